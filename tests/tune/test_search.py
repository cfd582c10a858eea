"""The search's last step: a winner is kept only when it beats the analytic
choice beyond noise (a lower median *and* most of the paired rounds).
Timings are made up, so no test depends on this machine's."""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import pytest

from stripeml.tuning.measure import Timing, faster
from stripeml.tuning.search import KernelSearch
from stripeml.tuning.space import Axis, choice_key

WINNER = {"unroll": {"rows": 2}}


class _Measurer:
    """Every choice checks out; the last timing of the winner against the
    analytic choice gives the batches it was made with."""

    def __init__(self, base: list[float], best: list[float]) -> None:
        self.base, self.best = base, best
        self.asked: list[int] = []

    def check(self, job, choices):
        return [(choice_key(c), None) for c in choices]

    def time(self, job, choices, rounds):
        self.asked.append(rounds)
        assert choices == [{}, WINNER]
        return [
            Timing(statistics.median(b), len(b), batches=tuple(b)) for b in (self.base, self.best)
        ]


def _finish(base: list[float], best: list[float]):
    job = SimpleNamespace(key="k", label="k0", count=1)
    measurer = _Measurer(base, best)
    search = KernelSearch(job, [Axis("unroll", "rows", (1, 2), 1)], measurer)  # type: ignore[arg-type]
    search.start(Timing(1.0, 5, batches=(1.0,) * 5))
    search.best = WINNER
    return search.finish(), measurer


def test_a_winner_faster_in_most_rounds_is_kept():
    base = [1.0] * 9
    best = [0.9] * 8 + [1.1]
    result, measurer = _finish(base, best)
    assert measurer.asked == [KernelSearch.FINAL_ROUNDS]
    assert result.choice == WINNER and result.best_s == pytest.approx(0.9)


def test_a_lower_median_from_a_few_rounds_is_noise():
    # the median is 10% lower, but only 5 of 9 rounds were won
    base = [1.0] * 9
    best = [0.5, 0.5, 0.5, 0.5, 0.9, 1.2, 1.2, 1.2, 1.2]
    result, _ = _finish(base, best)
    assert statistics.median(best) < 0.98 * statistics.median(base)
    assert result.choice == {} and result.best_s == result.base_s == 1.0


def test_faster_needs_both_the_median_and_the_rounds():
    t = lambda *b: Timing(statistics.median(b), len(b), batches=b)  # noqa: E731
    assert faster(t(1.0, 1.0, 1.0), t(0.9, 0.9, 0.9), 0.02, 2 / 3)
    assert not faster(t(1.0, 1.0, 1.0), t(0.99, 0.99, 0.99), 0.02, 2 / 3)  # under 2%
    base, lucky = t(1.0, 1.0, 1.0, 1.0, 1.0), t(0.5, 0.8, 0.9, 1.5, 1.5)  # won 3 of 5
    assert not faster(base, lucky, 0.02, 2 / 3)
    assert faster(base, lucky, 0.02, 0.5)


def test_the_report_says_when_the_machine_was_busy():
    from stripeml.tuning.driver import TuneReport

    assert "machine was busy" in TuneReport("cpu", load=(5.4, 4.8), cpus=2).table()
    assert "machine was busy" not in TuneReport("cpu", load=(1.2, 1.7), cpus=2).table()
    assert not TuneReport("cpu").busy  # no load average: nothing said
