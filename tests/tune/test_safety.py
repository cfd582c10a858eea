"""The whole-program safety check: per-kernel winners are stored only when the
whole program is faster with them (docs/tuning.md).  Timers are replaced, so
no test depends on this machine's timings."""

from __future__ import annotations

import pytest

import stripeml
from stripeml.runtime.tuning_db import TuningDB, choices_for
from stripeml.tuning import driver, executors
from stripeml.tuning.measure import Timing

from .helpers import compile_matmul, matmul_inputs


def _t(seconds: float, rounds: int = 15) -> Timing:
    return Timing(seconds, rounds, batches=(seconds,) * rounds)


@pytest.fixture
def candidates_look_faster(monkeypatch):
    """Every kernel's candidates time at half the analytic choice's time."""

    def time(self, job, choices, rounds):
        return [_t(1.0 if not c else 0.5, rounds) for c in choices]

    def baselines(self, jobs, rounds):
        return [_t(1.0, rounds) for _ in jobs]

    monkeypatch.setattr(executors.LocalMeasurer, "time", time)
    monkeypatch.setattr(executors.LocalMeasurer, "baselines", baselines)


def _program_timer(before_s: float, after_s: float):
    def fake(runs, **kwargs):
        return [_t(before_s), _t(after_s)][: len(runs)]

    return fake


def test_a_slower_whole_program_stores_nothing(cache, monkeypatch, candidates_look_faster):
    monkeypatch.setattr(driver, "time_interleaved", _program_timer(1.0, 1.2))
    f = compile_matmul()
    report = stripeml.tune(f, *matmul_inputs(), budget_s=20, pause_s=0.0)
    (k,) = report.kernels
    assert k.choice and k.dropped  # the kernel alone looked faster ...
    assert report.kept is False and "NOT kept" in report.table()
    rows = TuningDB().rows()  # ... so it is stored disabled: the analytic choice, gain 1
    assert rows and all(r.choice == {} and r.gain == 1.0 for r in rows)
    assert choices_for(f.target) == {}
    # and a second tune answers from the database without measuring
    again = stripeml.tune(f, *matmul_inputs(), budget_s=20, pause_s=0.0)
    assert again.measured == 0 and again.hits == 1 and again.kept is None


def test_a_faster_whole_program_keeps_the_choices(cache, monkeypatch, candidates_look_faster):
    monkeypatch.setattr(driver, "time_interleaved", _program_timer(1.0, 0.8))
    f = compile_matmul()
    report = stripeml.tune(f, *matmul_inputs(), budget_s=20, pause_s=0.0)
    (k,) = report.kernels
    assert report.kept is True and k.choice and not k.dropped
    (row,) = TuningDB().rows()
    assert row.choice == k.choice
    assert choices_for(f.target) == {k.key: k.choice}


def test_noise_is_not_a_gain():
    before = Timing(1.0, 6, batches=(1.0, 1.0, 1.0, 1.0, 1.0, 1.0))
    # a lower median, but faster in only half the paired rounds
    after = Timing(0.9, 6, batches=(0.9, 0.9, 0.9, 1.1, 1.1, 1.1))
    assert not driver._faster(before, after)
    assert not driver._faster(before, _t(0.995, 6))  # under 1%: noise
    assert driver._faster(before, _t(0.9, 6))


def test_choices_that_break_the_whole_program_are_not_kept(cache, monkeypatch,
                                                           candidates_look_faster):  # fmt: skip
    monkeypatch.setattr(driver, "time_interleaved", _program_timer(1.0, 0.5))
    monkeypatch.setattr(driver, "check_outputs", lambda got, want: "output C differs")
    report = stripeml.tune(compile_matmul(), *matmul_inputs(), budget_s=20, pause_s=0.0)
    assert report.kept is False and "output C differs" in report.verdict
    assert all(r.choice == {} for r in TuningDB().rows())
