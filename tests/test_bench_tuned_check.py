"""bench/tuned_check.py, the separate check after a tune: run on a small model
with an empty tuning database (no choices: the two programs are the same
program), one round; its line carries both programs' and onnxruntime's
figures.  Nothing here is asserted about speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

BENCH = Path(__file__).resolve().parents[1] / "bench" / "tuned_check.py"


def _model(path: Path) -> None:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "W")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["X", "W"], ["C"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["C"], ["Y"]),
        ],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 8, 16, 16])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_one_round_on_an_empty_database(tmp_path):
    path = tmp_path / "small.onnx"
    _model(path)
    env = {"STRIPEML_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(BENCH), str(path), "--rounds", "1"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["choices"] == 0 and line["rounds"] == 1
    for key in ("untuned_ms", "tuned_ms", "onnxruntime_ms"):
        assert line[key] > 0
    assert line["ratio"] == pytest.approx(line["untuned_ms"] / line["tuned_ms"], rel=0.01)
    assert line["tuned_won"] in ("0/1", "1/1")


def test_a_missing_model_is_a_usage_error(tmp_path):
    env = {"STRIPEML_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(BENCH), str(tmp_path / "none.onnx")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "none.onnx" in done.stderr and "Traceback" not in done.stderr
