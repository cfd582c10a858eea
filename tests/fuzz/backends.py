"""Running one program on one target, the way a user calls it, and judging the outcome.

Targets are ``interp``, ``cpu``, ``opencl_pocl`` and ``opencl`` (when pyopencl
finds a platform) and the example accelerators ``examples/npu`` and
``examples/two_level_cpu`` (the interpreter after their pass pipelines): every
bundled pipeline that can run here.  Each run uses one *call mode*, drawn per
program and target: positional or named arguments, ``out=`` arrays (fresh, or
aliasing an input: the known class ``out_alias``), strided (non-contiguous)
inputs, parameters bound as ``constants=``, or a first call on other inputs
before the checked one (stale state).  The executable's IR must round-trip
through the IR parser.

Outcome statuses: ``ok``; ``unsupported`` (a documented limitation: float16
on OpenCL raises a StripeError); ``skipped`` (a known-bug class is excluded);
and the failures ``mismatch`` (wrong values, dtype, shape, a missing error, a
wrong error, an input modified, a failed IR round trip), ``error`` (a valid
program rejected with a StripeError), ``crash`` (any other exception, or an
InternalError).  The pool adds ``death`` and ``hang``.
"""

from __future__ import annotations

import functools
import random
import traceback
import warnings

import numpy as np

from .compare import describe
from .inputs import random_values
from .program import Program
from .reference import MustFail, Reference

ALL_TARGETS = ("interp", "cpu", "opencl_pocl", "opencl", "examples/npu", "examples/two_level_cpu")
FAILURES = ("mismatch", "error", "crash", "death", "hang")
# Documented limitations: (target, reference event, text the StripeError contains).
UNSUPPORTED = [
    ("opencl", "float16", "16"),
    ("opencl_pocl", "float16", "16"),
]
MODES = ("positional", "named", "out", "alias", "strided", "constants", "again")


@functools.cache
def available_targets() -> tuple[str, ...]:
    """The targets this machine runs (OpenCL only with a device whose driver
    builds kernels)."""
    try:
        from stripeml.runtime.opencl import device_problem

        has_cl = device_problem() is None
    except Exception:  # no pyopencl, or no ICD: the OpenCL targets are left out
        has_cl = False
    return tuple(t for t in ALL_TARGETS if has_cl or "opencl" not in t)


def pick_mode(seed: int, target: str, program: Program, ref, exclude: frozenset[str]) -> str:
    rng = random.Random(f"{seed}/{target}")
    modes = ["positional", "positional", "named", "out", "strided", "constants", "again"]
    if "out_alias" not in exclude and isinstance(ref, Reference) and _alias_pairs(program, ref):
        modes.append("alias")
    return rng.choice(modes)


def _alias_pairs(program: Program, ref: Reference) -> list[tuple[str, str]]:
    """(output, input) pairs of one shape and dtype: ``out=`` may alias the input."""
    pairs = []
    for o in program.outputs:
        for p in program.params:
            v = ref.values[o]
            if program.shape_of(p) == v.shape and np.dtype(p.dtype) == v.dtype:
                pairs.append((o, p.name))
    return pairs


def _strided(a: np.ndarray) -> np.ndarray:
    """The same values in a non-contiguous view (every other element of a larger buffer)."""
    if a.ndim == 0:
        return a
    base = np.zeros((*a.shape[:-1], 2 * a.shape[-1]), a.dtype)
    base[..., ::2] = a
    return base[..., ::2]


def run_target(
    program: Program,
    inputs: dict[str, np.ndarray],
    ref: Reference | MustFail,
    target: str,
    mode: str,
    seed: int = 0,
    exclude: frozenset[str] = frozenset(),
) -> dict:
    """Compile and call ``program`` on ``target`` in ``mode``; the judged outcome."""
    import stripeml
    from stripeml.errors import InternalError, StripeError

    from .known import known_error

    outcome = {"target": target, "mode": mode}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            problem = _call(stripeml, program, inputs, ref, target, mode, seed)
    except InternalError as e:
        return {**outcome, "status": "crash", "kind": "InternalError", "detail": _chain(e)}
    except StripeError as e:
        kind = type(e).__name__
        # What a target cannot compile is reported when compiling, before a
        # run could raise the error a failing program expects.
        for t, event, text in UNSUPPORTED:
            if t == target and event in ref.events and text in str(e):
                return {**outcome, "status": "unsupported", "kind": kind, "detail": str(e)[:200]}
        if isinstance(ref, MustFail):
            status = "ok" if ref.kind in (kind, "StripeError") else "mismatch"
            return {
                **outcome,
                "status": status,
                "kind": kind,
                "detail": f"expected {ref.kind}: {e}",
            }
        known = known_error(exclude, str(e))
        if known:
            return {**outcome, "status": "skipped", "kind": known}
        return {**outcome, "status": "error", "kind": kind, "detail": str(e)[:2000]}
    except Exception as e:  # the fuzzer's reason to exist: anything not a StripeError
        return {**outcome, "status": "crash", "kind": type(e).__name__, "detail": _chain(e)}
    if problem:
        return {**outcome, "status": "mismatch", "kind": "values", "detail": problem}
    return {**outcome, "status": "ok"}


def _chain(e: BaseException) -> str:
    return "".join(traceback.format_exception(e))[-3000:]


def _call(stripeml, program, inputs, ref, target, mode, seed) -> str | None:
    """Run; return a description of what is wrong (``None``: all right)."""
    source = program.source()
    names = [p.name for p in program.params]
    snapshot = {k: v.copy() for k, v in inputs.items()}
    args = {k: v.copy() for k, v in inputs.items()}
    out = None
    if mode == "constants":
        bound = random.Random(seed).sample(names, random.Random(seed + 1).randint(1, len(names)))
        f = stripeml.compile(source, target=target, constants={k: args[k] for k in bound})
        args = {k: v for k, v in args.items() if k not in bound}
    else:
        f = stripeml.compile(source, target=target)
    if mode == "strided":
        args = {k: _strided(v) for k, v in args.items()}
    if mode == "again":
        rng = np.random.default_rng(seed + 7)
        other = {
            p.name: random_values(rng, p.dtype, program.shape_of(p), False, p.values)
            for p in program.params
        }
        try:
            f(**other)
        except stripeml.StripeError:
            pass  # other inputs may legitimately fail (a gather index): only the next call counts
    if isinstance(ref, Reference) and mode in ("out", "alias"):
        out = [np.zeros(ref.values[o].shape, ref.values[o].dtype) for o in program.outputs]
        if mode == "alias":
            o, p = random.Random(seed).choice(_alias_pairs(program, ref))
            out[program.outputs.index(o)] = args[p]  # the output overwrites an input
    if mode == "positional":
        got = f(*(args[n] for n in names if n in args))
    else:
        got = f(**args, out=(out[0] if out and len(out) == 1 else tuple(out) if out else None))
    if isinstance(ref, MustFail):
        if ref.dead_ok is None:
            return f"expected {ref.kind} ({ref}), got a result"
        ref = ref.dead_ok  # the failing statement is dead: dropping it is allowed
    results = got if isinstance(got, tuple) else (got,)
    if len(results) != len(program.outputs):
        return f"{len(results)} results for {len(program.outputs)} outputs"
    for o, g in zip(program.outputs, results):
        problem = describe(o, g, ref.values[o], ref.errs[o])
        if problem:
            return problem
    if out is not None and any(g is not a for g, a in zip(results, out)):
        return "out= arrays were not the arrays returned"
    if mode != "alias":
        for k in inputs:
            if k in args and not np.array_equal(args[k], snapshot[k], equal_nan=True):
                return f"input {k} was modified"
    exe = f.lower(**{k: v for k, v in args.items()})
    if stripeml.ir.format(stripeml.ir.parse(exe.ir)) != exe.ir:
        return "the executable's IR does not round-trip through stripeml.ir.parse"
    return None
