"""``stripeml.tune``: measure per-kernel alternatives, store the winners.

The route (docs/tuning.md): the function's program for the example inputs is
lowered and run through the pipeline up to the tuning point; each distinct
kernel there is a job (:mod:`.kernels`).  A job whose key the database already
holds for this target and compiler is answered from it (nothing measured).
The others are first measured with the analytic choice, then searched
(:mod:`.search`) in order of the time they cost in the program (median time
times occurrences), each given a share of the budget left proportional to that
cost.  Last, the safety check (:func:`_program_latency`): the whole program
compiled with the target's choices and with every choice (the database's and
the new ones) is checked against the interpreter and the two are timed
interleaved; the new choices are stored only when the whole program is faster
beyond noise (:func:`_faster`); if they are not, the subsets of those that
saved the most alone are checked the same way (:func:`_subset_that_pays`)
and the first that passes is stored.  Otherwise they are stored *disabled* (the
analytic choice, gain 1: a later tune measures nothing and compiles use the
target's choices) and the report says so.  A tune must never leave a model
slower.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..api import Function
from ..errors import StripeError
from ..passes._kernel_choices import Choice
from ..passes.manager import run_pipeline
from ..runtime.backend import backend_for
from ..runtime.tuning_db import Row, TuningDB, compiler_key, target_key
from ..tile.bind import signature_of
from .executors import make_measurer
from .kernels import KernelJob, check_outputs, kernel_jobs
from .measure import Timing, faster, time_interleaved
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
    #: whether the new choices were stored (None: nothing new, or not checked)
    kept: bool | None = None
    #: why not, or what the safety check found
    verdict: str = ""
    #: the 1-minute load average when the tune started and ended, and the CPUs
    #: this process may use (None where the OS does not say)
    load: tuple[float, float] | None = None
    cpus: int = 0

    @property
    def busy(self) -> bool:
        """Whether other processes kept the CPUs busy: a load average above the
        CPUs plus one half (the tune's own threads count about one per CPU)."""
        return self.load is not None and self.cpus > 0 and max(self.load) > self.cpus + 0.5

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
            if k.dropped:
                source = "dropped"
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
        if self.verdict:
            lines.append(self.verdict)
        if self.busy:
            assert self.load is not None
            lines.append(
                f"the machine was busy (load average {self.load[0]:.1f} -> {self.load[1]:.1f} "
                f"on {self.cpus} CPUs): gains of a few per cent are within its noise"
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
    load_before = _load()
    sig = signature_of(args)
    named = dict(zip(fn.params, args))
    jobs, report.skipped = kernel_jobs(fn.lowered(sig), target, fn.constants, seed, named)
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
            _search(todo, target, measurer, deadline, report, say)
        finally:
            measurer.close()
    report.measured = sum(k.timed for k in report.kernels)
    new = [k for k in report.kernels if not k.from_db and k.error is None]
    old_choices = {k: r.choice for k, r in stored.items() if r.choice}
    new_choices = {k.key: k.choice for k in new if k.choice}
    if measure_program and jobs:
        before, after, error = _program_latency(
            fn, jobs[0], {**old_choices, **new_choices}, pause_s
        )
        report.before_s = before.median_s
        report.after_s = after.median_s if after is not None else None
        if new_choices:
            report.kept = error is None and after is not None and _faster(before, after)
            if not report.kept:
                why = error or "the whole program is not faster beyond noise"
                subset = _subset_that_pays(fn, jobs[0], old_choices, new, pause_s)
                if subset is not None:
                    keys, before, after = subset
                    for k in new:
                        k.dropped = bool(k.choice) and k.key not in keys
                    report.kept = True
                    report.after_s = after.median_s
                    report.before_s = before.median_s
                    report.verdict = (
                        f"with every new choice {why}; kept the {len(keys)} that save the most "
                        f"of {len(new_choices)} (that subset makes the whole program faster), "
                        "the others stored disabled"
                    )
                else:
                    report.verdict = (
                        f"new choices NOT kept: {why} (nor with the ones that save the most); "
                        "stored disabled (the target's choices)"
                    )
            else:
                report.verdict = "new choices kept: the whole program is faster"
    if report.kept is False:
        for k in new:
            if k.choice:
                k.dropped = True
    db.put([_row(k, (tkey, ckey), target.name) for k in new])
    report.elapsed_s = time.monotonic() - t0
    load_after = _load()
    if load_before is not None and load_after is not None:
        report.load, report.cpus = (load_before, load_after), _cpus()
    say()
    return report


def _load() -> float | None:
    """The 1-minute load average (None where the OS does not give one)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 0


def _search(
    todo: list[Any],
    target: Any,
    measurer: Any,
    deadline: float,
    report: TuneReport,
    say: Callable[..., None],
) -> None:
    point = todo[0].point
    space = axes(target, point)
    searches = []
    # the analytic choice of every kernel first: what each one costs (one
    # program's runs time every kernel's window at once, where the executor can)
    baselines: list[Any] = [None] * len(todo)
    together = getattr(measurer, "baselines", None)
    if together is not None:
        say(todo[0].label)
        ((_, error),) = measurer.check(todo[0], [{}])
        if error is None:
            baselines = together(todo, KernelSearch.ROUNDS)
    for job, baseline in zip(todo, baselines):
        if time.monotonic() >= deadline:
            break
        say(job.label)
        s = KernelSearch(job, space, measurer)
        s.start(baseline)
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
        say()


def _subset_that_pays(
    fn: Function,
    job: KernelJob,
    old_choices: Mapping[str, Choice],
    new: Sequence[KernelResult],
    pause_s: float,
) -> tuple[set[str], Timing, Timing] | None:
    """When every new choice together does not make the whole program faster
    (choices measured one kernel at a time may interact: caches, the threads'
    balance), the ones that saved the most alone: the better half by time saved,
    then the best one.  The first subset whose whole program is checked and
    faster beyond noise (:func:`_faster`), with the timings, else None."""
    ranked = sorted((k for k in new if k.choice), key=lambda k: -k.saved_s)
    tried: set[int] = {len(ranked)}
    for size in (len(ranked) // 2, 1):
        if size < 1 or size in tried:
            continue
        tried.add(size)
        top = ranked[:size]
        choices = {**old_choices, **{k.key: k.choice for k in top}}
        before, after, error = _program_latency(fn, job, choices, pause_s)
        if error is None and after is not None and _faster(before, after):
            return {k.key for k in top}, before, after
    return None


def _row(r: KernelResult, keys: tuple[str, str], target_name: str) -> Row:
    """``r`` as a database row; a dropped choice is stored disabled (the
    analytic choice, gain 1), so a later tune measures nothing."""
    if r.dropped:
        return Row(keys[0], keys[1], r.key, {}, r.base_s, r.base_s, r.compiled, r.label,
                   target_name)  # fmt: skip
    choice = {p: dict(opts) for p, opts in r.choice.items()}
    return Row(keys[0], keys[1], r.key, choice, r.base_s, r.best_s, r.compiled, r.label,
               target_name)  # fmt: skip


#: The whole program must be this much faster (median of interleaved rounds) ...
MIN_PROGRAM_GAIN = 0.01
#: ... and faster in at least this share of the paired rounds.
MIN_ROUNDS_WON = 2 / 3


def _faster(before: Timing, after: Timing) -> bool:
    """Whether ``after`` is faster than ``before`` beyond noise: its median at
    least :data:`MIN_PROGRAM_GAIN` lower, and faster in at least
    :data:`MIN_ROUNDS_WON` of the rounds (each round timed both, adjacently)."""
    return faster(before, after, MIN_PROGRAM_GAIN, MIN_ROUNDS_WON)


def _program_latency(
    fn: Function, job: KernelJob, choices: Mapping[str, Choice], pause_s: float, rounds: int = 21
) -> tuple[Timing, Timing | None, str | None]:
    """The whole program at ``job``'s tuning point optimised with the target's
    choices and with ``choices``, timed interleaved (``rounds`` rounds of
    batches of about 50 ms: a loaded machine's preemptions average out); the
    tuned one is first checked against the interpreter (its timing is None and
    the reason given when it differs)."""
    target = fn.target
    passes = target.passes[job.point :]
    backend = backend_for(target)
    plain = backend.compile(run_pipeline(job.parsed, passes).program)
    if not choices:
        (t,) = time_interleaved([lambda: plain.run(dict(job.inputs))], rounds=rounds,
                                pause_s=pause_s)  # fmt: skip
        return t, t, None
    tuned = backend.compile(run_pipeline(job.parsed, passes, choices=choices).program)
    error = check_outputs(tuned.run(dict(job.inputs)), job.expected)
    if error is not None:
        (t,) = time_interleaved([lambda: plain.run(dict(job.inputs))], rounds=rounds,
                                pause_s=pause_s)  # fmt: skip
        return t, None, f"with every choice {error}"
    before, after = time_interleaved(
        [lambda: plain.run(dict(job.inputs)), lambda: tuned.run(dict(job.inputs))],
        rounds=rounds, pause_s=pause_s, margin=1e9, batch_s=0.05,
    )  # fmt: skip
    return before, after, None
