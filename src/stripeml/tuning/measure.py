"""Timing candidates so that a noisy machine cannot pick the winner.

Candidates are timed in interleaved *rounds*: each round times every
candidate still in the race once (a batch of calls lasting about
``batch_s``, the same number of calls for each), in an order that rotates
from round to round, with a pause of ``pause_s`` before each batch (another
runtime's spinning threads, or the previous candidate's, would otherwise
distort the next one's first calls).  A candidate's time is the median of its
batches.  From the third round on, a candidate whose *fastest* batch is slower
than ``1 + margin`` times the best median so far is clearly slower and stops
being timed (early stop).  Every batch timed counts in :data:`COUNTER`, which
tests read to prove that a tune answered from the database measured nothing.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["COUNTER", "Timing", "time_interleaved"]


class _Counter:
    """Batches timed in this process (see the module docstring)."""

    def __init__(self) -> None:
        self.batches = 0
        self.candidates = 0


COUNTER = _Counter()


@dataclass(frozen=True)
class Timing:
    """Median seconds per call, the batches it is the median of, and whether the
    candidate was stopped early (its median is then an upper bound's estimate)."""

    median_s: float
    samples: int
    stopped: bool = False


def time_interleaved(
    runs: Sequence[Callable[[], object]],
    *,
    rounds: int = 7,
    pause_s: float = 0.05,
    batch_s: float = 0.01,
    margin: float = 0.3,
) -> list[Timing]:
    """Time each of ``runs`` (a call of one compiled candidate) as the module
    docstring says; the first is the reference the batch size is set from."""
    if not runs:
        return []
    COUNTER.candidates += len(runs)
    for run in runs:  # warm: code paged in, buffers allocated
        run()
    start = time.perf_counter()
    runs[0]()
    once = max(time.perf_counter() - start, 1e-7)
    calls = max(1, min(10_000, int(batch_s / once)))
    samples: list[list[float]] = [[] for _ in runs]
    alive = list(range(len(runs)))
    for r in range(rounds):
        order = alive[r % len(alive) :] + alive[: r % len(alive)]
        for n in order:
            if pause_s:
                time.sleep(pause_s)
            run = runs[n]
            t0 = time.perf_counter()
            for _ in range(calls):
                run()
            samples[n].append((time.perf_counter() - t0) / calls)
            COUNTER.batches += 1
        if r >= 2 and len(alive) > 1:
            best = min(statistics.median(samples[n]) for n in alive)
            alive = [n for n in alive if min(samples[n]) <= (1 + margin) * best]
    return [Timing(statistics.median(s), len(s), stopped=len(s) < rounds) for s in samples]
