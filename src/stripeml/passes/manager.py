"""The pass manager: runs a target's pipeline over a program.

Each pass is a pure function of the program and its options.  After each pass
the program is verified: by default incrementally (a root kernel verified
before, unchanged and seeing the same root buffers, is not verified again, so
the program that leaves the pipeline is proven valid, bounds included, without
re-proving what no pass touched), or, with ``verify_all``, the whole program
after every pass (``STRIPEML_VERIFY=all``, read by :mod:`stripeml.api`); its text is recorded in the stages only when the pass
changed it (an identity check on the immutable IR), and the time each pass took
is kept.  With ``check`` set, the interpreter re-runs the program after each
pass and compares with the unoptimised result (semantic preservation).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..ir.nodes import Program
from ..ir.printer import format as format_ir
from ..ir.verifier import verify
from ..phases import phase
from .registry import Pass


@dataclass
class PipelineResult:
    program: Program
    stages: list[tuple[str, str]]
    timings: list[tuple[str, float]] = field(default_factory=list)


def run_pipeline(
    program: Program,
    passes: Sequence[Pass],
    *,
    check: Callable[[str, Program], None] | None = None,
    verify_all: bool = False,
) -> PipelineResult:
    """Run ``passes`` in order; the first stage is ``("lower", text)``."""
    memo: dict = {}

    def verified() -> dict | None:
        return None if verify_all else memo

    with phase("verify"):
        verify(program, verified())
    with phase("print IR"):
        stages = [("lower", format_ir(program))]
    timings: list[tuple[str, float]] = []
    for p in passes:
        start = time.perf_counter()
        with phase(f"pass {p.name}"):
            new = p.run(program)
        timings.append((p.name, time.perf_counter() - start))
        if new is program:
            continue
        with phase("verify"):
            verify(new, verified())
        if check is not None:
            check(p.name, new)
        with phase("print IR"):
            stages.append((p.name, format_ir(new)))
        program = new
    return PipelineResult(program, stages, timings)
