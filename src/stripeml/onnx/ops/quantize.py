"""Linear quantisation: QuantizeLinear and DequantizeLinear, elementwise in Tile.

``QuantizeLinear``: ``y = saturate(round(x / scale) + zero_point)``, rounding
half to even, saturating to the output type's range (uint8, int8, uint16,
int16).  ``DequantizeLinear``: ``y = (x - zero_point) * scale``, computed in
float32 and given the scale's type (or ``output_dtype``), as the ONNX
reference computes it.

The scale and zero point are one value for the whole tensor, one per element
of ``axis`` (per channel), or, with ``block_size``, one per block of
``block_size`` elements along ``axis``; each is brought to the input's rank
(a constant is reshaped or repeated when compiling; a value computed at run
time is expanded by a contraction whose output index is ``block * j + t``).
The float8, float4 and int4 types have no Stripe dtype and are refused.

``QLinearMatMul`` and ``QLinearConv`` are ``MatMulInteger`` and ``ConvInteger``
(int32 accumulators, zero points subtracted) rescaled by
``x_scale * w_scale / y_scale`` and requantised, in float64 as the ONNX
reference computes them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..builder import Builder, Node, Value, tile_dtype
from ..narrow import round_to
from ..narrow_types import FORMATS, is_narrow
from ..registry import op
from ._util import axis as norm_axis
from ._util import cast, indices, literal
from .shape import reshape

#: The integer types a quantised tensor may have, with their ranges.
RANGES = {
    np.dtype(np.uint8): (0, 255),
    np.dtype(np.int8): (-128, 127),
    np.dtype(np.uint16): (0, 65535),
    np.dtype(np.int16): (-32768, 32767),
}


def _onnx_type(n: Node, code: object, what: str) -> np.dtype:
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(int(code)))  # type: ignore[call-overload]
    except Exception:  # noqa: BLE001 - unknown enum values, types NumPy lacks
        raise n.error(f"{what} {code} is not supported") from None


def _quantised(n: Node, dtype: np.dtype, what: str) -> np.dtype:
    if dtype not in RANGES:
        raise n.error(
            f"{what} {dtype} is not supported (uint8, int8, uint16 and int16 are; "
            "float8, float4 and int4 have no Stripe dtype)"
        )
    return dtype


def along(b: Builder, n: Node, v: Value, shape: tuple[int, ...], what: str) -> Value:
    """``v`` (a scale or zero point) brought to ``len(shape)`` dimensions so that it
    broadcasts against a tensor of ``shape`` as the node's ``axis`` and
    ``block_size`` say."""
    rank = len(shape)
    block = int(n.attr("block_size", 0) or 0)
    if v.rank == 0 or (v.size == 1 and v.rank == 1 and not block):
        return v if v.rank == 0 else reshape(b, v, ())
    ax = norm_axis(n, int(n.attr("axis", 1)), rank)
    if not block:
        if v.rank != 1 or v.shape[0] != shape[ax]:
            raise n.error(
                f"{what} of shape {list(v.shape)} must be a scalar or hold one value per "
                f"element of axis {ax} ({shape[ax]})"
            )
        dims = [1] * rank
        dims[ax] = shape[ax]
        return reshape(b, v, dims)
    if block < 0:
        raise n.error(f"block_size must be positive, got {block}")
    want = list(shape)
    want[ax] = -(-shape[ax] // block)
    if list(v.shape) != want:
        raise n.error(
            f"{what} of shape {list(v.shape)} does not match blocks of {block} along axis "
            f"{ax} of an input of shape {list(shape)} (expected {want})"
        )
    if v.const is not None:
        arr = np.repeat(v.const, block, axis=ax).take(range(shape[ax]), axis=ax)
        return Value("", arr.shape, arr.dtype, arr)
    idx = indices(rank)
    out = list(idx)
    out[ax] = f"{block} * {idx[ax]} + t"
    sizes = ", ".join(str(s) for s in shape)
    text = f"{{out}}[{', '.join(out)} : {sizes}] = =({b.ref(v)}[{', '.join(idx)}]), t < {block}"
    return b.contraction(text, shape, v.dtype)


@op("QuantizeLinear")
def quantize_linear(b: Builder, n: Node) -> list[Value | None]:
    """QuantizeLinear: saturate(round(x / scale) + zero_point) to (u)int8/16; per tensor, axis or block."""
    x, scale, zp = n.input(0), n.input(1), n.opt(2)
    if x.dtype.kind != "f" or scale.dtype.kind != "f":
        raise n.error(f"input and scale must be floating point, got {x.dtype} and {scale.dtype}")
    out = n.attr("output_dtype", 0)
    dtype = _onnx_type(n, out, "output_dtype") if out else np.dtype(np.uint8)
    if zp is not None:
        zdt = zp.narrow or zp.dtype
        if out and zdt != dtype:
            raise n.error(f"output_dtype {dtype} and the zero point's type {zdt} differ")
        dtype = zdt
    if is_narrow(dtype):
        return [_quantize_narrow(b, n, x, scale, zp, dtype)]
    dtype = _quantised(n, dtype, "output type")
    precision = n.attr("precision", 0)
    work = _onnx_type(n, precision, "precision") if precision else x.dtype
    tile_dtype(work)
    s = along(b, n, scale, x.shape, "the scale")
    X, S = b.ref(x), b.ref(s)
    if work != x.dtype:
        X = cast(X, work)
    if work != s.dtype:
        S = cast(S, work)
    q = b.eltwise(f"round({X} / {S})", x.shape, work)
    # in float32 (exact for these ranges): the sum cannot overflow, and the
    # clamp saturates what the reference's int32 arithmetic would
    expr = cast(b.ref(q), np.dtype(np.float32))
    if zp is not None:
        z = along(b, n, zp, x.shape, "the zero point")
        expr = f"{expr} + {cast(b.ref(z), np.dtype(np.float32))}"
    lo, hi = RANGES[dtype]
    f32 = np.dtype(np.float32)
    clamped = f"max(min({expr}, {literal(hi, f32)}), {literal(lo, f32)})"
    return [b.eltwise(cast(clamped, dtype), x.shape, dtype)]


def _quantize_narrow(
    b: Builder, n: Node, x: Value, scale: Value, zp: Value | None, dtype: np.dtype
) -> Value:
    """QuantizeLinear to a narrow type, as the reference: float8 ``x / scale``
    converted (``saturate``, default on: clamped to the largest value), float4 with
    the zero point added, the narrow integers rounded half to even, offset and
    clamped to their range."""
    s = along(b, n, scale, x.shape, "the scale")
    fmt = FORMATS[dtype]
    ratio = b.eltwise(f"{b.ref(x)} / {b.ref(s)}", x.shape, x.dtype)
    if fmt.kind == "int":
        import ml_dtypes

        info = ml_dtypes.iinfo(dtype)
        f32 = np.dtype(np.float32)
        expr = f"round({cast(b.ref(ratio), f32)})"
        if zp is not None:
            expr = f"{expr} + {cast(b.ref(along(b, n, zp, x.shape, 'the zero point')), f32)}"
        lo, hi = literal(int(info.min), f32), literal(int(info.max), f32)
        clamped = b.eltwise(f"max(min({expr}, {hi}), {lo})", x.shape, f32)
        return round_to(b, clamped, dtype)
    if fmt.overflow == "max" and zp is not None:  # float4: the zero point is added
        z = along(b, n, zp, x.shape, "the zero point")
        ratio = b.eltwise(f"{b.ref(ratio)} + {b.ref(z)}", x.shape, x.dtype)
    return round_to(b, ratio, dtype, bool(n.attr("saturate", 1)))


@op("DequantizeLinear")
def dequantize_linear(b: Builder, n: Node) -> list[Value | None]:
    """DequantizeLinear: (x - zero_point) * scale in float32, as the scale's type (or output_dtype)."""
    x, scale, zp = n.input(0), n.input(1), n.opt(2)
    if x.narrow is not None and FORMATS[x.narrow].kind != "int":
        zp = None  # float8 and float4 have no zero point (the reference ignores it)
    if x.narrow is None and x.dtype not in RANGES and x.dtype != np.int32:
        raise n.error(
            f"input type {x.dtype} is not supported (uint8, int8, uint16, int16 and int32 are; "
            "float8, float4 and int4 have no Stripe dtype)"
        )
    if scale.dtype.kind != "f":
        raise n.error(f"the scale must be floating point, got {scale.dtype}")
    if zp is not None and (zp.narrow or zp.dtype) != (x.narrow or x.dtype):
        raise n.error(f"the zero point's type {zp.dtype} differs from the input's {x.dtype}")
    out = n.attr("output_dtype", 0)
    dtype = _onnx_type(n, out, "output_dtype") if out else (scale.narrow or scale.dtype)
    if is_narrow(dtype):  # a bfloat16 scale: computed in float32, then rounded
        wide = replace(n, attrs={**n.attrs, "output_dtype": 1})
        return [round_to(b, dequantize_linear(b, wide)[0], dtype)]  # type: ignore[arg-type]
    f32 = np.dtype(np.float32)
    expr = cast(b.ref(x), f32)
    if zp is not None:
        z = along(b, n, zp, x.shape, "the zero point")
        expr = f"({expr} - {cast(b.ref(z), f32)})"
    s = along(b, n, scale, x.shape, "the scale")
    expr = f"{expr} * {cast(b.ref(s), f32) if s.dtype != f32 else b.ref(s)}"
    if dtype != f32:
        expr = cast(f"({expr})", dtype)
    return [b.eltwise(expr, x.shape, dtype)]


def requantize(
    b: Builder, n: Node, acc: Value, multiplier: Value, zp: Value | None, dtype: np.dtype
) -> Value:
    """``saturate(round(acc * multiplier + zp))`` as ``dtype``: an int32 accumulator
    rescaled in float64, as the ONNX reference does (int32 times float32 is float64
    in NumPy)."""
    f64 = np.dtype(np.float64)
    expr = f"{cast(b.ref(acc), f64)} * {cast(b.ref(multiplier), f64)}"
    if zp is not None:
        expr = f"{expr} + {cast(b.ref(zp), f64)}"
    lo, hi = RANGES[dtype]
    clamped = f"max(min(round({expr}), {literal(hi, f64)}), {literal(lo, f64)})"
    return b.eltwise(cast(clamped, dtype), acc.shape, dtype)


def _multiplier(b: Builder, n: Node, scales: list[Value], shape: tuple[int, ...]) -> Value:
    """``s0 * s1 / s2`` in float32 (a per-channel ``s1`` along axis 1 of ``shape``)."""
    for s in scales:
        if s.dtype != np.float32:
            raise n.error(f"scales must be float32, got {s.dtype}")
    a, w, y = scales
    if w.size > 1:
        dims = [1] * len(shape)
        dims[1 if len(shape) > 2 else len(shape) - 1] = w.size
        w = reshape(b, w, dims)
    else:
        w = reshape(b, w, ())
    a, y = reshape(b, a, ()), reshape(b, y, ())
    return b.eltwise(f"{b.ref(a)} * {b.ref(w)} / {b.ref(y)}", w.shape, np.float32)


def out_type(n: Node, x: Value, zp: Value | None) -> np.dtype:
    return _quantised(n, zp.dtype if zp is not None else x.dtype, "output type")


@op("QLinearMatMul")
def qlinear_matmul(b: Builder, n: Node) -> list[Value | None]:
    """QLinearMatMul: an int32 MatMulInteger rescaled to (u)int8 (a_scale * b_scale / y_scale)."""
    from .linalg import matmul_integer

    a, sa, za, w, sw, zw, sy, zy = (n.opt(i) for i in range(8))
    if a is None or sa is None or w is None or sw is None or sy is None:
        raise n.error("needs a, a_scale, b, b_scale and y_scale")
    inner = replace(n, op_type="MatMulInteger", inputs=(a, w, za, zw), attrs={}, n_outputs=1)
    acc = matmul_integer(b, inner)[0]
    assert acc is not None
    if sw.size > 1 and (sw.rank != 1 or sw.shape[0] != acc.shape[-1]):
        raise n.error(f"b_scale of shape {list(sw.shape)} must be a scalar or one per column")
    dims = [1] * acc.rank
    if sw.size > 1:
        dims[-1] = sw.size
    if sa.dtype.kind != "f" or sw.dtype != sa.dtype or sy.dtype != sa.dtype:
        raise n.error(
            f"the scales must share one float type, got {sa.dtype}, {sw.dtype}, {sy.dtype}"
        )
    mult = b.eltwise(  # in the scales' type, as the reference multiplies them
        f"{b.ref(reshape(b, sa, ()))} * {b.ref(reshape(b, sw, dims if sw.size > 1 else ()))}"
        f" / {b.ref(reshape(b, sy, ()))}",
        tuple(dims) if sw.size > 1 else (),
        sa.dtype,
    )
    zy_s = reshape(b, zy, ()) if zy is not None else None
    return [requantize(b, n, acc, mult, zy_s, out_type(n, a, zy))]


@op("QLinearConv")
def qlinear_conv(b: Builder, n: Node) -> list[Value | None]:
    """QLinearConv: an int32 ConvInteger plus the int32 bias, rescaled to (u)int8 (per-channel w_scale too)."""
    from .conv import conv_integer

    x, sx, zx, w, sw, zw, sy, zy = (n.opt(i) for i in range(8))
    bias = n.opt(8)
    if x is None or sx is None or w is None or sw is None or sy is None:
        raise n.error("needs x, x_scale, w, w_scale and y_scale")
    inner = replace(n, op_type="ConvInteger", inputs=(x, w, zx, zw), n_outputs=1)
    acc = conv_integer(b, inner)[0]
    assert acc is not None
    if bias is not None:
        if bias.dtype != np.int32 or bias.shape != (w.shape[0],):
            raise n.error(
                f"the bias must be int32 with one value per output channel ({w.shape[0]})"
            )
        dims = [1] * acc.rank
        dims[1] = w.shape[0]
        acc = b.eltwise(f"{b.ref(acc)} + {b.ref(reshape(b, bias, dims))}", acc.shape, np.int32)
    if sw.size > 1 and sw.shape != (w.shape[0],):
        raise n.error(f"w_scale of shape {list(sw.shape)} must be a scalar or one per channel")
    mult = _multiplier(b, n, [sx, sw, sy], acc.shape)
    zy_s = reshape(b, zy, ()) if zy is not None else None
    return [requantize(b, n, acc, mult, zy_s, out_type(n, x, zy))]


def quantize_tail(b: Builder, node: Node, y: Value, first: int) -> Value:
    """``y`` (float) through the ``Relu`` and ``QuantizeLinear`` folded into
    ``node`` (see :func:`fused_quantize`), written as the model writes them (the
    scale and zero point are scalars, so ``y`` may be stored in any layout);
    ``y`` itself when nothing is folded."""
    if len(node.inputs) <= first or node.opt(first) is None:
        return y
    if node.attr("_relu", 0):
        y = b.eltwise(f"relu({b.ref(y)})", y.shape, y.dtype)
    q = replace(
        node,
        op_type="QuantizeLinear",
        inputs=(y, *(rank0(b, node.opt(i)) for i in (first, first + 1))),
        attrs={},
        n_outputs=1,
    )
    out = quantize_linear(b, q)[0]
    assert out is not None
    return out


def rank0(b: Builder, v: Value | None) -> Value | None:
    """A one-value scale or zero point as a scalar (a laid-out elementwise node's
    constants arrive at the node's rank)."""
    if v is None or v.rank == 0 or v.size != 1:
        return v
    return reshape(b, v, ())


@op("_QConv")
def qconv(b: Builder, n: Node) -> list[Value | None]:
    """_QConv: a Conv of DequantizeLinear'd input and weights (internal, from
    :func:`~stripeml.onnx.qdq.fuse_qdq`) where the channels-last integer form does
    not apply: the dequantised values convolved as the model writes them."""
    from .conv import conv
    from .integer import dequantized_conv

    y = conv(b, dequantized_conv(b, n, dequantize_linear))[0]
    assert y is not None
    return [quantize_tail(b, n, y, 7)]
