"""The Kernels and Traffic sections' data: each kernel's time, work and bytes moved.

On a compiled backend the times are :meth:`stripeml.api.Executable.profile`'s
(per kernel on ``cpu``; one ``program`` row elsewhere).  On an interpreter
target (``backend = "interp"``, such as ``examples/npu``) the program runs one
root statement at a time (:func:`run_steps`): each step is a program of its
own whose root buffers are the original program's (the temporaries and
outputs kept from one step to the next), so the interpreter's
:class:`~stripeml.runtime.interp.Traffic` counts the bytes each kernel moves
through each memory location, and each step's wall time is that kernel's
(interpreter) time.  The FLOPs and DRAM bytes are always the roofline
accounting of :mod:`stripeml.analysis.roofline`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from ..analysis.roofline import ProfileRow, Work, profile_rows, step_name
from ..ir.dtypes import to_numpy
from ..ir.nodes import Block, Program, Special, Statement
from ..runtime.interp import Traffic, run


@dataclass
class StepTraffic:
    """What one kernel moved: bytes read and written per location, and its time."""

    kernel: str
    statement: str
    seconds: float = 0.0
    reads: dict[str, int] = field(default_factory=dict)
    writes: dict[str, int] = field(default_factory=dict)

    def add(self, traffic: Traffic, seconds: float) -> None:
        self.seconds += seconds
        for mine, theirs in ((self.reads, traffic.reads), (self.writes, traffic.writes)):
            for loc, n in theirs.items():
                mine[loc] = mine.get(loc, 0) + n


def run_steps(
    program: Program,
    inputs: Mapping[str, np.ndarray],
    progress: Callable[[str], None] | None = None,
) -> list[StepTraffic]:
    """Run ``program`` on the interpreter one root statement at a time; one
    :class:`StepTraffic` per kernel name, in program order.  ``inputs``: every
    root ``in`` buffer by name."""
    root = program.root
    values = {
        r.into: np.zeros(r.shape.sizes, to_numpy(r.shape.dtype)) for r in root.refs if r.dir != "in"
    }
    steps: dict[str, StepTraffic] = {}
    last = time.perf_counter()
    for k, stmt in enumerate(root.stmts):
        used = _names(stmt)
        refs = tuple(
            r if r.dir == "in" else replace(r, dir="out") for r in root.refs if r.into in used
        )
        step = Program(replace(root, refs=refs, stmts=(stmt,)))
        traffic = Traffic()
        start = time.perf_counter()
        run(
            step,
            {r.into: inputs[r.into] for r in refs if r.dir == "in"},
            {r.into: values[r.into] for r in refs if r.dir == "out"},
            traffic=traffic,
        )
        seconds = time.perf_counter() - start
        name = step_name(k, stmt)
        comment = stmt.comment if isinstance(stmt, Block) else ""
        steps.setdefault(name, StepTraffic(name, comment)).add(traffic, seconds)
        if progress is not None and time.perf_counter() - last > 2.0:
            progress(f"interpreter: {k + 1} of {len(root.stmts)} kernels run")
            last = time.perf_counter()
    return list(steps.values())


def _names(stmt: Statement) -> set[str]:
    """The root buffers a root statement names."""
    if isinstance(stmt, Block):
        return {r.from_ for r in stmt.refs if r.from_}
    if isinstance(stmt, Special):
        return {*stmt.inputs, *stmt.outputs}
    return set()


def interpreter_rows(
    steps: list[StepTraffic],
    work: Mapping[str, Work],
    gflops: float | None,
    gbps: float | None,
) -> list[ProfileRow]:
    """:class:`ProfileRow` per kernel from the interpreter's step times, slowest first."""
    return profile_rows(((s.kernel, s.statement, s.seconds) for s in steps), work, gflops, gbps)


def can_run_steps(program: Program) -> bool:
    """Whether every root statement is a kernel or a special (a root ``load``
    would leave a scalar for a later step, which separate runs do not keep)."""
    return all(isinstance(s, (Block, Special)) for s in program.root.stmts)
