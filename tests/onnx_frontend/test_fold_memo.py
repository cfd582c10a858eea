"""A second input shape folds again only what its inputs changed: the weights'
preprocessing (here a transpose and a scaling of an initializer) is folded once
per model, what depends on the input's shape (``Shape`` -> ``Slice`` ->
``Concat``) once per shape; results against ONNX's reference evaluator at every
shape."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml.onnx import folding  # noqa: E402

RNG = np.random.default_rng(5)


def _model():
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),  # (4, 3), folded
        helper.make_node("Mul", ["Wt", "half"], ["Ws"]),  # folded from the one above
        helper.make_node("MatMul", ["X", "Ws"], ["Y"]),
        helper.make_node("Shape", ["X"], ["S"]),  # folded, per input shape
        helper.make_node("Slice", ["S", "zero", "two"], ["S2"]),  # (1, seq)
        helper.make_node("Concat", ["S2", "three"], ["S3"], axis=0),  # (1, seq, 3)
        helper.make_node("Reshape", ["Y", "S3"], ["Z"]),
    ]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, "seq", 4])
    outs = [helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)]
    inits = [
        numpy_helper.from_array(w, "W"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
        numpy_helper.from_array(np.array([3], np.int64), "three"),
    ]
    graph = helper.make_graph(nodes, "g", [x], outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_second_shape_folds_only_what_depends_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIPEML_LENGTHS", "0")  # each shape imported once (no probe length)
    folded: list[str] = []
    real = folding.fold

    def counting(d, node):
        folded.append(node.op_type)
        return real(d, node)

    monkeypatch.setattr(folding, "fold", counting)
    model = _model()
    f = stripeml.onnx.compile(model, target="interp")
    ref = ReferenceEvaluator(model)
    per_shape = []
    for seq in (5, 2, 7):
        x = RNG.standard_normal((1, seq, 4)).astype(np.float32)
        before = len(folded)
        got = f(x)
        per_shape.append(sorted(folded[before:]))
        (want,) = ref.run(None, {"X": x})
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # the first shape folds the weights' transpose and scaling and the computation
    # of the target shape from the input's (Shape itself is known, not folded)
    assert per_shape[0] == ["Concat", "Mul", "Slice", "Transpose"]
    for later in per_shape[1:]:
        assert later == ["Concat", "Slice"]  # the weights' folds are remembered
