"""bfloat16, float8, float4 and the narrow integers (onnx/narrow.py): casts round
exactly as ml_dtypes converts, on random bit patterns and the edge values of
each format; arithmetic on narrow tensors rounds each result as ml_dtypes'
NumPy arithmetic does; values cross the program's boundary as ml_dtypes arrays."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import stripeml  # noqa: E402
import stripeml.onnx  # noqa: E402

RNG = np.random.default_rng(21)
FLOATS = {
    "bfloat16": T.BFLOAT16,
    "float8_e4m3fn": T.FLOAT8E4M3FN,
    "float8_e4m3fnuz": T.FLOAT8E4M3FNUZ,
    "float8_e5m2": T.FLOAT8E5M2,
    "float8_e5m2fnuz": T.FLOAT8E5M2FNUZ,
    "float4_e2m1fn": T.FLOAT4E2M1,
}
INTS = {"int4": T.INT4, "uint4": T.UINT4, "int2": T.INT2, "uint2": T.UINT2}
TARGETS = ["cpu", "interp"]


def _cast_model(src, dst, shape, saturate=None):
    attrs = {"to": dst}
    if saturate is not None:
        attrs["saturate"] = saturate
    node = h.make_node("Cast", ["X"], ["Y"], **attrs)
    g = h.make_graph(
        [node],
        "cast",
        [h.make_tensor_value_info("X", src, shape)],
        [h.make_tensor_value_info("Y", dst, shape)],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)])


def _samples() -> np.ndarray:
    """Random float32 bit patterns (every exponent), and the edges: zeros,
    infinities, NaN, ties and the largest values of the narrow formats."""
    bits = RNG.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32)
    wide = bits.view(np.float32)
    small = (RNG.standard_normal(2000) * np.exp2(RNG.integers(-20, 20, 2000))).astype(np.float32)
    edges = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 448, 464, 480, 240, 248, 57344, 61440, 6, 7, 0.25,
         0.75, 2.5, 1e-10, -1e-10, 3.0e38, 1.0009765625, 1.00390625],
        np.float32,
    )  # fmt: skip
    return np.concatenate([wide, small, edges, -edges])


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal as the narrow type's bytes (NaNs equal whatever their payload)."""
    assert got.dtype == want.dtype
    g, w = got.astype(np.float32), want.astype(np.float32)
    both_nan = np.isnan(g) & np.isnan(w)
    assert np.array_equal(np.signbit(g[~both_nan]), np.signbit(w[~both_nan]))
    np.testing.assert_array_equal(g[~both_nan], w[~both_nan])
    assert not (np.isnan(g) ^ np.isnan(w)).any()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(FLOATS))
def test_casts_from_float32_round_as_ml_dtypes(target, name):
    x = _samples()
    dtype = np.dtype(getattr(ml_dtypes, name))
    model = _cast_model(T.FLOAT, FLOATS[name], x.shape, saturate=0 if "float8" in name else None)
    got = stripeml.onnx.compile(model, target=target)(X=x)
    _same(got, x.astype(dtype))
    back = stripeml.onnx.compile(_cast_model(FLOATS[name], T.FLOAT, x.shape), target=target)
    _same(back(X=got), got.astype(np.float32))


@pytest.mark.parametrize("name", [n for n in FLOATS if "float8" in n])
def test_saturating_casts_to_float8_clamp_as_onnx_does(name):
    x = _samples()
    dtype = np.dtype(getattr(ml_dtypes, name))
    got = stripeml.onnx.compile(_cast_model(T.FLOAT, FLOATS[name], x.shape, 1), target="cpu")(X=x)
    _same(got, nh.saturate_cast(x, dtype))


@pytest.mark.parametrize("name", list(INTS))
def test_casts_to_narrow_integers_truncate_and_wrap(name):
    x = np.concatenate([_samples()[4000:], np.arange(-40, 40, 0.5, dtype=np.float32)])
    dtype = np.dtype(getattr(ml_dtypes, name))
    got = stripeml.onnx.compile(_cast_model(T.FLOAT, INTS[name], x.shape), target="cpu")(X=x)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.astype(np.int32), x.astype(dtype).astype(np.int32))
    ints = np.arange(-300, 300, 7, dtype=np.int32)
    model = _cast_model(T.INT32, INTS[name], ints.shape)
    got = stripeml.onnx.compile(model, target="cpu")(X=ints)
    np.testing.assert_array_equal(got.astype(np.int32), ints.astype(dtype).astype(np.int32))


def test_bfloat16_arithmetic_rounds_each_result():
    """Mul then Add on bfloat16 tensors: each result rounded to bfloat16, as
    NumPy computes with ml_dtypes arrays; a MatMul too."""
    bf = np.dtype(ml_dtypes.bfloat16)
    nodes = [
        h.make_node("Mul", ["A", "B"], ["m"]),
        h.make_node("Add", ["m", "A"], ["s"]),
        h.make_node("MatMul", ["s", "W"], ["Y"]),
    ]
    w = RNG.standard_normal((6, 3)).astype(bf)
    g = h.make_graph(
        nodes,
        "bf16",
        [
            h.make_tensor_value_info("A", T.BFLOAT16, [4, 6]),
            h.make_tensor_value_info("B", T.BFLOAT16, [4, 6]),
        ],
        [h.make_tensor_value_info("Y", T.BFLOAT16, [4, 3])],
        [nh.from_array(w, "W")],
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    a = RNG.standard_normal((4, 6)).astype(bf)
    b = RNG.standard_normal((4, 6)).astype(bf)
    got = stripeml.onnx.compile(model, target="cpu")(A=a, B=b)
    assert got.dtype == bf
    s = a * b + a  # ml_dtypes: each operation rounded to bfloat16
    # the product's sum runs in float32 (its order is the compiler's), then rounds once
    want = (s.astype(np.float32) @ w.astype(np.float32)).astype(bf)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=8e-3)
    mid = stripeml.onnx.compile(
        h.make_model(
            h.make_graph(
                nodes[:2],
                "mid",
                g.input,
                [h.make_tensor_value_info("s", T.BFLOAT16, [4, 6])],
            ),
            opset_imports=[h.make_opsetid("", 21)],
        ),
        target="cpu",
    )(A=a, B=b)
    np.testing.assert_array_equal(mid.astype(np.float32), s.astype(np.float32))


def test_quantize_to_float8_and_back():
    x = (RNG.standard_normal(64) * 300).astype(np.float32)
    scale = np.array(2.0, np.float32)
    zp = np.zeros((), ml_dtypes.float8_e4m3fn)
    nodes = [
        h.make_node("QuantizeLinear", ["X", "S", "Z"], ["q"]),
        h.make_node("DequantizeLinear", ["q", "S", "Z"], ["Y"]),
    ]
    g = h.make_graph(
        nodes,
        "q8",
        [h.make_tensor_value_info("X", T.FLOAT, x.shape)],
        [
            h.make_tensor_value_info("q", T.FLOAT8E4M3FN, x.shape),
            h.make_tensor_value_info("Y", T.FLOAT, x.shape),
        ],
        [nh.from_array(scale, "S"), nh.from_array(zp, "Z")],
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    q, y = stripeml.onnx.compile(model, target="cpu")(X=x)
    want = nh.saturate_cast(x / scale, np.dtype(ml_dtypes.float8_e4m3fn))
    _same(q, want)
    np.testing.assert_array_equal(y, want.astype(np.float32) * scale)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_casts_to_float8_e8m0_as_onnx_converts(target, mode, saturate):
    x = _samples()
    node = h.make_node("Cast", ["X"], ["Y"], to=T.FLOAT8E8M0, saturate=saturate, round_mode=mode)
    g = h.make_graph(
        [node],
        "e8m0",
        [h.make_tensor_value_info("X", T.FLOAT, x.shape)],
        [h.make_tensor_value_info("Y", T.FLOAT8E8M0, x.shape)],
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 25)])
    got = stripeml.onnx.compile(model, target=target)(X=x)
    _same(got, nh.to_float8e8m0(x, bool(saturate), mode))
