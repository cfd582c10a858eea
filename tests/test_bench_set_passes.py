"""bench/set_passes.py (``bench_onnx.py --set ... --passes N``): the set in several
passes, each in its own process, and one summary line per model.  Nothing is timed
by these tests; the figures in the fake passes are made up to check the summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import set_passes  # noqa: E402


def _line(model, ours, theirs, load, **extra):
    record = {"bench": "onnx", "case": "set", "model": model, "load_avg_1m": load}
    if ours is not None:
        record.update(stripeml_s=ours, baselines={"onnxruntime": theirs}, ratio=ours / theirs)
        record["ok"] = True
    record.update(extra)
    return json.dumps(record)


def test_summary_takes_the_median_pass_and_keeps_every_line(capsys):
    # a: one slow pass (1.5) among two fast ones: the median pass is 0.9
    passes = [
        [_line("a", 3.0, 2.0, 1.2), _line("b", 1.0, 2.0, 1.0)],
        [_line("a", 1.8, 2.0, 0.5), "not json: passed to stderr", _line("b", 3.0, 2.0, 0.7)],
        [_line("a", 1.9, 2.0, 0.6), _line("b", 1.2, 2.0, 0.8)],
    ]
    calls = []

    def child(names, blocks):
        calls.append((list(names), blocks))
        return passes[len(calls) - 1], 0

    out: list[dict] = []
    status = set_passes.run_passes(
        ["a", "b"], 4, 3, child=child, emit=lambda s: out.append(json.loads(s))
    )
    assert status == 0
    assert calls == [(["a", "b"], 4)] * 3
    per_pass = [r for r in out if r["case"] == "set"]
    assert [(r["model"], r["pass"]) for r in per_pass] == [
        ("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3), ("b", 3)
    ]  # fmt: skip
    summary = {r["model"]: r for r in out if r["case"] == "set_summary"}
    assert summary["a"]["ratios"] == [1.5, 0.9, 0.95]
    assert summary["a"]["ratio"] == pytest.approx(0.95)
    assert summary["a"]["stripeml_s"] == pytest.approx(1.9)
    assert summary["a"]["baselines"] == {"onnxruntime": pytest.approx(2.0)}
    assert summary["a"]["load_avg_1m"] == [1.2, 0.5, 0.6]
    assert summary["b"]["ratios"] == [0.5, 1.5, 0.6]
    assert summary["b"]["ratio"] == pytest.approx(0.6)
    assert summary["a"]["ok"] and summary["b"]["ok"] and summary["a"]["passes"] == 3
    assert "not json" in capsys.readouterr().err


def test_the_quiet_ratios_are_summed_up_over_the_passes_that_had_them():
    # bench/quiet.py: a pass with no quiet round has no ratio_quiet; the summary
    # takes the median of those there are, apart from every pass's ratio.
    passes = [
        [_line("a", 3.0, 2.0, 1.2, ratio_quiet=1.1)],
        [_line("a", 1.8, 2.0, 0.5)],
        [_line("a", 1.9, 2.0, 0.6, ratio_quiet=0.9)],
    ]
    calls = []

    def child(names, blocks):
        calls.append(names)
        return passes[len(calls) - 1], 0

    out: list[dict] = []
    set_passes.run_passes(["a"], 1, 3, child=child, emit=lambda s: out.append(json.loads(s)))
    (summary,) = [r for r in out if r["case"] == "set_summary"]
    assert summary["ratios"] == [1.5, 0.9, 0.95] and summary["ratio"] == pytest.approx(0.95)
    assert summary["ratios_quiet"] == [1.1, 0.9]
    assert summary["ratio_quiet"] == pytest.approx(1.0)


def test_a_failed_pass_or_model_fails_the_run():
    def child(names, blocks):
        return [_line("a", None, None, 1.0, ok=False, max_err=0.5), _line("b", 1.0, 2.0, 1.0)], 1

    out: list[dict] = []
    status = set_passes.run_passes(
        ["a", "b", "c"], 1, 2, child=child, emit=lambda s: out.append(json.loads(s))
    )
    assert status == 1
    summary = {r["model"]: r for r in out if r["case"] == "set_summary"}
    assert summary["a"]["ok"] is False and summary["a"]["ratio"] is None
    assert summary["b"]["ok"] is True and summary["b"]["ratios"] == [0.5, 0.5]
    assert summary["c"]["ok"] is False and summary["c"]["skipped"] == "not run"


def test_a_model_skipped_in_every_pass_is_not_a_failure():
    def child(names, blocks):
        return [_line("a", None, None, 1.0, skipped="unsupported operators: X")], 0

    out: list[dict] = []
    assert (
        set_passes.run_passes(["a"], 1, 2, child=child, emit=lambda s: out.append(json.loads(s)))
        == 0
    )
    (summary,) = [r for r in out if r["case"] == "set_summary"]
    assert summary["ok"] and summary["ratio"] is None
    assert summary["skipped"] == "unsupported operators: X"


def test_passes_must_be_positive():
    res = subprocess.run(
        [sys.executable, str(BENCH / "bench_onnx.py"), "--set", "zoo_squeezenet", "--passes", "0"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "--passes: at least 1" in res.stderr


@pytest.mark.slow
def test_two_real_passes_of_a_light_model(tmp_path):
    """The light SqueezeNet (no torch needed), two passes of one block, each in its
    own process: both checked against onnxruntime and timed, then summed up."""
    pytest.importorskip("onnxruntime")
    res = subprocess.run(
        [sys.executable, str(BENCH / "bench_onnx.py"), "--set", "zoo_squeezenet",
         "--blocks", "1", "--passes", "2"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in res.stdout.splitlines()]
    per_pass = [r for r in records if r["case"] == "set"]
    assert [r["pass"] for r in per_pass] == [1, 2]
    assert all(r["ok"] and r["max_err"] < 1e-3 for r in per_pass)
    (summary,) = [r for r in records if r["case"] == "set_summary"]
    assert summary["passes"] == 2 and summary["ok"]
    assert summary["ratios"] == [round(r["ratio"], 4) for r in per_pass]
    assert min(summary["ratios"]) <= summary["ratio"] <= max(summary["ratios"])
