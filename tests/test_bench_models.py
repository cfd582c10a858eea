"""The benchmark set of bench/models.py: an entry exports, imports, and agrees with onnxruntime.

Nothing here is timed.  The PyTorch entries need torch and transformers (``make
bench-deps``); without them those tests are skipped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_onnx  # noqa: E402
import models  # noqa: E402

import stripeml.onnx  # noqa: E402


@pytest.mark.parametrize(
    "name", ["transformer_encoder", pytest.param("bert_mini_128", marks=pytest.mark.slow)]
)
def test_entry_agrees_with_onnxruntime(name, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    model, feeds = models.build(name, cache=tmp_path)
    assert (tmp_path / f"{name}.onnx").exists()
    assert models.unsupported_ops(model) == []
    got = stripeml.onnx.compile(model, target="cpu", threads=2)(**feeds)
    want = bench_onnx.ort_session(model).run(None, feeds)
    assert bench_onnx.relative_error(got, want) < 1e-3
    again, feeds_again = models.build(name, cache=tmp_path)  # from the cache, same inputs
    assert again.graph.node[0] == model.graph.node[0]
    assert all(np.array_equal(feeds[k], feeds_again[k]) for k in feeds)


def test_unsupported_operator_is_a_skip_not_a_crash(monkeypatch, capsys):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [1, None])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.array([0, 1, 0, 2], np.float32)}
    entry = SimpleNamespace(family="test", about="NonZero", build=lambda: (model, feeds))
    monkeypatch.setitem(models.REGISTRY, "nonzero", entry)
    assert bench_onnx.set_case("nonzero", blocks=1)
    record = json.loads(capsys.readouterr().out)
    assert record["case"] == "set" and record["model"] == "nonzero"
    assert record["stripeml_s"] is None
    assert record["skipped"] == "unsupported operators: NonZero"
