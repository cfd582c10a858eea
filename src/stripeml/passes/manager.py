"""The pass manager: runs a target's pipeline over a program.

Each pass is a pure function of the program and its options.  After each pass
the program is verified: by default incrementally (a root kernel verified
before, unchanged and seeing the same root buffers, is not verified again, so
the program that leaves the pipeline is proven valid, bounds included, without
re-proving what no pass touched), or, with ``verify_all``, the whole program
after every pass (``STRIPEML_VERIFY=all``, read by :mod:`stripeml.api`).  The
program is recorded as a stage only when the pass changed it (an identity
check on the immutable IR; the stages' texts are printed when first asked
for), and the time each pass took is kept.  With ``check`` set, the interpreter re-runs the program after each
pass and compares with the unoptimised result (semantic preservation).

``choices`` (structural kernel key -> pass -> options, what ``stripeml tune``
stored) run the passes from the tuning point on with each tuned kernel's own
options (:mod:`._kernel_choices`); without any the pipeline is the target's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..ir.nodes import Program
from ..ir.printer import format as format_ir
from ..ir.verifier import verify
from ..phases import phase
from ._kernel_choices import Choice, KernelChoices, tuning_point
from .registry import Pass


@dataclass
class PipelineResult:
    """The final program, each stage's program (``lower``, then every pass that
    changed it) and each pass's time.  The stages' texts are printed when first
    asked for (most compiles never look at them)."""

    program: Program
    programs: list[tuple[str, Program]]
    timings: list[tuple[str, float]] = field(default_factory=list)
    _texts: list[tuple[str, str]] | None = field(default=None, repr=False)

    @property
    def stages(self) -> list[tuple[str, str]]:
        """``[(stage, IR text)]``."""
        if self._texts is None:
            with phase("print IR"):
                self._texts = [(name, format_ir(p)) for name, p in self.programs]
        return self._texts


def run_pipeline(
    program: Program,
    passes: Sequence[Pass],
    *,
    check: Callable[[str, Program], None] | None = None,
    verify_all: bool = False,
    choices: Mapping[str, Choice] | None = None,
) -> PipelineResult:
    """Run ``passes`` in order; the first stage is ``("lower", text)``."""
    memo: dict = {}

    def verified() -> dict | None:
        return None if verify_all else memo

    with phase("verify"):
        verify(program, verified())
    stages: list[tuple[str, Program]] = [("lower", program)]
    timings: list[tuple[str, float]] = []
    point = tuning_point(passes) if choices else None
    tuned: KernelChoices | None = None
    for n, p in enumerate(passes):
        if n == point and choices:
            tuned = KernelChoices.at_tuning_point(program, choices)
        start = time.perf_counter()
        with phase(f"pass {p.name}"):
            new = tuned.run(p, program) if tuned is not None and tuned.by_name else p.run(program)
        timings.append((p.name, time.perf_counter() - start))
        if new is program:
            continue
        with phase("verify"):
            verify(new, verified())
        if check is not None:
            check(p.name, new)
        stages.append((p.name, new))
        program = new
    return PipelineResult(program, stages, timings)
