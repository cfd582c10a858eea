"""Operators written as their ONNX function definitions (ops/functions.py), the
model's own functions, and ``If`` (ops/control.py), checked against onnx's
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
from stripeml.onnx.ops import lookup  # noqa: E402

RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, inits=(), opset=23, functions=(), domains=()):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    ops = [h.make_opsetid("", opset), *(h.make_opsetid(d, 1) for d in domains)]
    return h.make_model(g, opset_imports=ops, functions=list(functions))


def _vi(name, elem, shape):
    return h.make_tensor_value_info(name, elem, shape)


def _check(model, feeds, rtol=1e-5, atol=1e-6):
    want = ReferenceEvaluator(model).run(None, feeds)
    fn = stripeml.onnx.compile(model, target="cpu")
    got = fn(**feeds)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return fn


def test_function_ops_are_registered():
    for name in ("Attention", "RotaryEmbedding", "SoftmaxCrossEntropyLoss", "HannWindow"):
        d = lookup(name)
        assert d is not None and "function definition" in d.doc


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_3d_with_heads_against_the_reference(causal):
    q = RNG.standard_normal((2, 5, 8)).astype(np.float32)
    k = RNG.standard_normal((2, 7, 8)).astype(np.float32)
    v = RNG.standard_normal((2, 7, 12)).astype(np.float32)
    node = h.make_node(
        "Attention", ["Q", "K", "V"], ["Y"], q_num_heads=2, kv_num_heads=2, is_causal=causal
    )
    model = _model(
        [node],
        [_vi("Q", T.FLOAT, q.shape), _vi("K", T.FLOAT, k.shape), _vi("V", T.FLOAT, v.shape)],
        [_vi("Y", T.FLOAT, None)],
    )
    _check(model, {"Q": q, "K": k, "V": v})


def test_softmax_cross_entropy_with_weights_and_ignore_index():
    x = RNG.standard_normal((6, 5, 3)).astype(np.float32)
    labels = RNG.integers(0, 5, (6, 3)).astype(np.int64)
    labels[0, 0] = 2  # ignored below
    w = RNG.random(5).astype(np.float32)
    node = h.make_node("SoftmaxCrossEntropyLoss", ["X", "L", "W"], ["loss", "logp"], ignore_index=2)
    model = _model(
        [node],
        [_vi("X", T.FLOAT, x.shape), _vi("L", T.INT64, labels.shape)],
        [_vi("loss", T.FLOAT, None), _vi("logp", T.FLOAT, None)],
        [nh.from_array(w, "W")],
        opset=17,
    )
    _check(model, {"X": x, "L": labels})
    # against NumPy's own arithmetic, mean over the weights of the labels kept
    logp = x - x.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    keep = labels != 2
    picked = np.take_along_axis(logp, np.where(keep, labels, 0)[:, None, :], 1)[:, 0, :]
    weights = np.where(keep, w[np.where(keep, labels, 0)], 0)
    want = -(picked * weights).sum() / weights.sum()
    got = stripeml.onnx.compile(model, target="cpu")(X=x, L=labels)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_window_size_from_a_graph_input_specialises_on_its_value():
    """A window's size is needed when compiling: a graph input holding it is
    specialised on (each size compiles its own program)."""
    node = h.make_node("HannWindow", ["N"], ["Y"])
    model = _model([node], [_vi("N", T.INT64, [])], [_vi("Y", T.FLOAT, None)], opset=17)
    fn = stripeml.onnx.compile(model, target="cpu")
    for n in (8, 13):
        k = np.arange(n)
        np.testing.assert_allclose(
            fn(N=np.array(n, np.int64)), 0.5 - 0.5 * np.cos(2 * np.pi * k / n), atol=1e-6
        )


def _if_model(then_nodes, then_out, else_nodes, else_out, cond_const=None):
    then_g = h.make_graph(then_nodes, "then", [], [then_out])
    else_g = h.make_graph(else_nodes, "else", [], [else_out])
    node = h.make_node("If", ["C"], ["Y"], then_branch=then_g, else_branch=else_g)
    inits = []
    inputs = [_vi("X", T.FLOAT, [4, 3])]
    if cond_const is None:
        inputs.append(_vi("C", T.BOOL, []))
    else:
        inits.append(nh.from_array(np.array(cond_const), "C"))
    return _model([node], inputs, [_vi("Y", T.FLOAT, None)], inits, opset=17)


def test_if_with_a_runtime_condition_runs_the_branch_taken():
    model = _if_model(
        [h.make_node("Relu", ["X"], ["a"])],
        _vi("a", T.FLOAT, [4, 3]),
        [h.make_node("Neg", ["X"], ["b"])],
        _vi("b", T.FLOAT, [4, 3]),
    )
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    fn = stripeml.onnx.compile(model, target="cpu")
    np.testing.assert_array_equal(fn(X=x, C=np.array(True)), np.maximum(x, 0))
    np.testing.assert_array_equal(fn(X=x, C=np.array(False)), -x)


def test_if_with_a_known_condition_writes_only_its_branch():
    """The branch not taken may hold anything: an operator the importer lacks."""
    unknown = h.make_node("NoSuchOp", ["X"], ["b"], domain="")
    model = _if_model(
        [h.make_node("Sigmoid", ["X"], ["a"])],
        _vi("a", T.FLOAT, [4, 3]),
        [unknown],
        _vi("b", T.FLOAT, [4, 3]),
        cond_const=True,
    )
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    got = stripeml.onnx.compile(model, target="cpu")(X=x)
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-x)), rtol=1e-6)


def test_if_whose_branches_disagree_in_shape_is_a_clear_error():
    model = _if_model(
        [h.make_node("Relu", ["X"], ["a"])],
        _vi("a", T.FLOAT, [4, 3]),
        [h.make_node("ReduceSum", ["X"], ["b"], keepdims=0)],
        _vi("b", T.FLOAT, []),
    )
    fn = stripeml.onnx.compile(model, target="cpu")
    with pytest.raises(stripeml.StripeError, match="would depend on the data"):
        fn(X=np.ones((4, 3), np.float32), C=np.array(True))


def _with_ref(node, name, elem):
    """``node`` with attribute ``name`` referring to the function's attribute."""
    node.attribute.append(h.make_attribute_ref(name, onnx.AttributeProto.FLOAT))
    return node


def test_model_functions_are_inlined():
    """A model's own functions (exporters write repeated blocks so) are inlined,
    attributes bound per call."""
    f = h.make_function(
        "my.dom",
        "ScaledAct",
        ["x", "w"],
        ["y"],
        [
            h.make_node("Mul", ["x", "w"], ["t"]),
            _with_ref(h.make_node("LeakyRelu", ["t"], ["y"]), "alpha", T.FLOAT),
        ],
        [h.make_opsetid("", 17)],
        attributes=["alpha"],
    )
    nodes = [
        h.make_node("ScaledAct", ["X", "W"], ["Y"], domain="my.dom", alpha=0.5),
        h.make_node("ScaledAct", ["Y", "W"], ["Z"], domain="my.dom", alpha=0.25),
    ]
    w = RNG.standard_normal(3).astype(np.float32)
    model = _model(
        nodes,
        [_vi("X", T.FLOAT, [2, 3])],
        [_vi("Z", T.FLOAT, [2, 3])],
        [nh.from_array(w, "W")],
        opset=17,
        functions=[f],
        domains=["my.dom"],
    )
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(
        stripeml.onnx.compile(model, target="cpu")(X=x), session.run(None, {"X": x})[0], rtol=1e-6
    )
    y = x * w
    y = np.where(y > 0, y, 0.5 * y) * w
    np.testing.assert_allclose(
        stripeml.onnx.compile(model, target="cpu")(X=x), np.where(y > 0, y, 0.25 * y), rtol=1e-6
    )


def _scan_model(in_dir, out_axis, out_dir, steps=5):
    """A running sum over the rows of X (state S), each step's sum a scan output."""
    body = h.make_graph(
        [h.make_node("Add", ["s", "x"], ["s2"]), h.make_node("Identity", ["s2"], ["y"])],
        "body",
        [_vi("s", T.FLOAT, [3]), _vi("x", T.FLOAT, [3])],
        [_vi("s2", T.FLOAT, [3]), _vi("y", T.FLOAT, [3])],
    )
    node = h.make_node(
        "Scan",
        ["S0", "X"],
        ["S", "Y"],
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_input_directions=[in_dir],
        scan_output_axes=[out_axis],
        scan_output_directions=[out_dir],
    )
    return _model(
        [node],
        [_vi("S0", T.FLOAT, [3]), _vi("X", T.FLOAT, [3, steps])],
        [_vi("S", T.FLOAT, None), _vi("Y", T.FLOAT, None)],
        opset=17,
    )


@pytest.mark.parametrize("steps", [5, 100])
@pytest.mark.parametrize("in_dir,out_axis,out_dir", [(0, 0, 0), (1, 0, 0), (0, 1, 1), (1, -1, 0)])
def test_scan_axes_and_directions_against_numpy(in_dir, out_axis, out_dir, steps):
    """5 steps are unrolled; 100 run on the host around the compiled body."""
    s0 = RNG.standard_normal(3).astype(np.float32)
    x = RNG.standard_normal((3, steps)).astype(np.float32)
    fn = stripeml.onnx.compile(_scan_model(in_dir, out_axis, out_dir, steps), target="cpu")
    s, y = fn(S0=s0, X=x)
    assert (fn.specialise([s0, x]).host is not None) == (steps > 64)
    cols = x.T[::-1] if in_dir else x.T  # the steps, in the order they run
    acc, sums = s0, []
    for col in cols:  # in float32, in the order the body adds
        acc = acc + col
        sums.append(acc)
    sums = np.stack(sums)
    np.testing.assert_allclose(s, sums[-1], rtol=1e-6)
    steps = sums[::-1] if out_dir else sums
    np.testing.assert_allclose(y, np.moveaxis(steps, 0, out_axis % 2), rtol=1e-6)


def _loop_model(cond_from_data=False):
    """v <- v * 2 + i for M steps, each step's v a scan output."""
    nodes = [
        h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
        h.make_node("Add", ["v", "v"], ["v2"]),
        h.make_node("Add", ["v2", "fi"], ["v3"]),
        h.make_node("Identity", ["v3"], ["out"]),
    ]
    if cond_from_data:
        nodes.append(h.make_node("ReduceSum", ["v3"], ["total"], keepdims=0))
        nodes.append(h.make_node("Less", ["total", "limit"], ["c2"]))
    else:
        nodes.append(h.make_node("Identity", ["c"], ["c2"]))
    body = h.make_graph(
        nodes,
        "body",
        [_vi("i", T.INT64, []), _vi("c", T.BOOL, []), _vi("v", T.FLOAT, [2])],
        [_vi("c2", T.BOOL, []), _vi("v3", T.FLOAT, [2]), _vi("out", T.FLOAT, [2])],
        [nh.from_array(np.array(100.0, np.float32), "limit")],
    )
    node = h.make_node("Loop", ["M", "", "V0"], ["V", "Ys"], body=body)
    return _model(
        [node],
        [_vi("M", T.INT64, []), _vi("V0", T.FLOAT, [2])],
        [_vi("V", T.FLOAT, None), _vi("Ys", T.FLOAT, None)],
        opset=17,
    )


def test_loop_with_a_trip_count_input_is_unrolled_per_count():
    fn = stripeml.onnx.compile(_loop_model(), target="cpu")
    v0 = np.array([1.0, -0.5], np.float32)
    for m in (1, 4):
        v, ys = fn(M=np.array(m, np.int64), V0=v0)
        want, steps = v0.copy(), []
        for i in range(m):
            want = want * 2 + i
            steps.append(want)
        np.testing.assert_allclose(v, want, rtol=1e-6)
        np.testing.assert_allclose(ys, np.stack(steps), rtol=1e-6)


def test_loop_ending_on_run_time_values_runs_around_its_compiled_body():
    """The body's condition depends on the data: the model is split at the loop,
    which runs on the host, calling its body compiled once; the steps it took
    decide the scan output's length."""
    fn = stripeml.onnx.compile(_loop_model(cond_from_data=True), target="cpu")
    for v0 in ([1.0, -0.5], [0.1, 0.2], [30.0, 1.0], [-5.0, 2.0]):
        feeds = {"M": np.array(20, np.int64), "V0": np.array(v0, np.float32)}
        v, ys = fn(**feeds)
        want, steps = feeds["V0"], []  # the body runs, then its condition decides
        for i in range(20):
            want = want * 2 + np.float32(i)
            steps.append(want)
            if not want.sum() < 100:
                break
        np.testing.assert_allclose(v, want, rtol=1e-6)
        np.testing.assert_allclose(ys, np.stack(steps), rtol=1e-6)
    spec = fn.specialise([feeds["M"], feeds["V0"]])
    assert spec.host is not None and spec.host.run._fn is not None  # one compiled body


def test_a_long_loop_is_not_unrolled():
    fn = stripeml.onnx.compile(_loop_model(), target="cpu")
    v0 = np.array([1e-30, -1e-30], np.float32)
    v, ys = fn(M=np.array(100, np.int64), V0=v0)
    want, steps = v0.copy(), []
    for i in range(100):
        want = want * 2 + i
        steps.append(want)
    np.testing.assert_allclose(v, want, rtol=1e-6)
    np.testing.assert_allclose(ys, np.stack(steps), rtol=1e-6)
    spec = fn.specialise([np.array(100, np.int64), v0])
    assert spec.host is not None


def _old_add(b_shape, axis):
    node = h.make_node("Add", ["A", "B"], ["Y"], broadcast=1, axis=axis)
    model = _model(
        [node],
        [_vi("A", T.FLOAT, [2, 3, 4]), _vi("B", T.FLOAT, b_shape)],
        [_vi("Y", T.FLOAT, [2, 3, 4])],
        opset=6,
    )
    model.ir_version = 3
    return model


def test_a_model_older_than_the_op_library_is_converted():
    """Opset 6's Add broadcasts along ``axis`` (attributes later opsets dropped):
    onnx's version converter rewrites it, and the result is NumPy's."""
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((3, 4)).astype(np.float32)
    got = stripeml.onnx.compile(_old_add([3, 4], 1), target="cpu")(A=a, B=b)
    np.testing.assert_array_equal(got, a + b)


def test_a_model_the_converter_cannot_convert_is_a_clear_error():
    """A broadcast along a middle axis has no NumPy spelling without a reshape,
    which onnx's converter does not insert: the error says what happened."""
    with pytest.raises(stripeml.StripeError, match="version_converter could not convert"):
        stripeml.onnx.compile(_old_add([3], 1), target="cpu")
