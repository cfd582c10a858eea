"""bench/quiet.py: the share of the FMA peak a benchmark's threads get, and which
rounds count as quiet.  Nothing here asserts a speed: the fake shares below stand
for a machine whose vCPU comes and goes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import quiet  # noqa: E402

Q = quiet.Sample


class FakeShare:
    """A :class:`quiet.CpuShare` whose samples are given."""

    def __init__(self, values: list[quiet.Sample]) -> None:
        self.values = list(values)
        self.taken = 0

    def sample(self, settle: float = 0.0) -> quiet.Sample:
        self.taken += 1
        return self.values.pop(0) if self.values else Q(0.5, 40.0)


def test_a_sample_is_quiet_with_both_cpus_under_one_cache():
    assert Q(0.95, 40.0).quiet and Q(quiet.QUIET, quiet.NEAR_NS).quiet
    assert not Q(0.5, 40.0).quiet  # a vCPU taken away
    assert not Q(0.97, 165.0).quiet  # the two vCPUs under different L3 caches
    assert not Q(0.97, None).quiet  # the second thread never came


def test_a_round_is_quiet_only_when_both_samples_are():
    assert quiet.quiet(Q(0.95, 40.0), Q(0.9, 45.0))
    assert not quiet.quiet(Q(0.95, 40.0), Q(0.5, 40.0))
    assert not quiet.quiet(Q(0.95, 170.0), Q(0.95, 40.0))


def test_summary_counts_the_quiet_rounds():
    samples = [Q(0.9, 40.0), Q(0.5, 42.0), Q(0.95, 170.0), Q(0.97, None)]
    got = quiet.summary(samples, [False, False])
    assert got == {
        "quiet_rounds": 0,
        "cpu_share_min": 0.5,
        "cpu_share_median": 0.925,
        "handoff_ns_median": 42.0,
        "handoff_ns_max": 170.0,
    }
    assert quiet.summary([], [])["cpu_share_min"] is None


def test_wait_stops_at_the_first_quiet_sample():
    share = FakeShare([Q(0.5, 40.0), Q(0.93, 160.0), Q(0.93, 41.0), Q(0.5, 40.0)])
    assert quiet.wait(share, 10.0) == Q(0.93, 41.0)  # type: ignore[arg-type]
    assert share.taken == 3


def test_wait_gives_up_after_its_time():
    share = FakeShare([])
    assert quiet.wait(share, 0.0) == Q(0.5, 40.0)  # type: ignore[arg-type]
    assert share.taken == 1


def test_a_real_sample_measures_both(monkeypatch, tmp_path):
    # The stored peak comes from the cache root; a fresh root measures it.
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    share = quiet.CpuShare(threads=2, bursts=3)
    assert share.peak > 0
    got = share.sample(0.0)
    # A burst can not run faster than the best run the peak was measured from by
    # more than timing jitter; a share of 0 would mean the bursts did no work.
    assert 0.0 < got.share < 1.5
    assert got.handoff_ns is None or got.handoff_ns > 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))


def test_rounds_sample_around_each_round_and_keep_the_quiet_ones():
    share = FakeShare([Q(0.95, 40.0), Q(0.9, 42.0), Q(0.95, 40.0), Q(0.97, 170.0)])
    log = quiet.Rounds(share)  # type: ignore[arg-type]
    for _ in range(2):
        with log.round():
            pass
    assert share.taken == 4 and log.flags == [True, False]
    assert log.quiet_only(["first", "second"]) == ["first"]
    assert log.summary()["quiet_rounds"] == 1 and log.summary()["handoff_ns_max"] == 170.0
    # Without a probe nothing is sampled and nothing is reported.
    bare = quiet.Rounds(None)
    with bare.round():
        pass
    assert bare.flags == [] and bare.summary() == {} and bare.quiet_only([1]) == []
