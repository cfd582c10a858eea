"""GridSample, RoiAlign and DeformConv (``ops/sampling.py``) against
``onnx.reference.ReferenceEvaluator`` on random inputs: every mode, padding
mode and align_corners of GridSample on 1-D to 3-D inputs (samples outside the
input, reflected several times), float16/32/64 and integer data; RoiAlign's
modes, coordinate transforms, sampling ratios (adaptive too), scales and rois
partly or wholly outside the image; DeformConv with groups, offset groups,
strides, pads, dilations, masks and biases, and with zero offsets against Conv
on other ranks.  Mostly on ``cpu``, a few on ``interp``; then the errors."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml.onnx as so  # noqa: E402
from stripeml.errors import ExecutionError, StripeError  # noqa: E402
from stripeml.onnx.builder import OnnxError  # noqa: E402

RNG = np.random.default_rng(31)
TOL = {np.float16: 4e-3, np.float32: 2e-5, np.float64: 1e-5}


def graph_model(
    nodes: list[Any],
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    inits: dict[str, np.ndarray] | None = None,
    opset: int = 22,
) -> onnx.ModelProto:
    vis = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for k, v in inputs.items()
    ]
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
    init = [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()]
    g = helper.make_graph(nodes, "g", vis, outs, init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], target: str = "cpu") -> list:
    got = so.compile(model, target=target)(**feeds)
    return list(got) if isinstance(got, tuple) else [got]


def check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], target: str = "cpu",
          reference: onnx.ModelProto | None = None) -> None:  # fmt: skip
    """``model`` on ``target`` against the reference evaluator (of
    ``reference``, a model it can run, when given)."""
    want = ReferenceEvaluator(reference or model).run(None, feeds)
    got = run(model, feeds, target)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w, err_msg=f"output {k}")
        else:
            tol = TOL[w.dtype.type]
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"output {k}")


# -- GridSample ----------------------------------------------------------------------

PAD_ALIGN = list(itertools.product(["zeros", "border", "reflection"], [0, 1]))


def grid_sample_model(x: np.ndarray, grid: np.ndarray, mode: str, opset: int = 22,
                      variants: list[tuple[str, int]] = PAD_ALIGN) -> onnx.ModelProto:  # fmt: skip
    """One GridSample node per (padding_mode, align_corners) of ``variants``."""
    nodes = [
        helper.make_node(
            "GridSample", ["X", "grid"], [f"Y{k}"], mode=mode, padding_mode=p, align_corners=a
        )  # fmt: skip
        for k, (p, a) in enumerate(variants)
    ]
    outs = [f"Y{k}" for k in range(len(variants))]
    return graph_model(nodes, {"X": x, "grid": grid}, outs, opset=opset)


def grid(shape: tuple[int, ...], dtype: Any = np.float32, reach: float = 2.6) -> np.ndarray:
    """Normalised coordinates, many outside [-1, 1] (some past several reflections)."""
    return RNG.uniform(-reach, reach, shape).astype(dtype)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize(
    ("xshape", "gshape"),
    [((2, 3, 4, 5), (2, 3, 4, 2)), ((1, 2, 3, 4, 3), (1, 2, 3, 2, 3)), ((2, 2, 5), (2, 4, 1))],
    ids=["2d", "3d", "1d"],
)
def test_grid_sample(mode: str, xshape: tuple[int, ...], gshape: tuple[int, ...]) -> None:
    x = RNG.standard_normal(xshape).astype(np.float32)
    g = grid(gshape)
    check(grid_sample_model(x, g, mode), {"X": x, "grid": g})


@pytest.mark.parametrize(
    ("xdtype", "gdtype"),
    [(np.float64, np.float64), (np.float16, np.float32), (np.float32, np.float16)],
)
def test_grid_sample_float_types(xdtype: Any, gdtype: Any) -> None:
    x = RNG.standard_normal((1, 2, 4, 3)).astype(xdtype)
    g = grid((1, 3, 2, 2), gdtype, 1.4)
    for mode in ("linear", "nearest", "cubic"):
        check(grid_sample_model(x, g, mode, variants=[("border", 0), ("zeros", 1)]),
              {"X": x, "grid": g})  # fmt: skip


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_])
def test_grid_sample_nearest_any_element_type(dtype: Any) -> None:
    """``nearest`` only copies: exact for every type (zeros padding gives 0/False)."""
    x = RNG.integers(0, 2 if dtype == np.bool_ else 200, (2, 3, 4, 4)).astype(dtype)
    g = grid((2, 3, 5, 2))
    m = grid_sample_model(x, g, "nearest")
    if dtype == np.bool_:  # the reference's zeros are ints in a bool tensor: compare as ints
        got = run(m, {"X": x, "grid": g})
        want = run(
            grid_sample_model(x.astype(np.int32), g, "nearest"),
            {"X": x.astype(np.int32), "grid": g},
        )
        for a, w in zip(got, want):
            np.testing.assert_array_equal(a, w.astype(bool))
    else:
        check(m, {"X": x, "grid": g})


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_grid_sample_on_the_interpreter(mode: str) -> None:
    x = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    g = grid((1, 2, 3, 2))
    check(grid_sample_model(x, g, mode), {"X": x, "grid": g}, target="interp")


@pytest.mark.parametrize(("old", "new"), [("bilinear", "linear"), ("bicubic", "cubic"),
                                          ("nearest", "nearest")])  # fmt: skip
def test_grid_sample_16_mode_names(old: str, new: str) -> None:
    """GridSample-16 names the modes bilinear/bicubic (the reference knows only
    the opset 20 names: it runs the opset 22 model)."""
    x = RNG.standard_normal((2, 2, 3, 4)).astype(np.float32)
    g = grid((2, 3, 2, 2))
    feeds = {"X": x, "grid": g}
    m16 = grid_sample_model(x, g, old, opset=16)
    check(m16, feeds, reference=grid_sample_model(x, g, new))
    # the default mode is bilinear there, linear from opset 20
    node = helper.make_node("GridSample", ["X", "grid"], ["Y"])
    check(graph_model([node], feeds, ["Y"], opset=16), feeds,
          reference=grid_sample_model(x, g, "linear", variants=[("zeros", 0)]))  # fmt: skip


def test_grid_sample_extreme_coordinates_stay_inside() -> None:
    """Infinite, NaN and huge coordinates (the reference fails on them) read
    nothing outside the input: every mode and padding runs."""
    x = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    g = np.array([np.inf, -np.inf, np.nan, 1e10, -1e10, 3e9, 0.5, 2.0**40], np.float32)
    g = g.reshape(1, 2, 2, 2)
    for mode in ("linear", "nearest", "cubic"):
        for y in run(grid_sample_model(x, g, mode), {"X": x, "grid": g}):
            assert y.shape == (1, 2, 2, 2)
    # finite ones far outside: as the reference
    g = RNG.uniform(-40, 40, (1, 3, 3, 2)).astype(np.float32)
    check(grid_sample_model(x, g, "linear"), {"X": x, "grid": g})


def test_grid_sample_constant_grid() -> None:
    x = RNG.standard_normal((1, 3, 5, 4)).astype(np.float32)
    g = grid((1, 2, 6, 2))
    node = helper.make_node("GridSample", ["X", "grid"], ["Y"], mode="cubic",
                            padding_mode="reflection")  # fmt: skip
    m = graph_model([node], {"X": x}, ["Y"], {"grid": g})
    check(m, {"X": x})


def _node_error(node: Any, feeds: dict[str, np.ndarray], match: str, opset: int = 22,
                inits: dict[str, np.ndarray] | None = None) -> None:  # fmt: skip
    m = graph_model([node], feeds, list(node.output), inits, opset)
    with pytest.raises(OnnxError, match=match):
        run(m, feeds, "interp")


def test_grid_sample_errors() -> None:
    x = np.zeros((1, 2, 3, 4), np.float32)
    g = np.zeros((1, 2, 2, 2), np.float32)
    feeds = {"X": x, "grid": g}
    _node_error(helper.make_node("GridSample", ["X", "grid"], ["Y"], mode="area"), feeds,
                "mode 'area'")  # fmt: skip
    _node_error(helper.make_node("GridSample", ["X", "grid"], ["Y"], padding_mode="wrap"), feeds,
                "padding_mode 'wrap'")  # fmt: skip
    bad = {"X": x, "grid": np.zeros((1, 2, 2, 3), np.float32)}
    _node_error(helper.make_node("GridSample", ["X", "grid"], ["Y"]), bad, "does not fit")
    ints = {"X": x.astype(np.int32), "grid": g}
    _node_error(helper.make_node("GridSample", ["X", "grid"], ["Y"]), ints, "floating point")
    vol = {
        "X": np.zeros((1, 1, 2, 2, 2), np.float32),
        "grid": np.zeros((1, 1, 1, 1, 3), np.float32),
    }
    _node_error(helper.make_node("GridSample", ["X", "grid"], ["Y"]), vol, "opset 20", opset=16)


# -- RoiAlign ---------------------------------------------------------------------------

ROIS = np.array(
    [
        [0.5, 1.0, 6.3, 7.1],  # inside
        [-3.0, -2.0, 2.5, 3.0],  # partly outside
        [4.2, 4.4, 4.6, 4.5],  # smaller than a pixel
        [7.5, 1.0, 2.0, 6.0],  # inverted
        [1.0, 1.0, 30.0, 20.0],  # far past the edge
        [-10.0, -10.0, -5.0, -4.0],  # wholly outside
    ],
    np.float32,
)
BATCH = np.array([0, 1, 1, 0, -1, 1], np.int64)  # -1: the last image, as the reference reads it


def roi_model(feeds: dict[str, np.ndarray], variants: list[dict[str, Any]], opset: int = 22,
              inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:  # fmt: skip
    nodes = [
        helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], [f"Y{k}"], **kw)
        for k, kw in enumerate(variants)
    ]
    return graph_model(nodes, feeds, [f"Y{k}" for k in range(len(variants))], inits, opset)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
def test_roi_align(mode: str, ctm: str) -> None:
    x = RNG.standard_normal((2, 3, 8, 9)).astype(np.float32)
    feeds = {"X": x, "rois": ROIS, "batch_indices": BATCH}
    variants = [
        dict(sampling_ratio=sr, spatial_scale=scale, output_height=oh, output_width=ow)
        for sr, scale, (oh, ow) in [(2, 1.0, (3, 2)), (1, 0.5, (2, 4)), (3, 0.75, (1, 1))]
    ]
    for kw in variants:
        kw.update(mode=mode, coordinate_transformation_mode=ctm)
    check(roi_model(feeds, variants), feeds)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_adaptive_sampling_with_known_rois(mode: str) -> None:
    """sampling_ratio 0: ceil(roi size / output size) samples, per roi (from 1 to
    several, and none for the inverted roi with half_pixel)."""
    x = RNG.standard_normal((2, 2, 8, 9)).astype(np.float32)
    variants = [
        dict(
            mode=mode,
            coordinate_transformation_mode=ctm,
            sampling_ratio=0,
            spatial_scale=scale,
            output_height=3,
            output_width=2,
        )  # fmt: skip
        for ctm, scale in [("half_pixel", 1.0), ("output_half_pixel", 0.5)]
    ]
    m = roi_model({"X": x}, variants, inits={"rois": ROIS, "batch_indices": BATCH})
    check(m, {"X": x})


def test_roi_align_float64_and_interp() -> None:
    x = RNG.standard_normal((2, 2, 6, 5))
    feeds = {"X": x, "rois": ROIS.astype(np.float64) / 2, "batch_indices": BATCH % 2}
    variants = [dict(mode=m, sampling_ratio=2, output_height=2, output_width=3)
                for m in ("avg", "max")]  # fmt: skip
    check(roi_model(feeds, variants), feeds, target="interp")
    check(roi_model(feeds, variants), feeds)


def test_roi_align_10_is_output_half_pixel() -> None:
    """RoiAlign-10 has no coordinate_transformation_mode: it is the legacy
    ``output_half_pixel`` (the reference reads the opset 16 default instead)."""
    x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
    feeds = {"X": x, "rois": ROIS[:3], "batch_indices": np.zeros(3, np.int64)}
    kw = dict(sampling_ratio=2, output_height=2, output_width=3)
    legacy = dict(kw, coordinate_transformation_mode="output_half_pixel")
    check(roi_model(feeds, [kw], opset=10), feeds, reference=roi_model(feeds, [legacy]))


def test_roi_align_batch_index_out_of_range_fails_when_it_runs() -> None:
    x = RNG.standard_normal((2, 1, 4, 4)).astype(np.float32)
    feeds = {"X": x, "rois": ROIS[:2], "batch_indices": np.array([0, 1], np.int64)}
    fn = so.compile(roi_model(feeds, [dict(sampling_ratio=1)]), target="cpu")
    fn(**feeds)
    with pytest.raises(ExecutionError, match=r"index 2 at position \(1,\).*size 2"):
        fn(X=x, rois=ROIS[:2], batch_indices=np.array([0, 2], np.int64))
    with pytest.raises(ExecutionError, match="index -3"):
        fn(X=x, rois=ROIS[:2], batch_indices=np.array([-3, 0], np.int64))


def test_roi_align_errors() -> None:
    x = np.zeros((1, 1, 4, 4), np.float32)
    feeds = {"X": x, "rois": ROIS[:2], "batch_indices": np.zeros(2, np.int64)}
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], name="ra")
    _node_error(node, feeds, r"(?s)ra.*sampling_ratio 0.*known when compiling")
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], mode="min",
                            sampling_ratio=1)  # fmt: skip
    _node_error(node, feeds, "mode 'min'")
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], sampling_ratio=1)
    bad = dict(feeds, rois=np.zeros((2, 5), np.float32))
    _node_error(node, bad, r"\(num_rois, 4\)")
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], name="ra")
    inits = {"rois": ROIS[:2], "batch_indices": np.array([0, 1], np.int64)}
    _node_error(node, {"X": x}, r"(?s)ra.*index 1 .*out of range", inits=inits)


# -- DeformConv --------------------------------------------------------------------------

DEFORM_CASES = [
    dict(xs=(1, 2, 4, 5), ws=(2, 2, 2, 2)),
    dict(xs=(2, 4, 5, 4), ws=(4, 2, 2, 3), mask=True, bias=True,
         kw=dict(group=2, offset_group=2, pads=[1, 0, 1, 1], strides=[2, 1], dilations=[1, 2])),
    dict(xs=(1, 4, 4, 4), ws=(2, 4, 3, 3), mask=True, kw=dict(offset_group=4, pads=[1, 1, 1, 1])),
    dict(xs=(1, 3, 4, 4), ws=(3, 1, 2, 2), bias=True, kw=dict(group=3)),
]  # fmt: skip


def deform_model(feeds: dict[str, np.ndarray], names: list[str], **kw: Any) -> onnx.ModelProto:
    node = helper.make_node("DeformConv", names, ["Y"], **kw)
    return graph_model([node], {k: v for k, v in feeds.items() if k}, ["Y"])


def deform_feeds(xs: tuple[int, ...], ws: tuple[int, ...], kw: dict[str, Any], mask: bool,
                 bias: bool, spread: float = 1.5) -> tuple[dict[str, np.ndarray], list[str]]:  # fmt: skip
    r = len(xs) - 2
    k = ws[2:]
    pads = kw.get("pads", [0] * 2 * r)
    st, dl = kw.get("strides", [1] * r), kw.get("dilations", [1] * r)
    og = kw.get("offset_group", 1)
    out = [(xs[2 + i] + pads[i] + pads[r + i] - ((k[i] - 1) * dl[i] + 1)) // st[i] + 1
           for i in range(r)]  # fmt: skip
    feeds = {
        "X": RNG.standard_normal(xs).astype(np.float32),
        "W": RNG.standard_normal(ws).astype(np.float32),
        "offset": (RNG.standard_normal((xs[0], og * int(np.prod(k)) * r, *out)) * spread).astype(
            np.float32
        ),
    }
    names = ["X", "W", "offset"]
    if bias or mask:
        names.append("B" if bias else "")
        if bias:
            feeds["B"] = RNG.standard_normal(ws[0]).astype(np.float32)
    if mask:
        names.append("mask")
        feeds["mask"] = RNG.uniform(0, 1, (xs[0], og * int(np.prod(k)), *out)).astype(np.float32)
    return feeds, names


@pytest.mark.parametrize("case", range(len(DEFORM_CASES)))
def test_deform_conv(case: int) -> None:
    c = DEFORM_CASES[case]
    kw = dict(c.get("kw", {}))
    feeds, names = deform_feeds(c["xs"], c["ws"], kw, c.get("mask", False), c.get("bias", False))
    m = deform_model(feeds, names, kernel_shape=list(c["ws"][2:]), **kw)
    check(m, feeds, target="interp" if case == 0 else "cpu")


@pytest.mark.parametrize(
    ("xs", "ws", "kw"),
    [((2, 3, 7), (4, 3, 3), dict(pads=[1, 2], strides=[2], dilations=[2])),
     ((1, 2, 4, 3, 5), (2, 1, 2, 2, 3), dict(group=2, pads=[1, 0, 1, 0, 1, 1]))],
    ids=["1d", "3d"],
)  # fmt: skip
def test_deform_conv_with_zero_offsets_is_conv(xs: tuple, ws: tuple, kw: dict) -> None:
    """The reference runs 2-D inputs only; on other ranks a zero offset samples
    the kernel's own taps, so the result is Conv's."""
    feeds, names = deform_feeds(xs, ws, kw, mask=False, bias=True, spread=0.0)
    m = deform_model(feeds, names, **kw)
    conv = helper.make_node("Conv", ["X", "W", "B"], ["Y"], **kw)
    ref = graph_model([conv], {k: feeds[k] for k in ("X", "W", "B")}, ["Y"])
    want = ReferenceEvaluator(ref).run(None, {k: feeds[k] for k in ("X", "W", "B")})[0]
    (got,) = run(m, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_deform_conv_errors() -> None:
    feeds, names = deform_feeds((1, 2, 4, 4), (2, 2, 2, 2), {}, mask=False, bias=False)
    bad = dict(feeds, offset=np.zeros((1, 8, 2, 2), np.float32))
    node = helper.make_node("DeformConv", names, ["Y"], name="dc")
    _node_error(node, bad, r"(?s)dc.*offset of shape \(1, 8, 2, 2\) should be \(1, 8, 3, 3\)")
    node = helper.make_node("DeformConv", names, ["Y"], group=2)
    _node_error(node, feeds, "do not fit group 2")
    node = helper.make_node("DeformConv", names, ["Y"], offset_group=3)
    _node_error(node, feeds, "offset groups")


def test_errors_are_stripe_errors() -> None:
    assert issubclass(OnnxError, StripeError) and issubclass(ExecutionError, StripeError)
