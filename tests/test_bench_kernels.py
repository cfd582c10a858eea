"""bench/kernels.py (``bench_onnx.py --kernels``): kernels matched to ONNX nodes and
to onnxruntime's per-node profile.  Nothing here asserts a speed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from stripeml.api import ProfileRow

BENCH = Path(__file__).resolve().parents[1] / "bench" / "kernels.py"


@pytest.fixture(scope="module")
def kernels():
    spec = importlib.util.spec_from_file_location("bench_kernels", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


SOURCE = """function (X[1, 4], C1[4, 3]) -> (T4) {
    // Gemm g0
    T2[m, n : 1, 3] = +(X[m, k] * C1[k, n]);
    T3 = T2 + 1.0;
    // Relu r1
    T4 = relu(T3);
}"""


def test_statements_map_to_the_nodes_before_them(kernels) -> None:
    assert kernels.nodes_by_tensor(SOURCE) == {
        "T2": ("Gemm", "g0"),
        "T3": ("Gemm", "g0"),
        "T4": ("Relu", "r1"),
    }
    rows = [
        ProfileRow("k0_T2", "T2[m, n : 1, 3] = +(X[m, k] * C1[k, n]); T3 = T2 + 1.0", 1.0),
        ProfileRow("k2_T4", "T4 = relu(T3)", 0.5),
        ProfileRow("k0_T2_panels", "C1_panels[cb, c] = C1[32 * cb + c]", 0.1),
    ]
    nodes = kernels.kernel_nodes(rows, SOURCE, ["k0_T2", "k2_T4", "k0_T2_panels", "k9"])
    assert nodes["k0_T2"] == [("Gemm", "g0")]
    assert nodes["k2_T4"] == [("Relu", "r1")]
    assert nodes["k0_T2_panels"] == [("Gemm", "g0")]  # a helper counts for its kernel
    assert nodes["k9"] == []


def _model():
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(
        np.linspace(-1, 1, 4 * 3 * 3 * 3, dtype=np.float32).reshape(4, 3, 3, 3), "w"
    )
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["y"], name="conv0", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["y"], ["z"], name="relu1"),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(model):
    return {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}


def test_report_matches_kernels_to_onnxruntime_nodes(kernels, capsys) -> None:
    model = _model()
    kernels.report("tiny", lambda name: model, _feeds, runs=2, top=5)
    out = capsys.readouterr().out
    assert "onnxruntime's slowest nodes" in out
    conv = next(line for line in out.splitlines() if line.split()[1:2] == ["conv0"])
    assert "Conv" in conv and not conv.split()[4] == "-"  # stripeml kernels found for it


def test_report_as_json_lines(kernels, capsys) -> None:
    model = _model()
    kernels.report("tiny", lambda name: model, _feeds, runs=2, as_json=True)
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    *rows, summary = lines
    assert summary["case"] == "kernels_summary" and summary["sizes"]["model"] == "tiny"
    assert rows and all(r["case"] == "kernel" and "flops" in r["roofline"] for r in rows)
    conv = [r for r in rows if any(n.endswith("conv0") for n in r["sizes"]["nodes"])]
    assert conv and all("onnxruntime" in r["baselines"] for r in conv)
    assert sum(r["roofline"]["flops"] for r in conv) >= 2 * 4 * 64 * 27  # the conv's MACs
