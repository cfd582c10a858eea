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
"""

from __future__ import annotations

import numpy as np

from ..builder import Builder, Node, Value, tile_dtype
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
        if out and zp.dtype != dtype:
            raise n.error(f"output_dtype {dtype} and the zero point's type {zp.dtype} differ")
        dtype = zp.dtype
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


@op("DequantizeLinear")
def dequantize_linear(b: Builder, n: Node) -> list[Value | None]:
    """DequantizeLinear: (x - zero_point) * scale in float32, as the scale's type (or output_dtype)."""
    x, scale, zp = n.input(0), n.input(1), n.opt(2)
    if x.dtype not in RANGES and x.dtype != np.int32:
        raise n.error(
            f"input type {x.dtype} is not supported (uint8, int8, uint16, int16 and int32 are; "
            "float8, float4 and int4 have no Stripe dtype)"
        )
    if scale.dtype.kind != "f":
        raise n.error(f"the scale must be floating point, got {scale.dtype}")
    if zp is not None and zp.dtype != x.dtype:
        raise n.error(f"the zero point's type {zp.dtype} differs from the input's {x.dtype}")
    out = n.attr("output_dtype", 0)
    dtype = _onnx_type(n, out, "output_dtype") if out else scale.dtype
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
