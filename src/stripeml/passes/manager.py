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
from ..ir.verifier import VerifyError, verify
from ..phases import phase
from . import _replicate
from ._kernel_choices import Choice, KernelChoices, tuning_point
from .registry import Pass, layer_local


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
    """Run ``passes`` in order; the first stage is ``("lower", text)``.

    A program of repeated layers (:mod:`._replicate`) runs the passes that
    declare ``layer_local`` over three of its repeats, the middle one copied
    back for the others (stages and timings ``repeats set aside`` and
    ``repeats copied``), then the rest of the pipeline over the whole
    program; not with ``check`` (which runs each stage's program)."""
    memo: dict = {}

    def verified() -> dict | None:
        return None if verify_all else memo

    with phase("verify"):
        verify(program, verified())
    cut = 0
    if check is None and _replicate.enabled():
        while cut < len(passes) and layer_local(passes[cut]):
            cut += 1
    if cut:
        start = time.perf_counter()
        with phase("repeats"):
            rep = _replicate.find_repeats(program)
        tries = 2  # a second start where the first's cuts did not hold
        while rep is not None and tries:
            tries -= 1
            got = _replicated(program, passes, cut, rep, verified, choices, start)
            if isinstance(got, PipelineResult):
                _replicate.remember(rep)
                return got
            rep = got  # its time counted in the next try's "repeats set aside"
    stages: list[tuple[str, Program]] = [("lower", program)]
    timings: list[tuple[str, float]] = []
    program = _run(program, passes, 0, stages, timings, verified, check, choices)
    return PipelineResult(program, stages, timings)


def _run(
    program: Program,
    passes: Sequence[Pass],
    first: int,
    stages: list[tuple[str, Program]],
    timings: list[tuple[str, float]],
    verified: Callable[[], dict | None],
    check: Callable[[str, Program], None] | None,
    choices: Mapping[str, Choice] | None,
) -> Program:
    """``passes[first:]`` over ``program``, each stage and time recorded."""
    point = tuning_point(passes) if choices else None
    tuned: KernelChoices | None = None
    for n, p in enumerate(passes[first:], start=first):
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
    return program


def _replicated(
    program: Program,
    passes: Sequence[Pass],
    cut: int,
    rep: _replicate.Repeats,
    verified: Callable[[], dict | None],
    choices: Mapping[str, Choice] | None,
    start: float,
) -> PipelineResult | _replicate.Repeats | None:
    """The pipeline over ``program`` with its repeats set aside for
    ``passes[:cut]``; when the result does not split, other repeats to try
    (:func:`._replicate.realigned`) or None (the caller then runs the whole
    pipeline over the whole program)."""
    with phase("repeats"):
        reduced = _replicate.reduce(program, rep)
    with phase("verify"):
        verify(reduced, verified())
    stages: list[tuple[str, Program]] = [("lower", program), ("repeats set aside", reduced)]
    timings: list[tuple[str, float]] = [("repeats set aside", time.perf_counter() - start)]
    done = _run(reduced, passes[:cut], 0, stages, timings, verified, None, choices)
    start = time.perf_counter()
    with phase("repeats"):
        whole = _replicate.expand(program, reduced, done, rep)
        if whole is None:
            return _replicate.realigned(program, reduced, done, rep)
    try:
        with phase("verify"):
            verify(whole, verified())
    except VerifyError:  # a name the copies got wrong: the whole pipeline instead
        return None
    timings.append(("repeats copied", time.perf_counter() - start))
    stages.append(("repeats copied", whole))
    whole = _run(whole, passes, cut, stages, timings, verified, None, choices)
    return PipelineResult(whole, stages, timings)
