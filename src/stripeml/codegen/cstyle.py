"""Stripe -> C-like GPU kernels: the base that OpenCL C and CUDA C share.

:class:`CStyle` prints types, literals, scalar intrinsics and aggregations in
C; a dialect (:mod:`.opencl`, :mod:`.cuda`) overrides only a few class
attributes and methods: qualifiers, work-item ids, the barrier, math function
names, bit-cast literals.  :func:`generate` walks the program:

* every root-level kernel block becomes one kernel function whose parameters
  are the root buffers it uses (:mod:`.gpu_abi`); root ``special`` statements
  stay on the host;
* how a kernel's points map onto work-groups and work-items is decided by
  :mod:`.gpu_plan` (``naive``: one work-item per point of the kernel's
  race-free indices; ``tiled``: tiles to work-groups, a tile's points to the
  group's work-items, ``SHARED`` buffers in local memory, barriers);
* blocks become loop nests, constraints become loop bounds (each bounds the
  innermost loop it mentions) or guards, refinements become a pointer plus an
  affine element offset, ``none`` allocations private arrays (or local memory
  for a tiled kernel's own buffers), zeroed per point;
* aggregation follows the scope rule of ``docs/stripe-ir.md``: a leaf scope
  with one store at an injective address accumulates in a register and stores
  once (if any point reached it); any other scope first writes the
  aggregation's identity to every element it touches, then accumulates in
  memory.  Points that store to one element always run on one work-item (the
  parallel indices are proven race-free with isl), so no atomics are needed.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

from ..errors import StripeError
from ..ir import dtypes
from ..ir.affine import Affine
from ..ir.nodes import Block, Constant, Intrinsic, Load, LoadIndex, Program, Special, Store
from .cpu_abi import BufferInfo
from .gpu_abi import GpuModule, GpuStep, KernelInfo
from .gpu_plan import KernelPlan, plan_kernel
from .plan import needed_in_init, register_scope

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
_CMP = {
    "cmp_lt": "<",
    "cmp_le": "<=",
    "cmp_gt": ">",
    "cmp_ge": ">=",
    "cmp_eq": "==",
    "cmp_ne": "!=",
}
_MATH = ("exp", "log", "sqrt", "tanh", "sin", "cos", "tan", "erf", "floor", "ceil", "pow")


class CStyle:
    """The C-like dialect: what OpenCL C and CUDA C print alike.

    Subclasses set the attributes below and override :meth:`math_name` and
    :meth:`float_from_bits` when their spelling differs.
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
    #: C type names of the Stripe dtypes (bool is one byte in memory, like NumPy's).
    types: dict[str, str] = _CTYPES

    def header(self, uses_f64: bool) -> str:
        """What the source starts with (extensions, typedefs)."""
        return ""

    def ctype(self, dt: str) -> str:
        if dt == "f16":
            raise StripeError(f"{self.name}: float16 is not supported yet")
        return self.types[dt]

    def reg_type(self, dt: str) -> str:
        """The type of a scalar in a register (bool computes as ``bool``)."""
        return "bool" if dt == "bool" else self.ctype(dt)

    def math_name(self, op: str, dt: str) -> str:
        """The math library function for ``op`` on ``dt`` (OpenCL's are overloaded)."""
        return "rint" if op == "round" else op

    def float_from_bits(self, dt: str, bits: int) -> str:
        """A float of ``dt`` with this bit pattern (used for inf and nan)."""
        if dt == "f32":
            return f"as_float(0x{bits:08x}u)"
        return f"as_double(0x{bits:016x}{self.u64_suffix})"

    # -- literals ----------------------------------------------------------------
    def literal(self, dt: str, value: object) -> str:
        if dt == "bool":
            return "true" if value else "false"
        if dtypes.is_float(dt):
            v = float(value)  # type: ignore[arg-type]
            if dt == "f32":
                v = float(struct.unpack("<f", struct.pack("<f", v))[0]) if math.isfinite(v) else v
            if not math.isfinite(v):
                if dt == "f32":
                    return self.float_from_bits(dt, struct.unpack("<I", struct.pack("<f", v))[0])
                return self.float_from_bits(dt, struct.unpack("<Q", struct.pack("<d", v))[0])
            text = v.hex()  # exact: C99 / C++17 hexadecimal floating literals
            return f"({text}f)" if dt == "f32" else f"({text})"
        bits = dtypes.bits(dt)
        v = int(value) & ((1 << bits) - 1)  # type: ignore[call-overload]
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
            return f"({self.ctype(dt)})({a} + {b})"
        if agg == "mul":
            return f"({self.ctype(dt)})({a} * {b})"
        return self.minmax(agg, a, b, dt)

    def minmax(self, op: str, a: str, b: str, dt: str) -> str:
        cmp = ">" if op == "max" else "<"
        if dtypes.is_float(dt):  # NaN-propagating, like NumPy's maximum/minimum
            return f"(({a}) != ({a}) ? ({a}) : (({b}) != ({b}) ? ({b}) : (({a}) {cmp}= ({b}) ? ({a}) : ({b}))))"
        return f"(({a}) {cmp} ({b}) ? ({a}) : ({b}))"

    def intrinsic(self, op: str, args: list[str], in_dts: list[str], dt: str, need) -> str:
        """The C expression of Stripe intrinsic ``op``; ``need(name, dt)`` requests a helper."""
        t = self.ctype(dt) if dt != "bool" else "bool"
        if op == "cast":
            return self.cast(args[0], in_dts[0], dt, need)
        if op == "ident":
            return args[0]
        if op == "select":
            return f"({args[0]} ? {args[1]} : {args[2]})"
        if op in _CMP:
            return f"({args[0]} {_CMP[op]} {args[1]})"
        if op == "and":
            return f"({args[0]} && {args[1]})"
        if op == "or":
            return f"({args[0]} || {args[1]})"
        if op == "not":
            return f"(!{args[0]})"
        if dt == "bool":
            table = {"add": "||", "mul": "&&", "sub": "!=", "max": "||", "min": "&&"}
            if op in table:
                return f"({args[0]} {table[op]} {args[1]})"
            if op in ("neg", "abs", "relu"):
                return args[0]
            raise StripeError(f"{self.name}: intrinsic {op} on bool is not supported")
        fl = dtypes.is_float(dt)
        if op in ("add", "sub", "mul"):
            sym = {"add": "+", "sub": "-", "mul": "*"}[op]
            return f"({t})({args[0]} {sym} {args[1]})"
        if op == "div":
            if fl:
                return f"({args[0]} / {args[1]})"
            return f"{need('div', dt)}({args[0]}, {args[1]})"
        if op == "mod":
            return f"{need('mod', dt)}({args[0]}, {args[1]})"
        if op == "neg":
            return f"({t})(-({args[0]}))"
        if op == "abs":
            if fl:
                return f"{self.math_name('fabs', dt)}({args[0]})"
            if not dtypes.is_signed(dt):
                return args[0]
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

    # -- helper functions ------------------------------------------------------------
    def helper(self, kind: str, dt: str, src: str = "") -> tuple[str, str]:
        """(name, definition) of a helper function the kernels call."""
        fq = self.function_qualifier
        t = self.ctype(dt)
        if kind in ("div", "mod") and dtypes.is_float(dt):
            name = f"sm_fmod_{dt}"
            fmod = self.math_name("fmod", dt)
            body = (
                f"{fq} {t} {name}({t} a, {t} b) {{ {t} r = {fmod}(a, b); "
                f"return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }}"
            )
            return name, body
        if kind in ("div", "mod"):
            name = f"sm_{kind}_{dt}"
            signed = dtypes.is_signed(dt)
            if kind == "div":
                neg1 = f"if (b == ({t})-1) return ({t})(0 - a); " if signed else ""
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
        if kind == "fdiv_idx":
            name = "sm_floordiv"
            body = (
                f"{fq} long {name}(long a, long b) {{ long q = a / b; "
                "return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }"
            )
            return name, body
        raise AssertionError(kind)


@dataclass
class _Bind:
    """A refinement as seen by generated code."""

    base: str  # C pointer (or array) name of the underlying memory
    offset: Affine  # element offset of the view's origin
    dtype: str
    agg: str
    mode: str  # read | plain | scope | mem | reg | init | skip
    init_target: bool = False
    acc: str | None = None  # register accumulator (mode reg)
    # A register strip (tiled kernels): the accumulator is acc[... + strip index].
    acc_index: str | None = None
    touched: str | None = None


@dataclass
class _Writer:
    lines: list[str] = field(default_factory=list)
    depth: int = 1

    def __call__(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def open(self, text: str) -> None:
        self(text + " {")
        self.depth += 1

    def close(self) -> None:
        self.depth -= 1
        self("}")


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
    buffers = tuple(
        BufferInfo(r.into, r.shape.dtype, r.shape.sizes, r.shape.strides, r.dir) for r in root.refs
    )
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
        symbol = f"k{n}_{_sanitize(stmt.name)}"
        gen = _KernelPrinter(style, root, stmt, symbol, helpers, max_group_size)
        gen.max_shared = shared_memory
        gen.strip = strip
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


def _sanitize(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "kernel"


class _KernelPrinter:
    def __init__(
        self,
        style: CStyle,
        root: Block,
        kernel: Block,
        symbol: str,
        helpers: dict[str, str],
        max_group_size: int,
    ) -> None:
        self.s = style
        self.root = root
        self.kernel = kernel
        self.symbol = symbol
        self.helpers = helpers
        self.max_group_size = max_group_size
        self.w = _Writer()
        self.counter = 0
        self.uses_f64 = False
        self.shared_bytes = 0
        self.max_shared = 0
        self.strip = 0
        self.local_arrays: dict[int, str] = {}  # id(ref) -> C name, for tiled kernels
        used: list[str] = []
        for r in kernel.refs:
            if r.from_ and r.from_ not in used:
                used.append(r.from_)
        self.used = used
        index = {r.into: i for i, r in enumerate(root.refs)}
        self.buffer_ids = tuple(index[u] for u in used)
        self.root_binds = {}
        for u in used:
            ref = root.ref(u)
            shape = ref.shape
            origin = sum(
                (n - 1) * -st for n, st in zip(shape.sizes, shape.strides) if st < 0 and n > 0
            )
            self.root_binds[u] = _Bind(
                f"b_{_sanitize(u)}", Affine.constant(origin), shape.dtype, "", "read"
            )

    # -- names and helpers ---------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{_sanitize(prefix)}_{self.counter}"

    def need(self, kind: str, dt: str, src: str = "") -> str:
        name, text = self.s.helper(kind, dt, src)
        self.helpers.setdefault(name, text)
        return name

    def aff(self, a: Affine, env: dict[str, str]) -> str:
        parts = []
        for name, c in a.terms:
            if name not in env:
                raise StripeError(f"{self.s.name}: index '{name}' is not visible")
            parts.append(env[name] if c == 1 else f"{c}*{env[name]}")
        if a.const or not parts:
            parts.append(str(a.const))
        return "(" + " + ".join(parts) + ")" if len(parts) > 1 else parts[0]

    def elem(self, bd: _Bind, env: dict[str, str]) -> str:
        return f"{bd.base}[{self.aff(bd.offset, env)}]"

    def typ(self, dt: str) -> str:
        if dt == "f64":
            self.uses_f64 = True
        return self.s.ctype(dt)

    # -- driver -------------------------------------------------------------------------
    def run(self) -> tuple[str, KernelInfo]:
        plan = plan_kernel(self.kernel, self.max_group_size, strip=self.strip)
        params = []
        for u in self.used:
            dt = self.root.ref(u).shape.dtype
            params.append(
                f"{self.s.global_qualifier} {self.typ(dt)}* {self.s.restrict} {self.root_binds[u].base}".strip()
            )
        if plan.mapping == "tiled":
            self.emit_tiled(plan)
        else:
            self.emit_naive(plan)
        head = f"{self.s.kernel_qualifier} {self.symbol}({', '.join(params)})"
        text = head + " {\n" + "\n".join(self.w.lines) + "\n}"
        info = KernelInfo(
            self.symbol,
            self.kernel.name,
            self.buffer_ids,
            plan.groups,
            plan.group_size,
            plan.mapping,
            self.shared_bytes,
        )
        return text, info

    def decompose(self, flat: str, names: list[str], blk: Block, env: dict[str, str]) -> None:
        """Bind ``names`` (indices of ``blk``) to the digits of ``flat`` (row-major)."""
        stride = 1
        strides = []
        for n in reversed(names):
            strides.append(stride)
            stride *= blk.idx(n).range
        for n, st in zip(names, reversed(strides)):
            r = blk.idx(n).range
            v = self.fresh(n)
            expr = flat if st == 1 else f"({flat} / {st})"
            if st * r < stride:
                expr = f"({expr} % {r})"
            base = blk.idx(n).affine
            if base is not None and (base.terms or base.const):
                expr = f"({self.aff(base, env)} + {expr})"
            self.w(f"const long {v} = {expr};")
            env[n] = v

    def emit_naive(self, plan: KernelPlan) -> None:
        w = self.w
        total = plan.points
        w(
            f"const long gid = (long){self.s.group_id} * {plan.group_size} + (long){self.s.local_id};"
        )
        if plan.groups * plan.group_size != total:
            w(f"if (gid >= {total}) return;")
        env: dict[str, str] = {}
        self.decompose("gid", list(plan.parallel), self.kernel, env)
        self.emit_block(self.kernel, env, self.root_binds, pinned=set(plan.parallel))

    # -- refinements ------------------------------------------------------------------
    def bind_refs(self, blk: Block, prefs: dict[str, _Bind], init: bool) -> dict[str, _Bind]:
        binds: dict[str, _Bind] = {}
        for r in blk.refs:
            if r.dir == "none":
                name = self.local_arrays.get(id(r)) or self.fresh(r.into)
                binds[r.into] = _Bind(
                    name, Affine(), r.shape.dtype, "", "skip" if init else "plain"
                )
                continue
            p = prefs[r.from_]
            off = p.offset
            for a, st in zip(r.access, r.shape.strides):
                off = off + a * st
            if init:
                mode = (
                    "init"
                    if p.init_target or p.mode == "init"
                    else ("read" if r.dir == "in" else "skip")
                )
            elif r.dir == "in":
                mode = "read"
            elif r.agg in ("", "assign"):
                mode = "plain"
            elif p.mode in ("mem", "reg"):
                mode = p.mode
            else:
                mode = "scope"
            if r.dir == "inout" and r.agg not in ("", "assign") and mode == "scope":
                mode = "mem"
            bd = _Bind(p.base, off, r.shape.dtype, r.agg, mode)
            if mode == "reg":
                bd.acc, bd.touched, bd.acc_index = p.acc, p.touched, p.acc_index
            binds[r.into] = bd
        return binds

    # -- blocks -------------------------------------------------------------------------
    def emit_block(
        self,
        blk: Block,
        env: dict[str, str],
        prefs: dict[str, _Bind],
        pinned: set[str] = frozenset(),  # type: ignore[assignment]
        init: bool = False,
        innermost: str | None = None,
    ) -> None:
        binds = self.bind_refs(blk, prefs, init)
        scopes = [n for n, bd in binds.items() if bd.mode == "scope"]
        reg = None
        if scopes:
            reg = register_scope(blk, {n: binds[n].offset for n in scopes})
            for n in scopes:
                binds[n].mode = "reg" if n == reg else "mem"
            mem = [n for n in scopes if n != reg]
            if mem:
                # Write the identity to every element these scopes will touch.
                saved = {}
                for r in blk.refs:
                    if r.into in mem:
                        saved[r.from_] = prefs[r.from_].init_target
                        prefs[r.from_].init_target = True
                self.emit_block(blk, env, prefs, pinned, init=True)
                for name, flag in saved.items():
                    prefs[name].init_target = flag
        order = [i.name for i in blk.idxs if i.name not in pinned]
        if innermost in order:
            order.remove(innermost)
            order.append(innermost)
        if init:
            order = [n for n in order if needed_in_init(blk, n)]
        outer, inner = order, []
        if reg is not None:
            addr = set(binds[reg].offset.names)
            outer = [n for n in order if n in addr]
            inner = [n for n in order if n not in addr]

        def body(env3: dict[str, str]) -> None:
            self.stmts(blk, env3, binds, init)

        def point(env2: dict[str, str]) -> None:
            if reg is None:
                body(env2)
                return
            bd = binds[reg]
            bd.acc = self.fresh("acc")
            self.w(f"{self.s.reg_type(bd.dtype)} {bd.acc} = {self.s.identity(bd.agg, bd.dtype)};")
            flagged = any(n in inner for c in blk.constraints for n in c.expr.names)
            bd.touched = None
            if flagged:
                bd.touched = self.fresh("touched")
                self.w(f"bool {bd.touched} = false;")
            self.loops(blk, inner, env2, body, guards_here=False)
            value = bd.acc
            if bd.dtype == "bool":
                value = f"(uchar){value}"
            if flagged:
                self.w(f"if ({bd.touched}) {self.elem(bd, env2)} = {value};")
            else:
                self.w(f"{self.elem(bd, env2)} = {value};")

        self.loops(blk, outer, env, point, guards_here=True)

    def loops(
        self, blk: Block, order: list[str], env: dict[str, str], body, guards_here: bool
    ) -> None:
        """Loops over ``order``; each constraint bounds the innermost loop it mentions;
        constraints on enclosing (or pinned) indices only become one guard."""
        pos = {n: i for i, n in enumerate(order)}
        own = {i.name for i in blk.idxs}
        guards, per_loop = [], {n: [] for n in order}
        for c in blk.constraints:
            names = [n for n in c.expr.names if n in pos]
            if any(n in own and n not in pos and n not in env for n in c.expr.names):
                continue
            if names:
                per_loop[max(names, key=pos.__getitem__)].append(c)
            elif guards_here:
                guards.append(c)
        w = self.w
        opened = 0
        if guards:
            cond = " && ".join(f"{self.aff(c.expr, env)} >= 0" for c in guards)
            w.open(f"if ({cond})")
            opened += 1
        env2 = dict(env)
        for name in order:
            idx = blk.idx(name)
            base = idx.affine or Affine()
            lo, hi = ["0"], [str(idx.range)]
            for c in per_loop[name]:
                coef = c.expr.coeff(name)
                rest = self.aff(c.expr - Affine.index(name, coef) + base * coef, env2)
                if coef > 0:  # coef*v + rest >= 0  ->  v >= ceil(-rest / coef)
                    lo.append(self._ceil(f"(-({rest}))", coef))
                else:  # v <= floor(rest / -coef)
                    hi.append(f"({self._floor(rest, -coef)} + 1)")
            v = self.fresh(name)
            lo_e = _fold("max", lo)
            hi_e = _fold("min", hi)
            w.open(f"for (long {v} = {lo_e}; {v} < {hi_e}; ++{v})")
            opened += 1
            if base.terms or base.const:
                val = self.fresh(name)
                w(f"const long {val} = {self.aff(base, env2)} + {v};")
                env2[name] = val
            else:
                env2[name] = v
        body(env2)
        for _ in range(opened):
            w.close()

    def _floor(self, x: str, d: int) -> str:
        return x if d == 1 else f"{self.need('fdiv_idx', 'i64')}({x}, {d})"

    def _ceil(self, x: str, d: int) -> str:
        return x if d == 1 else f"(-{self.need('fdiv_idx', 'i64')}(-({x}), {d}))"

    # -- statements ---------------------------------------------------------------------
    def stmts(self, blk: Block, env: dict[str, str], binds: dict[str, _Bind], init: bool) -> None:
        w = self.w
        s = self.s
        if not init:
            for r in blk.refs:
                if r.dir == "none" and id(r) not in self.local_arrays:
                    bd = binds[r.into]
                    size = max(r.shape.extent, 1)
                    w(f"{self.typ(bd.dtype)} {bd.base}[{size}];")
                    w(f"for (int z = 0; z < {size}; ++z) {bd.base}[z] = 0;")
        vals: dict[str, tuple[str, str]] = {}
        for st in blk.stmts:
            if isinstance(st, Block):
                self.emit_block(st, env, binds, init=init)
            elif isinstance(st, Store):
                bd = binds[st.ref]
                if init:
                    if bd.mode == "init":
                        w(f"{self.elem(bd, env)} = {s.identity(bd.agg, bd.dtype)};")
                    continue
                v = vals[st.value][0]
                if bd.mode == "reg":
                    acc, touched = bd.acc, bd.touched
                    if bd.acc_index is not None:  # acc, touched end in "[base + "
                        acc = f"{acc}{env[bd.acc_index]}]"
                        touched = f"{touched}{env[bd.acc_index]}]" if touched else None
                    w(f"{acc} = {s.combine(bd.agg, acc, v, bd.dtype)};")
                    if touched is not None:
                        w(f"{touched} = true;")
                elif bd.mode == "mem":
                    e = self.elem(bd, env)
                    cur = f"({e} != 0)" if bd.dtype == "bool" else e
                    w(f"{e} = {s.combine(bd.agg, cur, v, bd.dtype)};")
                else:
                    w(f"{self.elem(bd, env)} = {v};")
            elif init:
                continue
            elif isinstance(st, Load):
                bd = binds[st.ref]
                name = self.fresh("v")
                e = self.elem(bd, env)
                if bd.dtype == "bool":
                    w(f"const bool {name} = ({e} != 0);")
                else:
                    w(f"const {self.typ(bd.dtype)} {name} = {e};")
                vals[st.into] = (name, bd.dtype)
            elif isinstance(st, Constant):
                name = self.fresh("c")
                self.typ(st.dtype)
                w(f"const {s.reg_type(st.dtype)} {name} = {s.literal(st.dtype, st.value)};")
                vals[st.into] = (name, st.dtype)
            elif isinstance(st, LoadIndex):
                name = self.fresh("i")
                w(f"const long {name} = {self.aff(st.expr, env)};")
                vals[st.into] = (name, "i64")
            elif isinstance(st, Intrinsic):
                args = [vals[a][0] for a in st.inputs]
                dts = [vals[a][1] for a in st.inputs]
                self.typ(st.dtype)
                expr = s.intrinsic(st.op, args, dts, st.dtype, self.need)
                name = self.fresh("t")
                w(f"const {s.reg_type(st.dtype)} {name} = {expr};")
                vals[st.into] = (name, st.dtype)
            elif isinstance(st, Special):
                raise StripeError(
                    f"{s.name}: special '{st.op}' inside a kernel is not supported yet"
                )

    # -- tiled kernels --------------------------------------------------------------------
    def emit_tiled(self, plan: KernelPlan) -> None:
        from .gpu_tiled import emit_tiled

        emit_tiled(self, plan)


def _fold(fn: str, xs: list[str]) -> str:
    """``sm_max(a, sm_max(b, c))`` over index expressions (helpers of the prelude)."""
    out = xs[0]
    for x in xs[1:]:
        out = f"sm_{fn}({out}, {x})"
    return out
