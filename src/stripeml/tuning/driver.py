"""``stripeml.tune``: measure per-kernel alternatives, store the winners.

The route (docs/tuning.md): the function's program for the example inputs is
lowered and run through the pipeline up to the tuning point; each distinct
kernel there is a job (:mod:`.kernels`).  A job whose key the database already
holds for this target and compiler is answered from it (nothing measured).
The others are first measured with the analytic choice, then searched
(:mod:`.search`) in order of the time they cost in the program (median time
times occurrences), each given a share of the budget left proportional to that
cost, and each result is stored as soon as it is known, so a tune cut short
keeps what it found.  Last, the whole program is compiled without and with the
stored choices and the two are timed interleaved: the latency before and after.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..api import Function
from ..errors import StripeError
from ..runtime.tuning_db import Row, TuningDB, compiler_key, target_key
from ..tile.bind import signature_of
from .executors import make_measurer
from .kernels import kernel_jobs
from .measure import time_interleaved
from .search import KernelResult, KernelSearch
from .space import axes

__all__ = ["Progress", "TuneReport", "tune"]


@dataclass(frozen=True)
class Progress:
    """What a progress callback receives after each step."""

    kernels_done: int
    kernels: int
    best_gain: float
    elapsed_s: float
    budget_s: float
    current: str = ""


@dataclass
class TuneReport:
    """The outcome of a tune: one :class:`.search.KernelResult` per kernel, the
    kernels that could not be tuned and why, and the whole program's median
    latency before (analytic) and after (stored choices), timed interleaved
    (``None`` when not measured)."""

    target: str
    kernels: list[KernelResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    before_s: float | None = None
    after_s: float | None = None
    elapsed_s: float = 0.0
    measured: int = 0  # candidates timed (0: every kernel came from the database)

    @property
    def hits(self) -> int:
        return sum(1 for k in self.kernels if k.from_db)

    @property
    def speedup(self) -> float | None:
        if self.before_s and self.after_s:
            return self.before_s / self.after_s
        return None

    def table(self) -> str:
        """The kernels by time saved per run, then the whole program's latency."""
        rows = sorted(self.kernels, key=lambda k: -k.saved_s)
        lines = [
            f"{'saved ms':>9} {'gain':>6} {'x':>3} {'base ms':>9} {'tuned ms':>9}  "
            f"{'source':<8} kernel / choice"
        ]
        for k in rows:
            source = "db" if k.from_db else ("error" if k.error else "measured")
            choice = _describe(k.choice) if not k.error else k.error
            lines.append(
                f"{k.saved_s * 1e3:9.3f} {k.gain:5.2f}x {k.count:3d} {k.base_s * 1e3:9.3f} "
                f"{k.best_s * 1e3:9.3f}  {source:<8} {k.label}\n{'':>51}{choice}"
            )
        for s in self.skipped:
            lines.append(f"{'':>51}{s}")
        if self.before_s is not None and self.after_s is not None:
            lines.append(
                f"whole program: {self.before_s * 1e3:.3f} ms before, {self.after_s * 1e3:.3f} ms "
                f"after ({self.before_s / self.after_s:.2f}x, medians of interleaved rounds)"
            )
        lines.append(
            f"{len(self.kernels)} kernels ({self.hits} from the database), {self.measured} "
            f"candidates timed, {self.elapsed_s:.1f} s"
        )
        return "\n".join(lines)


def _describe(choice: Mapping[str, Mapping[str, object]]) -> str:
    if not choice:
        return "analytic choice (the target file's)"
    return "; ".join(
        f"{p}: " + ", ".join(f"{k}={v!r}" for k, v in sorted(opts.items()))
        for p, opts in sorted(choice.items())
    )


def _function_and_args(f: Any, inputs: Sequence[Any]) -> tuple[Function, list[np.ndarray]]:
    """The stripeml ``Function`` behind ``f`` and its call's arrays (an ONNX
    model's compiled program for these inputs)."""
    if isinstance(f, Function):
        return f, f._arrays(inputs, {})
    specialise = getattr(f, "specialise", None)
    if callable(specialise):  # stripeml.onnx.OnnxFunction
        arrays = f._arrays(inputs, {})
        spec = specialise(arrays)
        if spec.function is None:
            raise StripeError("the model folds to constants: nothing to tune")
        return spec.function, list(spec.call_args(arrays))
    raise StripeError(
        f"stripeml.tune takes a function made by stripeml.compile or stripeml.onnx.compile, "
        f"got {type(f).__name__}"
    )


def tune(
    f: Any,
    *inputs: Any,
    budget_s: float = 60.0,
    executor: str = "local",
    ray_address: str | None = None,
    progress: Callable[[Progress], None] | None = None,
    pause_s: float = 0.05,
    measure_program: bool = True,
    seed: int = 0,
) -> TuneReport:
    """Tune the kernels of ``f`` (a compiled Tile function or ONNX model) for the
    shapes of ``inputs`` on its target, within about ``budget_s`` seconds, and
    store the winners in the tuning database; later compiles use them."""
    if not budget_s > 0:
        raise StripeError(f"budget_s must be positive, got {budget_s!r}")
    t0 = time.monotonic()
    deadline = t0 + budget_s
    fn, args = _function_and_args(f, inputs)
    target = fn.target
    if target.backend == "interp" or fn.backend.describe() is None:
        raise StripeError(
            f"target '{target.name}' has no compiled code to tune (tuning is for targets "
            "whose backend caches compiled kernels, such as cpu)"
        )
    report = TuneReport(target.name)
    sig = signature_of(args)
    jobs, report.skipped = kernel_jobs(fn.lowered(sig), target, fn.constants, seed)
    db = TuningDB(fn.backend.cache_dir)
    tkey, ckey = target_key(target), compiler_key()
    stored = {row.kernel: row for row in db.rows(tkey, ckey)}
    todo = []
    for job in jobs:
        row = stored.get(job.key)
        if row is not None:
            report.kernels.append(
                KernelResult(job.key, job.label, job.count, row.choice, row.base_s, row.best_s,
                             from_db=True)
            )  # fmt: skip
        else:
            todo.append(job)

    def say(current: str = "") -> None:
        if progress is not None:
            gains = [k.gain for k in report.kernels if not k.error]
            progress(
                Progress(len(report.kernels), len(jobs), max(gains, default=1.0),
                         time.monotonic() - t0, budget_s, current)
            )  # fmt: skip

    say()
    if todo:
        measurer = make_measurer(executor, target, ray_address, pause_s)
        try:
            _search(todo, target, measurer, deadline, db, (tkey, ckey), report, say)
        finally:
            measurer.close()
    report.measured = sum(k.timed for k in report.kernels)
    if measure_program:
        report.before_s, report.after_s = _program_latency(fn, args, pause_s)
    report.elapsed_s = time.monotonic() - t0
    say()
    return report


def _search(
    todo: list[Any],
    target: Any,
    measurer: Any,
    deadline: float,
    db: TuningDB,
    keys: tuple[str, str],
    report: TuneReport,
    say: Callable[..., None],
) -> None:
    point = todo[0].point
    space = axes(target, point)
    searches = []
    for job in todo:  # the analytic choice of every kernel first: what each one costs
        if time.monotonic() >= deadline:
            break
        say(job.label)
        s = KernelSearch(job, space, measurer)
        s.start()
        searches.append(s)
    searches.sort(key=lambda s: -(s.result.base_s * s.result.count))
    weights = [s.result.base_s * s.result.count for s in searches]
    for n, s in enumerate(searches):
        left = deadline - time.monotonic()
        share = weights[n] / max(sum(weights[n:]), 1e-12)
        if not s.done and left > 0:
            say(s.job.label)
            s.run(time.monotonic() + left * share)
        result = s.finish()
        forget = getattr(measurer, "forget", None)
        if forget is not None:
            forget(s.job)
        report.kernels.append(result)
        if result.error is None:  # cut short too: a later tune answers from the database
            db.put([_row(result, keys, target.name)])
        say()


def _row(r: KernelResult, keys: tuple[str, str], target_name: str) -> Row:
    choice = {p: dict(opts) for p, opts in r.choice.items()}
    return Row(keys[0], keys[1], r.key, choice, r.base_s, r.best_s, r.compiled, r.label,
               target_name)  # fmt: skip


def _program_latency(fn: Function, args: list[np.ndarray], pause_s: float) -> tuple[float, float]:
    """The program's median latency compiled without and with the stored choices,
    timed interleaved."""
    before = Function(fn.source, fn.target, fn.name, fn.constants, tuned=False)
    after = Function(fn.source, fn.target, fn.name, fn.constants, tuned=True)
    for g in (before, after):
        g.lower(*args)
    t = time_interleaved(
        [lambda: before(*args), lambda: after(*args)], rounds=9, pause_s=pause_s, margin=1e9
    )
    return t[0].median_s, t[1].median_s
