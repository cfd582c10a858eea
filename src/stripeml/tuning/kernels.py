"""The units of tuning: each root kernel at the tuning point as a program of its own.

A program is run through its target's pipeline up to the tuning point (the
first pass with tunable options, :func:`stripeml.passes._kernel_choices.tuning_point`);
each distinct root kernel there (by structural key: a model's repeated layers
are one job, weighted by how often they occur) becomes a :class:`KernelJob`:
a program holding that kernel only, its buffers as parameters (the ones it
writes as outputs; constants keep their values and their ``const`` mark, so
a weight's panels are laid out as in the model), random inputs for the rest,
and the interpreter's outputs on them: the oracle every candidate is checked
against before it is timed (:func:`build_candidate`).

Jobs are plain data (Stripe text and arrays), so an executor can send them to
other processes or machines, which rebuild the target from its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import StripeError
from ..ir.dtypes import is_float, to_numpy
from ..ir.nodes import DEFAULT_LOCATION, Block, Program, Refinement
from ..ir.parser import parse as parse_ir
from ..ir.printer import format as format_ir
from ..passes._kernel_choices import Choice, kernel_key, tuning_point
from ..passes.manager import run_pipeline
from ..runtime.backend import Compiled, backend_for
from ..runtime.interp import run as interpret
from ..targets import Target

__all__ = ["Built", "KernelJob", "build_candidate", "kernel_jobs"]


@dataclass
class KernelJob:
    """One kernel to tune: ``program`` (Stripe text) holds it alone; ``inputs``
    are its parameters' values and ``expected`` the interpreter's outputs."""

    key: str
    label: str
    count: int
    program: str
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    point: int
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


def _mini_program(root: Block, kernel: Block) -> Program:
    """``kernel`` alone, its root buffers its parameters (written ones outputs)."""
    written = {r.from_ for r in kernel.refs if r.dir in ("out", "inout")}
    read = {r.from_ for r in kernel.refs if r.dir in ("in", "inout")}
    refs: list[Refinement] = []
    for r in root.refs:
        if r.into not in written and r.into not in read:
            continue
        if r.into in written:
            direction = "inout" if r.into in read else "out"
            refs.append(
                replace(r, dir=direction, const=False, location=DEFAULT_LOCATION, offset=None)
            )
        else:
            const = r.const and r.dir == "in"
            refs.append(replace(r, dir="in", const=const, location=DEFAULT_LOCATION, offset=None))
    return Program(replace(root, refs=tuple(refs), stmts=(kernel,)))


def _random(ref: Refinement, rng: np.random.Generator) -> np.ndarray:
    dtype = to_numpy(ref.shape.dtype)
    sizes = tuple(ref.shape.sizes)
    if ref.shape.dtype == "bool":
        return rng.random(sizes) < 0.5
    if is_float(ref.shape.dtype):
        return rng.standard_normal(sizes).astype(dtype)
    return rng.integers(0, 4, sizes).astype(dtype)  # small: valid as indices, no overflow


def kernel_jobs(
    program: Program,
    target: Target,
    constants: Mapping[str, np.ndarray],
    seed: int = 0,
) -> tuple[list[KernelJob], list[str]]:
    """The jobs of ``program`` (as lowered) for ``target``, and a line per kernel
    that cannot be tuned (the interpreter rejects its random inputs)."""
    point = tuning_point(target.passes)
    if point is None:
        return [], []
    at_point = run_pipeline(program, target.passes[:point]).program
    root = at_point.root
    rng = np.random.default_rng(seed)
    jobs: dict[str, KernelJob] = {}
    skipped: list[str] = []
    for s in root.stmts:
        if not isinstance(s, Block):
            continue
        key = kernel_key(root, s)
        if key in jobs:
            jobs[key].count += 1
            continue
        mini = _mini_program(root, s)
        inputs: dict[str, np.ndarray] = {}
        for r in mini.root.refs:
            if r.dir in ("in", "inout"):
                given = constants.get(r.into) if r.const else None
                inputs[r.into] = np.asarray(given) if given is not None else _random(r, rng)
        try:
            expected = interpret(mini, dict(inputs))
        except (StripeError, ValueError, IndexError, FloatingPointError) as exc:
            skipped.append(f"{_label(s)}: not tuned ({type(exc).__name__}: {exc})")
            continue
        jobs[key] = KernelJob(key, _label(s), 1, format_ir(mini), inputs, expected, point, mini)
    return list(jobs.values()), skipped


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    if got.shape != want.shape:
        return False
    if want.dtype.kind == "f":
        scale = float(np.nanmax(np.abs(want), initial=0.0)) if want.size else 0.0
        return bool(np.allclose(got, want, rtol=1e-3, atol=1e-4 * max(scale, 1.0), equal_nan=True))
    return bool(np.array_equal(got, want))


def build_candidate(job: KernelJob, target: Target, choice: Choice) -> Built:
    """``job``'s kernel optimised with ``choice`` and compiled, then run on the
    job's inputs and compared with the interpreter's outputs."""
    try:
        optimised = run_pipeline(
            job.parsed, target.passes[job.point :], choices={job.key: choice}
        ).program
    except StripeError as exc:
        return Built("", None, f"the passes refused it: {exc}")
    text = format_ir(optimised)
    compiled = backend_for(target).compile(optimised)
    got = compiled.run(dict(job.inputs))
    for name, want in job.expected.items():
        if name not in got or not _close(np.asarray(got[name]), want):
            return Built(text, None, f"output {name} differs from the interpreter's")
    return Built(text, compiled)
