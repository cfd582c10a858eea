"""Export and import of rows a real tune writes: a kernel ``epilogue`` merged
into the one before it has an empty window, 0 seconds (a ShuffleNet tune
stored 20 such rows, and the import refused the whole file)."""

from __future__ import annotations

import json

import pytest

import stripeml
from stripeml.runtime.tuning_db import Row, TuningDB


def test_a_kernel_with_an_empty_window_round_trips(cache, tmp_path):
    db = TuningDB()
    rows = [
        Row("t", "c", "merged", {}, 0.0, 0.0, 1, "k2_T6_k3_T7", "cpu"),
        Row("t", "c", "conv", {"thread": {"rank": 1}}, 2.0e-4, 1.0e-4, 5, "k1_T4", "cpu"),
    ]
    assert db.put(rows) == 2
    out = tmp_path / "tuned.json"
    assert db.export(out) == 2
    db.clear()
    assert db.import_(out) == 2
    got = {r.kernel: r for r in db.rows("t", "c")}
    assert got["merged"].gain == 1.0 and got["conv"].choice == {"thread": {"rank": 1}}


@pytest.mark.parametrize("bad", [-1.0, "inf", "nan"])
def test_a_negative_or_infinite_time_is_refused(cache, tmp_path, bad):
    db = TuningDB()
    db.put([Row("t", "c", "conv", {}, 1.0e-4, 1.0e-4, 1, "k1_T4", "cpu")])
    out = tmp_path / "tuned.json"
    db.export(out)
    data = json.loads(out.read_text())
    data["rows"][0]["best_s"] = float(bad)
    out.write_text(json.dumps(data))
    with pytest.raises(stripeml.StripeError, match="negative or not finite"):
        db.import_(out)
