"""Convolution, pooling and linear-algebra ops (``ops/conv.py``, ``ops/pool.py``,
``ops/linalg.py``) against NumPy references written independently here, on
both targets, for the cases the ONNX node tests cover thinly: groups, 1-D and
3-D, asymmetric padding, ceil mode, broadcasting, realistic sizes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx as so  # noqa: E402
from stripeml.errors import StripeError  # noqa: E402

TARGETS = ["interp", "cpu"]
rng = np.random.default_rng(1234)


def model(op: str, inputs: dict, consts: dict | None = None, n_out: int = 1, **attrs):
    """A one-node model: ``inputs`` become graph inputs, ``consts`` initializers."""
    consts = consts or {}
    names = list(inputs) + list(consts)
    order = attrs.pop("_order", names)
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, order, outs, **attrs)
    vis = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for k, v in inputs.items()
    ]
    ovis = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs]
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    g = helper.make_graph([node], "g", vis, ovis, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def run(m, target, *args):
    return so.compile(m, target=target)(*args)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# -- references -----------------------------------------------------------------


def ref_conv(x, w, b=None, strides=None, dil=None, pads=None, group=1):
    r = x.ndim - 2
    strides = strides or [1] * r
    dil = dil or [1] * r
    pads = pads or [0] * (2 * r)
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[r + i]) for i in range(r)])
    ks = w.shape[2:]
    out = [(xp.shape[2 + i] - (ks[i] - 1) * dil[i] - 1) // strides[i] + 1 for i in range(r)]
    m = w.shape[0]
    cig, cog = x.shape[1] // group, m // group
    y = np.zeros((x.shape[0], m, *out))
    for g in range(group):
        for kk in itertools.product(*[range(k) for k in ks]):
            sl = tuple(
                slice(kk[i] * dil[i], kk[i] * dil[i] + strides[i] * (out[i] - 1) + 1, strides[i])
                for i in range(r)
            )
            xs = xp[(slice(None), slice(g * cig, (g + 1) * cig), *sl)]
            wk = w[(slice(g * cog, (g + 1) * cog), slice(None), *kk)]
            y[:, g * cog : (g + 1) * cog] += np.einsum("nc...,mc->nm...", xs, wk)
    if b is not None:
        y += b.reshape((m,) + (1,) * r)
    return y


def ref_conv_transpose(x, w, strides, pads, out_pad=None, dil=None, group=1):
    r = x.ndim - 2
    dil = dil or [1] * r
    out_pad = out_pad or [0] * r
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    ks = w.shape[2:]
    full = [
        strides[i] * (x.shape[2 + i] - 1) + (ks[i] - 1) * dil[i] + 1 + out_pad[i] for i in range(r)
    ]
    cig, cog = x.shape[1] // group, w.shape[1]
    y = np.zeros((x.shape[0], cog * group, *full))
    for g in range(group):
        for kk in itertools.product(*[range(k) for k in ks]):
            sl = tuple(
                slice(
                    kk[i] * dil[i],
                    kk[i] * dil[i] + strides[i] * (x.shape[2 + i] - 1) + 1,
                    strides[i],
                )
                for i in range(r)
            )
            contrib = np.einsum(
                "nc...,cm->nm...",
                x[:, g * cig : (g + 1) * cig],
                w[(slice(g * cig, (g + 1) * cig), slice(None), *kk)],
            )
            y[(slice(None), slice(g * cog, (g + 1) * cog), *sl)] += contrib
    crop = tuple(slice(pads[i], full[i] - pads[r + i]) for i in range(r))
    return y[(slice(None), slice(None), *crop)]


def ref_pool(x, kind, kernel, strides, pads, dil=None, ceil=False, include_pad=False, p=2):
    """Windows over a NaN-padded copy; NaN taps are outside the input."""
    r = x.ndim - 2
    dil = dil or [1] * r
    ext = [(kernel[i] - 1) * dil[i] + 1 for i in range(r)]
    out = []
    for i in range(r):
        span = x.shape[2 + i] + pads[i] + pads[r + i] - ext[i]
        o = (-(-span // strides[i]) if ceil else span // strides[i]) + 1
        if ceil and (o - 1) * strides[i] >= x.shape[2 + i] + pads[i]:
            o -= 1
        out.append(o)
    extra = [
        max(0, (out[i] - 1) * strides[i] + ext[i] - x.shape[2 + i] - pads[i] - pads[r + i])
        for i in range(r)
    ]
    xp = np.pad(
        x.astype(np.float64),
        [(0, 0), (0, 0)] + [(pads[i], pads[r + i] + extra[i]) for i in range(r)],
        constant_values=np.nan,
    )
    inpad = np.pad(
        np.zeros(x.shape[2:]), [(pads[i], pads[r + i]) for i in range(r)]
    )  # 0 inside input or pads (counted when include_pad)
    inpad = np.pad(inpad, [(0, e) for e in extra], constant_values=1)
    taps, counted = [], []
    for kk in itertools.product(*[range(k) for k in kernel]):
        sl = tuple(
            slice(kk[i] * dil[i], kk[i] * dil[i] + strides[i] * (out[i] - 1) + 1, strides[i])
            for i in range(r)
        )
        taps.append(xp[(slice(None), slice(None), *sl)])
        counted.append(inpad[sl] == 0)
    t = np.stack(taps)
    if kind == "max":
        return np.nanmax(t, axis=0)
    if kind == "lp":
        return np.nansum(np.abs(t) ** p, axis=0) ** (1.0 / p)
    total = np.nansum(t, axis=0)
    n = np.stack(counted).sum(axis=0) if include_pad else (~np.isnan(t)).sum(axis=0)
    return total / n


# -- Conv -----------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "xshape, wshape, attrs",
    [
        ((2, 6, 11), (4, 3, 3), dict(group=2, strides=[2], pads=[2, 1], dilations=[2])),
        ((1, 4, 9, 8), (4, 1, 3, 3), dict(group=4, strides=[2, 1], pads=[1, 0, 2, 1])),
        ((1, 4, 9, 8), (8, 1, 2, 3), dict(group=4, dilations=[2, 1], pads=[0, 1, 1, 0])),
        ((1, 6, 7, 7), (3, 2, 3, 3), dict(group=3, strides=[3, 2], pads=[1, 1, 1, 1])),
        ((2, 3, 5, 6, 4), (4, 3, 2, 3, 2), dict(strides=[1, 2, 1], pads=[1, 0, 1, 0, 1, 1])),
    ],
)
def test_conv_groups_strides_pads(target, xshape, wshape, attrs):
    x, w, b = randn(*xshape), randn(*wshape), randn(wshape[0])
    r = len(xshape) - 2
    m = model("Conv", {"x": x, "w": w, "b": b}, **attrs)
    got = run(m, target, x, w, b)
    want = ref_conv(
        x,
        w,
        b,
        attrs.get("strides"),
        attrs.get("dilations"),
        attrs.get("pads", [0] * 2 * r),
        attrs.get("group", 1),
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad(target, auto_pad):
    x, w = randn(1, 2, 8, 7), randn(3, 2, 4, 3)
    m = model("Conv", {"x": x, "w": w}, auto_pad=auto_pad, strides=[2, 2])
    got = run(m, target, x, w)
    if auto_pad == "VALID":
        pads = [0, 0, 0, 0]
    else:
        pads = []
        for size, k in ((8, 4), (7, 3)):
            out = -(-size // 2)
            total = max(0, (out - 1) * 2 + k - size)
            lo = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            pads.append((lo, total - lo))
        pads = [pads[0][0], pads[1][0], pads[0][1], pads[1][1]]
    want = ref_conv(x, w, None, [2, 2], None, pads)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("weights", ["input", "initializer"])
def test_conv_realistic_size_cpu(weights):
    """1x64x56x56, 3x3, pad 1 (a ResNet-50 stage-1 conv) on the LLVM backend."""
    x, w, b = randn(1, 64, 56, 56), randn(64, 64, 3, 3) * 0.1, randn(64)
    if weights == "input":
        m = model("Conv", {"x": x, "w": w, "b": b}, pads=[1, 1, 1, 1])
        got = run(m, "cpu", x, w, b)
    else:
        m = model("Conv", {"x": x}, {"w": w, "b": b}, pads=[1, 1, 1, 1])
        got = run(m, "cpu", x)
    np.testing.assert_allclose(got, ref_conv(x, w, b, pads=[1, 1, 1, 1]), rtol=1e-4, atol=1e-3)


def test_conv_strided_realistic_cpu():
    """1x256x28x28 -> 512, 1x1 stride 2 (a ResNet-50 downsampling shortcut)."""
    x, w = randn(1, 256, 28, 28), randn(512, 256, 1, 1) * 0.1
    m = model("Conv", {"x": x, "w": w}, strides=[2, 2])
    got = run(m, "cpu", x, w)
    np.testing.assert_allclose(got, ref_conv(x, w, strides=[2, 2]), rtol=1e-4, atol=1e-3)


def test_conv_is_one_contraction():
    x, w, b = randn(1, 4, 8, 8), randn(6, 2, 3, 3), randn(6)
    m = model("Conv", {"x": x, "w": w, "b": b}, group=2, pads=[1, 1, 1, 1])
    src = so.compile(m, target="interp").source(x, w, b)
    body = [s for s in src.splitlines()[1:-1] if s.strip() and not s.strip().startswith("//")]
    assert sum("= +(" in s for s in body) == 1, src


@pytest.mark.parametrize("target", TARGETS)
def test_conv_integer(target):
    x = rng.integers(0, 255, (1, 3, 5, 5)).astype(np.uint8)
    w = rng.integers(0, 255, (4, 3, 3, 3)).astype(np.uint8)
    xz, wz = np.array(7, np.uint8), rng.integers(0, 255, 4).astype(np.uint8)
    m = model("ConvInteger", {"x": x, "w": w, "xz": xz, "wz": wz}, pads=[1, 1, 1, 1])
    got = run(m, target, x, w, xz, wz)
    xi = x.astype(np.int64) - 7
    wi = w.astype(np.int64) - wz.astype(np.int64)[:, None, None, None]
    want = ref_conv(xi, wi, pads=[1, 1, 1, 1]).astype(np.int64)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


# -- ConvTranspose ----------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "xshape, wshape, attrs",
    [
        ((1, 4, 5, 4), (4, 3, 3, 3), dict(group=2, strides=[2, 3], pads=[1, 0, 0, 2])),
        ((2, 2, 4), (2, 3, 3), dict(strides=[2], output_padding=[1], dilations=[2])),
        ((1, 3, 3, 3), (3, 1, 2, 2), dict(group=3, strides=[2, 2])),
        ((1, 2, 3, 2, 3), (2, 2, 2, 2, 2), dict(strides=[1, 2, 2], pads=[0, 1, 0, 0, 0, 1])),
    ],
)
def test_conv_transpose(target, xshape, wshape, attrs):
    x, w = randn(*xshape), randn(*wshape)
    r = len(xshape) - 2
    m = model("ConvTranspose", {"x": x, "w": w}, **attrs)
    got = run(m, target, x, w)
    want = ref_conv_transpose(
        x,
        w,
        attrs.get("strides", [1] * r),
        attrs.get("pads", [0] * 2 * r),
        attrs.get("output_padding"),
        attrs.get("dilations"),
        attrs.get("group", 1),
    )
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# -- pooling --------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "kind, xshape, attrs",
    [
        ("max", (1, 2, 9, 8), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1])),
        ("max", (1, 2, 10), dict(kernel_shape=[3], strides=[3], ceil_mode=1, dilations=[2])),
        ("avg", (2, 1, 7, 6), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        (
            "avg",
            (1, 2, 7, 6),
            dict(kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 1, 0], count_include_pad=1),
        ),
        ("avg", (1, 1, 8, 7), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
        ("avg", (1, 2, 5, 4, 6), dict(kernel_shape=[2, 2, 3], pads=[1, 0, 1, 0, 1, 1])),
        ("lp", (1, 2, 6, 7), dict(kernel_shape=[2, 3], strides=[2, 2], pads=[1, 1, 0, 0], p=3)),
        ("lp", (1, 2, 6, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ],
)
def test_pools(target, kind, xshape, attrs):
    x = randn(*xshape)
    op = {"max": "MaxPool", "avg": "AveragePool", "lp": "LpPool"}[kind]
    r = len(xshape) - 2
    got = run(model(op, {"x": x}, **attrs), target, x)
    want = ref_pool(
        x,
        kind,
        attrs["kernel_shape"],
        attrs.get("strides", [1] * r),
        attrs.get("pads", [0] * 2 * r),
        attrs.get("dilations"),
        bool(attrs.get("ceil_mode", 0)),
        bool(attrs.get("count_include_pad", 0)),
        attrs.get("p", 2),
    )
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("storage_order", [0, 1])
def test_maxpool_indices(target, storage_order):
    x = rng.integers(0, 6, (2, 3, 5, 4)).astype(np.float32)  # with ties
    x[0, 0, 0, 0] = 7.0
    m = model(
        "MaxPool",
        {"x": x},
        n_out=2,
        kernel_shape=[2, 2],
        strides=[2, 1],
        pads=[1, 0, 0, 1],
        storage_order=storage_order,
    )
    y, idx = run(m, target, x)
    np.testing.assert_array_equal(y, ref_pool(x, "max", [2, 2], [2, 1], [1, 0, 0, 1]))
    assert idx.dtype == np.int64
    want = np.zeros(y.shape, np.int64)
    for n, c, oh, ow in itertools.product(*[range(s) for s in y.shape]):
        best = None
        for kh, kw in itertools.product(range(2), range(2)):  # row-major scan, first max wins
            h, w = 2 * oh + kh - 1, ow + kw
            if 0 <= h < 5 and 0 <= w < 4 and (best is None or x[n, c, h, w] > best[0]):
                best = (x[n, c, h, w], h, w)
        _, h, w = best
        want[n, c, oh, ow] = (n * 3 + c) * 20 + (h * 4 + w if storage_order == 0 else w * 5 + h)
    np.testing.assert_array_equal(idx, want)


@pytest.mark.parametrize("target", TARGETS)
def test_maxpool_int(target):
    x = rng.integers(0, 255, (1, 2, 6, 6)).astype(np.uint8)
    got = run(model("MaxPool", {"x": x}, kernel_shape=[2, 2], strides=[2, 2]), target, x)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, x.reshape(1, 2, 3, 2, 3, 2).max(axis=(3, 5)))


@pytest.mark.parametrize("target", TARGETS)
def test_global_pools(target):
    x = randn(2, 3, 4, 5, 2)
    got = run(model("GlobalAveragePool", {"x": x}), target, x)
    np.testing.assert_allclose(
        got, x.mean(axis=(2, 3, 4), keepdims=True), rtol=1e-5, atol=1e-6
    )  # a mean may be near 0
    got = run(model("GlobalMaxPool", {"x": x}), target, x)
    np.testing.assert_array_equal(got, x.max(axis=(2, 3, 4), keepdims=True))


# -- Gemm / MatMul / Einsum ---------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("cshape", [None, (), (5,), (4, 1), (4, 5)])
def test_gemm(target, cshape):
    a, bb = randn(3, 4), randn(5, 3)
    inputs = {"a": a, "b": bb}
    if cshape is not None:
        inputs["c"] = randn(*cshape)
    m = model("Gemm", inputs, transA=1, transB=1, alpha=0.5, beta=-2.0)
    got = run(m, target, *inputs.values())
    want = 0.5 * a.T @ bb.T
    if cshape is not None:
        want = want - 2.0 * inputs["c"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_gemm_constant_transposed_weights(target):
    a, w, c = randn(6, 16), randn(10, 16), randn(10)
    m = model("Gemm", {"a": a}, {"w": w, "c": c}, transB=1)
    np.testing.assert_allclose(run(m, target, a), a @ w.T + c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    ("rows", "cols", "trans_b"), [(1, 1000, 1), (4, 64, 0), (3, 20, 0), (2, 16, 1)]
)
def test_gemm_constant_weights_stay_plain(target, rows, cols, trans_b):
    """Constant weights keep their plain layout in the generated Tile program (the
    target's pipeline, not the frontend, lays them out); NumPy's results either way."""
    a, c = randn(rows, 48), randn(cols)
    w = randn(cols, 48) if trans_b else randn(48, cols)
    m = model("Gemm", {"a": a}, {"w": w, "c": c}, transB=trans_b, alpha=0.5)
    want = 0.5 * (a @ (w.T if trans_b else w)) + c
    np.testing.assert_allclose(run(m, target, a), want, rtol=1e-5, atol=1e-5)
    source = so.compile(m, target=target).source(a)
    assert "jb" not in source and f"[48, {cols}]" in source


def test_cpu_lays_constant_gemm_weights_out_in_tile_panels():
    """On cpu, ``unroll`` lays a 4 x 256 dense layer's constant weights out once, in
    panels of its tile's width: 2 vectors (cpu.toml) of the target's f32 lanes, 4
    with 32 vector registers (AVX-512)."""
    import re

    from stripeml.targets import resolve

    host = resolve("cpu")
    vectors = 4 if host.vector_registers >= 32 else 2
    a, w, c = randn(4, 48), randn(48, 256), randn(256)
    m = model("Gemm", {"a": a}, {"w": w, "c": c})
    f = so.compile(m, target="cpu")
    ir = f.lower(a).ir
    panels = re.search(r"none \w+_panels f32\((\d+), 48, (\d+)\)", ir)
    assert panels is not None, ir
    width = vectors * host.vector_width
    assert int(panels[2]) == width and int(panels[1]) * int(panels[2]) == 256
    np.testing.assert_allclose(f(a), a @ w + c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "ashape, bshape",
    [
        ((3,), (3,)),
        ((3,), (2, 3, 4)),
        ((2, 1, 4, 3), (3,)),
        ((2, 1, 4, 3), (5, 3, 2)),
        ((1, 4, 3), (2, 1, 3, 6)),
        ((4, 3), (3, 6)),
    ],
)
def test_matmul_broadcasting(target, ashape, bshape):
    a, bb = randn(*ashape), randn(*bshape)
    got = run(model("MatMul", {"a": a, "b": bb}), target, a, bb)
    want = np.matmul(a, bb)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_matmul_realistic_cpu():
    a, bb = randn(8, 196, 384), randn(384, 512)
    got = run(model("MatMul", {"a": a}, {"b": bb}), "cpu", a)
    np.testing.assert_allclose(got, a.astype(np.float64) @ bb, rtol=1e-4, atol=1e-3)


def test_matmul_int64():
    a = rng.integers(-5, 5, (3, 4)).astype(np.int64)
    bb = rng.integers(-5, 5, (4, 2)).astype(np.int64)
    for target in TARGETS:
        np.testing.assert_array_equal(
            run(model("MatMul", {"a": a, "b": bb}), target, a, bb), a @ bb
        )


@pytest.mark.parametrize("target", TARGETS)
def test_matmul_integer(target):
    a = rng.integers(0, 255, (4, 3)).astype(np.uint8)
    bb = rng.integers(0, 255, (3, 5)).astype(np.uint8)
    az = rng.integers(0, 255, 4).astype(np.uint8)
    bz = rng.integers(0, 255, 5).astype(np.uint8)
    got = run(model("MatMulInteger", {"a": a, "b": bb, "az": az, "bz": bz}), target, a, bb, az, bz)
    want = (a.astype(np.int64) - az[:, None]) @ (bb.astype(np.int64) - bz)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "eq, shapes",
    [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("ij,jk", [(3, 4), (4, 5)]),
        ("ii->i", [(4, 4)]),
        ("ii", [(4, 4)]),
        ("bij,bjk->bki", [(2, 3, 4), (2, 4, 5)]),
        ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
        ("i,j,k->ijk", [(2,), (3,), (4,)]),
        ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)]),
        ("i,i", [(5,), (5,)]),
        ("Ab...->...A", [(2, 3, 4, 5)]),
    ],
)
def test_einsum(target, eq, shapes):
    xs = [randn(*s) for s in shapes]
    inputs = {f"x{i}": x for i, x in enumerate(xs)}
    got = run(model("Einsum", inputs, equation=eq), target, *xs)
    want = np.einsum(eq, *[x.astype(np.float64) for x in xs])
    assert np.shape(got) == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- BatchNormalization -------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("params", ["input", "initializer"])
def test_batchnorm(target, params):
    x = randn(2, 3, 4, 5)
    scale, bias, mean = randn(3), randn(3), randn(3)
    var = rng.uniform(0.5, 2.0, 3).astype(np.float32)
    p = {"s": scale, "bias": bias, "mean": mean, "var": var}
    if params == "input":
        m = model("BatchNormalization", {"x": x, **p}, epsilon=1e-3)
        got = run(m, target, x, scale, bias, mean, var)
    else:
        m = model("BatchNormalization", {"x": x}, p, epsilon=1e-3)
        got = run(m, target, x)
    c = (slice(None), None, None)
    want = (x - mean[c]) / np.sqrt(var[c] + 1e-3) * scale[c] + bias[c]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- errors -------------------------------------------------------------------------


def test_batchnorm_training_mode_is_rejected():
    x = randn(2, 3, 4)
    p = {k: randn(3) for k in ("s", "bias", "mean", "var")}
    m = model("BatchNormalization", {"x": x}, p, training_mode=1)
    with pytest.raises(StripeError, match="training mode is not supported"):
        run(m, "interp", x)


def test_conv_errors():
    x, w = randn(1, 4, 5, 5), randn(4, 3, 3, 3)
    with pytest.raises(StripeError, match="input channels"):
        run(model("Conv", {"x": x, "w": w}), "interp", x, w)
    w = randn(4, 4, 3, 3)
    with pytest.raises(StripeError, match="auto_pad"):
        run(model("Conv", {"x": x, "w": w}, auto_pad="SAME"), "interp", x, w)
    xi = x.astype(np.int32)
    with pytest.raises(StripeError, match="floating point"):
        run(model("Conv", {"x": xi, "w": w.astype(np.int32)}), "interp", xi, w.astype(np.int32))


def test_einsum_errors():
    a, bb = randn(3, 4), randn(5, 6)
    with pytest.raises(StripeError, match="label 'j' has sizes"):
        run(model("Einsum", {"a": a, "b": bb}, equation="ij,jk->ik"), "interp", a, bb)
    with pytest.raises(StripeError, match="not in any input"):
        run(model("Einsum", {"a": a}, equation="ij->iz"), "interp", a)


def test_dropout_keeps_the_channels_last_layout():
    """Conv -> Dropout -> Conv: the inference-time Dropout passes the NHWC image
    through, so the program transposes only the graph's input and output."""
    x, w1, w2 = randn(1, 3, 6, 6), randn(8, 3, 3, 3), randn(4, 8, 1, 1)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
        helper.make_node("Dropout", ["h"], ["d"]),
        helper.make_node("Conv", ["d", "w2"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h = sum(
        np.einsum("nchw,oc->nohw", xp[:, :, a : a + 6, b : b + 6], w1[:, :, a, b])
        for a in range(3)
        for b in range(3)
    )
    want = np.einsum("nchw,oc->nohw", h, w2[:, :, 0, 0])
    for target in TARGETS:
        np.testing.assert_allclose(run(m, target, x), want, rtol=1e-4, atol=1e-4)
    source = so.compile(m, target="interp").source(x)
    assert source.count("= =(") == 2, source  # NCHW -> NHWC in, NHWC -> NCHW out
