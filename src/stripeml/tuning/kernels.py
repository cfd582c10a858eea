"""The units of tuning: each root kernel at the tuning point, measured in its program.

A program is run through its target's pipeline up to the tuning point (the
first pass with tunable options, :func:`stripeml.passes._kernel_choices.tuning_point`);
each distinct root kernel there (by structural key: a model's repeated layers
are one job, weighted by how often they occur) becomes a :class:`KernelJob`.
A candidate is measured **as it will run**: the whole program at the tuning
point, with the candidate's options for that kernel (every occurrence of its
key) and the target's for the others, is run through the rest of the pipeline
(so ``epilogue`` merges the following bias and activation into it, exactly as
in a compile), compiled, run on the call's inputs and compared with the
interpreter's outputs of the whole program (the oracle, computed once per
tune) before it is timed (:func:`build_candidate`).

What is timed is the kernel's *window* inside the whole program
(:func:`window_seconds`): the steps the compiled program runs for the kernel
(its parts: ``k3_O``, ``k3_O_rest``, ``k3_O_panels``) and, for a contraction,
for the elementwise kernel that immediately follows it when that one reads
what it writes (``epilogue`` may merge it in), from the runtime's per-step timer,
with the buffers where the program leaves them (caches as in a real run).
Earlier versions timed the kernel alone, before ``epilogue``: a thread choice
measured there was wrong once the epilogue ran inside it (docs/tuning.md).

Jobs are plain data (Stripe text and arrays), so an executor can send them to
other processes or machines, which rebuild the target from its name.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import StripeError
from ..ir.dtypes import is_float, to_numpy
from ..ir.nodes import Block, Program, Refinement
from ..ir.parser import parse as parse_ir
from ..ir.printer import format as format_ir
from ..passes._kernel_choices import Choice, kernel_key, tuning_point
from ..passes.manager import run_pipeline
from ..runtime.backend import Compiled, backend_for
from ..runtime.interp import run as interpret
from ..targets import Target

__all__ = [
    "Built", "KernelJob", "build_candidate", "check_outputs", "kernel_jobs", "owner_seconds",
    "step_owner", "window_seconds",
]  # fmt: skip


@dataclass
class KernelJob:
    """One kernel to tune: ``program`` (Stripe text) is the whole program at the
    tuning point, ``inputs`` its parameters' values and ``expected`` the
    interpreter's outputs; ``name`` is the kernel's name there (its first
    occurrence), ``window`` the names whose steps are timed, ``names`` every
    root kernel's name at the tuning point (a step's owner, see
    :func:`step_owner`)."""

    key: str
    label: str
    count: int
    program: str
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    point: int
    name: str = ""
    window: tuple[str, ...] = ()
    names: frozenset[str] = frozenset()
    _parsed: Program | None = field(default=None, repr=False, compare=False)

    @property
    def parsed(self) -> Program:
        if self._parsed is None:
            self._parsed = parse_ir(self.program)
        return self._parsed

    def __getstate__(self) -> dict[str, Any]:  # the text travels, not the parsed tree
        return {**self.__dict__, "_parsed": None}


@dataclass
class Built:
    """A candidate compiled and checked: ``text`` is its optimised program (two
    choices that give the same text are one candidate), ``error`` why it was
    discarded (None: it matched the interpreter)."""

    text: str
    compiled: Compiled | None
    error: str | None = None


def _label(kernel: Block) -> str:
    marks = " ".join(f"#{t}" for t in sorted(kernel.tags - {"kernel"}))
    shape = ", ".join(f"{i.name}:{i.range}" for i in kernel.idxs)
    comment = kernel.comment.strip()
    if len(comment) > 60:
        comment = comment[:57] + "..."
    return f"{kernel.name} [{shape}] {marks}" + (f"  // {comment}" if comment else "")


def _random(ref: Refinement, rng: np.random.Generator) -> np.ndarray:
    dtype = to_numpy(ref.shape.dtype)
    sizes = tuple(ref.shape.sizes)
    if ref.shape.dtype == "bool":
        return rng.random(sizes) < 0.5
    if is_float(ref.shape.dtype):
        return rng.standard_normal(sizes).astype(dtype)
    return rng.integers(0, 4, sizes).astype(dtype)  # small: valid as indices, no overflow


def _window(stmts: list[Block], n: int) -> tuple[str, ...]:
    """Kernel ``n`` and, when ``n`` is a contraction, the next root kernel if that
    one is elementwise and reads what ``n`` writes (what ``epilogue`` may merge
    into it).  Nothing else: a halo's zero fill is read by the convolution
    after it, and timing that convolution in the fill's window made the fill's
    candidates look 5-10% faster or slower by the convolution's noise."""
    kernel = stmts[n]
    names = [kernel.name]
    if n + 1 < len(stmts) and "contraction" in kernel.tags:
        after = stmts[n + 1]
        if "eltwise" in after.tags and "fill" not in after.tags:
            written = {r.from_ for r in kernel.refs if r.dir in ("out", "inout")}
            if any(r.from_ in written and r.dir in ("in", "inout") for r in after.refs):
                names.append(after.name)
    return tuple(names)


def kernel_jobs(
    program: Program,
    target: Target,
    constants: Mapping[str, np.ndarray],
    seed: int = 0,
    inputs: Mapping[str, np.ndarray] | None = None,
) -> tuple[list[KernelJob], list[str]]:
    """The jobs of ``program`` (as lowered) for ``target``, and lines saying
    what cannot be tuned.  ``inputs``: the call's parameters by name (random
    values for the ones missing); ``constants`` are added to them."""
    point = tuning_point(target.passes)
    if point is None:
        return [], []
    at_point = run_pipeline(program, target.passes[:point]).program
    root = at_point.root
    rng = np.random.default_rng(seed)
    values: dict[str, np.ndarray] = {}
    for r in root.refs:
        if r.dir not in ("in", "inout"):
            continue
        given = (inputs or {}).get(r.into)
        if given is None:
            given = constants.get(r.into)
        values[r.into] = np.asarray(given) if given is not None else _random(r, rng)
    try:
        expected = interpret(at_point, dict(values))
    except (StripeError, ValueError, IndexError, FloatingPointError) as exc:
        return [], [f"not tuned: the interpreter rejects the inputs ({type(exc).__name__}: {exc})"]
    kernels = [s for s in root.stmts if isinstance(s, Block)]
    names = frozenset(k.name for k in kernels)
    text = format_ir(at_point)
    jobs: dict[str, KernelJob] = {}
    for n, s in enumerate(kernels):
        key = kernel_key(root, s)
        if key in jobs:
            jobs[key].count += 1
            continue
        jobs[key] = KernelJob(
            key, _label(s), 1, text, values, expected, point, s.name, _window(kernels, n), names,
            at_point,
        )  # fmt: skip
    return list(jobs.values()), []


def step_owner(step: str, names: frozenset[str]) -> str:
    """The root kernel at the tuning point that compiled step ``step`` comes
    from (``k3_O_rest`` -> ``k3_O``; a name that is none's: itself)."""
    name = step
    while name:
        if name in names:
            return name
        name = name.rpartition("_")[0]
    return step


def owner_seconds(compiled: Compiled, job: KernelJob, owners: dict[str, str]) -> dict[str, float]:
    """One run of the whole program ``compiled``: the seconds its steps took,
    added up per root kernel at the tuning point (``owners`` memoises
    :func:`step_owner`); ``{"": seconds}`` for a backend without a per-step timer."""
    if not hasattr(compiled, "step_seconds"):
        start = time.perf_counter()
        compiled.run(dict(job.inputs))
        return {"": time.perf_counter() - start}
    compiled.step_seconds = {}
    try:
        compiled.run(dict(job.inputs))
        steps = dict(compiled.step_seconds)
    finally:
        compiled.step_seconds = None
    out: dict[str, float] = {}
    for step, seconds in steps.items():
        owner = owners.get(step)
        if owner is None:
            owner = owners[step] = step_owner(step, job.names)
        out[owner] = out.get(owner, 0.0) + seconds
    return out


def window_seconds(compiled: Compiled, job: KernelJob, owners: dict[str, str]) -> float:
    """One run of the whole program ``compiled``: the seconds its steps of
    ``job``'s window took (the whole run's, for a backend without a per-step
    timer)."""
    per = owner_seconds(compiled, job, owners)
    if "" in per:
        return per[""]
    return sum(per.get(name, 0.0) for name in job.window)


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    if got.shape != want.shape:
        return False
    if want.dtype.kind == "f":
        scale = float(np.nanmax(np.abs(want), initial=0.0)) if want.size else 0.0
        return bool(np.allclose(got, want, rtol=1e-3, atol=1e-4 * max(scale, 1.0), equal_nan=True))
    return bool(np.array_equal(got, want))


def build_candidate(
    job: KernelJob, target: Target, choice: Choice, by_text: dict[str, Built] | None = None
) -> Built:
    """The whole program with ``choice`` for ``job``'s kernel, optimised from the
    tuning point on and compiled, then run on the job's inputs and compared
    with the interpreter's outputs.  ``by_text`` (optimised text -> Built)
    shares a program several choices or jobs give (the analytic one)."""
    try:
        optimised = run_pipeline(
            job.parsed, target.passes[job.point :], choices={job.key: choice} if choice else None
        ).program
    except StripeError as exc:
        return Built("", None, f"the passes refused it: {exc}")
    text = format_ir(optimised)
    if by_text is not None and text in by_text:
        return by_text[text]
    built = _compile_and_check(job, target, optimised, text)
    if by_text is not None:
        by_text[text] = built
    return built


def _compile_and_check(job: KernelJob, target: Target, optimised: Program, text: str) -> Built:
    compiled = backend_for(target).compile(optimised)
    error = check_outputs(compiled.run(dict(job.inputs)), job.expected)
    return Built(text, None if error else compiled, error)


def check_outputs(got: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> str | None:
    """Why ``got`` is not ``expected`` (None: every output matches)."""
    for name, want in expected.items():
        if name not in got or not _close(np.asarray(got[name]), want):
            return f"output {name} differs from the interpreter's"
    return None
