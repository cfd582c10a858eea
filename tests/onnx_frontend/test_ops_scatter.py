"""ScatterElements, Scatter, ScatterND, TensorScatter, MaxUnpool and TopK
(``ops/scatter.py``) on one-node models against
``onnx.reference.ReferenceEvaluator``, on the interpreter and the cpu target:
element types, axes, every reduction with duplicate and negative indices,
inputs given as initializers or at run time, old opsets, and the errors
(at import, and an index out of range when the model runs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml.onnx as so  # noqa: E402
from stripeml.errors import ExecutionError, StripeError  # noqa: E402
from stripeml.onnx.builder import OnnxError  # noqa: E402

TARGETS = ["interp", "cpu"]
RNG = np.random.default_rng(31)
REDUCTIONS = ["none", "add", "mul", "max", "min"]


def model(
    op: str,
    inputs: dict[str, np.ndarray],
    inits: dict[str, np.ndarray] | None = None,
    outputs: tuple[str, ...] = ("Y",),
    opset: int = 18,
    **attrs: Any,
) -> onnx.ModelProto:
    """A one-node model: ``inputs`` are graph inputs, ``inits`` initializers
    (its input names in the order given, ``""`` for an omitted one)."""
    inits = inits or {}
    names = list(inputs) + list(inits)
    order = attrs.pop("order", None) or names
    node = helper.make_node(op, order, list(outputs), **attrs)
    vis = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for k, v in inputs.items()
    ]
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
    graph = helper.make_graph(
        [node], "g", vis, outs, [numpy_helper.from_array(v, k) for k, v in inits.items()]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def call(m: onnx.ModelProto) -> None:
    """Import ``m`` (the importer runs at the first call) with zero inputs."""
    inputs = {
        vi.name: np.zeros(
            [d.dim_value for d in vi.type.tensor_type.shape.dim],
            helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type),
        )
        for vi in m.graph.input
    }
    so.compile(m)(**inputs)


def check(m: onnx.ModelProto, inputs: dict[str, np.ndarray], target: str) -> None:
    """Every output equal to the reference's: same dtype and shape, bit for bit."""
    want = ReferenceEvaluator(m).run(None, inputs)
    got = so.compile(m, target=target)(**inputs)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_array_equal(g, w)


def data(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return RNG.random(shape) < 0.5
    if dtype.kind in "iu":
        return RNG.integers(0 if dtype.kind == "u" else -9, 10, shape).astype(dtype)
    return (RNG.standard_normal(shape) * 4).astype(dtype)


def indices(shape: tuple[int, ...], dim: int, dtype: Any = np.int64) -> np.ndarray:
    return RNG.integers(-dim, dim, shape).astype(dtype)


# -- ScatterElements / Scatter ---------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float64, np.int32])
def test_scatter_elements(target: str, reduction: str, dtype: Any) -> None:
    """Duplicate and negative indices along a middle axis; max/min need opset 18."""
    x = data((3, 4, 5), dtype)
    i = indices((2, 9, 4), 4, np.int32)
    u = data((2, 9, 4), dtype)
    m = model("ScatterElements", {"x": x, "i": i, "u": u}, axis=1, reduction=reduction)
    check(m, {"x": x, "i": i, "u": u}, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements_constant_indices_and_old_opsets(target: str, axis: int) -> None:
    x = data((4, 6), np.float32)
    i = indices((3, 2), x.shape[axis])
    u = data((3, 2), np.float32)
    m = model("ScatterElements", {"x": x}, {"i": i, "u": u}, opset=11, axis=axis)
    check(m, {"x": x}, target)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    # Scatter (opset 9-10) is ScatterElements under its old name (the reference lacks it).
    m = model("Scatter", {"x": x, "u": u}, {"i": i}, opset=10, axis=axis, order=["x", "i", "u"])
    np.testing.assert_array_equal(so.compile(m, target=target)(x=x, u=u), want)


@pytest.mark.parametrize("target", TARGETS)
def test_scatter_elements_bool_and_uint8(target: str) -> None:
    for dtype in (np.bool_, np.uint8):
        x, u = data((5, 3), dtype), data((7, 3), dtype)
        i = indices((7, 3), 5)
        check(model("ScatterElements", {"x": x, "i": i, "u": u}), {"x": x, "i": i, "u": u}, target)


@pytest.mark.parametrize("target", TARGETS)
def test_scatter_elements_out_of_range_when_it_runs(target: str) -> None:
    x = np.zeros((3, 4), np.float32)
    u = np.ones((1, 2), np.float32)
    m = model("ScatterElements", {"x": x, "i": np.zeros((1, 2), np.int64), "u": u})
    fn = so.compile(m, target=target)
    with pytest.raises(ExecutionError, match=r"index 3 at position \(0, 1\)") as info:
        fn(x=x, i=np.array([[0, 3]], np.int64), u=u)
    assert isinstance(info.value, StripeError)
    np.testing.assert_array_equal(fn(x=x, i=np.array([[-3, 2]]), u=u)[0], [1, 0, 0, 0])


def test_scatter_elements_import_errors() -> None:
    x, u = np.zeros((3, 4), np.float32), np.zeros((2, 2), np.float32)
    i = np.zeros((2, 2), np.int64)
    with pytest.raises(OnnxError, match="indices must be integers"):
        call(model("ScatterElements", {"x": x, "i": i.astype(np.float32), "u": u}))
    with pytest.raises(OnnxError, match="updates .* differ in shape"):
        call(model("ScatterElements", {"x": x, "i": i, "u": u[:1]}))
    with pytest.raises(OnnxError, match="exceed the data"):
        bigger = np.zeros((4, 2), np.int64)
        call(model("ScatterElements", {"x": x, "i": bigger, "u": u.repeat(2, 0)}, axis=1))


def test_scatter_with_nothing_to_write_is_the_data() -> None:
    x = data((3, 4), np.float32)
    i, u = np.zeros((3, 0), np.int64), np.zeros((3, 0), np.float32)
    m = model("ScatterElements", {"x": x}, {"i": i, "u": u}, axis=1, reduction="mul")
    np.testing.assert_array_equal(so.compile(m)(x=x), x)


# -- ScatterND ---------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_scatter_nd(target: str, reduction: str, k: int) -> None:
    x = data((4, 3, 5), np.float32)
    i = np.stack([indices((3, 4), x.shape[j]) for j in range(k)], -1)
    u = data((3, 4) + x.shape[k:], np.float32)
    m = model("ScatterND", {"x": x, "i": i, "u": u}, reduction=reduction)
    check(m, {"x": x, "i": i, "u": u}, target)


@pytest.mark.parametrize("target", TARGETS)
def test_scatter_nd_int_data_constant_indices(target: str) -> None:
    x = data((6, 2), np.int32)
    i = np.array([[5], [0], [-1], [2]], np.int64)
    u = data((4, 2), np.int32)
    check(model("ScatterND", {"x": x, "u": u}, {"i": i}, order=["x", "i", "u"]), {"x": x, "u": u}, target)  # fmt: skip


@pytest.mark.parametrize("target", TARGETS)
def test_scatter_nd_out_of_range_when_it_runs(target: str) -> None:
    x = np.zeros((3, 4), np.float32)
    u = np.ones(2, np.float32)
    fn = so.compile(
        model("ScatterND", {"x": x, "i": np.zeros((2, 2), np.int64), "u": u}), target=target
    )
    with pytest.raises(ExecutionError, match=r"scatter_nd index -4 at position \(1, 0\)"):
        fn(x=x, i=np.array([[0, 0], [-4, 1]], np.int64), u=u)


def test_scatter_nd_import_errors() -> None:
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(OnnxError, match="tuples of at most 2"):
        call(model("ScatterND", {"x": x, "i": np.zeros((2, 3), np.int64), "u": x[0, :2]}))
    with pytest.raises(OnnxError, match=r"should have shape \(2, 4\)"):
        call(model("ScatterND", {"x": x, "i": np.zeros((2, 1), np.int64), "u": x[:2, :3]}))
    with pytest.raises(OnnxError, match="reduction 'sum'"):
        i = np.zeros((2, 1), np.int64)
        call(model("ScatterND", {"x": x, "i": i, "u": x[:2]}, reduction="sum"))


# -- TopK --------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.uint64])
def test_topk(target: str, dtype: Any) -> None:
    """Ties (values from a few) and NaN, both orders, every axis, k from an initializer."""
    x = RNG.integers(0, 5, (3, 4, 6)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[RNG.random(x.shape) < 0.15] = np.nan
    for ax, k, largest in ((0, 2, 1), (1, 4, 0), (-1, 3, 1), (2, 6, 0)):
        kk = np.array([k], np.int64)
        m = model("TopK", {"x": x}, {"k": kk}, ("V", "I"), opset=11, axis=ax, largest=largest)
        check(m, {"x": x}, target)


@pytest.mark.parametrize("target", TARGETS)
def test_topk_k_from_a_graph_input_and_opset_1(target: str) -> None:
    x = data((5, 7), np.float32)
    m = model("TopK", {"x": x, "k": np.array([3], np.int64)}, outputs=("V", "I"), opset=10)
    check(m, {"x": x, "k": np.array([3], np.int64)}, target)
    m = model("TopK", {"x": x}, outputs=("V", "I"), opset=9, k=2, axis=0)
    check(m, {"x": x}, target)


def test_topk_k_zero_and_rank1() -> None:
    x = data((6,), np.float32)
    check(model("TopK", {"x": x}, {"k": np.array([0], np.int64)}, ("V", "I")), {"x": x}, "cpu")
    check(model("TopK", {"x": x}, {"k": np.array([6], np.int64)}, ("V", "I")), {"x": x}, "cpu")


def test_topk_import_errors() -> None:
    x = data((5, 7), np.float32)
    with pytest.raises(OnnxError, match="k = 8 is not between 0 and the size 7"):
        call(model("TopK", {"x": x}, {"k": np.array([8], np.int64)}, ("V", "I")))
    with pytest.raises(OnnxError, match="K must hold one value"):
        call(model("TopK", {"x": x}, {"k": np.array([1, 2], np.int64)}, ("V", "I")))


# -- TensorScatter -----------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(target: str, mode: str) -> None:
    past = data((2, 3, 8, 4), np.float32)
    upd = data((2, 3, 3, 4), np.float32)
    w = np.array([5, 1] if mode == "linear" else [6, -1], np.int64)
    m = model("TensorScatter", {"p": past, "u": upd, "w": w}, opset=24, mode=mode)
    check(m, {"p": past, "u": upd, "w": w}, target)
    m = model("TensorScatter", {"p": past, "u": upd[:, :, :2]}, opset=24, mode=mode)
    check(m, {"p": past, "u": upd[:, :, :2]}, target)
    m = model("TensorScatter", {"p": past[..., 0], "u": upd[..., 0]}, {"w": w}, opset=24,
              mode=mode, axis=-1)  # fmt: skip
    check(m, {"p": past[..., 0], "u": upd[..., 0]}, target)


def test_tensor_scatter_linear_past_the_end_fails_when_it_runs() -> None:
    past, upd = np.zeros((2, 5, 3), np.float32), np.ones((2, 2, 3), np.float32)
    fn = so.compile(
        model("TensorScatter", {"p": past, "u": upd, "w": np.zeros(2, np.int64)}, opset=24, axis=1)
    )
    with pytest.raises(ExecutionError, match="out of range for axis 1 of size 5"):
        fn(p=past, u=upd, w=np.array([0, 4], np.int64))


# -- MaxUnpool ---------------------------------------------------------------------------


def _pooled(shape: tuple[int, ...], full: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Values and flat indices into the unpooled shape ``(N, C, *full)``, as
    MaxPool gives them (some duplicates, as overlapping windows do)."""
    out = data(shape, np.float32)
    n, c, *spatial = shape
    per = int(np.prod(full))
    base = np.arange(n * c).reshape(n, c, *([1] * len(spatial))) * per
    flat = RNG.integers(0, per, shape)
    return out, (base + flat).astype(np.int64)


@pytest.mark.parametrize("target", TARGETS)
def test_max_unpool(target: str) -> None:
    x, i = _pooled((2, 3, 3, 4), (6, 8))
    m = model("MaxUnpool", {"x": x, "i": i}, opset=22, kernel_shape=[2, 2], strides=[2, 2])
    check(m, {"x": x, "i": i}, target)
    shape = np.array([2, 3, 7, 9], np.int64)
    m = model("MaxUnpool", {"x": x, "i": i}, {"s": shape}, opset=11, kernel_shape=[2, 2], strides=[2, 2])  # fmt: skip
    check(m, {"x": x, "i": i}, target)
    x1, i1 = _pooled((1, 2, 5), (5,))
    m = model("MaxUnpool", {"x": x1, "i": i1}, opset=22, kernel_shape=[3], pads=[1, 1])
    check(m, {"x": x1, "i": i1}, target)


def test_max_unpool_errors() -> None:
    x, i = _pooled((1, 1, 2, 2), (4, 4))
    small = np.array([1, 1, 3, 3], np.int64)
    with pytest.raises(OnnxError, match="smaller than the inferred shape"):
        call(model("MaxUnpool", {"x": x, "i": i}, {"s": small}, kernel_shape=[2, 2], strides=[2, 2]))  # fmt: skip
    fn = so.compile(model("MaxUnpool", {"x": x, "i": i}, kernel_shape=[2, 2], strides=[2, 2]))
    with pytest.raises(ExecutionError, match="index 16 at position"):
        fn(x=x, i=np.array([[[[0, 1], [2, 16]]]], np.int64))
