"""Shape and data-movement ops: the cases the ONNX node tests cover thinly
(shapes and pads fed as graph inputs, old-opset attributes, negative steps and
pads, runtime fill values, constant data with runtime indices, folding, empty
results) against NumPy, on both targets."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml.errors import ExecutionError  # noqa: E402
from stripeml.onnx.builder import OnnxError  # noqa: E402

TARGETS = ["interp", "cpu"]
RNG = np.random.default_rng(11)


def _model(nodes, inputs, outputs, opset, inits=None, dims=None):
    """``dims`` overrides the declared shape of some inputs (``None``: unknown)."""
    if not isinstance(nodes, list):
        nodes = [nodes]
    dims = dims or {}
    vis = [
        helper.make_tensor_value_info(
            k, helper.np_dtype_to_tensor_dtype(v.dtype), dims.get(k, v.shape)
        )
        for k, v in inputs.items()
    ]
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(nodes, "g", vis, outs, initializer=init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(target, nodes, inputs, opset, inits=None, outputs=None):
    if outputs is None:
        last = nodes[-1] if isinstance(nodes, list) else nodes
        outputs = list(last.output)
    fn = stripeml.onnx.compile(_model(nodes, inputs, outputs, opset, inits), target=target)
    res = fn(**inputs)
    return res if isinstance(res, tuple) else (res,)


def _i64(*v):
    return np.array(v, dtype=np.int64)


# -- reshape family ------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_reshape_shape_from_graph_input_specialises(target):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    model = _model(node, {"x": x, "s": _i64(0, -1)}, ["y"], 14, dims={"s": ["n"]})
    fn = stripeml.onnx.compile(model, target=target)
    np.testing.assert_array_equal(fn(x, _i64(0, -1)), x.reshape(2, 12))
    np.testing.assert_array_equal(fn(x, _i64(-1, 2, 2)), x.reshape(6, 2, 2))
    np.testing.assert_array_equal(fn(x, _i64(4, 0, 2)), x.reshape(4, 3, 2))


@pytest.mark.parametrize("target", TARGETS)
def test_squeeze_unsqueeze_attribute_opsets(target):
    x = RNG.standard_normal((1, 3, 1, 2)).astype(np.float32)
    nodes = [
        helper.make_node("Squeeze", ["x"], ["s"], axes=[0, -2]),
        helper.make_node("Unsqueeze", ["s"], ["y"], axes=[-1, 0]),
    ]
    (y,) = _run(target, nodes, {"x": x}, 11)
    np.testing.assert_array_equal(y, x.reshape(1, 3, 2, 1))
    node = helper.make_node("Squeeze", ["x"], ["y"])
    (y,) = _run(target, node, {"x": x}, 13)
    np.testing.assert_array_equal(y, x.reshape(3, 2))


@pytest.mark.parametrize("target", TARGETS)
def test_transpose_expand_tile_depth_to_space(target):
    x = RNG.standard_normal((2, 8, 2, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 3, 1]),
        helper.make_node("Tile", ["x", "r"], ["u"]),
        helper.make_node("DepthToSpace", ["x"], ["d"], blocksize=2, mode="CRD"),
        helper.make_node("Expand", ["v", "e"], ["w"]),
    ]
    v = RNG.standard_normal((3, 1)).astype(np.float32)
    inits = {"r": _i64(1, 2, 3, 1), "e": _i64(2, 1, 4)}
    t, u, d, w = _run(target, nodes, {"x": x, "v": v}, 13, inits, ["t", "u", "d", "w"])
    np.testing.assert_array_equal(t, x.transpose(2, 0, 3, 1))
    np.testing.assert_array_equal(u, np.tile(x, (1, 2, 3, 1)))
    crd = x.reshape(2, 2, 2, 2, 2, 3).transpose(0, 1, 4, 2, 5, 3).reshape(2, 2, 4, 6)
    np.testing.assert_array_equal(d, crd)
    np.testing.assert_array_equal(w, np.broadcast_to(v, (2, 3, 4)))


# -- concat / split / slice ------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_concat_constant_and_runtime_inputs(target):
    x = RNG.integers(-9, 9, (2, 3)).astype(np.int32)
    c = np.arange(4, dtype=np.int32).reshape(2, 2)
    node = helper.make_node("Concat", ["x", "c", "x"], ["y"], axis=-1)
    (y,) = _run(target, node, {"x": x}, 13, {"c": c})
    np.testing.assert_array_equal(y, np.concatenate([x, c, x], axis=1))


@pytest.mark.parametrize("target", TARGETS)
def test_split_attribute_and_uneven(target):
    x = RNG.standard_normal((7, 2)).astype(np.float32)
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=0, split=[3, 4])
    a, b = _run(target, node, {"x": x}, 11)
    np.testing.assert_array_equal(a, x[:3])
    np.testing.assert_array_equal(b, x[3:])
    node = helper.make_node("Split", ["x"], ["a", "b", "c"], num_outputs=3)
    a, b, c = _run(target, node, {"x": x}, 18)
    for got, want in zip((a, b, c), (x[:3], x[3:6], x[6:])):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_slice_negative_steps_and_clamping(target):
    x = RNG.standard_normal((5, 6, 7)).astype(np.float32)
    node = helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])
    inits = {
        "s": _i64(-1, 100, 1),
        "e": _i64(-(2**63), 0, 5),
        "a": _i64(2, 1, 0),
        "t": _i64(-3, -2, 2),
    }
    (y,) = _run(target, node, {"x": x}, 13, inits)
    np.testing.assert_array_equal(y, x[1:5:2, 100:0:-2, -1::-3])
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[1000, -1], axes=[0, 2])
    (y,) = _run(target, node, {"x": x}, 9)
    np.testing.assert_array_equal(y, x[1:, :, -3:-1])


def test_slice_to_nothing_is_an_empty_constant():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    node = helper.make_node("Slice", ["x", "s", "e"], ["y"])
    (y,) = _run("interp", node, {"x": x}, 13, {"s": _i64(3), "e": _i64(1)})
    assert y.shape == (0, 4) and y.dtype == np.float32


# -- pad ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_modes_with_axes_and_negative_pads(target, mode):
    x = RNG.standard_normal((3, 5, 4)).astype(np.float32)
    node = helper.make_node("Pad", ["x", "p", "", "a"], ["y"], mode=mode)
    inits = {"p": _i64(2, -1, 1, 3), "a": _i64(-1, 1)}  # axis 2: (2, 1), axis 1: (-1, 3)
    (y,) = _run(target, node, {"x": x}, 18, inits)
    want = np.pad(x[:, 1:, :], [(0, 0), (0, 3), (2, 1)], mode=mode)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("target", TARGETS)
def test_pad_constant_runtime_value_and_crop(target):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    v = np.array(-2.5, dtype=np.float32)
    node = helper.make_node("Pad", ["x", "p", "v"], ["y"])
    (y,) = _run(target, node, {"x": x, "v": v}, 13, {"p": _i64(1, -1, 2, 2)})
    np.testing.assert_array_equal(y, np.pad(x[:, 1:], [(1, 2), (0, 2)], constant_values=-2.5))
    node = helper.make_node("Pad", ["x"], ["y"], pads=[0, 2, 0, 0], value=np.inf)
    (y,) = _run(target, node, {"x": x}, 2)
    np.testing.assert_array_equal(y, np.pad(x, [(0, 0), (2, 0)], constant_values=np.inf))


# -- gathers ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_gather_constant_table_runtime_indices(target):
    table = RNG.standard_normal((10, 4)).astype(np.float32)
    i = np.array([[0, -1, 3], [9, 2, -10]], dtype=np.int32)
    nodes = [
        helper.make_node("Gather", ["w", "i"], ["y"]),
        helper.make_node("Gather", ["w", "j"], ["z"], axis=1),
    ]
    j = np.array(2, dtype=np.int64)
    y, z = _run(target, nodes, {"i": i, "j": j}, 13, {"w": table}, ["y", "z"])
    np.testing.assert_array_equal(y, table[np.where(i < 0, i + 10, i)])
    np.testing.assert_array_equal(z, table[:, 2])


@pytest.mark.parametrize("target", TARGETS)
def test_gather_runtime_data_constant_indices(target):
    """Constant indices in a progression (a scalar, a stride, a negative step,
    negative indices) are imported as affine copies; others keep the gather."""
    x = RNG.standard_normal((3, 6, 5)).astype(np.float32)
    inits = {
        "s": np.array(-2, dtype=np.int64),  # scalar: drops the axis
        "p": np.array([1, 3, 5], dtype=np.int64),  # step 2
        "q": np.array([-1, -2, 3], dtype=np.int32),  # 5, 4, 3: step -1
        "r": np.array([0, 2, 1], dtype=np.int64),  # no progression
        "u": np.array([4], dtype=np.int64),
    }
    nodes = [
        helper.make_node("Gather", ["x", "s"], ["ys"], axis=1),
        helper.make_node("Gather", ["x", "p"], ["yp"], axis=1),
        helper.make_node("Gather", ["x", "q"], ["yq"], axis=-2),
        helper.make_node("Gather", ["x", "r"], ["yr"], axis=0),
        helper.make_node("Gather", ["x", "u"], ["yu"], axis=2),
    ]
    got = _run(target, nodes, {"x": x}, 13, inits, ["ys", "yp", "yq", "yr", "yu"])
    want = [
        x[:, 4],
        x[:, [1, 3, 5]],
        x[:, [5, 4, 3]],
        x[[0, 2, 1]],
        x[:, :, [4]],
    ]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_gather_constant_index_out_of_range_is_the_nodes_error():
    x = np.zeros((3, 4), dtype=np.float32)
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=1, name="pick")
    model = _model(node, {"x": x}, ["y"], 13, {"i": np.array([1, 4], dtype=np.int64)})
    with pytest.raises(OnnxError, match=r"(?s)pick.*index 4 is out of range"):
        stripeml.onnx.compile(model, target="interp")(x=x)


@pytest.mark.parametrize("target", TARGETS)
def test_gather_elements_and_nd(target):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    i = RNG.integers(-4, 4, (3, 2, 5)).astype(np.int64)
    nodes = [
        helper.make_node("GatherElements", ["x", "i"], ["g"], axis=1),
        helper.make_node("GatherND", ["x", "k"], ["h"], batch_dims=1),
    ]
    k = np.array([[[1, -1], [0, 2]], [[3, 3], [2, 0]], [[0, 0], [-4, -5]]], dtype=np.int64)
    g, h = _run(target, nodes, {"x": x, "i": i, "k": k}, 13, None, ["g", "h"])
    np.testing.assert_array_equal(g, np.take_along_axis(x, np.where(i < 0, i + 4, i), axis=1))
    want = np.stack([x[b][tuple(np.moveaxis(k[b], -1, 0))] for b in range(3)])
    np.testing.assert_array_equal(h, want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    ("ax", "bad", "dtype"),
    [(1, 4, np.int64), (1, -5, np.int64), (0, 3, np.int32), (2, 5, np.int64),
     (-1, 2**64 - 1, np.uint64), (1, 2**64 - 4, np.uint64)],
)  # fmt: skip
def test_gather_elements_index_past_the_axis_fails_when_it_runs(target, ax, bad, dtype):
    """An index outside the axis is an error, not a read of another row through
    the flattened data (index 4 on an axis of 4 is still inside the buffer)."""
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    i = np.zeros((2, 3, 4), dtype)
    node = helper.make_node("GatherElements", ["x", "i"], ["g"], axis=ax)
    fn = stripeml.onnx.compile(_model(node, {"x": x, "i": i}, ["g"], 13), target=target)
    bad_i = i.copy()
    bad_i[1, 2, 3] = bad
    dim = x.shape[ax]
    with pytest.raises(ExecutionError, match=rf"index {bad} at position \(1, 2, 3\).*size {dim}"):
        fn(x=x, i=bad_i)
    # in range (negative ones wrap) it still reads the right elements
    ok = RNG.integers(0 if dtype == np.uint64 else -dim, dim, i.shape).astype(dtype)
    rows = tuple(slice(None) if k == ax % 3 else slice(0, i.shape[k]) for k in range(3))
    want = np.take_along_axis(x[rows], ok.astype(np.int64) % dim, ax)
    np.testing.assert_array_equal(fn(x=x, i=ok), want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    ("bd", "tup", "ax", "dim"), [(0, [0, 4], 1, 4), (0, [-4, 0], 0, 3), (1, [2, -5], 2, 4)]
)
def test_gather_nd_entry_past_its_axis_fails_when_it_runs(target, bd, tup, ax, dim):
    """(0, 4) into a (3, 4) block is not the element (1, 0)."""
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    x = x[0] if bd == 0 else x
    i = np.zeros((2, 2), np.int64)
    node = helper.make_node("GatherND", ["x", "i"], ["g"], batch_dims=bd)
    fn = stripeml.onnx.compile(_model(node, {"x": x, "i": i}, ["g"], 13), target=target)
    bad = i.copy()
    bad[1] = tup
    with pytest.raises(ExecutionError, match=rf"at position \(1,\) .* for axis {ax} of size {dim}"):
        fn(x=x, i=bad)
    ok = np.array([[1, -1], [-3, 2]], np.int64)
    want = np.stack([x[b][tuple(ok[b])] for b in range(2)]) if bd else x[tuple(ok.T)]
    np.testing.assert_array_equal(fn(x=x, i=ok), want)


def test_gather_elements_constant_index_out_of_range_is_the_nodes_error():
    x = np.zeros((3, 4), dtype=np.float32)
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1, name="pick")
    i = np.array([[1, 4]], dtype=np.int64)
    with pytest.raises(OnnxError, match=r"(?s)pick.*index 4 .*out of range"):
        stripeml.onnx.compile(_model(node, {"x": x}, ["y"], 13, {"i": i}), target="interp")(x=x)


@pytest.mark.parametrize("target", TARGETS)
def test_gather_elements_constant_indices(target):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    i = np.array([[1, -1, 0], [3, -4, 2]], dtype=np.int64)
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)
    fn = stripeml.onnx.compile(_model(node, {"x": x}, ["y"], 13, {"i": i}), target=target)
    np.testing.assert_array_equal(fn(x=x), np.take_along_axis(x[:2], i % 4, 1))


# -- trilu / onehot / eyelike -------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_trilu_eyelike_onehot(target):
    x = RNG.integers(1, 9, (2, 3, 5)).astype(np.int64)
    idx = np.array([[1.0, -1.0], [4.0, 7.0]], dtype=np.float32)
    vals = np.array([-1, 5], dtype=np.int32)
    nodes = [
        helper.make_node("Trilu", ["x", "k"], ["lo"], upper=0),
        helper.make_node("EyeLike", ["e"], ["eye"], k=-1, dtype=TensorProto.DOUBLE),
        helper.make_node("OneHot", ["idx", "depth", "vals"], ["oh"], axis=0),
    ]
    e = np.zeros((3, 4), np.float32)
    inits = {"k": _i64(1), "depth": np.array(5.0, np.float32)}
    lo, eye, oh = _run(
        target,
        nodes,
        {"x": x, "e": e, "idx": idx, "vals": vals},
        14,  # Trilu's first opset
        inits,
        ["lo", "eye", "oh"],
    )
    np.testing.assert_array_equal(lo, np.tril(x, 1))
    assert eye.dtype == np.float64
    np.testing.assert_array_equal(eye, np.eye(3, 4, -1))
    wrapped = np.where(idx < 0, idx + 5, idx)
    want = np.where(np.arange(5).reshape(5, 1, 1) == wrapped[None], 5, -1).astype(np.int32)
    np.testing.assert_array_equal(oh, want)


# -- constants and folding --------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_shape_ops_fold_to_constants(target):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    w = RNG.standard_normal((4, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=1),
        helper.make_node(
            "ConstantOfShape",
            ["s"],
            ["z"],
            value=numpy_helper.from_array(np.array([1.5], np.float32)),
        ),
        helper.make_node("Transpose", ["w"], ["wt"]),  # folded on the interpreter
        helper.make_node("Add", ["z", "wt"], ["zw"]),
        helper.make_node("Add", ["x", "zw"], ["y"]),
        helper.make_node("Range", ["r0", "r1", "r2"], ["r"]),
        helper.make_node("Size", ["x"], ["n"]),
    ]
    inits = {
        "w": w,
        "r0": np.array(5, np.int32),
        "r1": np.array(-4, np.int32),
        "r2": np.array(-3, np.int32),
    }
    fn = stripeml.onnx.compile(_model(nodes, {"x": x}, ["y", "r", "n"], 15, inits), target=target)
    y, r, n = fn(x)
    np.testing.assert_allclose(y, x + (1.5 + w.T), rtol=1e-6)
    np.testing.assert_array_equal(r, np.arange(5, -4, -3, dtype=np.int32))
    assert n == 24 and n.dtype == np.int64
    assert "Transpose" not in fn.source(x)


@pytest.mark.parametrize("target", TARGETS)
def test_dropout_inference_mask(target):
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    node = helper.make_node("Dropout", ["x", "r"], ["y", "m"])
    y, m = _run(target, node, {"x": x}, 13, {"r": np.array(0.5, np.float32)})
    np.testing.assert_array_equal(y, x)
    assert m.dtype == np.bool_ and m.all()


# -- errors ----------------------------------------------------------------------------


def test_unsupported_cases_raise_clear_errors():
    x = np.zeros((2, 3), np.float32)
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode="mirror")
    with pytest.raises(OnnxError, match="mode 'mirror' is not supported"):
        _run("interp", node, {"x": x}, 13, {"p": _i64(1, 1, 1, 1)})
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y"])
    inits = {"r": np.array(0.5, np.float32), "t": np.array(True)}
    with pytest.raises(OnnxError, match="training mode is not supported"):
        _run("interp", node, {"x": x}, 13, inits)
    node = helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])
    inits = {"s": _i64(0), "e": _i64(2), "a": _i64(1), "t": _i64(0)}
    with pytest.raises(OnnxError, match="steps must not be 0"):
        _run("interp", node, {"x": x}, 13, inits)
    node = helper.make_node("DepthToSpace", ["x4"], ["y"], blocksize=2, mode="XYZ")
    with pytest.raises(OnnxError, match="mode 'XYZ' is not supported"):
        _run("interp", node, {"x4": np.zeros((1, 4, 1, 1), np.float32)}, 13)
