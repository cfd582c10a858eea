"""Elementwise operators: arithmetic, sign, casts and bit casts, bitwise operators
and shifts, the variadic Max/Min/Sum/Mean and Clip, and the helpers the other elementwise modules share
(:mod:`.unary_math`: math functions; :mod:`.logic`: comparisons, logic,
selection).

Every elementwise op is one (or a few fused) Tile elementwise statements with
NumPy broadcasting.  Points to keep in mind when reading them:

* Tile literals are *weak*: they take the dtype of the tensor they meet, but a
  float literal next to an integer tensor makes the result float64.  Constants
  whose dtype matters are written with :func:`typed` (a cast of a literal).
* Tile's integer ``/`` is floor division and ``%`` follows NumPy (the sign of
  the divisor); ONNX's integer ``Div`` truncates and ``Mod(fmod=1)`` follows C.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from ..builder import Builder, Node, OnnxError, Value, tile_dtype
from ..registry import op
from ._util import broadcast_shape, cast, literal, scalar

F64 = np.dtype(np.float64)


# -- helpers -----------------------------------------------------------------
def typed(b: Builder, value: float | int | bool, dtype: np.dtype) -> str:
    """A Tile expression for the constant ``value`` with exactly ``dtype`` (not
    weak): a cast literal, or a constant parameter for inf/NaN."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" and not math.isfinite(float(value)):
        return scalar(b, value, dtype)
    return cast(literal(value, dtype), dtype)


def is_float(v: Value) -> bool:
    return v.dtype.kind == "f"


def float_input(n: Node, i: int = 0) -> Value:
    """Input ``i``, which must be a floating-point tensor."""
    v = n.input(i)
    if not is_float(v):
        raise n.error(f"input {i} must be a float tensor, got {v.dtype}")
    return v


def same_dtype(n: Node, values: list[Value]) -> np.dtype:
    """The common dtype of ``values`` (ONNX requires them to agree)."""
    dt = values[0].dtype
    for v in values[1:]:
        if v.dtype != dt:
            raise n.error(f"inputs must have one element type, got {dt} and {v.dtype}")
    return dt


def unary(b: Builder, n: Node, fn: Callable[[str], str], *, wide: bool = False) -> Value:
    """``fn(X)`` on the float input 0, same shape and dtype.  With ``wide``,
    float32 (and float16) inputs are evaluated in float64 and rounded once."""
    x = float_input(n)
    if wide and x.dtype.itemsize < 8:
        t = b.eltwise(cast(b.ref(x), F64), x.shape, F64)
        return b.eltwise(cast(fn(t.name), x.dtype), x.shape, x.dtype)
    return b.eltwise(fn(b.ref(x)), x.shape, x.dtype)


def binary(b: Builder, n: Node, template: str, dtype: np.dtype | None = None) -> Value:
    """``template`` with ``{a}``/``{b}`` naming inputs 0 and 1 (same dtype),
    broadcasting; the result has ``dtype`` (default: the inputs')."""
    x, y = n.input(0), n.input(1)
    dt = same_dtype(n, [x, y])
    shape = broadcast_shape(n, x.shape, y.shape)
    expr = template.format(a=b.ref(x), b=b.ref(y))
    return b.eltwise(expr, shape, dt if dtype is None else dtype)


def _no_bool(n: Node, v: Value) -> None:
    """Reject a bool input (the arithmetic operators take numbers only)."""
    if v.dtype.kind == "b":
        raise n.error("bool inputs are not supported by this operator")


def register_as(name: str, doc: str, fn: Callable[[Builder, Node], list[Value | None]]) -> None:
    """Register ``fn`` for ``name`` with its own one-line doc (for ops that
    share one implementation)."""

    def op_fn(b: Builder, n: Node) -> list[Value | None]:
        return fn(b, n)

    op_fn.__doc__ = doc
    op_fn.__name__ = op_fn.__qualname__ = name.lower()
    op(name)(op_fn)


# -- arithmetic --------------------------------------------------------------
@op("Add")
def add(b: Builder, n: Node) -> list[Value | None]:
    """Add: ``A + B`` with broadcasting (numeric types; integers wrap)."""
    _no_bool(n, n.input(0))
    return [binary(b, n, "{a} + {b}")]


@op("Sub")
def sub(b: Builder, n: Node) -> list[Value | None]:
    """Sub: ``A - B`` with broadcasting (numeric types; integers wrap)."""
    _no_bool(n, n.input(0))
    return [binary(b, n, "{a} - {b}")]


@op("Mul")
def mul(b: Builder, n: Node) -> list[Value | None]:
    """Mul: ``A * B`` with broadcasting (numeric types; integers wrap)."""
    _no_bool(n, n.input(0))
    return [binary(b, n, "{a} * {b}")]


@op("Div")
def div(b: Builder, n: Node) -> list[Value | None]:
    """Div: ``A / B`` with broadcasting; integers truncate toward zero (x / 0 gives 0).

    Tile's ``/`` floors on integers, so signed division steps back toward zero."""
    x = n.input(0)
    _no_bool(n, x)
    if x.dtype.kind == "i":
        # Tile's integer / floors; step back toward zero when the signs differ.
        return [
            binary(
                b,
                n,
                "({a} % {b} != 0) && (({a} < 0) != ({b} < 0)) ? {a} / {b} + 1 : {a} / {b}",
            )
        ]
    return [binary(b, n, "{a} / {b}")]


@op("Mod")
def mod(b: Builder, n: Node) -> list[Value | None]:
    """Mod: ``fmod=0`` NumPy ``%`` (divisor's sign), ``fmod=1`` C ``fmod``; ints and floats.

    A zero integer divisor gives 0."""
    x = n.input(0)
    _no_bool(n, x)
    fmod = int(n.attr("fmod", 0))
    if fmod not in (0, 1):
        raise n.error(f"fmod must be 0 or 1, got {fmod}")
    if not fmod or x.dtype.kind == "u":
        return [binary(b, n, "{a} % {b}")]
    y = n.input(1)
    dt = same_dtype(n, [x, y])
    shape = broadcast_shape(n, x.shape, y.shape)
    # C fmod is |x| mod |y| (exact, both positive) with the dividend's sign.
    X, Y = b.ref(x), b.ref(y)
    r = b.eltwise(f"abs({X}) % abs({Y})", shape, dt)
    R = r.name
    expr = f"{X} < 0 ? -{R} : ({X} > 0 ? {R} : ({R} == 0 ? {X} : {R}))"
    return [b.eltwise(expr, shape, dt)]


@op("Pow")
def pow_(b: Builder, n: Node) -> list[Value | None]:
    """Pow: ``X ** Y``, broadcasting; mixed numeric types, the result in the base's type.

    Computed in the NumPy-promoted type of base and exponent (a float base with
    an integer exponent stays in the base's precision).  A float base with a
    constant exponent of one value from 1 to 4 (GELU's ``x ** 3``) is a product
    of the base (each product rounded: within an ulp or two of ``pow``); in
    GPT-2's tanh GELU that took the 12 kernels from 20.8 to 4.6 ms."""
    x, y = n.input(0), n.input(1)
    _no_bool(n, x)
    _no_bool(n, y)
    shape = broadcast_shape(n, x.shape, y.shape)
    power = _small_power(y)
    if x.dtype.kind == "f" and power is not None and tuple(shape) == tuple(x.shape):
        # A constant small integer exponent (GELU's x ** 3, a norm's x ** 2) is
        # products, not exp(y * log|x|) in double (within an ulp).
        X = b.ref(x)
        products = {1: X, 2: f"{X} * {X}", 3: f"{X} * {X} * {X}", 4: f"({X} * {X}) * ({X} * {X})"}
        return [b.eltwise(products[power], shape, x.dtype)]
    promoted = np.result_type(x.dtype, y.dtype)
    if x.dtype.kind == "f" and y.dtype.kind in "iu":
        # A float base keeps its precision with an integer exponent (as NumPy).
        promoted = x.dtype
        expr = f"pow({b.ref(x)}, {cast(b.ref(y), x.dtype)})"
    else:
        expr = f"pow({b.ref(x)}, {b.ref(y)})"
    if promoted != x.dtype:
        expr = cast(expr, x.dtype)
    return [b.eltwise(expr, shape, x.dtype)]


def _small_power(y: Value) -> int | None:
    """The exponent when ``y`` is a constant whose every element is the same
    integer from 1 to 4, else ``None``."""
    c = y.const
    if c is None or c.size == 0 or c.dtype.kind not in "iuf":
        return None
    first = c.reshape(-1)[0]
    if not np.all(c == first) or first not in (1, 2, 3, 4):
        return None
    return int(first)


# -- sign and magnitude ------------------------------------------------------
@op("Neg")
def neg(b: Builder, n: Node) -> list[Value | None]:
    """Neg: ``-X`` (signed integers and floats)."""
    x = n.input(0)
    _no_bool(n, x)
    return [b.eltwise(f"-{b.ref(x)}", x.shape, x.dtype)]


@op("Abs")
def abs_(b: Builder, n: Node) -> list[Value | None]:
    """Abs: ``|X|`` (integers and floats)."""
    x = n.input(0)
    _no_bool(n, x)
    return [b.eltwise(f"abs({b.ref(x)})", x.shape, x.dtype)]


@op("Sign")
def sign(b: Builder, n: Node) -> list[Value | None]:
    """Sign: -1, 0 or 1 in the input's type (NaN stays NaN)."""
    x = n.input(0)
    _no_bool(n, x)
    X, dt = b.ref(x), x.dtype
    if dt.kind == "u":
        expr = f"{X} > 0 ? {typed(b, 1, dt)} : {X}"
    else:
        expr = f"{X} > 0 ? {typed(b, 1, dt)} : ({X} < 0 ? {typed(b, -1, dt)} : {X})"
    return [b.eltwise(expr, x.shape, dt)]


# -- casts -------------------------------------------------------------------
def _cast_to(
    b: Builder, n: Node, x: Value, dtype: np.dtype, saturate: bool = False, mode: str = "up"
) -> Value:
    """``x`` as ``dtype``; a narrow ``dtype`` (bfloat16, float8 ...) is rounded into
    (``saturate``: float8 values past the largest clamp to it), see narrow.py."""
    from ..narrow import round_to
    from ..narrow_types import is_narrow

    if x.dtype.kind in "OSU" or dtype.kind in "OSU":
        raise n.error("casts from or to strings are not supported (stripeml tensors are numeric)")
    if is_narrow(dtype):
        if x.narrow == dtype:
            return x
        try:
            return round_to(b, x, dtype, saturate, mode)
        except ValueError as exc:
            raise n.error(str(exc)) from None
    try:
        tile_dtype(dtype)
    except OnnxError:
        raise n.error(f"casting to {dtype} is not supported") from None
    if x.narrow is not None:  # held in a wider type: its values are that type's
        x = replace(x, narrow=None)
    if x.dtype == dtype:
        return x
    return b.eltwise(cast(b.ref(x), dtype), x.shape, dtype)


@op("Cast")
def cast_(b: Builder, n: Node) -> list[Value | None]:
    """Cast: bool, integer, float, bfloat16, float8, float4 and int4/int2 types; no strings.

    Float to integer truncates toward zero; to bool is ``x != 0``; to a narrow type
    rounds as ``ml_dtypes`` does, ``saturate`` (float8) clamping to the largest value."""
    from onnx import TensorProto, helper

    to = n.attr("to")
    if to is None:
        raise n.error("the 'to' attribute is required")
    if int(to) == TensorProto.STRING:
        raise n.error("casts from or to strings are not supported (stripeml tensors are numeric)")
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(int(to)))
    except Exception:  # noqa: BLE001 - unknown enum values
        raise n.error(f"casting to element type {to} is not supported") from None
    mode = str(n.attr("round_mode", "up"))
    return [_cast_to(b, n, n.input(0), dtype, _saturate(n), mode)]


def _saturate(n: Node) -> bool:
    return bool(n.attr("saturate", 1)) if n.opset >= 19 else True


@op("CastLike")
def castlike(b: Builder, n: Node) -> list[Value | None]:
    """CastLike: Cast to the element type of input 1."""
    like = n.input(1)
    return [_cast_to(b, n, n.input(0), like.narrow or like.dtype, _saturate(n))]


def _onnx_dtype(n: Node, to: Any) -> np.dtype:
    """The NumPy dtype of ONNX element type ``to`` (an attribute)."""
    from onnx import TensorProto, helper

    if to is None:
        raise n.error("the 'to' attribute is required")
    if int(to) == TensorProto.STRING:
        raise n.error("casts from or to strings are not supported (stripeml tensors are numeric)")
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(int(to)))
    except Exception:  # noqa: BLE001 - unknown enum values
        raise n.error(f"element type {to} is not supported") from None


@op("BitCast")
def bitcast(b: Builder, n: Node) -> list[Value | None]:
    """BitCast: the bits of each element as type ``to`` of the same width (no conversion).

    Integers, float16/32/64 and bool (as the byte 0 or 1, to an 8-bit integer);
    not to bool, whose bytes hold only 0 or 1."""
    x = n.input(0)
    dtype = _onnx_dtype(n, n.attr("to"))
    for dt in (x.dtype, dtype):
        if dt.kind not in "biuf":
            raise n.error(f"bit casts from or to {dt} are not supported")
        try:
            tile_dtype(dt)
        except OnnxError:
            raise n.error(f"bit casts from or to {dt} are not supported") from None
    if dtype.itemsize != x.dtype.itemsize:
        raise n.error(
            f"'to' must have the input's width: {x.dtype} has {8 * x.dtype.itemsize} bits, "
            f"{dtype} {8 * dtype.itemsize}"
        )
    if dtype == x.dtype:
        return [x]
    if dtype.kind == "b":
        raise n.error(
            f"bit casts to bool are not supported: a bool byte holds 0 or 1, not every {x.dtype}"
        )
    fn = {"f": "bitcast_float", "i": "bitcast_int", "u": "bitcast_uint"}[dtype.kind]
    return [b.eltwise(f"{fn}({b.ref(x)}, {8 * dtype.itemsize})", x.shape, dtype)]


# -- bitwise -----------------------------------------------------------------
def _int_inputs(n: Node, count: int) -> None:
    """Inputs ``0 .. count-1`` must be integer tensors (ONNX's bitwise ops take no
    floats and no bools)."""
    for i in range(count):
        v = n.input(i)
        if v.dtype.kind not in "iu":
            raise n.error(f"input {i} must be an integer tensor, got {v.dtype}")


def _bitwise(symbol: str) -> Callable[[Builder, Node], list[Value | None]]:
    def fn(b: Builder, n: Node) -> list[Value | None]:
        _int_inputs(n, 2)
        return [binary(b, n, "{a} " + symbol + " {b}")]

    return fn


for _name, _symbol, _what in (
    ("BitwiseAnd", "&", "and"),
    ("BitwiseOr", "|", "or"),
    ("BitwiseXor", "^", "exclusive or"),
):
    register_as(
        _name,
        f"{_name}: bitwise {_what}, ``A {_symbol} B``, of integer tensors, broadcasting.",
        _bitwise(_symbol),
    )


@op("BitwiseNot")
def bitwise_not(b: Builder, n: Node) -> list[Value | None]:
    """BitwiseNot: ``~X`` on an integer tensor."""
    _int_inputs(n, 1)
    x = n.input(0)
    return [b.eltwise(f"~{b.ref(x)}", x.shape, x.dtype)]


@op("BitShift")
def bitshift(b: Builder, n: Node) -> list[Value | None]:
    """BitShift: ``X << Y`` or ``X >> Y`` (``direction``), integers, broadcasting.

    Right shifts are arithmetic on signed types; an amount that is negative or at
    least the width gives 0 (-1 for a right shift of a negative value)."""
    _int_inputs(n, 2)
    direction = n.attr("direction")
    symbols = {"LEFT": "<<", "RIGHT": ">>"}
    if direction not in symbols:
        raise n.error(f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    return [binary(b, n, "{a} " + symbols[direction] + " {b}")]


# -- variadic ----------------------------------------------------------------
def _variadic(n: Node) -> tuple[list[Value], np.dtype, tuple[int, ...]]:
    vals = [v for v in n.inputs if v is not None]
    if not vals:
        raise n.error("needs at least one input")
    dt = same_dtype(n, vals)
    shape = broadcast_shape(n, *[v.shape for v in vals])
    return vals, dt, shape


def _max_min(b: Builder, n: Node) -> list[Value | None]:
    vals, dt, shape = _variadic(n)
    if len(vals) == 1:
        return [vals[0]]
    fn = n.op_type.lower()
    expr = b.ref(vals[0])
    for v in vals[1:]:
        expr = f"{fn}({expr}, {b.ref(v)})"
    return [b.eltwise(expr, shape, dt)]


def _sum_mean(b: Builder, n: Node) -> list[Value | None]:
    vals, dt, shape = _variadic(n)
    if n.op_type == "Mean" and dt.kind != "f":
        raise n.error(f"inputs must be float tensors, got {dt}")
    if len(vals) == 1:
        return [vals[0]]
    expr = " + ".join(b.ref(v) for v in vals)
    if n.op_type == "Mean":
        expr = f"({expr}) / {len(vals)}"
    return [b.eltwise(expr, shape, dt)]


register_as(
    "Max", "Max: elementwise maximum of 1 or more inputs, broadcasting (NaN propagates).", _max_min
)
register_as(
    "Min", "Min: elementwise minimum of 1 or more inputs, broadcasting (NaN propagates).", _max_min
)
register_as("Sum", "Sum: elementwise sum of 1 or more inputs, broadcasting.", _sum_mean)
register_as("Mean", "Mean: elementwise mean of 1 or more float inputs, broadcasting.", _sum_mean)


def _scalar_ref(b: Builder, n: Node, v: Value) -> str:
    """A rank-0 Tile expression for the one-element tensor ``v``."""
    if v.const is not None:
        value = v.const.reshape(()).item()
        if v.dtype.kind != "f" or math.isfinite(value):
            return typed(b, value, v.dtype)
        return scalar(b, value, v.dtype)
    if not v.rank:
        return b.ref(v)
    zeros = ", ".join("0" for _ in v.shape)
    return b.contraction(f"{{out}}[] = =({b.ref(v)}[{zeros}])", (), v.dtype).name


@op("Clip", oldest=1)
def clip(b: Builder, n: Node) -> list[Value | None]:
    """Clip: optional ``min``/``max`` inputs (or opset < 11 attributes), numeric types.

    ``min(max(X, lo), hi)``; NaN propagates."""
    x = n.input(0)
    _no_bool(n, x)
    expr = b.ref(x)
    if n.opset < 11 or "min" in n.attrs or "max" in n.attrs:
        lo, hi = n.attr("min"), n.attr("max")
        if lo is not None:
            expr = f"max({expr}, {typed(b, lo, x.dtype)})"
        if hi is not None:
            expr = f"min({expr}, {typed(b, hi, x.dtype)})"
    else:
        for i, fn in ((1, "max"), (2, "min")):
            bound = n.opt(i)
            if bound is None:
                continue
            if bound.size != 1:
                raise n.error(f"input {i} ({'min' if i == 1 else 'max'}) must be a scalar")
            if bound.dtype != x.dtype:
                raise n.error(f"bounds must have the input's type {x.dtype}, got {bound.dtype}")
            ref = _scalar_ref(b, n, bound)
            expr = f"{fn}({expr}, {ref})"
    if expr == b.ref(x):
        return [x]
    return [b.eltwise(expr, x.shape, x.dtype)]
