"""Timing candidates so that a noisy machine cannot pick the winner.

Candidates are timed in interleaved *rounds*: each round times every
candidate still in the race once (a batch of calls lasting about
``batch_s``, the same number of calls for each), in an order that rotates
from round to round, with a pause of ``pause_s`` before each batch (another
runtime's spinning threads, or the previous candidate's, would otherwise
distort the next one's first calls).  A candidate's time is the median of its
batches.  From the third round on, a candidate whose *fastest* batch is slower
than ``1 + margin`` times the best median so far is clearly slower and stops
being timed (early stop).  With ``self_timed`` each call returns the seconds it measured itself (a
kernel's steps inside a whole program's run, :func:`.kernels.window_seconds`)
and a batch's time is their mean; every batch has at least ``min_calls``
calls.  Every batch timed counts in :data:`COUNTER`, which
tests read to prove that a tune answered from the database measured nothing.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..runtime.kept_layouts import wait_writes

__all__ = ["COUNTER", "Timing", "faster", "time_interleaved"]


class _Counter:
    """Batches timed in this process (see the module docstring)."""

    def __init__(self) -> None:
        self.batches = 0
        self.candidates = 0


COUNTER = _Counter()


@dataclass(frozen=True)
class Timing:
    """Median seconds per call, the batches it is the median of, whether the
    candidate was stopped early (its median is then an upper bound's estimate),
    and each round's batch time in order (rounds of two candidates pair up)."""

    median_s: float
    samples: int
    stopped: bool = False
    batches: tuple[float, ...] = ()


def faster(before: Timing, after: Timing, min_gain: float, min_won: float) -> bool:
    """Whether ``after`` is faster than ``before`` beyond noise: its median at
    least ``min_gain`` lower, and faster in at least ``min_won`` of the rounds
    both were timed in (each round timed both, adjacently: a sign test, so a
    lower median from a few lucky rounds is not a gain)."""
    if not after.median_s < before.median_s * (1 - min_gain):
        return False
    pairs = list(zip(before.batches, after.batches))
    if not pairs:
        return True
    won = sum(1 for b, a in pairs if a < b)
    return won >= min_won * len(pairs)


def time_interleaved(
    runs: Sequence[Callable[[], object]],
    *,
    rounds: int = 7,
    pause_s: float = 0.05,
    batch_s: float = 0.01,
    margin: float = 0.3,
    self_timed: bool = False,
    min_calls: int = 1,
) -> list[Timing]:
    """Time each of ``runs`` (a call of one compiled candidate) as the module
    docstring says; the first is the reference the batch size is set from."""
    if not runs:
        return []
    COUNTER.candidates += len(runs)
    for run in runs:  # warm: code paged in, buffers allocated
        run()
    # the cache files the candidates' compiles and first calls left to write
    # (runtime.kept_layouts.in_background) are written now, not while timing
    wait_writes()
    start = time.perf_counter()
    runs[0]()
    once = max(time.perf_counter() - start, 1e-7)
    calls = max(min_calls, min(10_000, int(batch_s / once)))
    samples: list[list[float]] = [[] for _ in runs]
    alive = list(range(len(runs)))
    for r in range(rounds):
        order = alive[r % len(alive) :] + alive[: r % len(alive)]
        for n in order:
            if pause_s:
                time.sleep(pause_s)
            run = runs[n]
            t0 = time.perf_counter()
            took = 0.0
            if self_timed:
                for _ in range(calls):
                    got = run()
                    assert isinstance(got, float), "a self-timed run returns its seconds"
                    took += got
            else:
                for _ in range(calls):
                    run()
                took = time.perf_counter() - t0
            samples[n].append(took / calls)
            COUNTER.batches += 1
        if r >= 2 and len(alive) > 1:
            best = min(statistics.median(samples[n]) for n in alive)
            alive = [n for n in alive if min(samples[n]) <= (1 + margin) * best]
    return [
        Timing(statistics.median(s), len(s), stopped=len(s) < rounds, batches=tuple(s))
        for s in samples
    ]
