"""Whether the machine is, right now, the machine the figures are meant for.

The benchmark machine is a 2-vCPU VM on a shared host, and the host changes
it under the benchmark in two ways that nothing inside the VM reports (no
steal time, a load average near 1):

* **a vCPU taken away**, for seconds at a time: every two-thread program
  slows down, onnxruntime and stripeml alike, by different amounts;
* **the two vCPUs under different L3 caches**, for 5-10 s at a time: a cache
  line goes from one thread to the other in 160-185 ns instead of about 40,
  and a model of small kernels that pass their results between the threads
  slows down most (ShuffleNet 2.4 -> 6.7 ms, onnxruntime 2.8 -> 5.7 ms),
  while the FMA peak, the pool's hand-over of a job (2.4-2.7 us) and one
  thread's copies through L2, L3 and DRAM measure as usual (the DRAM stream
  of both threads is higher: 60-69 GB/s against 40).

A round timed in either state is not a quiet-machine figure, and it moves the
ratios.  :class:`CpuShare` measures both: :meth:`CpuShare.sample` gives

* ``share``: the median of five bursts of the peak FMA loop on both threads
  (:class:`stripeml.runtime.peaks.FmaBurst`, half a millisecond each) over the
  peak stored for this machine (``peaks.json`` in the cache root) or the best
  burst of its first 0.1 s, whichever is higher: 0.87-1.0 with both vCPUs,
  0.47-0.50 with one;
* ``handoff_ns``: the median of three runs of
  :class:`stripeml.runtime.handoff.Handoff`, a counter passed back and forth
  between the two threads: the one-way latency in ns (``None`` when the
  second thread never came).

A benchmark samples before and after each round and calls the round quiet when
both samples are (:func:`quiet`: a share of at least :data:`QUIET` and a
hand-over of at most :data:`NEAR_NS`).  The rounds that are not are still
reported, apart.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

#: The least share of the peak for a quiet sample.
QUIET = 0.8
#: The longest hand-over between the two threads for a quiet sample, in ns (about
#: 40 sharing an L3 cache, 160-185 not, on the benchmark VM).
NEAR_NS = 100.0
#: Seconds :meth:`CpuShare.sample` waits before it measures.
SETTLE_S = 0.05


@dataclass(frozen=True)
class Sample:
    """One look at the machine: the share of the FMA peak both threads got, and
    the hand-over latency between them (``None``: not measured)."""

    share: float
    handoff_ns: float | None

    @property
    def quiet(self) -> bool:
        return self.share >= QUIET and self.handoff_ns is not None and self.handoff_ns <= NEAR_NS


class CpuShare:
    """The state of this machine's two threads right now (:meth:`sample`)."""

    def __init__(self, threads: int = 2, bursts: int = 5, handoffs: int = 3) -> None:
        from stripeml import api
        from stripeml.runtime.handoff import Handoff
        from stripeml.runtime.peaks import FmaBurst, target_peaks

        self.threads, self.bursts, self.handoffs = threads, bursts, handoffs
        self._burst = FmaBurst(threads)
        self._handoff = Handoff() if threads >= 2 else None
        stored = target_peaks(api.target_for("cpu", threads)).gflops or 0.0
        self.peak = max(stored, self._burst.flops / self._burst.best_seconds(0.1) / 1e9)

    def sample(self, settle: float = SETTLE_S) -> Sample:
        """After ``settle`` seconds (another library's threads spin for a while after
        its last call, and would be counted against the machine), the share of the
        peak (the median of :attr:`bursts` bursts, about a millisecond each with
        their warm-up runs) and the hand-over latency (the median of
        :attr:`handoffs` runs of a few milliseconds)."""
        time.sleep(settle)
        share = statistics.median(self._burst.gflops() for _ in range(self.bursts)) / self.peak
        ns = None
        if self._handoff is not None:
            runs = [self._handoff.nanoseconds() for _ in range(self.handoffs)]
            measured = [r for r in runs if r is not None]
            ns = statistics.median(measured) if measured else None
        return Sample(share, ns)


def quiet(before: Sample, after: Sample) -> bool:
    """Whether a round between samples ``before`` and ``after`` ran on a quiet machine."""
    return before.quiet and after.quiet


def summary(samples: list[Sample], flags: list[bool]) -> dict[str, Any]:
    """The JSON fields of a run's samples: rounds quiet, the least and median share,
    and the median and longest hand-over."""
    shares = [s.share for s in samples]
    ns = [s.handoff_ns for s in samples if s.handoff_ns is not None]
    return {
        "quiet_rounds": sum(flags),
        "cpu_share_min": round(min(shares), 3) if shares else None,
        "cpu_share_median": round(statistics.median(shares), 3) if shares else None,
        "handoff_ns_median": round(statistics.median(ns), 1) if ns else None,
        "handoff_ns_max": round(max(ns), 1) if ns else None,
    }


class Rounds:
    """The samples a benchmark takes around each of its rounds (:meth:`round`), and
    which rounds were quiet; with no ``share`` nothing is sampled, and
    :meth:`summary` is empty."""

    def __init__(self, share: CpuShare | None) -> None:
        self.share = share
        self.samples: list[Sample] = []
        self.flags: list[bool] = []  # per round: quiet

    @contextlib.contextmanager
    def round(self) -> Iterator[None]:
        """Sample before and after the ``with`` block, one round."""
        if self.share is None:
            yield
            return
        before = self.share.sample()
        yield
        after = self.share.sample()
        self.samples += [before, after]
        self.flags.append(quiet(before, after))

    def quiet_only(self, per_round: Sequence[T]) -> list[T]:
        """The items of ``per_round`` (one per round, in order) of the quiet rounds."""
        return [x for x, q in zip(per_round, self.flags) if q]

    def summary(self) -> dict[str, Any]:
        """:func:`summary` of the samples (nothing without a ``share``)."""
        return summary(self.samples, self.flags) if self.share is not None else {}


def wait(share: CpuShare, seconds: float) -> Sample:
    """Sample every 0.1 s until a sample is quiet or ``seconds`` have passed; the
    last sample."""
    stop = time.perf_counter() + seconds
    got = share.sample()
    while not got.quiet and time.perf_counter() < stop:
        got = share.sample(0.1)
    return got
