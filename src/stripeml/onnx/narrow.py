"""Narrow element types: bfloat16, the float8 and float4 formats, int4/uint4/int2/uint2.

(float8 E8M0, a power of two, converts as onnx's ``to_float8e8m0`` with its
``round_mode``.)

Stripe has no dtype for these.  The importer keeps each such tensor *as a wider
Tile type holding exactly its values*: the floating formats as float32 (every
bfloat16, float8 and float4 value is a float32), the narrow integers as int8 or
uint8.  The ONNX type travels beside the value (:attr:`~.builder.Value.narrow`).
Values enter and leave the program through ``ml_dtypes`` arrays, converted
exactly on the host (``astype``), and become narrow where ONNX makes them so:

* a ``Cast`` (``CastLike``, ``QuantizeLinear``) to a narrow type rounds in the
  program, as ``ml_dtypes`` converts: to nearest, ties to even, with each
  format's overflow rule (bfloat16 and float8 E5M2 to infinity, the other
  float8 formats to NaN, float4 E2M1 saturates; ``saturate=1`` casts to float8
  clamp to the largest finite value as ``onnx.numpy_helper.saturate_cast``
  does); the integers truncate toward zero and wrap;
* any other operator given narrow inputs computes in the wide type and rounds
  its results back to the narrow type, which is what ``ml_dtypes`` does for
  NumPy's arithmetic on these arrays (:func:`narrowed`, which
  ``importer.run_node`` applies to every operator not in :data:`NARROW_AWARE`).

The rounding is elementwise Tile (bit casts, shifts, ``round``), so it fuses
with whatever computes the value.  Memory is the wide type's: a bfloat16
model's activations take float32's space inside the program.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .builder import Builder, Value
from .narrow_types import FORMATS, Format, wide_dtype

__all__ = ["MOVES_DATA", "NARROW_AWARE", "narrowed", "round_array", "round_to"]


def round_array(
    arr: np.ndarray, dtype: np.dtype, saturate: bool = False, mode: str = "up"
) -> np.ndarray:
    """``arr`` rounded to ``dtype`` as ``ml_dtypes`` (or, with ``saturate``, onnx's
    ``saturate_cast``; for float8 E8M0, onnx's ``to_float8e8m0`` with rounding
    ``mode``) converts, held in the wide type: the folding counterpart of
    :func:`round_to`."""
    fmt = FORMATS[np.dtype(dtype)]
    x = np.asarray(arr)
    if fmt.kind == "e8m0":
        from onnx.numpy_helper import to_float8e8m0

        return np.asarray(to_float8e8m0(x, saturate, mode)).astype(fmt.wide)
    if saturate and fmt.kind == "float":
        from onnx.numpy_helper import saturate_cast

        return np.asarray(saturate_cast(x, fmt.dtype)).astype(fmt.wide)
    return x.astype(fmt.dtype).astype(fmt.wide)


def round_to(
    b: Builder, v: Value, dtype: np.dtype, saturate: bool = False, mode: str = "up"
) -> Value:
    """``v`` (a float or integer tensor) rounded to the narrow type ``dtype``, as a
    Tile tensor of the wide type marked ``narrow=dtype`` (``mode``: float8 E8M0's
    rounding, ``up``, ``down`` or ``nearest``)."""
    fmt = FORMATS[np.dtype(dtype)]
    if v.const is not None:
        arr = round_array(np.asarray(v.const), fmt.dtype, saturate, mode)
        return Value("", arr.shape, arr.dtype, arr, narrow=fmt.dtype)
    if fmt.kind == "int":
        expr = _wrap_int(b, v, fmt)
    elif fmt.kind == "e8m0":
        expr = _e8m0(b, v, saturate, mode)
    elif fmt.kind == "bf16":
        expr = _bf16(b, v)
    else:
        expr = _small_float(b, v, fmt, saturate)
    return replace(b.eltwise(expr, v.shape, fmt.wide), narrow=fmt.dtype)


def _f32(b: Builder, v: Value) -> str:
    x = b.ref(b.logical(v))
    return x if v.dtype == np.float32 else f"as_float({x}, 32)"


def _bf16(b: Builder, v: Value) -> str:
    """Round to nearest even on the float32 bits (NaN kept, infinities stay)."""
    x = b.eltwise(_f32(b, v), v.shape, np.float32)
    X = b.ref(x)
    u = f"bitcast_uint({X}, 32)"
    rounded = f"bitcast_float(({u} + 32767 + (({u} >> 16) & 1)) & 4294901760, 32)"
    return f"{X} != {X} ? {X} : {rounded}"


def _small_float(b: Builder, v: Value, fmt: Format, saturate: bool) -> str:
    """Round to a float8/float4 format: the quantum of |x|'s binade (never below
    the subnormals'), ties to even, then the format's overflow rule, the sign
    copied back (not onto zero in the FNUZ formats)."""
    from .ops._util import literal, scalar

    f32 = np.dtype(np.float32)
    x = b.eltwise(_f32(b, v), v.shape, f32)
    X = b.ref(x)
    a = b.eltwise(f"abs({X})", v.shape, f32)
    A = b.ref(a)
    i32 = np.dtype(np.int32)
    exp = b.eltwise(
        f"max(as_int(bitcast_uint({A}, 32) >> 23, 32) - 127, {literal(fmt.min_exp, i32)})",
        v.shape,
        i32,
    )
    step = f"bitcast_float(as_uint({b.ref(exp)} - {fmt.mantissa} + 127, 32) << 23, 32)"
    r = b.eltwise(f"round({A} / {step}) * {step}", v.shape, f32)
    R = b.ref(r)
    top = literal(fmt.max, f32)
    if saturate or fmt.overflow == "max":
        past = top
    elif fmt.overflow == "inf":
        past = scalar(b, np.inf, f32)
    else:
        past = scalar(b, np.nan, f32)
    kept = b.eltwise(f"{R} > {top} ? {past} : {R}", v.shape, f32)
    K = b.ref(kept)
    sign = f"bitcast_uint({X}, 32) & 2147483648"
    signed = f"bitcast_float(bitcast_uint({K}, 32) | ({sign}), 32)"
    if fmt.overflow == "max":  # float4 E2M1: infinities saturate; NaN becomes a zero of
        # the opposite sign (ml_dtypes' conversion)
        flipped = f"bitcast_float(({sign}) ^ 2147483648, 32)"
        return f"{X} != {X} ? {flipped} : {signed}"
    if not fmt.negative_zero:
        return f"{K} == 0 ? {K} : {signed}"
    return signed


def _wrap_int(b: Builder, v: Value, fmt: Format) -> str:
    """Truncate toward zero (NaN to 0) and wrap into ``fmt.bits`` bits, as
    ``ml_dtypes`` converts."""
    from .ops._util import literal

    x = b.logical(v)
    X = b.ref(x)
    i32 = np.dtype(np.int32)
    if x.dtype.kind == "f":  # NaN and the infinities become 0
        X = f"as_int(abs({X}) <= {literal(float(np.finfo(np.float32).max), x.dtype)} ? {X} : 0, 32)"
    elif x.dtype != i32:
        X = f"as_int({X}, 32)"
    mask = (1 << fmt.bits) - 1
    if fmt.signed:
        half = 1 << (fmt.bits - 1)
        return f"as_int((({X} + {half}) & {mask}) - {half}, 8)"
    return f"as_uint({X} & {mask}, 8)"


def _e8m0(b: Builder, v: Value, saturate: bool, mode: str) -> str:
    """float8 E8M0 (a power of two, ``2 ** (code - 127)``; code 255 is NaN) as onnx's
    ``to_float8e8m0``: the code is the float32 exponent field (the sign is
    dropped), raised by one when ``mode`` rounds the fraction up (``up``: any
    fraction; ``nearest``: guard bit and round, sticky or odd code), not past 254
    with ``saturate``."""
    if mode not in ("up", "down", "nearest"):
        raise ValueError(f"round_mode {mode!r} is not up, down or nearest")
    x = b.eltwise(_f32(b, v), v.shape, np.float32)
    u = f"bitcast_uint({b.ref(x)}, 32)"
    u32 = np.dtype(np.uint32)
    exp = b.eltwise(f"({u} >> 23) & 255", v.shape, u32)
    E = b.ref(exp)
    if mode == "up":
        bump = f"({u} & 8388607) > 0"
    elif mode == "nearest":
        bump = (
            f"(({u} & 4194304) > 0) && ((({u} & 2097152) > 0) || (({u} & 2097151) > 0)"
            f" || ({E} > 0))"
        )
    else:
        bump = "0 > 1"
    if saturate:
        bump = f"({bump}) && ({E} != 254)"
    code = b.eltwise(f"{E} == 255 ? {E} : {E} + as_uint({bump}, 32)", v.shape, u32)
    C = b.ref(code)
    value = f"bitcast_float({C} == 0 ? 4194304 : {C} << 23, 32)"
    from .ops._util import scalar

    return f"{C} == 255 ? {scalar(b, np.nan, np.float32)} : {value}"


#: Operators that handle narrow types themselves (their results' types are theirs).
NARROW_AWARE = frozenset(
    {"Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "If",
     "Loop", "Scan", "Shape", "Size"}
)  # fmt: skip
#: Operators that only move values: a narrow input's values stay representable.
MOVES_DATA = frozenset(
    {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split",
     "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "DepthToSpace",
     "SpaceToDepth", "Compress", "ReverseSequence", "Max", "Min", "ReduceMax", "ReduceMin",
     "Where", "Neg", "Abs", "Relu", "MaxPool", "TopK", "Unique", "OneHot"}
)  # fmt: skip


def narrowed(b: Builder, v: Value | None, narrow: np.dtype, moves: bool) -> Value | None:
    """An operator's result given narrow inputs: rounded back to their narrow type,
    as ``ml_dtypes`` computes (wide arithmetic, then the narrow type); a result of
    another type (a shape, a comparison) is left as it is."""
    if v is None or v.narrow is not None or v.dtype != wide_dtype(narrow):
        return v
    if moves:  # the values are the inputs' own: representable already
        return replace(v, narrow=narrow)
    return round_to(b, v, narrow)
