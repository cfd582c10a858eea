"""Whether the machine gives this process all of its CPUs right now.

The benchmark machine is a 2-vCPU VM on a shared host.  For seconds at a time
the host runs one of its vCPUs elsewhere: nothing inside the VM shows it (no
steal time is reported, the load average stays near 1), but every two-thread
program slows down, onnxruntime and stripeml alike, by different amounts
(ShuffleNet 2.4 -> 6.7 ms, onnxruntime 2.8 -> 5.7 ms, minutes apart at a load
average of 1.0-1.3).  A round timed in such a phase is not a quiet-machine
figure, and it moves the ratios.

:class:`CpuShare` measures it directly: a burst of the peak FMA loop
(:class:`stripeml.runtime.peaks.FmaBurst`, half a millisecond on every thread)
against the peak stored for this machine (``peaks.json`` in the cache root) or
the best burst of its first 0.1 s, whichever is higher.  :meth:`CpuShare.sample`
is the median of a few bursts over that peak: about 0.95 on a quiet machine,
about 0.5 while a vCPU is away.  A benchmark samples before and after each round
and calls the round quiet when both samples are at least :data:`QUIET`; the
rounds that are not are still reported, apart.

It catches that cause only.  The VM has another slow state, of 5-10 s at a
time, in which ShuffleNet takes 6.5-7.5 ms instead of 2.4-2.8 (onnxruntime
5.7 instead of 2.8) while the FMA bursts, the pool's hand-over of a job
(2.4-2.7 us) and one thread's copies through L2, L3 and DRAM all measure as
usual (2026-12-06 20:21-20:58); in one run ShuffleNet's quiet rounds were
that state's.  So a quiet round is one whose CPUs were all there, not one
known to be fast: read the quiet figures beside the others, never instead.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

#: The least share of the peak, before and after a round, for a quiet round.
QUIET = 0.8
#: Seconds :meth:`CpuShare.sample` waits before its bursts.
SETTLE_S = 0.05


class CpuShare:
    """The share of this machine's FMA peak that ``threads`` threads get right now."""

    def __init__(self, threads: int = 2, bursts: int = 5) -> None:
        from stripeml import api
        from stripeml.runtime.peaks import FmaBurst, target_peaks

        self.threads, self.bursts = threads, bursts
        self._burst = FmaBurst(threads)
        stored = target_peaks(api.target_for("cpu", threads)).gflops or 0.0
        self.peak = max(stored, self._burst.flops / self._burst.best_seconds(0.1) / 1e9)

    def sample(self, settle: float = SETTLE_S) -> float:
        """After ``settle`` seconds (another library's threads spin for a while after
        its last call, and would be counted against the machine), the median of
        :attr:`bursts` bursts' GFLOP/s over :attr:`peak` (about a millisecond each,
        with their warm-up runs)."""
        time.sleep(settle)
        return statistics.median(self._burst.gflops() for _ in range(self.bursts)) / self.peak


def quiet(before: float, after: float) -> bool:
    """Whether a round between samples ``before`` and ``after`` ran on a quiet machine."""
    return min(before, after) >= QUIET


def summary(shares: list[float], flags: list[bool]) -> dict[str, Any]:
    """The JSON fields of a run's samples: rounds quiet, and the least and median share."""
    return {
        "quiet_rounds": sum(flags),
        "cpu_share_min": round(min(shares), 3) if shares else None,
        "cpu_share_median": round(statistics.median(shares), 3) if shares else None,
    }


def wait(share: CpuShare, seconds: float) -> float:
    """Sample every 0.1 s until a sample is at least :data:`QUIET` or ``seconds``
    have passed; the last sample."""
    stop = time.perf_counter() + seconds
    got = share.sample()
    while got < QUIET and time.perf_counter() < stop:
        got = share.sample(0.1)
    return got
