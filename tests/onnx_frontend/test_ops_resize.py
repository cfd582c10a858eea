"""Resize and Upsample (``ops/resize.py``) on the ``cpu`` target against
``onnx.reference.ReferenceEvaluator`` on one-node models: every mode,
coordinate transformation, nearest rounding, antialias, axes, scales and
sizes, keep_aspect_ratio_policy and tf_crop_and_resize's extrapolation, on
3-D to 5-D tensors, enlarging and shrinking, float and integer data
(integers bit for bit); Resize-10 and Upsample, which the reference does not
run, against values worked out by hand; and the errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml.onnx as so  # noqa: E402
from stripeml.errors import StripeError  # noqa: E402
from stripeml.onnx.builder import Builder  # noqa: E402
from stripeml.onnx.graph import NodeInfo  # noqa: E402
from stripeml.onnx.importer import run_node  # noqa: E402

F32 = np.float32
RNG = np.random.default_rng(20)


def _f(*v: float) -> np.ndarray:
    return np.array(v, dtype=np.float32)


def _i(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


def resize_model(x: np.ndarray, opset: int = 19, **kw: Any) -> onnx.ModelProto:
    """A one-node Resize model; ``roi``/``scales``/``sizes`` become initializers."""
    consts = {k: kw.pop(k) for k in ("roi", "scales", "sizes") if k in kw}
    names = [k if k in consts else "" for k in ("roi", "scales", "sizes")]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node("Resize", ["X", *names], ["Y"], **kw)
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", t, x.shape)],
        [helper.make_tensor_value_info("Y", t, None)],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def data(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    if np.dtype(dtype).kind == "u":
        return RNG.integers(0, 256, shape).astype(dtype)
    return (RNG.standard_normal(shape) * 50).astype(dtype)


def same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)  # bit for bit
    else:
        tol = {np.float16: 2e-3, np.float32: 1e-5, np.float64: 1e-12}[want.dtype.type]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 50)


X4 = (2, 3, 5, 6)
UP, DOWN, MIXED = _f(1, 1, 2, 3), _f(1, 1, 0.6, 0.45), _f(1, 1, 1.7, 0.8)
ROI = _f(0, 0, -0.3, 0.1, 1, 1, 1.2, 0.8)  # partly outside: extrapolation
TRANSFORMS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners"]
TRANSFORMS += ["asymmetric"]

CASES: list[tuple[str, tuple[int, ...], Any, dict[str, Any]]] = []


def case(name: str, shape: tuple[int, ...], dtype: Any, **kw: Any) -> None:
    CASES.append((name, shape, dtype, kw))


for _mode in ("nearest", "linear", "cubic"):
    for _k, _t in enumerate(TRANSFORMS):  # enlarging, or enlarging one axis and shrinking one
        _s = UP if _k % 2 else MIXED
        case(f"{_mode}-{_t}", X4, F32, mode=_mode, coordinate_transformation_mode=_t, scales=_s)
    case(f"{_mode}-down-sizes", X4, F32, mode=_mode, sizes=_i(2, 3, 3, 2))
    case(
        f"{_mode}-crop",
        X4,
        F32,
        mode=_mode,
        coordinate_transformation_mode="tf_crop_and_resize",
        roi=ROI,
        sizes=_i(2, 3, 4, 7),
        extrapolation_value=10.0,
    )
for _nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
    for _t, _s in (("half_pixel", _f(1, 1, 2.5, 0.45)), ("align_corners", _f(1, 1, 1.5, 0.7))):
        case(f"nearest-{_nm}-{_t}", X4, F32, mode="nearest", nearest_mode=_nm, scales=_s)
for _mode in ("linear", "cubic"):
    case(f"{_mode}-antialias", X4, F32, mode=_mode, antialias=1, scales=_f(1, 1, 0.3, 0.5))
    case(
        f"{_mode}-antialias-sizes",
        (1, 2, 9, 40),
        F32,
        mode=_mode,
        antialias=1,
        sizes=_i(1, 2, 4, 5),
    )
for _a, _ex in ((-0.5, 1), (-0.75, 1), (-0.6, 0)):
    case(
        f"cubic-a{_a}-ex{_ex}",
        X4,
        F32,
        mode="cubic",
        cubic_coeff_a=_a,
        exclude_outside=_ex,
        scales=_f(1, 1, 2, 0.6),
    )
case("linear-exclude-outside", X4, F32, mode="linear", exclude_outside=1, scales=_f(1, 1, 0.6, 2.5))
case(
    "nearest-exclude-outside",
    X4,
    F32,
    mode="nearest",
    nearest_mode="floor",
    exclude_outside=1,
    scales=_f(1, 1, 0.6, 2.5),
)
for _pol in ("not_larger", "not_smaller"):
    for _mode in ("nearest", "linear"):
        case(
            f"{_mode}-{_pol}",
            X4,
            F32,
            mode=_mode,
            axes=[2, 3],
            keep_aspect_ratio_policy=_pol,
            sizes=_i(7, 3),
        )
case("axes-3-2-cubic", X4, F32, mode="cubic", axes=[3, 2], scales=_f(0.5, 2.5))
case("axes-0-2-linear", X4, F32, mode="linear", axes=[0, 2], scales=_f(1.5, 0.5))
case(
    "crop-axes-3-2",
    X4,
    F32,
    mode="linear",
    coordinate_transformation_mode="tf_crop_and_resize",
    axes=[3, 2],
    roi=_f(0.1, -0.3, 0.8, 1.2),
    sizes=_i(7, 4),
    extrapolation_value=-3.0,
)
case("3d-linear-up", (2, 3, 7), F32, mode="linear", scales=_f(1, 1, 2.5))
case("3d-cubic-down", (2, 3, 17), F32, mode="cubic", sizes=_i(2, 3, 6))
case("5d-linear", (1, 2, 4, 5, 6), F32, mode="linear", scales=_f(1, 1, 1.5, 0.5, 2))
case("5d-nearest-axes", (1, 2, 4, 5, 6), F32, mode="nearest", axes=[4, 2, 3], sizes=_i(3, 7, 2))
case("5d-cubic-axes", (1, 2, 4, 5, 6), np.float64, mode="cubic", axes=[4, 2], sizes=_i(9, 3))
case("1d-antialias", (30,), F32, mode="cubic", antialias=1, scales=_f(0.2))
case(
    "size-1-align-corners",
    (1, 1, 4, 4),
    F32,
    mode="linear",
    coordinate_transformation_mode="align_corners",
    sizes=_i(1, 1, 1, 3),
)
case(
    "size-1-pytorch",
    (1, 1, 4, 4),
    F32,
    mode="linear",
    coordinate_transformation_mode="pytorch_half_pixel",
    sizes=_i(1, 1, 1, 3),
)
case("float16-linear", X4, np.float16, mode="linear", scales=MIXED)
case(
    "float16-cubic-crop",
    X4,
    np.float16,
    mode="cubic",
    coordinate_transformation_mode="tf_crop_and_resize",
    roi=ROI,
    sizes=_i(2, 3, 4, 7),
)
case("float64-linear", X4, np.float64, mode="linear", scales=DOWN)
# integers: linear and cubic computed in float64 and rounded as the reference does
for _dt in (np.uint8, np.int32):
    case(f"{np.dtype(_dt)}-nearest", X4, _dt, mode="nearest", scales=MIXED)
    case(
        f"{np.dtype(_dt)}-linear",
        X4,
        _dt,
        mode="linear",
        coordinate_transformation_mode="asymmetric",
        scales=UP,
    )
    case(f"{np.dtype(_dt)}-cubic", X4, _dt, mode="cubic", scales=MIXED)
    case(
        f"{np.dtype(_dt)}-crop",
        X4,
        _dt,
        mode="cubic",
        coordinate_transformation_mode="tf_crop_and_resize",
        roi=ROI,
        sizes=_i(2, 3, 4, 7),
        extrapolation_value=300.5,
    )
    # many taps on the last axis: the reference sums them pairwise
    case(
        f"{np.dtype(_dt)}-antialias", (2, 40), _dt, mode="cubic", antialias=1, scales=_f(0.6, 0.11)
    )
case("int8-linear-axes", X4, np.int8, mode="linear", axes=[3, 2], scales=_f(1.5, 2.5))
case("bool-nearest", X4, np.bool_, mode="nearest", scales=MIXED)


@pytest.mark.parametrize(("name", "shape", "dtype", "kw"), CASES, ids=[c[0] for c in CASES])
def test_matches_reference(
    name: str, shape: tuple[int, ...], dtype: Any, kw: dict[str, Any]
) -> None:
    x = data(shape, dtype) if dtype is not np.bool_ else RNG.random(shape) < 0.5
    m = resize_model(x, **kw)
    if dtype is np.bool_:  # the reference casts its float64 result, and cannot to bool
        want = (
            ReferenceEvaluator(resize_model(x.astype(np.uint8), **kw))
            .run(None, {"X": x.astype(np.uint8)})[0]
            .astype(bool)
        )
    else:
        want = ReferenceEvaluator(m).run(None, {"X": x})[0]
    same(so.compile(m, target="cpu")(x), want)


def test_opsets_11_to_18() -> None:
    """roi and scales are inputs (empty where unused) before opset 13; the
    attributes of opset 18 are absent before it."""
    x = data(X4, F32)
    empty = np.zeros(0, F32)
    for opset in (11, 13, 18):
        for kw in (
            dict(mode="linear", roi=empty, scales=MIXED),
            dict(mode="cubic", roi=empty, scales=empty, sizes=_i(2, 3, 3, 8)),
        ):
            m = resize_model(x, opset=opset, **kw)
            same(so.compile(m, target="cpu")(x), ReferenceEvaluator(m).run(None, {"X": x})[0])


def test_negative_axes() -> None:
    x = data(X4, F32)
    kw = dict(mode="linear", scales=_f(0.5, 2.5))
    want = ReferenceEvaluator(resize_model(x, axes=[3, 2], **kw)).run(None, {"X": x})[0]
    same(so.compile(resize_model(x, axes=[-1, -2], **kw), target="cpu")(x), want)


def test_nearest_copies_integers_exactly() -> None:
    """int64 beyond 2**53 (the reference's float64 would round them): a copy."""
    x = (2**62 + np.arange(12, dtype=np.int64)).reshape(1, 1, 3, 4)
    f = so.compile(resize_model(x, mode="nearest", scales=_f(1, 1, 2, 2)), target="cpu")
    np.testing.assert_array_equal(f(x), x.repeat(2, axis=2).repeat(2, axis=3))


def test_lowering() -> None:
    """linear: one contraction per resized axis with its matrix; nearest by an
    integer factor: one affine copy, no gather; an identity resize: nothing."""
    x = data(X4, F32)
    src = so.compile(resize_model(x, mode="linear", scales=MIXED), target="cpu").source(x)
    assert src.count("= +(") == 2 and "gather" not in src
    src = so.compile(resize_model(x, mode="nearest", scales=UP), target="cpu").source(x)
    assert src.count("= =(") == 1 and "gather" not in src
    f = so.compile(resize_model(x, mode="cubic", scales=_f(1, 1, 1, 1)), target="cpu")
    np.testing.assert_array_equal(f(x), x)


def test_empty_output() -> None:
    x = data(X4, F32)
    y = so.compile(resize_model(x, mode="linear", sizes=_i(2, 3, 0, 6)), target="cpu")(x)
    assert y.shape == (2, 3, 0, 6) and y.dtype == F32


def _old_model(
    op: str, opset: int, x: np.ndarray, scales: list[float], mode: str
) -> onnx.ModelProto:
    if opset < 9:
        node = helper.make_node(op, ["X"], ["Y"], mode=mode, scales=[float(s) for s in scales])
        inits = []
    else:
        node = helper.make_node(op, ["X", "scales"], ["Y"], mode=mode)
        inits = [numpy_helper.from_array(np.array(scales, F32), "scales")]
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(("op", "opset"), [("Resize", 10), ("Upsample", 9), ("Upsample", 7)])
def test_resize_10_and_upsample(op: str, opset: int) -> None:
    """asymmetric coordinates; nearest floors when enlarging and takes the
    ceiling when shrinking (as onnxruntime, and the opset-10 node tests of
    earlier onnx releases)."""
    x = np.array([[[[1, 2, 3, 4], [5, 6, 7, 8]]]], F32)
    run = lambda s, mode: so.compile(_old_model(op, opset, x, s, mode), target="cpu")(x)  # noqa: E731
    same(run([1, 1, 2, 1.5], "nearest"), x.repeat(2, axis=2)[..., [0, 0, 1, 2, 2, 3]])
    up = run([1, 1, 2, 2], "linear")
    np.testing.assert_allclose(
        up[0, 0, :2], [[1, 1.5, 2, 2.5, 3, 3.5, 4, 4], [3, 3.5, 4, 4.5, 5, 5.5, 6, 6]]
    )
    if op == "Resize":  # Upsample only enlarges
        same(run([1, 1, 0.6, 0.6], "nearest"), np.array([[[[1, 3]]]], F32))
        np.testing.assert_allclose(run([1, 1, 0.6, 0.6], "linear"), [[[[1, 2 + 2 / 3]]]], rtol=1e-6)


def test_non_constant_scales_is_an_error() -> None:
    """scales computed when the program runs: an OnnxError naming the node and
    the input, raised where the op reads it (no internal traceback)."""
    b = Builder()
    env = {"X": b.input((1, 1, 2, 2), F32), "S": b.input((4,), F32)}
    info = NodeInfo("Resize", "", "up", ["X", "", "S"], ["Y"], {"mode": "nearest"})
    with pytest.raises(
        StripeError, match=r"node 'up' \(Resize\): input 2 \(scales\) must be known when compiling"
    ) as exc:
        run_node(b, info, env, 19)
    assert exc.value.__cause__ is None


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(mode="bicubic", scales=UP), "mode 'bicubic' is not supported"),
        (
            dict(
                mode="linear",
                coordinate_transformation_mode="tf_crop_and_resize",
                sizes=_i(2, 3, 4, 4),
            ),
            "needs the roi input",
        ),
        (dict(mode="linear", scales=_f(1, 1, 0, 2)), "must be positive"),
        (dict(mode="linear", scales=_f(2, 2)), "scales has 2 entries for 4 axes"),
        (dict(mode="linear", axes=[2, 2], scales=_f(2, 2)), "repeated axis"),
        (dict(mode="nearest", nearest_mode="nearest", scales=UP), "nearest_mode 'nearest'"),
    ],
)
def test_bad_attributes(kw: dict[str, Any], message: str) -> None:
    x = data(X4, F32)
    with pytest.raises(StripeError, match=message):
        so.compile(resize_model(x, **kw), target="cpu")(x)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("how", ["scales", "sizes"])
def test_resize_between_convolutions_stays_channels_last(mode, how):
    """Conv -> Resize -> Conv: the resize reads and writes the channels-last
    tensors the convolutions keep (no transposes around it), same results."""
    rng = np.random.default_rng(4)
    w1 = rng.standard_normal((6, 3, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((4, 6, 3, 3)).astype(np.float32)
    inits = [
        numpy_helper.from_array(w1, "W1"),
        numpy_helper.from_array(w2, "W2"),
        numpy_helper.from_array(np.array([], np.float32), "roi"),
    ]
    if how == "scales":
        inits.append(numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "s"))
        names = ["c1", "roi", "s"]
    else:
        inits.append(numpy_helper.from_array(np.array([1, 6, 17, 9], np.int64), "z"))
        names = ["c1", "roi", "", "z"]
    nodes = [
        helper.make_node("Conv", ["X", "W1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Resize", names, ["r"], mode=mode),
        helper.make_node("Conv", ["r", "W2"], ["Y"], pads=[1, 1, 1, 1]),
    ]
    g = helper.make_graph(
        nodes,
        "crc",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 8, 6])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    x = rng.standard_normal((1, 3, 8, 6)).astype(np.float32)
    fn = so.compile(model, target="cpu")
    want = ReferenceEvaluator(model).run(None, {"X": x})[0]
    np.testing.assert_allclose(fn(X=x), want, rtol=1e-4, atol=1e-4)
    source = fn.source(X=x)
    transposes = [line for line in source.splitlines() if "[n, c, h, w])" in line]
    assert len(transposes) == 1, source  # the input's NCHW -> NHWC only
