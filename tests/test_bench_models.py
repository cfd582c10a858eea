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
    "name",
    [
        "transformer_encoder",
        *(
            pytest.param(n, marks=pytest.mark.slow)
            for n in ("bert_mini_128", "unet", "mobilevit_seg", "lstm", "gru", "resnet50")
        ),
    ],
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

    # strings are not tensors here: StringNormalizer is never in the op library
    graph = helper.make_graph(
        [helper.make_node("StringNormalizer", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [4])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.array(["a", "B", "c", "D"], object)}
    entry = SimpleNamespace(family="test", about="strings", build=lambda: (model, feeds))
    monkeypatch.setitem(models.REGISTRY, "strings", entry)
    assert bench_onnx.set_case("strings", blocks=1)
    record = json.loads(capsys.readouterr().out)
    assert record["case"] == "set" and record["model"] == "strings"
    assert record["stripeml_s"] is None
    assert record["skipped"] == "unsupported operators: StringNormalizer"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18_int8", "resnet50_int8", "bert_mini_int8"])
def test_quantized_entry_agrees_with_onnxruntime(name, tmp_path):
    """A model quantised by onnxruntime's tool, against onnxruntime running the same
    graph: within the entry's tolerance (activations are rounded to 8 bits between
    layers, where a sum that differs in its last float bit can move a value one
    step; onnxruntime's own fused integer kernels differ from its unfused graph
    by as much)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    model, feeds = models.build(name, cache=tmp_path)
    assert {"QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger"} & {
        n.op_type for n in model.graph.node
    }
    fn = stripeml.onnx.compile(model, target="cpu", threads=2)
    got = fn(**feeds)
    want = bench_onnx.ort_session(model).run(None, feeds)
    assert bench_onnx.relative_error(got, want) < models.REGISTRY[name].tolerance
    # the integer dot products ran: every convolution or matrix product of 8-bit
    # weights as dot4 (docs/onnx.md, "Quantised models")
    exe = fn.lower(**feeds)
    assert exe is not None and exe.ir.count("dot4(") >= 4
