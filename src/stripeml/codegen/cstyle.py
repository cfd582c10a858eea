"""Stripe -> C-like GPU kernels: the C-style base that OpenCL C and CUDA C share.

:class:`CStyle` prints types, literals, scalar intrinsics, aggregations and
helper functions in C; a dialect (:mod:`.opencl`, :mod:`.cuda`) sets only
class attributes: qualifiers, work-item ids, the barrier, the math functions'
float suffix, bit-cast spellings, what the source starts with (after
tinygrad's ``renderer/cstyle.py``).  :func:`generate` prints a whole program:

* every root-level kernel block becomes one kernel function whose parameters
  are the root buffers it uses (:mod:`.gpu_abi`), printed by
  :class:`.cstyle_kernel.KernelPrinter` (blocks, loops, statements,
  aggregation) once :mod:`.gpu_plan` has mapped its points onto work-groups
  and work-items (``naive``, or ``tiled``: :mod:`.gpu_tiled`);
* root ``special`` statements stay on the host (``GpuStep.special``);
* the source is the dialect's prelude, the index helpers ``sm_max`` /
  ``sm_min``, the helper functions the kernels asked for, then the kernels.
"""

from __future__ import annotations

import math
import struct

from ..errors import StripeError
from ..ir import dtypes
from ..ir.nodes import Block, Program, Scalar, Special
from .cpu_abi import root_buffers
from .cstyle_kernel import KernelPrinter
from .gpu_abi import GpuModule, GpuStep
from .plan import COMPARISONS, kernel_symbol

_CTYPES = {
    "bool": "uchar",
    "i8": "char",
    "i16": "short",
    "i32": "int",
    "i64": "long",
    "u8": "uchar",
    "u16": "ushort",
    "u32": "uint",
    "u64": "ulong",
    "f32": "float",
    "f64": "double",
}
_MATH = ("exp", "log", "sqrt", "tanh", "sin", "cos", "tan", "erf", "floor", "ceil", "pow")
#: Bitwise intrinsics as C operators, and on bool (logical: one byte holding 0 or 1).
_BITWISE = {"bit_and": "&", "bit_or": "|", "bit_xor": "^"}
_BOOL_BITWISE = {"bit_and": "&&", "bit_or": "||", "bit_xor": "!="}


class CStyle:
    """The C-like dialect: what OpenCL C and CUDA C print alike.

    The attributes' defaults are OpenCL C's spelling (C99 with address-space
    qualifiers); a dialect overrides the ones it spells differently.
    """

    name = "c"
    kernel_qualifier = "__kernel void"
    global_qualifier = "__global"
    local_decl = "__local"  # a group-shared array at kernel scope
    local_pointer = "__local"  # a pointer into group-shared memory
    restrict = "restrict"
    function_qualifier = "inline"
    group_id = "get_group_id(0)"
    local_id = "get_local_id(0)"
    barrier = "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"
    unroll = "#pragma unroll"
    u64_suffix = "UL"
    #: What every source starts with (typedefs), and what one that uses float64 adds.
    prelude = ""
    f64_prelude = ""
    #: Appended to a math function's name for float32 (C's ``expf``; "" where overloaded).
    f32_math_suffix = ""
    #: A float32 / float64 with a given bit pattern (``str.format`` of the bits).
    f32_from_bits = "as_float(0x{:08x}u)"
    f64_from_bits = "as_double(0x{:016x}UL)"
    #: C type names of the Stripe dtypes (bool is one byte in memory, like NumPy's).
    types: dict[str, str] = _CTYPES
    #: Reinterpreting bits: ``as_<type>(x)`` (the C type's name) in OpenCL C.
    reinterpret_cast = "as_{type}({x})"

    def header(self, uses_f64: bool) -> str:
        """What the source starts with (extensions, typedefs)."""
        return "\n".join(p for p in (self.prelude, self.f64_prelude if uses_f64 else "") if p)

    def ctype(self, dt: str) -> str:
        """The C type of Stripe dtype ``dt`` in memory."""
        if dt == "f16":
            raise StripeError(f"{self.name}: float16 is not supported yet")
        return self.types[dt]

    def reg_type(self, dt: str) -> str:
        """The type of a scalar in a register (bool computes as ``bool``)."""
        return "bool" if dt == "bool" else self.ctype(dt)

    def math_name(self, op: str, dt: str) -> str:
        """The math library function for ``op`` on ``dt``."""
        name = "rint" if op == "round" else op
        return name + self.f32_math_suffix if dt == "f32" else name

    def float_from_bits(self, dt: str, bits: int) -> str:
        """A float of ``dt`` with this bit pattern (used for inf and nan)."""
        return (self.f32_from_bits if dt == "f32" else self.f64_from_bits).format(bits)

    # -- literals ----------------------------------------------------------------
    def literal(self, dt: str, value: Scalar) -> str:
        """``value`` as a C literal of ``dt``: floats exact in hexadecimal, inf and
        nan from their bits, integers wrapped to ``dt``'s width and cast to it."""
        if dt == "bool":
            return "true" if value else "false"
        if dtypes.is_float(dt):
            v = float(value)
            if dt == "f32":
                v = float(struct.unpack("<f", struct.pack("<f", v))[0]) if math.isfinite(v) else v
            if not math.isfinite(v):
                if dt == "f32":
                    return self.float_from_bits(dt, struct.unpack("<I", struct.pack("<f", v))[0])
                return self.float_from_bits(dt, struct.unpack("<Q", struct.pack("<d", v))[0])
            text = v.hex()  # exact: C99 / C++17 hexadecimal floating literals
            return f"({text}f)" if dt == "f32" else f"({text})"
        bits = dtypes.bits(dt)
        v = int(value) & ((1 << bits) - 1)
        if dtypes.is_signed(dt) and v >= 1 << (bits - 1):
            v -= 1 << bits
        if -(1 << 31) < v < (1 << 31):
            return f"(({self.ctype(dt)}){v})"
        u = v & ((1 << 64) - 1)
        return f"(({self.ctype(dt)})0x{u:x}{self.u64_suffix})"

    def identity(self, agg: str, dt: str) -> str:
        """The neutral element of an aggregation (add: -0.0, so -0.0 + x == x exactly)."""
        if agg == "add":
            return self.literal(dt, -0.0 if dtypes.is_float(dt) else 0)
        if agg == "mul":
            return self.literal(dt, 1)
        big = agg == "min"
        if dtypes.is_float(dt):
            return self.literal(dt, math.inf if big else -math.inf)
        if dt == "bool":
            return self.literal(dt, big)
        bits = dtypes.bits(dt)
        if not dtypes.is_signed(dt):
            return self.literal(dt, (1 << bits) - 1 if big else 0)
        return self.literal(dt, (1 << (bits - 1)) - 1 if big else -(1 << (bits - 1)))

    # -- scalar operations ---------------------------------------------------------
    def combine(self, agg: str, a: str, b: str, dt: str) -> str:
        """``a (agg) b``: the aggregation of one more value into an accumulator."""
        if dt == "bool":
            return f"({a} || {b})" if agg in ("add", "max") else f"({a} && {b})"
        if agg == "add":
            return self.arith("+", a, b, dt)
        if agg == "mul":
            return self.arith("*", a, b, dt)
        return self.minmax(agg, a, b, dt)

    def _wrapping(self, dt: str) -> str | None:
        """The unsigned C type that 32- and 64-bit signed arithmetic is done in.

        C leaves signed overflow undefined (and compilers assume it away), while
        NumPy wraps; unsigned arithmetic wraps by definition.  Narrower types
        are promoted to int, where their sums and products cannot overflow."""
        if dtypes.is_signed(dt) and not dtypes.is_float(dt) and dtypes.bits(dt) >= 32:
            return self.ctype("u" + dt[1:])
        return None

    def arith(self, sym: str, a: str, b: str, dt: str) -> str:
        """``a sym b`` (+ - *) in ``dt``, wrapping on overflow as NumPy does."""
        t = self.ctype(dt)
        ut = self._wrapping(dt)
        if ut is None:
            return f"({t})({a} {sym} {b})"
        return f"({t})(({ut})({a}) {sym} ({ut})({b}))"

    def minmax(self, op: str, a: str, b: str, dt: str) -> str:
        """``max(a, b)`` or ``min(a, b)``; on floats a NaN operand wins."""
        cmp = ">" if op == "max" else "<"
        if dtypes.is_float(dt):  # NaN-propagating, like NumPy's maximum/minimum
            return f"(({a}) != ({a}) ? ({a}) : (({b}) != ({b}) ? ({b}) : (({a}) {cmp}= ({b}) ? ({a}) : ({b}))))"
        return f"(({a}) {cmp} ({b}) ? ({a}) : ({b}))"

    def intrinsic(self, op: str, args: list[str], in_dts: list[str], dt: str, need) -> str:
        """The C expression of Stripe intrinsic ``op``; ``need(name, dt)`` requests a helper."""
        t = self.ctype(dt) if dt != "bool" else "bool"
        if op == "cast":
            return self.cast(args[0], in_dts[0], dt, need)
        if op == "bitcast":
            return self.bitcast(args[0], in_dts[0], dt)
        if op == "ident":
            return args[0]
        if op == "select":
            return f"({args[0]} ? {args[1]} : {args[2]})"
        if op in COMPARISONS:
            return f"({args[0]} {COMPARISONS[op]} {args[1]})"
        if op == "and":
            return f"({args[0]} && {args[1]})"
        if op == "or":
            return f"({args[0]} || {args[1]})"
        if op == "not":
            return f"(!{args[0]})"
        if op in _BITWISE:  # C promotes narrow operands to int: the cast takes the low bits
            if dt == "bool":
                return f"({args[0]} {_BOOL_BITWISE[op]} {args[1]})"
            return f"({t})({args[0]} {_BITWISE[op]} {args[1]})"
        if op == "bit_not":  # ~ of a bool (promoted to int 1) would be -2, still true
            return f"(!{args[0]})" if dt == "bool" else f"({t})(~{args[0]})"
        if op in ("shl", "shr"):
            return f"{need(op, dt)}({args[0]}, {args[1]})"
        if op == "dot4":
            return f"{need('dot4', dt)}({args[0]}, {args[1]})"
        if dt == "bool":
            table = {"add": "||", "mul": "&&", "sub": "!=", "max": "||", "min": "&&"}
            if op in table:
                return f"({args[0]} {table[op]} {args[1]})"
            if op in ("neg", "abs", "relu"):
                return args[0]
            raise StripeError(f"{self.name}: intrinsic {op} on bool is not supported")
        fl = dtypes.is_float(dt)
        if op in ("add", "sub", "mul"):
            return self.arith({"add": "+", "sub": "-", "mul": "*"}[op], args[0], args[1], dt)
        if op == "div":
            if fl:
                return f"({args[0]} / {args[1]})"
            return f"{need('div', dt)}({args[0]}, {args[1]})"
        if op == "mod":
            return f"{need('mod', dt)}({args[0]}, {args[1]})"
        ut = self._wrapping(dt)
        if op == "neg":
            if ut is not None:  # -MIN wraps to MIN
                return f"({t})(({ut})0 - ({ut})({args[0]}))"
            return f"({t})(-({args[0]}))"
        if op == "abs":
            if fl:
                return f"{self.math_name('fabs', dt)}({args[0]})"
            if not dtypes.is_signed(dt):
                return args[0]
            if ut is not None:  # abs(MIN) is MIN, as in NumPy
                x = args[0]
                return f"({t})(({x}) < 0 ? ({ut})0 - ({ut})({x}) : ({ut})({x}))"
            return f"({t})({args[0]} < 0 ? -{args[0]} : {args[0]})"
        if op in ("max", "min"):
            return self.minmax(op, args[0], args[1], dt)
        if op == "relu":
            return self.minmax("max", args[0], self.literal(dt, 0), dt)
        if fl and op == "sigmoid":
            one = self.literal(dt, 1.0)
            return f"({one} / ({one} + {self.math_name('exp', dt)}(-({args[0]}))))"
        if fl and (op in _MATH or op == "round"):
            return f"{self.math_name(op, dt)}({', '.join(args)})"
        raise StripeError(f"{self.name}: intrinsic {op} on {dt} is not supported")

    def cast(self, x: str, src: str, dst: str, need) -> str:
        """NumPy ``astype``: float -> int as x86 does it (NaN, out of range: the minimum)."""
        if src == dst:
            return x
        if dst == "bool":
            return f"({x} != 0)"
        if src == "bool":
            return f"(({self.ctype(dst)})({x} ? 1 : 0))"
        if dtypes.is_float(src) and not dtypes.is_float(dst):
            return f"{need('f2i', dst, src)}({x})"
        return f"(({self.ctype(dst)}){x})"

    def bitcast(self, x: str, src: str, dst: str) -> str:
        """The bits of ``x`` (of ``src``) as ``dst``, of the same width: a bool is the
        byte 0 or 1, and integers convert with their bits kept (two's complement)."""
        t = self.ctype(dst)
        if src == dst:
            return x
        if src == "bool":
            return f"(({t})({x} ? 1 : 0))"
        if not dtypes.is_float(src) and not dtypes.is_float(dst):
            return f"(({t}){x})"
        return self.reinterpret(x, src, dst)

    def reinterpret(self, x: str, src: str, dst: str) -> str:
        """A float's bits as an integer of its width, or an integer's as a float."""
        return self.reinterpret_cast.format(type=self.ctype(dst), x=x)

    # -- helper functions ------------------------------------------------------------
    def helper(self, kind: str, dt: str, src: str = "") -> tuple[str, str]:
        """(name, definition) of a helper function the kernels call."""
        fq = self.function_qualifier
        t = self.ctype(dt)
        if kind in ("div", "mod") and dtypes.is_float(dt):
            # NumPy's remainder: fmod, moved into the divisor's sign; a zero remainder is
            # a zero with the divisor's sign (fmod's zero has the dividend's).  A zero
            # divisor answers (a * b) / b, NaN computed at run time: PoCL folds fmod(a,
            # 0.0) to a constant NaN, and exp of that constant to finite garbage
            # (exp(A % 0.0): 6.2e17 for one or two work-items; a literal NaN, always).
            name = f"sm_fmod_{dt}"
            fmod = self.math_name("fmod", dt)
            copysign = self.math_name("copysign", dt)
            body = (
                f"{fq} {t} {name}({t} a, {t} b) {{ if (b == 0) return (a * b) / b; "
                f"{t} r = {fmod}(a, b); "
                f"if (r == 0) return {copysign}({self.literal(dt, 0.0)}, b); "
                f"return ((r < 0) != (b < 0)) ? r + b : r; }}"
            )
            return name, body
        if kind in ("div", "mod"):
            # NumPy's floor_divide / remainder; a zero divisor gives 0.  C's a / b and a % b
            # are undefined for b == 0 and for MIN / -1, so both are answered first, and
            # -a is taken in the unsigned type (wraps: MIN / -1 == MIN, as NumPy).
            name = f"sm_{kind}_{dt}"
            signed = dtypes.is_signed(dt)
            if kind == "div":
                ut = self.ctype("u" + dt[1:]) if signed else t
                neg1 = f"if (b == ({t})-1) return ({t})(({ut})0 - ({ut})a); " if signed else ""
                adj = "if (r != 0 && ((r < 0) != (b < 0))) q -= 1; " if signed else ""
                body = (
                    f"{fq} {t} {name}({t} a, {t} b) {{ if (b == 0) return 0; {neg1}"
                    f"{t} q = ({t})(a / b); {t} r = ({t})(a % b); {adj}return q; }}"
                )
            else:
                neg1 = "if (b == -1) return 0; " if signed else ""
                adj = "if (r != 0 && ((r < 0) != (b < 0))) r += b; " if signed else ""
                body = (
                    f"{fq} {t} {name}({t} a, {t} b) {{ if (b == 0) return 0; {neg1}"
                    f"{t} r = ({t})(a % b); {adj}return r; }}"
                )
            return name, body
        if kind in ("shl", "shr"):
            return self._shift_helper(kind, dt)
        if kind == "f2i":
            name = f"sm_{src}_to_{dt}"
            s = self.ctype(src)
            bits = dtypes.bits(dt)
            wide = 64 if bits == 64 or dt == "u32" else 32
            w = self.ctype(f"i{wide}")
            lim = self.literal(src, float(2 ** (wide - 1)))
            lo = self.literal(src, -float(2 ** (wide - 1)))
            low = self.literal(f"i{wide}", -(2 ** (wide - 1)))
            conv = f"((x >= {lo} && x < {lim}) ? ({w})x : {low})"
            if dt == "u64":
                top = self.literal(src, float(2**64))
                conv = (
                    f"(x >= {lim} ? (x < {top} ? ({t})x : ({t})0xffffffffffffffff{self.u64_suffix})"
                    f" : ({t}){conv})"
                )
            return name, f"{fq} {t} {name}({s} x) {{ return ({t}){conv}; }}"
        if kind == "dot4":
            return self._dot4_helper()
        if kind == "fdiv_idx":
            name = "sm_floordiv"
            body = (
                f"{fq} long {name}(long a, long b) {{ long q = a / b; "
                "return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }"
            )
            return name, body
        raise AssertionError(kind)

    def _dot4_helper(self) -> tuple[str, str]:
        """``sm_dot4``: byte ``t`` of ``a`` (unsigned) times byte ``t`` of ``b``
        (signed), summed over the four little-endian bytes.  The bytes come out of
        the unsigned word by shifts (no byte order of memory involved); a signed
        byte is ``(u ^ 0x80) - 0x80``, which C defines (a cast of 200 to a signed
        char is implementation-defined).  The sum lies within +-4 * 255 * 128,
        so ``int`` holds it with no overflow."""
        fq = self.function_qualifier
        t, ut = self.ctype("i32"), self.ctype("u32")
        terms = " + ".join(
            f"({t})((ua >> {8 * k}) & 0xffu) * ((({t})((ub >> {8 * k}) & 0xffu) ^ 0x80) - 0x80)"
            for k in range(4)
        )
        name = "sm_dot4"
        body = (
            f"{fq} {t} {name}({t} a, {t} b) {{ {ut} ua = ({ut})a, ub = ({ut})b; return {terms}; }}"
        )
        return name, body

    def _shift_helper(self, kind: str, dt: str) -> tuple[str, str]:
        """``sm_shl_<dt>`` / ``sm_shr_<dt>``: the amount read as unsigned, and from the
        width on every bit shifted out (0, or the sign fill of a signed ``shr``), as
        NumPy.  C leaves shifts by the width or more undefined (OpenCL masks the
        amount), a left shift of a negative or overflowing signed value too, and a right
        shift of a negative one to the implementation: the left shift runs in an
        unsigned type of at least 32 bits, and a negative value shifts right as
        ``~(~a >> n)``, where ``~a`` is not negative."""
        fq = self.function_qualifier
        t = self.ctype(dt)
        width = dtypes.bits(dt)
        ut = self.ctype("u" + dt[1:])  # the amount, read as unsigned
        name = f"sm_{kind}_{dt}"
        head = f"{fq} {t} {name}({t} a, {t} b) {{ "
        if kind == "shl":
            wide = self.ctype("u64") if width == 64 else self.ctype("u32")
            body = f"return ({ut})b < {width} ? ({t})(({wide})a << ({ut})b) : ({t})0; }}"
        elif not dtypes.is_signed(dt):
            body = f"return ({ut})b < {width} ? ({t})(a >> ({ut})b) : ({t})0; }}"
        else:
            body = (
                f"{ut} n = ({ut})b < {width} ? ({ut})b : {width - 1}; "
                f"return ({t})(a < 0 ? ~(~a >> n) : a >> n); }}"
            )
        return name, head + body


def generate(
    program: Program,
    style: CStyle,
    *,
    max_group_size: int = 256,
    shared_memory: int = 0,
    strip: int = 0,
) -> GpuModule:
    """The kernels' source and the metadata the GPU runtimes need.

    ``max_group_size``: the most work-items in one work-group (the target's
    ``max_threads_per_group``); ``shared_memory``: bytes of local memory one
    group may use (0: unchecked); ``strip``: the longest register strip one
    work-item of a tiled kernel keeps (0: none; see :mod:`.gpu_plan`).
    """
    root = program.root
    buffers = root_buffers(root)
    for r in root.refs:
        style.ctype(r.shape.dtype)
    helpers: dict[str, str] = {}
    kernels: list[str] = []
    steps: list[GpuStep] = []
    uses_f64 = False
    for n, stmt in enumerate(root.stmts):
        if isinstance(stmt, Special):
            steps.append(GpuStep(special=stmt))
            continue
        if not isinstance(stmt, Block):
            raise StripeError(f"{style.name}: root statement {type(stmt).__name__} is unsupported")
        gen = KernelPrinter(
            style, root, stmt, kernel_symbol(n, stmt), helpers, max_group_size, shared_memory, strip
        )
        text, info = gen.run()
        uses_f64 = uses_f64 or gen.uses_f64
        kernels.append(text)
        steps.append(GpuStep(kernel=info))
    uses_f64 = uses_f64 or any(b.dtype == "f64" for b in buffers)
    parts = [style.header(uses_f64)]
    fq = style.function_qualifier
    parts.append(f"{fq} long sm_max(long a, long b) {{ return a > b ? a : b; }}")
    parts.append(f"{fq} long sm_min(long a, long b) {{ return a < b ? a : b; }}")
    parts += list(helpers.values())
    source = "\n".join(p for p in parts if p) + "\n\n" + "\n\n".join(kernels) + "\n"
    return GpuModule(source, buffers, tuple(steps), uses_f64)
