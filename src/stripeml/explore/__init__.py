"""The compiler explorer: one self-contained HTML page about one compiled program
(``stripeml explore``, ``Executable.explore``; docs/explorer.md).

The page has four sections, each from one module:

* **Passes** (:mod:`.passes`): the program after each pass that changed it, its
  diff against the stage before, each pass's time, the kernels it touched;
* **Memory** (:mod:`.memory`): per location, each buffer as a rectangle of
  program steps (its liveness) by bytes (its offset from ``place``), with the
  peak and the target's capacity;
* **Kernels** (:mod:`.kernels`): each kernel's time, FLOPs, bytes and rates,
  and a roofline plot against the target's ceilings;
* **Traffic**: bytes moved per memory level per kernel (counted by the
  interpreter on interpreter targets; elsewhere the compulsory DRAM bytes of
  the roofline accounting).

The pictures are matplotlib's (:mod:`.plots`, the ``explore`` extra), the page
is :mod:`.page`.  This package sits above ``runtime`` (it runs the program)
and below ``api``, whose ``Executable.explore`` hands it a :class:`Subject`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import numpy as np

from ..analysis.roofline import NO_WORK, ProfileRow, program_work, step_name
from ..ir.nodes import Program
from ..targets import Target
from . import page, plots
from .kernels import StepTraffic, can_run_steps, interpreter_rows, run_steps
from .memory import memory_map
from .passes import build_stages, pass_runs

__all__ = ["Subject", "random_inputs", "report_html", "write_report"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Subject:
    """What the explorer looks at: one program compiled for one target.

    ``stages``: ``[(stage, program)]``, ``lower`` first, the final program last
    (the pass manager's); ``timings``: every pass run; ``inputs``: every root
    ``in`` buffer by name (constants included); ``profile``: runs the compiled
    program and returns its :class:`ProfileRow` per kernel (not called on an
    interpreter target, whose kernels are run one by one here)."""

    name: str
    target: Target
    stages: Sequence[tuple[str, Program]]
    timings: Sequence[tuple[str, float]]
    inputs: Mapping[str, np.ndarray]
    profile: Callable[[], Sequence[ProfileRow]]

    @property
    def program(self) -> Program:
        return self.stages[-1][1]


def random_inputs(
    signature: Sequence[tuple[tuple[int, ...], str]], seed: int = 0
) -> list[np.ndarray]:
    """Seeded arrays of the given ``(shape, dtype)`` signature: normal floats,
    small non-negative integers, random booleans."""
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in signature:
        dt = np.dtype(dtype)
        if dt.kind == "f":
            out.append(rng.standard_normal(shape).astype(dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, shape).astype(bool))
        else:
            out.append(rng.integers(0, 4, shape).astype(dt))
    return out


def write_report(
    path: str | PathLike[str], subject: Subject, progress: Progress | None = None
) -> Path:
    """Write the explorer page for ``subject`` to ``path``; returns the path."""
    html = report_html(subject, progress)
    path = Path(path)
    path.write_text(html, encoding="utf-8")
    return path


def report_html(subject: Subject, progress: Progress | None = None) -> str:
    """The explorer page's HTML text for ``subject``."""
    say = progress or (lambda _text: None)
    plots._matplotlib()  # say at once when the extra is missing, before any work
    target, program = subject.target, subject.program

    say("passes: diffing the stages")
    stages = build_stages(subject.stages, subject.timings)
    runs = pass_runs(subject.stages, subject.timings)

    say("memory: liveness and placement")
    locations = memory_map(program, target)
    labels = _step_labels(program)

    work = program_work(program)
    gflops, gbps = _peaks(target, say)
    steps: list[StepTraffic] = []
    if target.backend == "interp" and can_run_steps(program):
        say(f"kernels: running {len(program.root.stmts)} kernels one by one on the interpreter")
        steps = run_steps(program, subject.inputs, say)
        rows = interpreter_rows(steps, work, gflops, gbps)
        times_from = "the interpreter's wall time per kernel (not the target's speed)"
        traffic_from = (
            "Bytes each kernel read and wrote at each memory location, counted by the "
            "interpreter as it ran the kernel (each load and store of an element, each "
            "special's whole buffers)."
        )
    else:
        say("kernels: running the program (median of 3 runs)")
        rows = list(subject.profile())
        times_from = (
            "each kernel's median wall time over 3 runs"
            if target.backend == "cpu"
            else "the whole program's median wall time over 3 runs (this backend does not time "
            "kernels)"
        )
        steps = [
            StepTraffic(
                name,
                _statement(program, name),
                reads={"DRAM": w.bytes_read},
                writes={"DRAM": w.bytes_written},
            )
            for name, w in work.items()
            if w != NO_WORK
        ]
        traffic_from = (
            f"The {target.backend} backend counts no traffic (only interpreter targets do, "
            "such as examples/npu): shown here are the compulsory DRAM bytes each kernel "
            "reads and writes according to the roofline accounting of the final IR."
        )

    say("drawing the plots")
    report = page.Report(
        title=subject.name,
        target=target,
        stages=stages,
        runs=runs,
        pass_svg=plots.pass_times(runs) if runs else "",
        locations=locations,
        memory_svgs=[plots.memory(loc, len(program.root.stmts), labels) for loc in locations],
        rows=rows,
        times_from=times_from,
        gflops=gflops,
        gbps=gbps,
        roofline_svg=plots.roofline(rows, gflops, gbps),
        steps=steps,
        traffic_from=traffic_from,
        traffic_svg=plots.traffic(steps, _traffic_locations(steps, target)),
    )
    return page.render(report)


def _step_labels(program: Program) -> list[str]:
    return [step_name(k, s) for k, s in enumerate(program.root.stmts)]


def _statement(program: Program, name: str) -> str:
    for s in program.root.sub_blocks:
        if s.name == name:
            return s.comment
    return ""


def _traffic_locations(steps: Sequence[StepTraffic], target: Target) -> list[str]:
    seen = list(dict.fromkeys(loc for s in steps for loc in (*s.reads, *s.writes)))
    order = [m.name for m in target.memories]
    return [n for n in order if n in seen] + [n for n in seen if n not in order]


def _peaks(target: Target, say: Progress) -> tuple[float | None, float | None]:
    """The target's roofline ceilings (on a ``cpu`` target without them in its
    file: measured once per machine, then read from the disk cache)."""
    from ..runtime.peaks import target_peaks

    start = time.perf_counter()
    peaks = target_peaks(target)
    if time.perf_counter() - start > 0.5:
        say("measured this machine's peak GFLOP/s and DRAM bandwidth (kept for next time)")
    return peaks.gflops, peaks.gbps
