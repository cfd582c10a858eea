"""Scalar intrinsics and aggregation as LLVM instructions.

Semantics follow ``docs/stripe-ir.md`` (and the interpreter, the oracle):
NaN-propagating ``max``/``min``, floor division and floor modulo on integers
with division by zero giving 0, ``cmp_ne`` true for NaN, saturating float to
integer casts (never poison), shifts by the width or more giving 0 or the sign
fill (LLVM's ``shl``/``lshr``/``ashr`` are poison there, so the amount is
clamped first).
"""

from __future__ import annotations

import llvmlite.ir as ir

from ..errors import StripeError
from ..ir import dtypes
from .llvm_minmax import hreduce_minmax, vector_minmax
from .llvm_types import (  # call_intrinsic and mangle: this module's names too
    F32,
    I1,
    call_intrinsic,
    identity,
    is_float,
    is_unsigned,
    lanes_of,
    mangle,
    reg_type,
    typed_const,
    vec,
)
from .plan import COMPARISONS


def _intrinsic(
    b: ir.IRBuilder, name: str, args: list[ir.Value], types: list[ir.Type] | None = None
):
    if types and len(types) == 2:  # (result, source) overloads, e.g. fptosi.sat
        return call_intrinsic(b, name, args, ret=types[0], overloads=types)
    return call_intrinsic(b, name, args)


def _zero(t: ir.Type) -> ir.Constant:
    return typed_const(t, 0)


def _is_nonzero(b: ir.IRBuilder, v: ir.Value, dt: str) -> ir.Value:
    if dt == "bool":
        return v
    if is_float(dt):
        return b.fcmp_unordered("!=", v, _zero(v.type))
    return b.icmp_unsigned("!=", v, _zero(v.type))


def cast(b: ir.IRBuilder, v: ir.Value, src: str, dst: str) -> ir.Value:
    if src == dst:
        return v
    to = vec(reg_type(dst), lanes_of(v))
    if dst == "bool":
        return _is_nonzero(b, v, src)
    if is_float(src) and is_float(dst):
        return b.fpext(v, to) if dtypes.bits(dst) > dtypes.bits(src) else b.fptrunc(v, to)
    if is_float(dst):
        return b.uitofp(v, to) if is_unsigned(src) else b.sitofp(v, to)
    if is_float(src):
        return _float_to_int(b, v, dst, to)
    sw, dw = dtypes.bits(src) if src != "bool" else 1, dtypes.bits(dst)
    if dw == sw:
        return v
    if dw < sw:
        return b.trunc(v, to)
    return b.zext(v, to) if is_unsigned(src) else b.sext(v, to)


def _x86_convert(b: ir.IRBuilder, v: ir.Value, bits: int) -> ir.Value:
    """Float -> i32/i64 as x86's cvtt* does (and so NumPy's astype): truncation toward
    zero, with NaN and out-of-range values giving the minimum integer.  A range check
    selects the value (else 0.0, so ``fptosi`` is never poison) and the result (else
    the minimum): one ``vcvttps2dq`` under a mask on AVX-512.  (``llvm.fptosi.sat``
    gives the same numbers, but LLVM scalarises it on x86 vectors: 119 instructions
    for 16 lanes, which made a quantising epilogue cost three times its GEMM.)"""
    lanes = lanes_of(v)
    it = vec(ir.IntType(bits), lanes)
    limit = float(2 ** (bits - 1))
    in_range = b.and_(
        b.fcmp_ordered(">=", v, typed_const(v.type, -limit)),
        b.fcmp_ordered("<", v, typed_const(v.type, limit)),
    )
    conv = b.fptosi(b.select(in_range, v, typed_const(v.type, 0.0)), it)
    return b.select(in_range, conv, typed_const(it, -(2 ** (bits - 1)) & ((1 << bits) - 1)))


def _float_to_int(b: ir.IRBuilder, v: ir.Value, dst: str, to: ir.Type) -> ir.Value:
    bits = dtypes.bits(dst)
    if dst == "u64":
        big = b.fcmp_ordered(">=", v, typed_const(v.type, float(2**63)))
        sat = _intrinsic(b, "llvm.fptoui.sat", [v], [to, v.type])
        return b.select(big, sat, _x86_convert(b, v, 64))
    # Narrow targets go through a 32-bit conversion (u32 through 64 bits) and wrap.
    wide = 64 if bits == 64 or dst == "u32" else 32
    r = _x86_convert(b, v, wide)
    return r if bits == wide else b.trunc(r, to)


def _int_floordiv(b: ir.IRBuilder, x: ir.Value, y: ir.Value, unsigned: bool, mod: bool) -> ir.Value:
    """NumPy's ``floor_divide`` / ``remainder`` on integers (scalars or vectors): a zero
    divisor gives 0, ``x / -1`` is the wrapping ``-x`` (``MIN / -1 == MIN``), ``x % -1`` is 0.

    x86's ``idiv`` traps (SIGFPE) on a zero divisor and on ``MIN / -1``, and LLVM calls
    both undefined, so neither pair reaches ``sdiv``/``srem``: the divisor becomes 1
    there and the result is chosen afterwards."""
    zero = _zero(x.type)
    one = typed_const(y.type, 1)
    is_zero = b.icmp_unsigned("==", y, zero)
    if unsigned:
        safe_y = b.select(is_zero, one, y)
        r = b.urem(x, safe_y) if mod else b.udiv(x, safe_y)
        return b.select(is_zero, zero, r)
    is_m1 = b.icmp_signed("==", y, typed_const(y.type, -1))
    safe_y = b.select(b.or_(is_zero, is_m1), one, y)
    q = b.sdiv(x, safe_y)
    r = b.srem(x, safe_y)  # 0 when y is 0 or -1 (safe_y == 1): x % -1 needs nothing more
    adjust = b.and_(
        b.icmp_signed("!=", r, zero),
        b.icmp_signed("!=", b.icmp_signed("<", r, zero), b.icmp_signed("<", safe_y, zero)),
    )
    if mod:
        out = b.select(adjust, b.add(r, safe_y), r)
    else:
        out = b.select(adjust, b.sub(q, typed_const(q.type, 1)), q)
        out = b.select(is_m1, b.sub(zero, x), out)  # plain sub wraps: MIN stays MIN
    return b.select(is_zero, zero, out)


_BITWISE = {"bit_and": "and_", "bit_or": "or_", "bit_xor": "xor"}


def _shift(b: ir.IRBuilder, op: str, x: ir.Value, n: ir.Value, dt: str) -> ir.Value:
    """``x << n`` / ``x >> n`` with the amount ``n`` read as unsigned: from the width on
    every bit is shifted out (0; the sign fill for ``shr`` of a signed ``x``), as NumPy.

    LLVM's shifts are poison for an amount of the width or more, so such an amount
    never reaches one: ``shl``/``lshr`` shift by ``n & (width - 1)`` and the result is
    chosen afterwards; ``ashr`` shifts by ``min(n, width - 1)``, which is the sign fill."""
    t = x.type
    width = dtypes.bits(dt)
    in_range = b.icmp_unsigned("<", n, typed_const(t, width))
    if op == "shr" and not is_unsigned(dt):
        return b.ashr(x, b.select(in_range, n, typed_const(t, width - 1)))
    masked = b.and_(n, typed_const(t, width - 1))
    shifted = b.shl(x, masked) if op == "shl" else b.lshr(x, masked)
    return b.select(in_range, shifted, _zero(t))


def _bitcast(b: ir.IRBuilder, v: ir.Value, src: str, dst: str) -> ir.Value:
    """The bits of ``v`` as ``dst`` (same width; a bool, an ``i1`` in registers, is the
    byte 0 or 1)."""
    to = vec(reg_type(dst), lanes_of(v))
    if src == "bool":
        return b.zext(v, to)
    return v if v.type == to else b.bitcast(v, to)


def _float_mod(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    r = b.frem(x, y)
    zero = _zero(x.type)
    adjust = b.and_(
        b.fcmp_ordered("!=", r, zero),
        b.icmp_unsigned("!=", b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", y, zero)),
    )
    # A zero remainder takes the divisor's sign, as NumPy's (Python's) modulo.
    signed_zero = call_intrinsic(b, "llvm.copysign", [zero, y])
    r = b.select(b.fcmp_ordered("==", r, zero), signed_zero, r)
    return b.select(adjust, b.fadd(r, y), r)


def _minmax(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, dt: str, flags=()) -> ir.Value:
    if is_float(dt):
        if isinstance(x.type, ir.VectorType):
            return vector_minmax(b, op, x, y)
        return _intrinsic(b, "llvm.maximum" if op == "max" else "llvm.minimum", [x, y])
    pred = ">" if op == "max" else "<"
    cmp = b.icmp_unsigned(pred, x, y) if is_unsigned(dt) else b.icmp_signed(pred, x, y)
    return b.select(cmp, x, y)


_MATH = ("exp", "log", "tanh", "sigmoid", "sin", "cos", "tan", "erf", "pow")
_LLVM_UNARY = {
    "sqrt": "llvm.sqrt",
    "floor": "llvm.floor",
    "ceil": "llvm.ceil",
    "round": "llvm.roundeven",
}


#: The x86 VNNI instruction ``vpdpbusd`` by lanes: ``acc + dot4(a, b)`` in each
#: int32 lane (``a``'s bytes unsigned, ``b``'s signed), exact (no saturation).
_VPDPBUSD = {
    4: "llvm.x86.avx512.vpdpbusd.128",
    8: "llvm.x86.avx512.vpdpbusd.256",
    16: "llvm.x86.avx512.vpdpbusd.512",
}


def _vpdpbusd(b: ir.IRBuilder, acc: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
    lanes = lanes_of(acc) or 0
    name = _VPDPBUSD[lanes]
    fn = b.module.globals.get(name)
    if fn is None:
        t = acc.type
        fn = ir.Function(b.module, ir.FunctionType(t, [t, t, t]), name)
    return b.call(fn, [acc, x, y])


def _dot4(b: ir.IRBuilder, x: ir.Value, y: ir.Value, int8_dot: bool) -> ir.Value:
    """``dot4``: per int32 (lane), its four bytes of ``x`` (unsigned) times those of
    ``y`` (signed), summed.  With ``int8_dot``, a vector of 4, 8 or 16 lanes is one
    ``vpdpbusd`` from zero, which :func:`combine` folds into the accumulator it is
    added to; otherwise the bytes are widened, multiplied and summed in groups."""
    lanes = lanes_of(x)
    if int8_dot and lanes in _VPDPBUSD:
        return _vpdpbusd(b, ir.Constant(x.type, None), x, y)
    n = 4 * (lanes or 1)
    i32 = ir.IntType(32)
    wide = ir.VectorType(i32, n)
    bytes_t = ir.VectorType(ir.IntType(8), n)
    p = b.mul(b.zext(b.bitcast(x, bytes_t), wide), b.sext(b.bitcast(y, bytes_t), wide))
    if lanes is None:
        return call_intrinsic(b, "llvm.vector.reduce.add", [p], ret=i32, overloads=[wide])
    parts = [
        b.shuffle_vector(
            p,
            ir.Constant(wide, None),
            ir.Constant(ir.VectorType(i32, lanes), [4 * j + t for j in range(lanes)]),
        )
        for t in range(4)
    ]
    return b.add(b.add(parts[0], parts[1]), b.add(parts[2], parts[3]))


def _dot4_from_zero(v: ir.Value) -> ir.CallInstr | None:
    """``v`` when it is a ``vpdpbusd`` from a zero accumulator (a ``dot4`` alone)."""
    if isinstance(v, ir.CallInstr) and v.callee.name in _VPDPBUSD.values():
        acc = v.args[0]
        if isinstance(acc, ir.Constant) and all(
            isinstance(e, ir.Constant) and e.constant == 0 for e in acc.constant
        ):
            return v
    return None


def intrinsic(
    b: ir.IRBuilder,
    op: str,
    args: list[ir.Value],
    in_dts: list[str],
    dt: str,
    fma: bool = False,
    int8_dot: bool = False,
) -> ir.Value:
    """Emit Stripe intrinsic ``op`` producing dtype ``dt``."""
    if op == "dot4":
        return _dot4(b, args[0], args[1], int8_dot)
    if op == "bitcast":  # before the float16 path: bits, not values
        return _bitcast(b, args[0], in_dts[0], dt)
    if dt == "f16" or "f16" in in_dts:
        return _half_intrinsic(b, op, args, in_dts, dt)
    if op == "cast":
        return cast(b, args[0], in_dts[0], dt)
    if op == "ident":
        return args[0]
    if op == "select":
        return b.select(args[0], args[1], args[2])
    if op in COMPARISONS:
        src = in_dts[0]
        pred = COMPARISONS[op]
        if is_float(src):
            return b.fcmp_unordered(pred, *args) if op == "cmp_ne" else b.fcmp_ordered(pred, *args)
        return (b.icmp_unsigned if is_unsigned(src) else b.icmp_signed)(pred, *args)
    if op in ("and", "or"):
        return (b.and_ if op == "and" else b.or_)(*args)
    if op == "not":
        return b.xor(args[0], typed_const(args[0].type, 1))
    if op in _BITWISE:  # on bool (i1) these are the logical and/or/xor
        return getattr(b, _BITWISE[op])(*args)
    if op == "bit_not":
        return b.not_(args[0])
    if op in ("shl", "shr"):
        return _shift(b, op, args[0], args[1], dt)
    fl = is_float(dt)
    if dt == "bool":
        # Bool arithmetic as NumPy does it on bool arrays: + is or, * is and, - is xor.
        table = {"add": b.or_, "mul": b.and_, "sub": b.xor, "max": b.or_, "min": b.and_}
        if op in table:
            return table[op](*args)
        if op in ("neg", "abs", "relu"):
            return args[0]
        raise StripeError(f"intrinsic {op} on bool is not supported by the cpu target")
    if op in ("add", "sub", "mul"):
        name = {"add": "fadd", "sub": "fsub", "mul": "fmul"}[op] if fl else op
        if fl and fma:
            return getattr(b, name)(*args, flags=("contract",))
        return getattr(b, name)(*args)
    if op == "div":
        if fl:
            return b.fdiv(*args)
        return _int_floordiv(b, args[0], args[1], is_unsigned(dt), mod=False)
    if op == "mod":
        if fl:
            return _float_mod(b, *args)
        return _int_floordiv(b, args[0], args[1], is_unsigned(dt), mod=True)
    if op == "neg":
        return b.fneg(args[0]) if fl else b.sub(_zero(args[0].type), args[0])
    if op == "abs":
        if fl:
            return _intrinsic(b, "llvm.fabs", args)
        if is_unsigned(dt):
            return args[0]
        neg = b.sub(_zero(args[0].type), args[0])
        return b.select(b.icmp_signed("<", args[0], _zero(args[0].type)), neg, args[0])
    if op in ("max", "min"):
        return _minmax(b, op, args[0], args[1], dt)
    if op == "relu":
        return _minmax(b, "max", args[0], _zero(args[0].type), dt)
    if op in _LLVM_UNARY and fl:
        return _intrinsic(b, _LLVM_UNARY[op], args)
    if op in ("sin", "cos", "tan") and fl:
        return _trig(b, op, args[0])
    if op in _MATH and fl:
        from .llvm_math import emit_math

        return emit_math(b, op, list(args))
    raise StripeError(f"intrinsic {op} on {dt} is not supported by the cpu target")


def _widen(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """A half value (or vector) extended to float (exact)."""
    return b.fpext(v, vec(F32, lanes_of(v)))


def _narrow(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """A float/double value (or vector) rounded to half (one rounding)."""
    return b.fptrunc(v, vec(reg_type("f16"), lanes_of(v)))


def _round_to_odd_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Double -> float rounded to odd (toward zero, lowest bit set when inexact).

    Rounding that float to half then gives the half nearest to ``x`` (float keeps
    more than 11 + 2 bits), one rounding as NumPy's astype, with no libcall (LLVM
    lowers ``fptrunc double to half`` on x86 to ``__truncdfhf2``)."""
    lanes = lanes_of(x)
    i32 = vec(ir.IntType(32), lanes)
    t = b.fptrunc(x, vec(F32, lanes))
    back = b.fpext(t, x.type)
    bits = b.bitcast(t, i32)
    fabs = call_intrinsic(b, "llvm.fabs", [back])
    over = b.fcmp_ordered(">", fabs, call_intrinsic(b, "llvm.fabs", [x]))
    toward_zero = b.select(over, b.sub(bits, typed_const(i32, 1)), bits)
    odd = b.bitcast(b.or_(toward_zero, typed_const(i32, 1)), t.type)
    inexact = b.fcmp_ordered("!=", back, x)  # false for NaN: NaN stays as it is
    return b.select(inexact, odd, t)


def _half_intrinsic(
    b: ir.IRBuilder, op: str, args: list[ir.Value], in_dts: list[str], dt: str
) -> ir.Value:
    """Intrinsics on float16 values as NumPy computes them: the f16 operands are
    extended to float, the operation runs in float (exact for + - * / sqrt, whose
    float results round to the same half as the exact results), and a float16
    result is rounded to half once.  ``sigmoid`` rounds after each of its steps
    and ``erf`` runs in double, as the interpreter computes them."""
    if op == "cast":
        src = in_dts[0]
        if src == "f64" and dt == "f16":
            return _narrow(b, _round_to_odd_f32(b, args[0]))  # one rounding, as astype
        if src == "f16" and dt == "f16":
            return args[0]
    if op == "sigmoid":
        x = args[0]
        one = typed_const(x.type, 1.0)
        e = _half_intrinsic(
            b, "exp", [_half_intrinsic(b, "neg", [x], ["f16"], "f16")], ["f16"], "f16"
        )
        return _half_intrinsic(
            b, "div", [one, _half_intrinsic(b, "add", [one, e], ["f16", "f16"], "f16")],
            ["f16", "f16"], "f16",
        )  # fmt: skip
    if op == "erf":
        wide = b.fpext(args[0], vec(ir.DoubleType(), lanes_of(args[0])))
        return _narrow(b, _round_to_odd_f32(b, intrinsic(b, "erf", [wide], ["f64"], "f64")))
    wide = [_widen(b, a) if d == "f16" else a for a, d in zip(args, in_dts)]
    dts = ["f32" if d == "f16" else d for d in in_dts]
    r = intrinsic(b, op, wide, dts, "f32" if dt == "f16" else dt)
    return _narrow(b, r) if dt == "f16" else r


# Beyond these magnitudes the inline trig's range reduction loses accuracy; such
# arguments (rare) go to the C library one lane at a time.
_TRIG_LIMIT = {"f32": 1.0e5, "f64": 1.0e14}


def _trig(b: ir.IRBuilder, op: str, x: ir.Value) -> ir.Value:
    from .llvm_math import emit_math

    fast = emit_math(b, op, [x])
    lanes = lanes_of(x)
    el = x.type.element if lanes else x.type
    dt = "f32" if isinstance(el, ir.FloatType) else "f64"
    big = b.fcmp_ordered(
        ">", call_intrinsic(b, "llvm.fabs", [x]), typed_const(x.type, _TRIG_LIMIT[dt])
    )
    any_big = (
        call_intrinsic(b, "llvm.vector.reduce.or", [big], ret=I1, overloads=[big.type])
        if lanes
        else big
    )
    name = op + ("f" if dt == "f32" else "")
    libm = b.module.globals.get(name) or ir.Function(b.module, ir.FunctionType(el, [el]), name)
    before = b.block
    with b.if_then(any_big, likely=False):
        if lanes:
            slow = fast
            for i in range(lanes):
                k = ir.Constant(ir.IntType(32), i)
                slow = b.insert_element(slow, b.call(libm, [b.extract_element(x, k)]), k)
        else:
            slow = b.call(libm, [x])
        slow = b.select(big, slow, fast)
        after_slow = b.block
    out = b.phi(x.type)
    out.add_incoming(fast, before)
    out.add_incoming(slow, after_slow)
    return out


def combine(
    b: ir.IRBuilder, agg: str, acc: ir.Value, v: ir.Value, dt: str, fma: bool = False
) -> ir.Value:
    """``acc (agg) v`` for a reduction: float add/mul carry only ``reassoc``
    (what a vectorised reduction needs), plus ``contract`` when the target
    allows FMA."""
    if dt == "f16":
        # Rounded to half after every step, as the interpreter accumulates float16;
        # no reassoc, so a scalar loop adds in the interpreter's order.
        x, y = _widen(b, acc), _widen(b, v)
        if agg in ("add", "mul"):
            return _narrow(b, b.fadd(x, y) if agg == "add" else b.fmul(x, y))
        return _narrow(b, _minmax(b, agg, x, y, "f32"))
    flags = ("reassoc", "contract") if fma else ("reassoc",)
    dot = _dot4_from_zero(v) if agg == "add" else None
    if dot is not None:  # acc + dot4(x, y): one vpdpbusd into the accumulator
        return _vpdpbusd(b, acc, dot.args[1], dot.args[2])
    if agg == "add":
        return (
            b.fadd(acc, v, flags=flags)
            if is_float(dt)
            else (b.or_(acc, v) if dt == "bool" else b.add(acc, v))
        )
    if agg == "mul":
        return (
            b.fmul(acc, v, flags=("reassoc",))
            if is_float(dt)
            else (b.and_(acc, v) if dt == "bool" else b.mul(acc, v))
        )
    if agg in ("max", "min"):
        if dt == "bool":
            return b.or_(acc, v) if agg == "max" else b.and_(acc, v)
        if is_float(dt) and isinstance(v.type, ir.VectorType):
            return vector_minmax(b, agg, v, acc)  # the accumulator second: see there
        return _minmax(b, agg, acc, v, dt)
    raise AssertionError(agg)


__all__ = ["cast", "combine", "identity", "intrinsic"]


def hreduce(b: ir.IRBuilder, agg: str, v: ir.Value, dt: str) -> ir.Value:
    """Reduce the lanes of ``v`` with ``agg`` (``reassoc`` for float add/mul)."""
    if dt == "f16":
        return _narrow(b, hreduce(b, agg, _widen(b, v), "f32"))
    el = v.type.element
    if is_float(dt):
        if agg in ("add", "mul"):
            start = typed_const(el, -0.0 if agg == "add" else 1.0)
            name = "llvm.vector.reduce.fadd" if agg == "add" else "llvm.vector.reduce.fmul"
            fn = b.module.globals.get(f"{name}.{mangle(v.type)}")
            if fn is None:
                fn = ir.Function(
                    b.module, ir.FunctionType(el, [el, v.type]), f"{name}.{mangle(v.type)}"
                )
            return b.call(fn, [start, v], fastmath=("reassoc",))
        return hreduce_minmax(b, agg, v)
    if dt == "bool":
        name = {"add": "or", "max": "or", "mul": "and", "min": "and"}[agg]
    elif agg in ("max", "min"):
        name = ("u" if is_unsigned(dt) else "s") + agg
    else:
        name = agg
    return call_intrinsic(b, f"llvm.vector.reduce.{name}", [v], ret=el, overloads=[v.type])
