"""Stripe dtypes and scalar intrinsics as LLVM IR (llvmlite.ir).

Values live in registers with these types: floats as half/float/double,
integers as iN (signedness comes from the Stripe dtype), bool as i1.  In
memory a bool is one byte (NumPy's layout), so loads and stores convert.
float16 values are stored and kept in registers as ``half``; arithmetic on them
runs in float and rounds back to half once per operation (NumPy's semantics,
see ``llvm_ops.intrinsic``).
"""

from __future__ import annotations

import llvmlite.ir as ir

from ..ir import dtypes
from ..ir.nodes import Scalar

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I64 = ir.IntType(64)
PTR = ir.PointerType()

_FLOATS = {"f16": ir.HalfType(), "f32": ir.FloatType(), "f64": ir.DoubleType()}
F32 = _FLOATS["f32"]


def reg_type(dt: str) -> ir.Type:
    """The register type of a Stripe dtype."""
    if dt == "bool":
        return I1
    if dt in _FLOATS:
        return _FLOATS[dt]
    return ir.IntType(dtypes.bits(dt))


def mem_type(dt: str) -> ir.Type:
    """The in-memory element type (bool is a byte)."""
    return I8 if dt == "bool" else reg_type(dt)


def is_float(dt: str) -> bool:
    return dt in _FLOATS


def is_unsigned(dt: str) -> bool:
    return dt.startswith("u") or dt == "bool"


def const(dt: str, value: Scalar) -> ir.Constant:
    t = reg_type(dt)
    if dt == "bool":
        return ir.Constant(t, int(bool(value)))
    if is_float(dt):
        return ir.Constant(t, float(value))
    bits = dtypes.bits(dt)
    v = int(value) & ((1 << bits) - 1)
    return ir.Constant(t, v)


def identity(agg: str, dt: str) -> ir.Constant:
    """The neutral element of an aggregation (add: -0.0 so that -0.0 + x == x exactly)."""
    if agg == "add":
        return const(dt, -0.0 if is_float(dt) else 0)
    if agg == "mul":
        return const(dt, 1)
    if agg in ("max", "min"):
        big = agg == "min"
        if is_float(dt):
            return const(dt, float("inf") if big else float("-inf"))
        if dt == "bool":
            return const(dt, big)
        bits = dtypes.bits(dt)
        if is_unsigned(dt):
            return const(dt, (1 << bits) - 1 if big else 0)
        return const(dt, (1 << (bits - 1)) - 1 if big else -(1 << (bits - 1)))
    raise AssertionError(agg)


def typed_const(t: ir.Type, value: Scalar) -> ir.Constant:
    """A constant of type ``t``; for a vector type, ``value`` in every lane."""
    if isinstance(t, ir.VectorType):  # one element constant, in every lane
        return ir.Constant(t, typed_const(t.element, value))
    if isinstance(t, (ir.HalfType, ir.FloatType, ir.DoubleType)):
        return ir.Constant(t, float(value))
    return ir.Constant(t, int(value))


def splat(c: ir.Constant, lanes: int | None) -> ir.Constant:
    """A scalar constant broadcast to ``lanes`` (unchanged when ``lanes`` is None)."""
    if not lanes:
        return c
    # ``c`` itself in every lane: llvmlite would otherwise make one constant per lane
    return ir.Constant(ir.VectorType(c.type, lanes), c)


def lanes_of(v: ir.Value) -> int | None:
    return v.type.count if isinstance(v.type, ir.VectorType) else None


def vec(t: ir.Type, lanes: int | None) -> ir.Type:
    return ir.VectorType(t, lanes) if lanes else t


def acc_dtype(dt: str) -> str:
    """The dtype a register accumulator of ``dt`` holds: float16 sums and products
    accumulate in float and round to float16 once, as NumPy's float16 reductions
    (``sum``, ``einsum``, ``matmul``) and the interpreter's fast path do; an
    accumulation in memory rounds after every step, as the general mode does."""
    return "f32" if dt == "f16" else dt


def mangle(t: ir.Type) -> str:
    """LLVM's overload suffix for a type: f32, f64, i32, v8f32, p0."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{mangle(t.element)}"
    if isinstance(t, ir.HalfType):
        return "f16"
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    if isinstance(t, ir.PointerType):
        return "p0"
    raise AssertionError(t)


def call_intrinsic(
    b: ir.IRBuilder,
    base: str,
    args: list[ir.Value],
    ret: ir.Type | None = None,
    overloads: list[ir.Type] | None = None,
):
    """Call ``llvm.<base>.<overloads>`` (declared on first use with the exact signature)."""
    ret = ret or args[0].type
    overloads = overloads if overloads is not None else [args[0].type]
    name = base + "".join("." + mangle(t) for t in overloads)
    fn = b.module.globals.get(name)
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return b.call(fn, args)
