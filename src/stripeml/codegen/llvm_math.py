"""Transcendental and rounding functions as inline, vectorisable LLVM IR.

``emit_math(builder, name, args)`` computes the Stripe ``math`` intrinsic
``name`` (plus ``abs``) on ``args``, whose type is ``float``/``double`` or a
vector ``<N x float>``/``<N x double>``; the result has the same type.

Shape of the generated code
---------------------------
Every body is straight-line code: ``select`` instead of branches, integer
bit manipulation for exponents, and only LLVM intrinsics that lower to one or
two instructions on x86-64 with FMA (``llvm.fma``, ``fabs``, ``floor``,
``ceil``, ``roundeven``, ``sqrt``, ``copysign``).  There are no libm calls, so
the same code serves scalars and vectors, and LLVM's loop vectoriser can widen
a scalar loop that uses it.

Code size: ``sqrt``, ``floor``, ``ceil``, ``round`` (half to even) and ``abs``
are a single intrinsic and are emitted inline.  The others are defined once
per module and type as an ``internal`` ``alwaysinline`` function named
``stripeml.<name>.<type>`` (``stripeml.exp.v8f32``, ``stripeml.tanh.f64``) and
called; the always-inliner (which also runs at -O0) pastes the body at each
call before the vectoriser runs, and the definition then dies.  One
definition per (name, type) keeps the textual IR small when a kernel uses a
function many times.

Algorithms and sources (coefficients are copied, not fitted)
------------------------------------------------------------
* exp: ``n = roundeven(x/ln2)``, Cody-Waite ``r = x - n*ln2`` with FMA, a
  polynomial for ``e^r`` and ``2^n`` applied as two exponent-bit scalings (one
  ``vscalef`` with AVX-512), so overflow gives inf and underflow gives
  correctly rounded subnormals.
  Polynomials: Cephes ``expf.c`` (float), SLEEF ``xexp`` (double).  With
  AVX-512 the polynomial is evaluated by Horner's rule (fewer operations; the
  loops that call ``exp`` hide its longer chain), and scalar float code (a
  kernel LLVM's loop vectoriser widens: a softmax's ``exp`` and row sum) rounds
  ``n`` by adding 1.5 * 2^23 and reads its integer from the sum's bits, so a
  NaN flows into ``ldexp`` (one ``vscalef``) with no conversion back to float
  and no select to patch it.
* log: float: Cephes ``logf.c``; double: fdlibm ``e_log.c`` (as in musl).
  Subnormal inputs are scaled by a power of two first.
* tanh: ``x + x^3 P(x^2)`` below 0.625 (Cephes ``tanhf.c`` polynomial,
  ``tanh.c`` rational), otherwise ``1 - 2/(exp(2|x|)+1)``, which saturates to
  exactly 1.
* sigmoid: ``e = exp(-|x|)``, ``1/(1+e)`` for ``x >= 0`` and ``e/(1+e)``
  otherwise: no overflow and no cancellation.
* erf: float: the rational minimax approximation on [-4, 4] used by Eigen and
  XLA (``x P(x^2) / Q(x^2)``, both by Horner's rule); double: fdlibm
  ``s_erf.c`` with its four intervals evaluated branch-free.
* sin, cos, tan: quadrant ``q = roundeven(|x| * 2/pi)``, three-part
  Cody-Waite reduction with FMA (the first step is exact), polynomials from
  Cephes ``sinf.c``/``tanf.c`` (float) and ``sin.c``/``tan.c`` (double).  The
  first reduction step stays exact while ``q < 2^22`` (float, |x| < ~6.5e6)
  and ``q < 2^51`` (double, |x| < ~3.5e15); the table below holds to 1e6 and
  1e15, float error grows slowly above 1e6, and past the exact range results
  stay finite and in range but lose all accuracy.
* pow: ``exp(y * log|x|)``.  double: ``log`` as a double-double (fdlibm's
  ``log(1+f) = 2s + s R(s^2)``) and the product's rounding error fed into
  ``exp``; float: the double ``log`` and ``exp`` above on widened operands,
  rounded once at the end.  C99/NumPy special cases
  (negative base with integer exponent, zeros, infinities, ``pow(x, 0) = 1``,
  ``pow(1, y) = 1``) are applied with selects.

Accuracy, measured by tests/codegen/test_llvm_math.py (float32 against the
function in float64, float64 against ``np.longdouble``; max over ~1e6
samples spread over all magnitudes, scalar and vector code alike):

=========  ==================  ==================
function   float32             float64
=========  ==================  ==================
exp        1.0 ulp             1.0 ulp
log        0.8 ulp             0.8 ulp
tanh       1.3 ulp             1.3 ulp
sigmoid    2.2 ulp             2.3 ulp
sin, cos   1.7 ulp (|x|<1e6)   1.8 ulp (|x|<1e15)
tan        2.5 ulp (|x|<1e6)   2.5 ulp (|x|<1e15)
pow        0.5 ulp             1.3 ulp
erf        3.1e-7 abs/4.1e-7   2.2e-16 rel (1 ulp)
           rel (6 ulp near 1)
=========  ==================  ==================

Special values follow C99/NumPy: exp overflows to inf and underflows to
(subnormal, then) 0; log(0) = -inf, log(<0) = nan; tanh and erf saturate to
exactly +-1; sigmoid never produces nan from overflow; sin/cos/tan(+-inf) =
nan; signed zeros are kept (sin, tan, tanh, erf are odd).  Subnormal inputs
and results are handled, assuming the caller has not enabled FTZ/DAZ, and the
calling function must not carry ``no-nans-fp-math``/``no-infs-fp-math``
attributes (or fast-math flags that imply them), which would let LLVM delete
the special-value selects after inlining.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from llvmlite import ir

from .llvm_math_consts import (
    COS_P,
    COSF_P,
    ERF_PA,
    ERF_PP,
    ERF_QA,
    ERF_QQ,
    ERF_RA,
    ERF_RA_LIMIT,
    ERF_RB,
    ERF_SA,
    ERF_SB,
    ERFF_P,
    ERFF_Q,
    ERX,
    EXPD_U,
    EXPF_LN2,
    EXPF_P,
    LG,
    LN2_HI_D,
    LN2_LO_D,
    LOG2E,
    LOGF_P,
    PIO2_D,
    PIO2_F,
    SIN_P,
    SINF_P,
    SQRTHF,
    TAN_P,
    TAN_Q,
    TANF_P,
    TANH_P,
    TANH_Q,
    TANHF_P,
    TWO_OVER_PI,
)

__all__ = ["MATH_FUNCTIONS", "emit_math"]

# Functions that are one intrinsic, emitted inline.
_INLINE = {"sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "round": "roundeven", "abs": "fabs"}

# ---------------------------------------------------------------------------
# The emitter: typed arithmetic on one float/double scalar or vector type
# ---------------------------------------------------------------------------


def _suffix(ty: ir.Type) -> str:
    """LLVM's overload suffix for a type: f32, f64, v8f32, ..."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_suffix(ty.element)}"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    raise TypeError(f"llvm_math: unsupported type {ty}")


def _int_suffix(ty: ir.Type) -> str:
    """LLVM's overload suffix for i32 lanes: i32, v8i32, ..."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}i32"
    return "i32"


@functools.cache
def _native_ldexp(triple: str) -> bool:
    """Whether ``llvm.ldexp`` is one instruction for modules of ``triple``:
    on the host, with AVX-512F and VL (``vscalef`` at every width); anywhere else LLVM may expand it
    into calls of libm's ``ldexp``, which the JIT does not link."""
    import llvmlite.binding as llvm

    if triple != llvm.get_process_triple() or not triple.startswith("x86_64"):
        return False
    try:
        features = llvm.get_host_cpu_features()
        return bool(features.get("avx512f", False) and features.get("avx512vl", False))
    except RuntimeError:
        return False


class _Emit:
    """Arithmetic helpers for one floating type (scalar or vector) at a builder."""

    def __init__(self, b: ir.IRBuilder, ty: ir.Type):
        self.b = b
        self.ty = ty
        self.lanes = ty.count if isinstance(ty, ir.VectorType) else 0
        elem = ty.element if self.lanes else ty
        if not isinstance(elem, (ir.FloatType, ir.DoubleType)):
            raise TypeError(f"llvm_math: unsupported type {ty}")
        self.is64 = isinstance(elem, ir.DoubleType)
        self.ity = self.lanes_of(ir.IntType(64 if self.is64 else 32))  # same-width int
        self.i32 = self.lanes_of(ir.IntType(32))

    def lanes_of(self, t: ir.Type) -> ir.Type:
        return ir.VectorType(t, self.lanes) if self.lanes else t

    # constants
    def f(self, v: float) -> ir.Constant:
        return ir.Constant(self.ty, v)

    def i(self, v: int, ty: ir.Type | None = None) -> ir.Constant:
        return ir.Constant(ty or self.ity, v)

    # float arithmetic (no fast-math flags: inf/nan semantics matter here)
    def add(self, a: ir.Value, c: ir.Value | float) -> ir.Value:
        return self.b.fadd(a, self._v(c))

    def sub(self, a: ir.Value | float, c: ir.Value | float) -> ir.Value:
        return self.b.fsub(self._v(a), self._v(c))

    def mul(self, a: ir.Value, c: ir.Value | float) -> ir.Value:
        return self.b.fmul(a, self._v(c))

    def div(self, a: ir.Value | float, c: ir.Value) -> ir.Value:
        return self.b.fdiv(self._v(a), c)

    def neg(self, a: ir.Value) -> ir.Value:
        return self.b.fneg(a)

    def _v(self, v: ir.Value | float) -> ir.Value:
        return self.f(v) if isinstance(v, (int, float)) else v

    def intr(self, name: str, *args: ir.Value) -> ir.Value:
        """Call ``llvm.<name>`` overloaded on the argument type."""
        ty = args[0].type
        module = self.b.module
        fname = f"llvm.{name}.{_suffix(ty)}"
        fn = module.globals.get(fname)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(ty, [a.type for a in args]), fname)
        return self.b.call(fn, list(args))

    def fma(self, a: ir.Value, c: ir.Value | float, d: ir.Value | float) -> ir.Value:
        return self.intr("fma", a, self._v(c), self._v(d))

    def abs(self, a: ir.Value) -> ir.Value:
        return self.intr("fabs", a)

    def floor(self, a: ir.Value) -> ir.Value:
        return self.intr("floor", a)

    def roundeven(self, a: ir.Value) -> ir.Value:
        return self.intr("roundeven", a)

    def copysign(self, mag: ir.Value, sign: ir.Value) -> ir.Value:
        return self.intr("copysign", mag, sign)

    def poly(self, x: ir.Value, coeffs: Sequence[float]) -> ir.Value:
        """Evaluate the polynomial with ``coeffs`` from the highest degree down.

        Short ones use Horner's rule; from degree 4 on, Estrin's scheme
        (pairs ``c_i + c_{i+1} x`` combined with ``x^2``, ``x^4``...), whose
        dependency chain grows with log(degree) instead of the degree, for a
        few more multiplications (a few percent faster on exp and log here;
        the accuracy in the module docstring is measured with it).
        """
        if len(coeffs) < 5:
            acc = self.f(coeffs[0])
            for c in coeffs[1:]:
                acc = self.fma(acc, x, c)
            return acc
        low_first = list(reversed(coeffs))
        terms = [
            self.fma(self.f(low_first[i + 1]), x, low_first[i])
            if i + 1 < len(low_first)
            else self.f(low_first[i])
            for i in range(0, len(low_first), 2)
        ]
        power = self.mul(x, x)
        while len(terms) > 1:
            terms = [
                self.fma(terms[i + 1], power, terms[i]) if i + 1 < len(terms) else terms[i]
                for i in range(0, len(terms), 2)
            ]
            if len(terms) > 1:
                power = self.mul(power, power)
        return terms[0]

    def horner(self, x: ir.Value, coeffs: Sequence[float]) -> ir.Value:
        """Horner's rule for ``coeffs`` from the highest degree down: one FMA per
        coefficient, no powers of ``x``.  In a loop over many elements (the
        vectoriser's, or a kernel's vector loop) the longer dependency chain is
        hidden and the fewer operations win: ``exp`` with AVX-512 and float
        ``erf`` use it (docs/cpu-backend.md, "Intrinsics")."""
        acc = self.f(coeffs[0])
        for c in coeffs[1:]:
            acc = self.fma(acc, x, c)
        return acc

    # comparisons and selection
    def cmp(self, op: str, a: ir.Value, c: ir.Value | float) -> ir.Value:
        """Ordered comparison: false when either side is NaN."""
        return self.b.fcmp_ordered(op, a, self._v(c))

    def ucmp(self, op: str, a: ir.Value, c: ir.Value | float) -> ir.Value:
        """Unordered comparison: true when either side is NaN."""
        return self.b.fcmp_unordered(op, a, self._v(c))

    def isnan(self, a: ir.Value) -> ir.Value:
        return self.b.fcmp_unordered("uno", a, a)

    def sel(self, cond: ir.Value, a: ir.Value | float, c: ir.Value | float) -> ir.Value:
        return self.b.select(cond, self._v(a), self._v(c))

    def clamp_keeping_nan(self, x: ir.Value, lo: float, hi: float) -> ir.Value:
        """Clamp to [lo, hi]; NaN stays NaN (ordered comparisons are false)."""
        x = self.sel(self.cmp("<", x, lo), lo, x)
        return self.sel(self.cmp(">", x, hi), hi, x)

    def clamp(self, x: ir.Value, lo: float, hi: float) -> ir.Value:
        """Clamp to [lo, hi] with NaN going to ``lo`` (safe to convert to int)."""
        x = self.sel(self.ucmp("<", x, lo), lo, x)
        return self.sel(self.cmp(">", x, hi), hi, x)

    # integer views
    def bits(self, a: ir.Value) -> ir.Value:
        return self.b.bitcast(a, self.ity)

    def from_bits(self, a: ir.Value) -> ir.Value:
        return self.b.bitcast(a, self.ty)

    def to_i32(self, a: ir.Value) -> ir.Value:
        """Float holding an integer (|a| < 2^31) to i32 lanes (cvttps2dq / cvttpd2dq)."""
        return self.b.fptosi(a, self.i32)

    def from_i32(self, a: ir.Value) -> ir.Value:
        return self.b.sitofp(a, self.ty)

    def signbit(self, a: ir.Value) -> ir.Value:
        return self.b.icmp_signed("<", self.bits(a), self.i(0))

    def pow2(self, k: ir.Value) -> ir.Value:
        """2^k for i32 lanes ``k`` inside the normal exponent range."""
        if self.is64:
            biased = self.b.sext(self.b.add(k, self.i(1023, self.i32)), self.ity)
            return self.from_bits(self.b.shl(biased, self.i(52)))
        return self.from_bits(self.b.shl(self.b.add(k, self.i(127)), self.i(23)))

    def scale(self, x: ir.Value, k: ir.Value) -> ir.Value:
        """x * 2^k, for |k| up to twice the exponent range.

        One ``llvm.ldexp`` where the host scales in one instruction (AVX-512's
        ``vscalefps``/``vscalefpd``, every width: rounded once, overflow to inf
        and subnormal results as C's ``ldexp``); elsewhere, where LLVM would
        call libm's ``ldexp`` per lane, two exact exponent-bit steps.
        """
        if _native_ldexp(self.b.module.triple):
            name = f"llvm.ldexp.{_suffix(self.ty)}.{_int_suffix(self.i32)}"
            fn = self.b.module.globals.get(name)
            if fn is None:
                fn = ir.Function(self.b.module, ir.FunctionType(self.ty, [self.ty, self.i32]), name)
            return self.b.call(fn, [x, k])
        k1 = self.b.ashr(k, self.i(1, self.i32))
        k2 = self.b.sub(k, k1)
        return self.mul(self.mul(x, self.pow2(k1)), self.pow2(k2))

    def has_scalef(self) -> bool:
        """Whether :meth:`scalef` exists here: an AVX-512 host and a vector of
        128, 256 or 512 bits (scalars keep ``llvm.ldexp``, which LLVM's loop
        vectoriser can widen; a target intrinsic would stop it)."""
        width = self.lanes * (64 if self.is64 else 32)
        return _native_ldexp(self.b.module.triple) and width in (128, 256, 512)

    def scalef(self, x: ir.Value, n: ir.Value) -> ir.Value:
        """x * 2^floor(n) for float lanes ``n`` in one AVX-512 ``vscalef`` (only
        where :meth:`has_scalef`): NaN in either gives NaN, no integer detour."""
        width = self.lanes * (64 if self.is64 else 32)
        kind = "pd" if self.is64 else "ps"
        mask = ir.IntType(max(8, self.lanes))
        name = f"llvm.x86.avx512.mask.scalef.{kind}.{width}"
        return self._scalef_call(name, self.ty, x, n, mask, rounding=width == 512)

    def _scalef_call(
        self, name: str, ty: ir.Type, x: ir.Value, n: ir.Value, mask: ir.IntType, rounding: bool
    ) -> ir.Value:
        args = [ty, ty, ty, mask] + ([ir.IntType(32)] if rounding else [])
        fn = self.b.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.b.module, ir.FunctionType(ty, args), name)
        vals = [x, n, ir.Constant(ty, None), ir.Constant(mask, -1)]
        if rounding:
            vals.append(ir.Constant(ir.IntType(32), 4))  # _MM_FROUND_CUR_DIRECTION
        return self.b.call(fn, vals)


# ---------------------------------------------------------------------------
# The functions
# ---------------------------------------------------------------------------


def _exp(e: _Emit, x: ir.Value, lo: ir.Value | None = None) -> ir.Value:
    """e^(x + lo); ``lo`` is an optional tiny correction (double-double input)."""
    coeffs: tuple[float, ...]
    if e.is64:
        lo_b, hi_b = -746.0, 710.0
        ln2_hi, ln2_lo, coeffs = LN2_HI_D, LN2_LO_D, EXPD_U
    else:
        lo_b, hi_b = -104.0, 89.0
        (ln2_hi, ln2_lo), coeffs = EXPF_LN2, EXPF_P
    native = e.has_scalef()
    if not native and not e.is64 and lo is None and _native_ldexp(e.b.module.triple):
        return _exp_f32_ldexp(e, x, lo_b, hi_b, ln2_hi, ln2_lo, coeffs)
    # Past the bounds e^x is 0 or inf in this precision.  With ``vscalef``, n
    # stays a float and a NaN flows through every step; otherwise clamping keeps
    # n an in-range integer (NaN is clamped too and patched back at the end).
    xc = e.clamp_keeping_nan(x, lo_b, hi_b) if native else e.clamp(x, lo_b, hi_b)
    n = e.roundeven(e.mul(xc, LOG2E))
    r = e.fma(n, -ln2_hi, xc)
    r = e.fma(n, -ln2_lo, r)
    if lo is not None:
        r = e.add(r, e.sel(e.cmp("==", xc, x), lo, 0.0))
    u = e.horner(r, coeffs) if native else e.poly(r, coeffs)
    p = e.add(e.fma(e.mul(r, r), u, r), 1.0)
    if native:
        return e.scalef(p, n)
    return e.sel(e.isnan(x), x, e.scale(p, e.to_i32(n)))


# 1.5 * 2^23: added to |v| < 2^22 it rounds v to an integer (ties to even), which
# the sum's low mantissa bits then hold as a two's-complement offset.
_ROUND_F32 = 12582912.0
_ROUND_F32_BITS = 0x4B400000


def _exp_f32_ldexp(
    e: _Emit,
    x: ir.Value,
    lo_b: float,
    hi_b: float,
    ln2_hi: float,
    ln2_lo: float,
    coeffs: Sequence[float],
) -> ir.Value:
    """float e^x where ``llvm.ldexp`` is one instruction (AVX-512's ``vscalef``)
    and the code is scalar (widened by LLVM's loop vectoriser): ``n`` rounded by
    adding 1.5 * 2^23, its integer read from the sum's bits, so no float-to-int
    conversion runs and a NaN flows through every step into ``ldexp`` (NaN in,
    NaN out) with no select to patch it back.  Same bounds, reduction and
    polynomial as :func:`_exp`; the integer taken for a NaN is some value,
    never poison."""
    xc = e.clamp_keeping_nan(x, lo_b, hi_b)
    t = e.fma(xc, LOG2E, _ROUND_F32)
    n = e.sub(t, _ROUND_F32)
    k = e.b.sub(e.bits(t), e.i(_ROUND_F32_BITS))
    r = e.fma(n, -ln2_hi, xc)
    r = e.fma(n, -ln2_lo, r)
    p = e.add(e.fma(e.mul(r, r), e.horner(r, coeffs), r), 1.0)
    return e.scale(p, k)


def _log_specials(e: _Emit, x: ir.Value, r: ir.Value) -> ir.Value:
    r = e.sel(e.cmp("==", x, float("inf")), float("inf"), r)
    r = e.sel(e.cmp("==", x, 0.0), float("-inf"), r)
    return e.sel(e.ucmp("<", x, 0.0), float("nan"), r)


def _log_f32(e: _Emit, x: ir.Value) -> ir.Value:
    b = e.b
    sub = e.cmp("<", x, 1.1754943508222875e-38)  # subnormal (or <= 0: patched later)
    xs = e.sel(sub, e.mul(x, 2.0**25), x)
    adj = b.select(sub, e.i(-25 - 126), e.i(-126))
    ix = e.bits(xs)
    ex = b.add(b.and_(b.lshr(ix, e.i(23)), e.i(0xFF)), adj)
    m = e.from_bits(b.or_(b.and_(ix, e.i(0x007FFFFF)), e.i(0x3F000000)))  # [0.5, 1)
    low = e.cmp("<", m, SQRTHF)
    fe = e.sub(e.from_i32(ex), e.sel(low, 1.0, 0.0))
    m = e.sub(e.sel(low, e.add(m, m), m), 1.0)
    z = e.mul(m, m)
    y = e.mul(e.mul(e.poly(m, LOGF_P), m), z)
    y = e.fma(fe, EXPF_LN2[1], y)
    y = e.fma(z, -0.5, y)
    r = e.fma(fe, EXPF_LN2[0], e.add(m, y))
    return _log_specials(e, x, r)


def _log_reduce_f64(e: _Emit, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """x = 2^k m with m in [sqrt(2)/2, sqrt(2)), for finite x > 0 (fdlibm/musl)."""
    b = e.b
    sub = e.cmp("<", x, 2.2250738585072014e-308)
    xs = e.sel(sub, e.mul(x, 2.0**54), x)
    adj = b.select(sub, e.i(-54 - 0x3FF, e.i32), e.i(-0x3FF, e.i32))
    ix = b.add(e.bits(xs), e.i((0x3FF00000 - 0x3FE6A09E) << 32))
    k = b.add(b.trunc(b.lshr(ix, e.i(52)), e.i32), adj)
    ix = b.add(b.and_(ix, e.i(0x000FFFFFFFFFFFFF)), e.i(0x3FE6A09E << 32))
    return e.from_bits(ix), k


def _lg_r(e: _Emit, z: ir.Value) -> ir.Value:
    """fdlibm's R(z) = Lg1 z + ... + Lg7 z^7, split in odd/even halves."""
    w = e.mul(z, z)
    t1 = e.mul(w, e.poly(w, (LG[5], LG[3], LG[1])))
    t2 = e.mul(z, e.poly(w, (LG[6], LG[4], LG[2], LG[0])))
    return e.add(t2, t1)


def _log_f64(e: _Emit, x: ir.Value) -> ir.Value:
    m, k = _log_reduce_f64(e, x)
    f = e.sub(m, 1.0)
    hfsq = e.mul(e.mul(f, f), 0.5)
    s = e.div(f, e.add(f, 2.0))
    r = _lg_r(e, e.mul(s, s))
    dk = e.from_i32(k)
    out = e.mul(s, e.add(hfsq, r))
    out = e.fma(dk, LN2_LO_D, out)
    out = e.add(e.sub(out, hfsq), f)
    out = e.fma(dk, LN2_HI_D, out)
    return _log_specials(e, x, out)


def _log(e: _Emit, x: ir.Value) -> ir.Value:
    return _log_f64(e, x) if e.is64 else _log_f32(e, x)


def _two_sum(e: _Emit, a: ir.Value, c: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(s, err) with s + err == a + c exactly (Knuth)."""
    s = e.add(a, c)
    bb = e.sub(s, a)
    err = e.add(e.sub(a, e.sub(s, bb)), e.sub(c, bb))
    return s, err


def _log_dd(e: _Emit, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """log(x) as hi + lo (relative error ~2^-60) for finite x > 0, double only."""
    m, k = _log_reduce_f64(e, x)
    f = e.sub(m, 1.0)  # exact
    d = e.add(f, 2.0)
    d_lo = e.add(e.sub(2.0, d), f)  # 2 + f == d + d_lo exactly (|f| < 1)
    inv = e.div(1.0, d)
    s = e.mul(f, inv)  # s + s_lo == f / (2 + f) to ~2^-104, whatever s's rounding
    s_lo = e.mul(e.sub(e.fma(e.neg(s), d, f), e.mul(s, d_lo)), inv)
    r = _lg_r(e, e.mul(s, s))
    dk = e.from_i32(k)
    hi, err = _two_sum(e, e.mul(dk, LN2_HI_D), e.add(s, s))  # both products exact
    lo = e.fma(dk, LN2_LO_D, e.fma(s, r, e.add(s_lo, s_lo)))
    lo = e.add(err, lo)
    h = e.add(hi, lo)
    return h, e.sub(lo, e.sub(h, hi))


def _pow(e: _Emit, x: ir.Value, y: ir.Value, extra_precise: bool = True) -> ir.Value:
    """x^y in double; C99 special cases via selects.

    ``extra_precise`` carries log|x| and y log|x| as double-doubles, needed
    for a double result; a float result only needs plain double arithmetic.
    """
    b = e.b
    a = e.abs(x)
    finite_pos = b.and_(e.cmp(">", a, 0.0), e.cmp("<", a, float("inf")))
    a_safe = e.sel(finite_pos, a, 1.0)
    if extra_precise:
        lh, ll = _log_dd(e, a_safe)
        ph = e.mul(y, lh)
        r = _exp(e, ph, e.fma(y, ll, e.fma(y, lh, e.neg(ph))))
    else:
        r = _exp(e, e.mul(y, _log_f64(e, a_safe)))
    # |x| is 0 or inf: the log above was of 1.
    r = e.sel(e.cmp("==", a, 0.0), e.sel(e.cmp("<", y, 0.0), float("inf"), 0.0), r)
    r = e.sel(e.cmp("==", a, float("inf")), e.sel(e.cmp("<", y, 0.0), 0.0, float("inf")), r)
    y_int = e.cmp("==", e.floor(y), y)  # true for +-inf, false for NaN
    half = e.mul(y, 0.5)
    y_odd = b.and_(y_int, e.cmp("!=", e.floor(half), half))
    r = e.sel(b.and_(e.signbit(x), y_odd), e.neg(r), r)
    neg_finite = b.and_(e.cmp("<", x, 0.0), e.cmp(">", x, float("-inf")))
    r = e.sel(b.and_(neg_finite, b.not_(y_int)), float("nan"), r)
    r = e.sel(b.or_(e.isnan(x), e.isnan(y)), float("nan"), r)
    one = b.or_(e.cmp("==", y, 0.0), e.cmp("==", x, 1.0))
    one = b.or_(one, b.and_(e.cmp("==", a, 1.0), e.cmp("==", e.abs(y), float("inf"))))
    return e.sel(one, 1.0, r)


def _pow_any(e: _Emit, x: ir.Value, y: ir.Value) -> ir.Value:
    if e.is64:
        return _pow(e, x, y)
    # float: run the double algorithm, then round once.
    dty = e.lanes_of(ir.DoubleType())
    d = _Emit(e.b, dty)
    r = _pow(d, e.b.fpext(x, dty), e.b.fpext(y, dty), extra_precise=False)
    return e.b.fptrunc(r, e.ty)


def _tanh(e: _Emit, x: ir.Value) -> ir.Value:
    a = e.abs(x)
    z = e.mul(a, a)
    if e.is64:
        q = e.div(e.poly(z, TANH_P), e.poly(z, TANH_Q))
    else:
        q = e.poly(z, TANHF_P)
    small = e.fma(e.mul(a, z), q, a)
    big = e.sub(1.0, e.div(2.0, e.add(_exp(e, e.add(a, a)), 1.0)))
    return e.copysign(e.sel(e.cmp("<", a, 0.625), small, big), x)


def _sigmoid(e: _Emit, x: ir.Value) -> ir.Value:
    t = _exp(e, e.neg(e.abs(x)))
    num = e.sel(e.cmp(">=", x, 0.0), 1.0, t)
    return e.div(num, e.add(t, 1.0))


def _erf_f32(e: _Emit, x: ir.Value) -> ir.Value:
    xc = e.sel(e.cmp(">", x, 4.0), 4.0, x)
    xc = e.sel(e.cmp("<", xc, -4.0), -4.0, xc)
    z = e.mul(xc, xc)
    # x * (P/Q), not (x P)/Q: keeps subnormal x from flushing to zero.
    r = e.abs(e.mul(xc, e.div(e.horner(z, ERFF_P), e.horner(z, ERFF_Q))))
    return e.copysign(e.sel(e.cmp(">", r, 1.0), 1.0, r), x)


def _erf_f64(e: _Emit, x: ir.Value) -> ir.Value:
    """fdlibm erf, every interval evaluated and the right one selected."""
    b = e.b
    a = e.abs(x)
    # [0, 0.84375): a + a P(a^2)/Q(a^2);  [0.84375, 1.25): erx + P(a-1)/Q(a-1).
    first = e.cmp("<", a, 0.84375)
    z = e.mul(a, a)
    s = e.sub(a, 1.0)
    num = e.sel(first, e.poly(z, ERF_PP), e.poly(s, ERF_PA))
    den = e.sel(first, e.poly(z, ERF_QQ), e.poly(s, ERF_QA))
    q = e.div(num, den)
    near = e.sel(first, e.fma(a, q, a), e.add(q, ERX))
    # [1.25, 6): 1 - exp(-a^2 - 0.5625 + R(1/a^2)/S(1/a^2)) / a, two coefficient sets.
    t = e.div(1.0, z)
    in_ra = e.cmp("<", a, ERF_RA_LIMIT)
    big_r = _poly_select(e, t, in_ra, ERF_RA, ERF_RB)
    big_s = _poly_select(e, t, in_ra, ERF_SA, ERF_SB)
    # a = hi + (a - hi) with hi's low 32 bits cleared, so -hi*hi - 0.5625 is exact.
    hi = e.from_bits(b.and_(e.bits(a), e.i(0xFFFFFFFF00000000)))
    corr = e.fma(e.sub(hi, a), e.add(hi, a), e.div(big_r, big_s))
    arg = e.add(e.fma(e.neg(hi), hi, -0.5625), corr)
    far = e.sub(1.0, e.div(_exp(e, arg), a))
    y = e.sel(e.cmp("<", a, 1.25), near, e.sel(e.cmp("<", a, 6.0), far, 1.0))
    y = e.sel(e.isnan(x), x, y)
    return e.copysign(y, x)


def _poly_select(
    e: _Emit, x: ir.Value, cond: ir.Value, ca: Sequence[float], cb: Sequence[float]
) -> ir.Value:
    """Horner with per-lane coefficients: ``ca`` where ``cond``, else ``cb``.

    The shorter list is padded with leading zeros.
    """
    pad = len(ca) - len(cb)
    cb = [0.0] * pad + list(cb) if pad > 0 else cb
    ca = [0.0] * -pad + list(ca) if pad < 0 else ca
    acc = e.sel(cond, ca[0], cb[0])
    for u, v in zip(ca[1:], cb[1:]):
        acc = e.fma(acc, x, e.sel(cond, u, v) if u != v else e.f(u))
    return acc


def _erf(e: _Emit, x: ir.Value) -> ir.Value:
    return _erf_f64(e, x) if e.is64 else _erf_f32(e, x)


def _reduce_pio2(e: _Emit, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """|x| = q pi/2 + r, |r| <= ~pi/4; returns (r, q mod 4 as i32, finite mask)."""
    a = e.abs(x)
    finite = e.cmp("<", a, float("inf"))
    a = e.sel(finite, a, 0.0)
    c1, c2, c3 = PIO2_D if e.is64 else PIO2_F
    q = e.roundeven(e.mul(a, TWO_OVER_PI))
    r = e.fma(q, -c1, a)  # exact while q < 2^22 (float) / 2^51 (double)
    r = e.fma(q, -c2, r)
    r = e.fma(q, -c3, r)
    # a * 2/pi is rounded (and 2/pi too), so q can be one off when a is near
    # an odd multiple of pi/4 and |r| a little over pi/4: far enough, in float,
    # to ruin tan.  Step once more in that case (r - c1 is exact again).
    pio4 = 0.7853981633974483
    step = e.sel(e.cmp(">", r, pio4), 1.0, e.sel(e.cmp("<", r, -pio4), -1.0, 0.0))
    q = e.add(q, step)
    r = e.fma(step, -c1, r)
    r = e.fma(step, -c2, r)
    r = e.fma(step, -c3, r)
    # Beyond the accurate range keep r bounded so results stay in range.
    r = e.sel(e.cmp(">", r, 0.8), 0.8, r)
    r = e.sel(e.cmp("<", r, -0.8), -0.8, r)
    quadrant = e.sub(q, e.mul(e.floor(e.mul(q, 0.25)), 4.0))  # exact, in 0..3
    return r, e.to_i32(quadrant), finite


def _sin_cos(e: _Emit, x: ir.Value, cosine: bool) -> ir.Value:
    b = e.b
    r, qi, finite = _reduce_pio2(e, x)
    z = e.mul(r, r)
    if e.is64:
        s = e.fma(e.mul(r, z), e.poly(z, SIN_P), r)
        c = e.fma(e.mul(z, z), e.poly(z, COS_P), e.fma(z, -0.5, 1.0))
    else:
        s = e.fma(e.mul(r, z), e.poly(z, SINF_P), r)
        c = e.fma(e.mul(z, z), e.poly(z, COSF_P), e.fma(z, -0.5, 1.0))
    if cosine:
        qi = b.add(qi, e.i(1, e.i32))
    odd = b.icmp_unsigned("!=", b.and_(qi, e.i(1, e.i32)), e.i(0, e.i32))
    neg = b.icmp_unsigned("!=", b.and_(qi, e.i(2, e.i32)), e.i(0, e.i32))
    res = e.sel(odd, c, s)
    res = e.sel(neg, e.neg(res), res)
    if not cosine:  # sin is odd: sin(x) = sign(x) sin(|x|), keeps sin(-0) = -0
        res = e.mul(res, e.copysign(e.f(1.0), x))
    return e.sel(finite, res, float("nan"))


def _tan(e: _Emit, x: ir.Value) -> ir.Value:
    b = e.b
    r, qi, finite = _reduce_pio2(e, x)
    z = e.mul(r, r)
    if e.is64:
        q = e.div(e.poly(z, TAN_P), e.poly(z, TAN_Q))
    else:
        q = e.poly(z, TANF_P)
    t = e.fma(e.mul(r, z), q, r)
    odd = b.icmp_unsigned("!=", b.and_(qi, e.i(1, e.i32)), e.i(0, e.i32))
    t = e.sel(odd, e.div(-1.0, t), t)
    t = e.mul(t, e.copysign(e.f(1.0), x))
    return e.sel(finite, t, float("nan"))


_Body = Callable[..., ir.Value]

_DEFINED: dict[str, tuple[int, _Body]] = {
    "exp": (1, lambda e, x: _exp(e, x)),
    "log": (1, _log),
    "tanh": (1, _tanh),
    "sigmoid": (1, _sigmoid),
    "erf": (1, _erf),
    "sin": (1, lambda e, x: _sin_cos(e, x, cosine=False)),
    "cos": (1, lambda e, x: _sin_cos(e, x, cosine=True)),
    "tan": (1, _tan),
    "pow": (2, _pow_any),
}

MATH_FUNCTIONS: frozenset[str] = frozenset(_DEFINED) | frozenset(_INLINE)


def _function(module: ir.Module, name: str, ty: ir.Type) -> ir.Function:
    """The module's ``stripeml.<name>.<type>`` definition, created on first use."""
    fname = f"stripeml.{name}.{_suffix(ty)}"
    fn = module.globals.get(fname)
    if fn is not None:
        return fn
    arity, body = _DEFINED[name]
    fn = ir.Function(module, ir.FunctionType(ty, [ty] * arity), fname)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    fn.attributes.add("readnone")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.ret(body(_Emit(b, ty), *fn.args))
    return fn


def emit_math(builder: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
    """Emit ``name(*args)`` at ``builder`` and return the result.

    ``name`` is one of ``MATH_FUNCTIONS``: ``exp log tanh sigmoid erf sin cos
    tan pow sqrt floor ceil round abs`` (``round`` is half-to-even, like
    ``numpy.round``).  All arguments share one type: ``float``, ``double`` or
    a vector of either.
    """
    if name not in MATH_FUNCTIONS:
        raise ValueError(f"llvm_math: unknown function {name!r}")
    ty = args[0].type
    _suffix(ty)  # rejects unsupported types early
    if any(a.type != ty for a in args):
        raise TypeError(f"llvm_math: {name} arguments differ in type")
    if name in _INLINE:
        if len(args) != 1:
            raise TypeError(f"llvm_math: {name} takes 1 argument, got {len(args)}")
        return _Emit(builder, ty).intr(_INLINE[name], args[0])
    arity, _ = _DEFINED[name]
    if len(args) != arity:
        raise TypeError(f"llvm_math: {name} takes {arity} argument(s), got {len(args)}")
    return builder.call(_function(builder.module, name, ty), list(args))
