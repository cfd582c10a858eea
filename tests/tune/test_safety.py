"""The whole-program safety check: per-kernel winners are stored only when the
whole program is faster with them (docs/tuning.md).  Timers are replaced, so
no test depends on this machine's timings."""

from __future__ import annotations

import numpy as np
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


TWO_MATMULS = """
function (A[M, K], B[K, N], D[N, P]) -> (E) {
    C[m, n : M, N] = +(A[m, k] * B[k, n]);
    E[m, p : M, P] = +(C[m, n] * D[n, p]);
}
"""


def _two_matmuls():
    rng = np.random.default_rng(3)
    a, b, d = (rng.standard_normal(s).astype(np.float32) for s in ((48, 64), (64, 96), (96, 80)))
    return stripeml.compile(TWO_MATMULS, target="cpu", threads=2), (a, b, d)


@pytest.fixture
def one_kernel_saves_more(monkeypatch):
    """Candidates time at half the analytic choice; the second kernel's analytic
    choice costs three times the first's, so its choice saves the most alone."""
    seen: list[str] = []

    def base(job) -> float:
        if job.key not in seen:
            seen.append(job.key)
        return 1.0 if seen.index(job.key) == 0 else 3.0

    def time(self, job, choices, rounds):
        return [_t(base(job) * (1.0 if not c else 0.5), rounds) for c in choices]

    def baselines(self, jobs, rounds):
        return [_t(base(j), rounds) for j in jobs]

    monkeypatch.setattr(executors.LocalMeasurer, "time", time)
    monkeypatch.setattr(executors.LocalMeasurer, "baselines", baselines)


@pytest.mark.parametrize("subset_pays", [True, False])
def test_when_every_choice_together_is_slower_the_best_subset_is_tried(
    cache, monkeypatch, one_kernel_saves_more, subset_pays
):
    tried: list[int] = []

    def latency(fn, job, choices, pause_s, rounds=21):
        tried.append(len(choices))
        after = 0.8 if (len(choices) == 1 and subset_pays) else 1.2
        return _t(1.0), _t(after), None

    monkeypatch.setattr(driver, "_program_latency", latency)
    f, inputs = _two_matmuls()
    report = stripeml.tune(f, *inputs, budget_s=20, pause_s=0.0)
    chosen = [k for k in report.kernels if k.choice]
    assert len(chosen) == 2 and tried == [2, 1]  # all together, then the best one
    best = max(chosen, key=lambda k: k.saved_s)
    rows = {r.kernel: r for r in TuningDB().rows()}
    if subset_pays:
        assert report.kept is True and "kept the 1 that save the most of 2" in report.verdict
        assert [k.key for k in chosen if not k.dropped] == [best.key]
        assert rows[best.key].choice == best.choice
        assert choices_for(f.target) == {best.key: best.choice}
    else:
        assert report.kept is False and "nor with the ones that save the most" in report.verdict
        assert all(k.dropped for k in chosen)
        assert choices_for(f.target) == {}
    others = [k for k in chosen if k.key != best.key]
    assert all(rows[k.key].choice == {} for k in others)  # stored disabled either way
