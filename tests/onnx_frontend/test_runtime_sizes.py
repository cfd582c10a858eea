"""Operators whose output's shape depends on run-time values (ops/dynamic.py):
the model is split there, the operator runs on the host and the rest compiles
for the sizes it gives (importer.py, "Run-time sizes"), checked against onnx's
reference evaluator and NumPy."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml  # noqa: E402
import stripeml.onnx  # noqa: E402

RNG = np.random.default_rng(5)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def _vi(name, elem, shape=None):
    return h.make_tensor_value_info(name, elem, shape)


def _nonzero_model():
    """The positive elements of X, gathered and doubled: compute before NonZero
    (X * W), the host in the middle, compute after it on a run-time size."""
    nodes = [
        h.make_node("Mul", ["X", "W"], ["xw"]),
        h.make_node("Greater", ["xw", "zero"], ["pos"]),
        h.make_node("NonZero", ["pos"], ["idx"]),
        h.make_node("Transpose", ["idx"], ["idx_t"]),
        h.make_node("GatherND", ["xw", "idx_t"], ["picked"]),
        h.make_node("Add", ["picked", "picked"], ["Y"]),
        h.make_node("Shape", ["picked"], ["N"]),
    ]
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    return _model(
        nodes,
        [_vi("X", T.FLOAT, [3, 4])],
        [_vi("Y", T.FLOAT), _vi("N", T.INT64)],
        [nh.from_array(w, "W"), nh.from_array(np.array(0.0, np.float32), "zero")],
    ), w


def test_nonzero_splits_the_model_and_the_rest_compiles_per_size():
    model, w = _nonzero_model()
    fn = stripeml.onnx.compile(model, target="cpu")
    ref = ReferenceEvaluator(model)
    sizes = set()
    for _ in range(4):
        x = RNG.standard_normal((3, 4)).astype(np.float32)
        y, count = fn(X=x)
        want_y, want_n = ref.run(None, {"X": x})
        np.testing.assert_array_equal(count, want_n)
        np.testing.assert_allclose(y, want_y, rtol=1e-6)
        xw = x * w
        np.testing.assert_allclose(y, 2 * xw[xw > 0], rtol=1e-6)
        sizes.add(int(count[0]))
    spec = fn.specialise([x])
    assert spec.host is not None and spec.function is not None
    # one compiled rest per distinct size, none twice
    assert len(spec.host.rest._cache) == len(sizes)


def test_unique_then_compute():
    nodes = [
        h.make_node("Unique", ["X"], ["U", "I", "Inv", "C"], sorted=1),
        h.make_node("Mul", ["U", "U"], ["Y"]),
    ]
    model = _model(
        nodes,
        [_vi("X", T.INT64, [10])],
        [_vi("Y", T.INT64), _vi("Inv", T.INT64), _vi("C", T.INT64)],
    )
    fn = stripeml.onnx.compile(model, target="cpu")
    x = RNG.integers(0, 5, 10).astype(np.int64)
    y, inv, counts = fn(X=x)
    u, want_inv, want_counts = np.unique(x, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(y, u * u)
    np.testing.assert_array_equal(inv, want_inv)
    np.testing.assert_array_equal(counts, want_counts)


@pytest.mark.parametrize("runtime", [False, True])
def test_compress_with_a_known_or_run_time_condition(runtime):
    cond = np.array([True, False, True, True, False])
    inputs = [_vi("X", T.FLOAT, [2, 5])]
    inits = []
    if runtime:
        inputs.append(_vi("C", T.BOOL, [5]))
    else:
        inits.append(nh.from_array(cond, "C"))
    nodes = [h.make_node("Compress", ["X", "C"], ["P"], axis=1), h.make_node("Neg", ["P"], ["Y"])]
    model = _model(nodes, inputs, [_vi("Y", T.FLOAT)], inits)
    fn = stripeml.onnx.compile(model, target="cpu")
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    got = fn(X=x, C=cond) if runtime else fn(X=x)
    np.testing.assert_array_equal(got, -x[:, cond])
    spec = fn.specialise([x, cond] if runtime else [x])
    assert (spec.host is not None) == runtime


def test_a_run_time_sized_operator_inside_a_branch_is_a_clear_error():
    branch = h.make_graph([h.make_node("NonZero", ["X"], ["nz"])], "then", [], [_vi("nz", T.INT64)])
    other = h.make_graph(
        [h.make_node("Constant", [], ["z"], value=nh.from_array(np.zeros((1, 1), np.int64)))],
        "else",
        [],
        [_vi("z", T.INT64)],
    )
    node = h.make_node("If", ["B"], ["Y"], then_branch=branch, else_branch=other)
    model = _model([node], [_vi("X", T.FLOAT, [4]), _vi("B", T.BOOL, [])], [_vi("Y", T.INT64)])
    fn = stripeml.onnx.compile(model, target="cpu")
    with pytest.raises(stripeml.StripeError, match="main graph only"):
        fn(X=np.ones(4, np.float32), B=np.array(True))


def test_topk_with_a_k_computed_at_run_time():
    """K from the data (the number of positive elements): the model splits at TopK."""
    nodes = [
        h.make_node("Greater", ["X", "zero"], ["pos"]),
        h.make_node("Cast", ["pos"], ["posi"], to=T.INT64),
        h.make_node("ReduceSum", ["posi"], ["K"], keepdims=1),
        h.make_node("TopK", ["X", "K"], ["V", "I"], axis=0),
        h.make_node("Mul", ["V", "V"], ["Y"]),
    ]
    model = _model(
        nodes,
        [_vi("X", T.FLOAT, [9])],
        [_vi("Y", T.FLOAT), _vi("I", T.INT64)],
        [nh.from_array(np.array(0.0, np.float32), "zero")],
    )
    fn = stripeml.onnx.compile(model, target="cpu")
    for _ in range(3):
        x = RNG.standard_normal(9).astype(np.float32)
        y, idx = fn(X=x)
        k = int((x > 0).sum())
        order = np.argsort(-x, kind="stable")[:k]
        np.testing.assert_array_equal(idx, order)
        np.testing.assert_array_equal(y, x[order] ** 2)


def _random_model(op, **attrs):
    nodes = [h.make_node("Relu", ["X"], ["r"]), h.make_node(op, ["r"], ["d"], **attrs)]
    nodes.append(h.make_node("Add", ["d", "d"], ["Y"]))
    return _model(nodes, [_vi("X", T.FLOAT, [4000])], [_vi("Y", T.FLOAT)])


def test_seeded_random_draws_are_the_reference_evaluators():
    """Bernoulli and RandomUniformLike run on the host: with a seed, exactly the
    onnx reference's draws (then doubled by the compiled rest)."""
    x = np.clip(RNG.standard_normal(4000).astype(np.float32), 0, 1)
    for op, attrs in (("Bernoulli", {"seed": 3.0}), ("RandomUniformLike", {"seed": 5.0})):
        model = _random_model(op, **attrs)
        np.testing.assert_array_equal(
            stripeml.onnx.compile(model, target="cpu")(X=x),
            ReferenceEvaluator(model).run(None, {"X": x})[0],
        )


def test_unseeded_draws_change_per_call_with_the_right_statistics():
    fn = stripeml.onnx.compile(_random_model("Bernoulli"), target="cpu")
    x = np.full(4000, 0.25, np.float32)
    a, b = fn(X=x), fn(X=x)
    assert set(np.unique(a)) <= {0.0, 2.0} and not np.array_equal(a, b)
    assert abs(a.mean() / 2 - 0.25) < 0.05
    u = stripeml.onnx.compile(_random_model("RandomUniformLike", low=-1.0, high=3.0), target="cpu")
    draw = u(X=x) / 2
    assert draw.min() >= -1 and draw.max() < 3 and abs(draw.mean() - 1) < 0.15
