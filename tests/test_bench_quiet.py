"""bench/quiet.py: the share of the FMA peak a benchmark's threads get, and which
rounds count as quiet.  Nothing here asserts a speed: the fake shares below stand
for a machine whose vCPU comes and goes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import quiet  # noqa: E402


class FakeShare:
    """A :class:`quiet.CpuShare` whose samples are given."""

    def __init__(self, values: list[float]) -> None:
        self.values = list(values)
        self.taken = 0

    def sample(self, settle: float = 0.0) -> float:
        self.taken += 1
        return self.values.pop(0) if self.values else 0.5


def test_a_round_is_quiet_only_when_both_samples_are():
    assert quiet.quiet(0.95, 0.9)
    assert not quiet.quiet(0.95, 0.5)
    assert not quiet.quiet(0.5, 0.95)
    assert quiet.quiet(quiet.QUIET, quiet.QUIET)


def test_summary_counts_the_quiet_rounds():
    got = quiet.summary([0.9, 0.5, 0.95, 0.97], [False, True])
    assert got == {"quiet_rounds": 1, "cpu_share_min": 0.5, "cpu_share_median": 0.925}
    assert quiet.summary([], [])["cpu_share_min"] is None


def test_wait_stops_at_the_first_quiet_sample():
    share = FakeShare([0.5, 0.48, 0.93, 0.5])
    assert quiet.wait(share, 10.0) == 0.93  # type: ignore[arg-type]
    assert share.taken == 3


def test_wait_gives_up_after_its_time():
    share = FakeShare([])
    assert quiet.wait(share, 0.0) == 0.5  # type: ignore[arg-type]
    assert share.taken == 1


def test_a_real_sample_is_a_share_of_a_measured_peak(monkeypatch, tmp_path):
    # The stored peak comes from the cache root; a fresh root measures it.
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    share = quiet.CpuShare(threads=2, bursts=3)
    assert share.peak > 0
    got = share.sample(0.0)
    # A burst can not run faster than the best run the peak was measured from by
    # more than timing jitter; a share of 0 would mean the bursts did no work.
    assert 0.0 < got < 1.5


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
