"""The search: a beam over one-option steps from the analytic choice, per kernel.

Why a beam over steps: the target file's choice is already good (it comes from
a cost model), so the winners are near it, and the options interact (rows
with vectors, packing with row blocks), which one-option-at-a-time greedy
search misses once a step makes the next one pay.  The beam keeps the
``width`` best points; each generation proposes every unseen neighbour of
them (:func:`.space.neighbours`), compiles and checks each against the
interpreter (a wrong one is discarded: counted, never timed, never stored),
drops those whose optimised program is one already timed (most options do
nothing to most kernels: an elementwise kernel has no register tiles), and
times the rest interleaved with the best so far (:mod:`.measure`; each
generation re-times the best in the same rounds, so times are compared only
within rounds, as ratios).  Points whose program equals a beam member's (a
plateau: ``rows`` 5 tiles like 4 where 5 does not divide the range) are
expanded too, so a step that does nothing does not end the walk.  The search
ends when a generation improves the best by less than ``min_gain``, when
nothing new is left, when :attr:`KernelSearch.MAX_UNTIMED` candidates in a
row were compiled without one to time (a plateau walk that finds nothing new:
the rest of the kernel's share of the budget goes back to the kernels after
it), or at the kernel's deadline.  Last, the winner and the
analytic choice are timed against each other in more rounds; a winner less
than ``min_gain`` faster, or faster in fewer than two thirds of those rounds
(a sign test: on a busy machine a lower median can be a few lucky rounds), is
not kept (the analytic choice is stored: a later tune measures nothing).

The first thing measured is always the analytic choice (``{}``), on its own
or, where the executor can, with every other kernel's from the same runs: it
is the reference every ratio starts from.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from ..passes._kernel_choices import Choice
from .kernels import KernelJob
from .measure import Timing, faster
from .space import Axis, choice_key, neighbours

__all__ = ["KernelResult", "KernelSearch", "Measurer"]


class Measurer(Protocol):
    """What the search needs from an executor (:mod:`.executors`)."""

    def check(self, job: KernelJob, choices: list[Choice]) -> list[tuple[str, str | None]]:
        """Per choice: its optimised program's text, and why it was discarded (None: it
        matches the interpreter)."""
        ...

    def time(self, job: KernelJob, choices: list[Choice], rounds: int) -> list[Timing]:
        """Time checked choices interleaved (the first is the reference)."""
        ...


@dataclass
class KernelResult:
    """One kernel's outcome: the choice kept (``{}``: the analytic one), the
    medians of the analytic and the kept choice from the same rounds, how many
    candidates were compiled, discarded as wrong and timed; ``from_db``: read
    from the database, nothing measured; ``error``: why it was not tuned."""

    key: str
    label: str
    count: int
    choice: Choice = field(default_factory=dict)
    base_s: float = 0.0
    best_s: float = 0.0
    compiled: int = 0
    discarded: int = 0
    timed: int = 0
    from_db: bool = False
    error: str | None = None
    #: measured faster in its window, but the whole program with the new choices was
    #: not faster: stored disabled (docs/tuning.md, the safety check)
    dropped: bool = False

    @property
    def gain(self) -> float:
        return self.base_s / self.best_s if self.best_s > 0 else 1.0

    @property
    def saved_s(self) -> float:
        """Seconds saved per run of the program (each occurrence of the kernel)."""
        if self.dropped:
            return 0.0
        return max(0.0, self.base_s - self.best_s) * self.count


class KernelSearch:
    """The beam search of one kernel, run in slices (see the module docstring)."""

    ROUNDS = 5

    def __init__(
        self,
        job: KernelJob,
        space: list[Axis],
        measurer: Measurer,
        *,
        width: int = 2,
        rounds: int = ROUNDS,
        min_gain: float = 0.02,
        max_untimed: int | None = None,
    ) -> None:
        self.job = job
        self.space = space
        self.measurer = measurer
        self.width = width
        self.rounds = rounds
        self.min_gain = min_gain
        self.max_untimed = self.MAX_UNTIMED if max_untimed is None else max_untimed
        #: candidates compiled since the last generation that timed one
        self.untimed = 0
        self.result = KernelResult(job.key, job.label, job.count)
        self.seen: set[str] = set()
        self.by_text: dict[str, float] = {}  # optimised text -> time relative to the analytic
        self.text_of: dict[str, str] = {}  # choice key -> its optimised text
        self.beam: list[Choice] = []
        self.best: Choice = {}
        self.best_rel = 1.0
        self.done = False

    def start(self, baseline: Timing | None = None) -> None:
        """Compile, check and time the analytic choice (the first measurement;
        ``baseline``: its timing, already measured with other kernels')."""
        ((text, error),) = self.measurer.check(self.job, [{}])
        self.result.compiled += 1
        self.seen.add(choice_key({}))
        if error is not None:
            self.result.error = f"the analytic choice does not match the interpreter: {error}"
            self.done = True
            return
        timing = baseline or self.measurer.time(self.job, [{}], self.rounds)[0]
        self.result.timed += 1
        self.result.base_s = self.result.best_s = timing.median_s
        self.by_text[text] = 1.0
        self.text_of[choice_key({})] = text
        self.beam = [{}]

    #: Candidates compiled in a row without one to time, at most, before the
    #: search of a kernel ends (docs/tuning.md, "Search strategy").
    MAX_UNTIMED = 256

    def step(self) -> None:
        """One generation; sets :attr:`done` when the search is over."""
        room = self.max_untimed - self.untimed  # the plateau walk's cap
        proposals: list[Choice] = []
        for c in self.beam:
            for nb in neighbours(c, self.space):
                k = choice_key(nb)
                if k not in self.seen and len(proposals) < room:
                    self.seen.add(k)
                    proposals.append(nb)
        if not proposals:
            self.done = True
            return
        checked = self.measurer.check(self.job, proposals)
        self.result.compiled += len(proposals)
        fresh: list[tuple[Choice, str]] = []
        plateau: list[Choice] = []
        beam_texts = {self.text_of[choice_key(c)] for c in self.beam}
        for choice, (text, error) in zip(proposals, checked):
            if error is not None:
                self.result.discarded += 1
                continue
            self.text_of[choice_key(choice)] = text
            if text in self.by_text:
                if text in beam_texts:
                    plateau.append(choice)
                continue
            if text not in {t for _, t in fresh}:
                fresh.append((choice, text))
        if not fresh:
            self.untimed += len(proposals)
            self.beam = plateau[: 3 * self.width]
            self.done = not self.beam or self.untimed >= self.max_untimed
            return
        self.untimed = 0
        timings = self.measurer.time(self.job, [self.best] + [c for c, _ in fresh], self.rounds)
        self.result.timed += len(fresh)
        ref = timings[0].median_s
        ranked: list[tuple[float, Choice]] = [(self.best_rel, self.best)]
        for (choice, text), t in zip(fresh, timings[1:]):
            rel = self.best_rel * t.median_s / ref
            self.by_text[text] = rel
            ranked.append((rel, choice))
        ranked.sort(key=lambda rc: rc[0])
        improved = ranked[0][0] < self.best_rel * (1 - self.min_gain)
        self.best_rel, self.best = ranked[0]
        self.beam = [c for _, c in ranked[: self.width]] + plateau[: self.width]
        if not improved:
            self.done = True

    def run(self, deadline: float) -> None:
        """Generations until done or ``deadline`` (``time.monotonic()``)."""
        while not self.done and time.monotonic() < deadline:
            self.step()

    #: Rounds of the last timing of the winner against the analytic choice, and
    #: the share of them the winner must win (:func:`.measure.faster`).
    FINAL_ROUNDS = 9
    FINAL_WON = 2 / 3

    def finish(self) -> KernelResult:
        """Time the winner against the analytic choice and keep it if it is
        faster beyond noise: ``min_gain`` lower median and faster in
        :attr:`FINAL_WON` of the paired rounds."""
        r = self.result
        if r.error is None and self.best:
            base, best = self.measurer.time(self.job, [{}, self.best], self.FINAL_ROUNDS)
            if faster(base, best, self.min_gain, self.FINAL_WON):
                r.choice, r.base_s, r.best_s = self.best, base.median_s, best.median_s
            else:
                r.base_s = r.best_s = base.median_s
        return r
