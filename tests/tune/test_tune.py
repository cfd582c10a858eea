"""``stripeml.tune``: what is measured, what is stored, what is reused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import stripeml
from stripeml.passes._kernel_choices import tuning_point
from stripeml.passes.unroll import Unroll
from stripeml.runtime.tuning_db import Row, TuningDB, choices_for, compiler_key, target_key
from stripeml.tile.bind import signature_of
from stripeml.tuning import executors
from stripeml.tuning.kernels import kernel_jobs
from stripeml.tuning.measure import COUNTER
from stripeml.tuning.space import axes

from .helpers import MATMUL, compile_matmul, matmul_inputs, wrong_when


def test_analytic_choice_is_measured_first(cache, monkeypatch):
    timed: list[list[dict]] = []
    original = executors.LocalMeasurer.time
    together = executors.LocalMeasurer.baselines

    def spy(self, job, choices, rounds):
        timed.append(choices)
        return original(self, job, choices, rounds)

    def spy_baselines(self, jobs, rounds):
        timed.append([{}])  # every kernel's analytic choice, from the same runs
        return together(self, jobs, rounds)

    monkeypatch.setattr(executors.LocalMeasurer, "time", spy)
    monkeypatch.setattr(executors.LocalMeasurer, "baselines", spy_baselines)
    f = compile_matmul()
    report = stripeml.tune(f, *matmul_inputs(), budget_s=20, pause_s=0.0, measure_program=False)
    assert timed and timed[0] == [{}]
    assert len(report.kernels) == 1 and report.kernels[0].timed >= 1


def test_wrong_candidate_is_discarded_and_never_stored(cache, monkeypatch):
    f = compile_matmul()
    (rows,) = [a for a in axes(f.target, tuning_point(f.target.passes)) if a.option == "rows"]
    bad = rows.values[rows.values.index(rows.start) - 1]  # one step from the analytic rows
    wrong_when(Unroll, "rows", bad, monkeypatch)
    report = stripeml.tune(f, *matmul_inputs(), budget_s=30, pause_s=0.0, measure_program=False)
    (k,) = report.kernels
    assert k.error is None and k.discarded >= 1
    stored = TuningDB().rows()
    assert stored and all(r.choice.get("unroll", {}).get("rows") != bad for r in stored)
    # what a compile applies now still computes A @ B
    a, b = matmul_inputs()
    np.testing.assert_allclose(compile_matmul()(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_second_tune_measures_nothing(cache):
    f = compile_matmul()
    first = stripeml.tune(f, *matmul_inputs(), budget_s=20, pause_s=0.0, measure_program=False)
    assert first.measured >= 1 and first.hits == 0
    before = COUNTER.batches
    again = stripeml.tune(f, *matmul_inputs(), budget_s=20, pause_s=0.0, measure_program=False)
    assert again.hits == len(again.kernels) == len(first.kernels)
    assert again.measured == 0 and COUNTER.batches == before


def _store(choice: dict) -> str:
    """Store ``choice`` for the matmul's kernel; its key."""
    f = compile_matmul()
    a, b = matmul_inputs()
    (job,), _ = kernel_jobs(f.lowered(signature_of([a, b])), f.target, {})
    row = Row(target_key(f.target), compiler_key(), job.key, choice, 2.0, 1.0, 3, job.label, "cpu")
    assert TuningDB().put([row]) == 1
    return job.key


def test_fresh_process_uses_the_stored_choice_without_measuring(cache):
    _store({"unroll": {"rows": 2, "vectors": 1}})
    script = textwrap.dedent(
        f"""
        import sys, numpy as np, stripeml
        src = {MATMUL!r}
        rng = np.random.default_rng(1)
        a = rng.standard_normal((48, 64)).astype(np.float32)
        b = rng.standard_normal((64, 96)).astype(np.float32)
        tuned = stripeml.compile(src, target="cpu", threads=2)
        exe = tuned.lower(a, b)
        plain = stripeml.api.Function(src, "cpu", threads=2, tuned=False).lower(a, b)
        want = stripeml.compile(src, target="interp")(a, b)
        print(exe.ir != plain.ir, float(np.abs(tuned(a, b) - want).max()),
              "stripeml.tuning.measure" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=os.environ, check=True
    ).stdout.split()
    assert out[0] == "True"  # the stored options changed the program
    assert float(out[1]) < 1e-3  # and it still computes what the interpreter does
    assert out[2] == "False"  # nothing of the tuner ran, so nothing was measured


def test_database_round_trip_export_import(cache, tmp_path):
    key = _store({"thread": {"rank": 1}})
    db = TuningDB()
    (row,) = db.rows()
    assert row.kernel == key and row.choice == {"thread": {"rank": 1}} and row.gain == 2.0
    f = compile_matmul()
    assert choices_for(f.target) == {key: {"thread": {"rank": 1}}}
    # a worse result for the same kernel does not replace a better one
    assert db.put([Row(row.target, row.compiler, key, {}, 1.0, 1.0, 1, "x", "cpu")]) == 0
    out = tmp_path / "tuned.json"
    assert db.export(out) == 1
    db.clear()
    assert db.rows() == []
    assert db.import_(out) == 1
    assert db.rows()[0].choice == {"thread": {"rank": 1}}


def test_a_row_changed_behind_the_key_is_ignored(cache):
    import sqlite3

    _store({"thread": {"rank": 1}})
    db = TuningDB()
    con = sqlite3.connect(db.path)
    con.execute("UPDATE choices SET choice = ?", (json.dumps({"thread": {"rank": 2}}),))
    con.commit()
    con.close()
    assert db.rows() == []


def test_import_rejects_a_file_that_is_not_an_export(cache, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(stripeml.StripeError, match="not a tuning database export"):
        TuningDB().import_(bad)


def test_concurrent_writers(cache):
    script = textwrap.dedent(
        """
        import sys
        from stripeml.runtime.tuning_db import Row, TuningDB
        who = sys.argv[1]
        db = TuningDB()
        for n in range(40):
            db.put([Row("t", "c", f"{who}-{n}", {}, 1.0, 1.0, 1, "k", "cpu")])
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, who], env=os.environ) for who in "ab"]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert len(TuningDB().rows("t", "c")) == 80


def test_tune_rejects_the_interpreter():
    f = stripeml.compile(MATMUL, target="interp")
    with pytest.raises(stripeml.StripeError, match="no compiled code to tune"):
        stripeml.tune(f, *matmul_inputs(), budget_s=1)
