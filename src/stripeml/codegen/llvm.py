"""Stripe -> LLVM IR for the CPU backend.

Each root-level kernel block becomes one function with the ABI of
:mod:`stripeml.codegen.cpu_abi`.  Blocks become loop nests; refinements become
a base pointer plus an element offset that is an affine function of the
indices (views keep their parent's strides, so offsets compose by addition);
constraints become loop bounds (each constraint bounds the innermost loop it
mentions, so no guard remains inside a loop); ``none`` refinements become stack
allocations, zeroed per point.

Aggregation (the scope rule of docs/stripe-ir.md): a block whose output view
aggregates while its parent does not is a *scope*.  When the scope is a leaf
block with a single store, its loops are ordered with the store's address
indices outside and the rest inside, and the value accumulates in a register
(``reassoc`` on float add/mul so the loop vectoriser may reduce in vector
lanes), stored once per element if any point reached it.  Otherwise the scope
first writes the aggregation's identity to every element it will touch (a
copy of its loop nest that only stores), then accumulates in memory.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

import llvmlite.ir as ir

from ..errors import StripeError
from ..ir.affine import Affine
from ..ir.nodes import (
    Block,
    Constant,
    Intrinsic,
    Load,
    LoadIndex,
    Program,
    Special,
    Store,
    TensorShape,
)
from .cpu_abi import BufferInfo, CpuModule, KernelInfo, Step
from .llvm_ops import call_intrinsic, combine, hreduce, intrinsic
from .llvm_plan import (
    Bind,
    _init_targets,
    _injective,
    _loop_order,
    _needed_in_init,
    _parallel_index,
    _reg_candidate,
    _register_tile_plan,
    _vectorizable,
    _work,
    blk_idx_names,
)
from .llvm_types import (
    F32,
    I1,
    I8,
    I64,
    PTR,
    const,
    identity,
    lanes_of,
    mem_type,
    reg_type,
    splat,
    vec,
)


def generate(
    program: Program, *, vector_width: int = 8, triple: str = "", fma: bool = False
) -> CpuModule:
    """Generate the LLVM module and the metadata the CPU runtime needs.

    ``fma``: float multiplies and the additions they feed carry LLVM's
    ``contract`` flag, so LLVM may fuse them into one FMA (one rounding instead
    of two; results may differ from the interpreter in the last bits).
    """
    module = ir.Module(name=program.root.name or "stripeml")
    if not triple:
        import llvmlite.binding as llvm

        triple = llvm.get_process_triple()
    module.triple = triple
    root = program.root
    buffers = tuple(
        BufferInfo(r.into, r.shape.dtype, r.shape.sizes, r.shape.strides, r.dir) for r in root.refs
    )
    steps: list[Step] = []
    for n, stmt in enumerate(root.stmts):
        if isinstance(stmt, Special):
            steps.append(Step(special=stmt))
        elif isinstance(stmt, Block):
            symbol = f"k{n}_{_sanitize(stmt.name)}"
            info = _KernelGen(module, root, stmt, symbol, vector_width, fma).run()
            steps.append(Step(kernel=info))
        else:
            raise StripeError(f"cpu: root statement {type(stmt).__name__} is not supported")
    text = str(module)
    if re.search(r"[\s<(]half[\s>,)]", text) and not _native_half(triple):
        raise StripeError("cpu: float16 needs the F16C conversions on x86 (this host lacks them)")
    return CpuModule(text, buffers, tuple(steps))


def _native_half(triple: str) -> bool:
    """Whether LLVM converts half <-> float inline for ``triple``: on x86 only with
    F16C (else it calls compiler-rt helpers the JIT cannot resolve)."""
    if not triple.startswith(("x86_64", "i386", "i686")):
        return True
    import llvmlite.binding as llvm

    if triple != llvm.get_process_triple():
        return True  # not the host: the caller chooses the features
    try:
        return bool(llvm.get_host_cpu_features().get("f16c", False))
    except RuntimeError:
        return False


def _sanitize(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "kernel"


class _KernelGen:
    def __init__(
        self,
        module: ir.Module,
        root: Block,
        kernel: Block,
        symbol: str,
        vector_width: int,
        fma: bool = False,
    ):
        self.module = module
        self.fma = fma
        self.root = root
        self.kernel = kernel
        self.symbol = symbol
        self.vector_width = vector_width
        used = []
        for r in kernel.refs:
            if r.from_ and r.from_ not in used:
                used.append(r.from_)
        self.used = used
        root_index = {r.into: i for i, r in enumerate(root.refs)}
        # The ABI wrapper loads the buffer pointers and calls a body whose pointer
        # parameters are noalias (each root buffer appears once).
        wrapper_ty = ir.FunctionType(ir.VoidType(), [PTR, I64, I64])
        self.wrapper = ir.Function(module, wrapper_ty, symbol)
        body_ty = ir.FunctionType(ir.VoidType(), [PTR] * len(used) + [I64, I64])
        self.fn = ir.Function(module, body_ty, symbol + ".body")
        self.fn.linkage = "internal"
        self.fn.attributes.add("alwaysinline")
        for a in self.fn.args[: len(used)]:
            a.add_attribute("noalias")
        wb = ir.IRBuilder(self.wrapper.append_basic_block("entry"))
        bufs, start, end = self.wrapper.args
        ptrs = []
        for name in used:
            slot = wb.gep(bufs, [ir.Constant(I64, root_index[name])], source_etype=PTR)
            ptrs.append(wb.load(slot, typ=PTR))
        wb.call(self.fn, [*ptrs, start, end])
        wb.ret_void()
        self.entry = self.fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(self.entry)
        first = self.fn.append_basic_block("start")
        self.b = ir.IRBuilder(first)
        self.start, self.end = self.fn.args[len(used)], self.fn.args[len(used) + 1]
        self.root_binds = {
            name: Bind(self.fn.args[i], Affine(), root.ref(name).shape.dtype, "", "read", name)
            for i, name in enumerate(used)
        }
        self.counter = 0

    # -- driver ---------------------------------------------------------------
    def run(self) -> KernelInfo:
        par = _parallel_index(self.kernel)
        self.par = par
        self.emit_block(self.kernel, {}, self.root_binds, top=True)
        self.b.ret_void()
        self.alloca_builder.branch(self.fn.blocks[1])
        extent = self.kernel.idx(par).range if par else 1
        return KernelInfo(
            self.symbol, self.kernel.name, extent, par is not None, _work(self.kernel)
        )

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}.{self.counter}"

    # -- values ---------------------------------------------------------------
    def affine(self, a: Affine, env: dict[str, ir.Value]) -> ir.Value:
        v: ir.Value | None = None
        for name, c in a.terms:
            if name not in env:
                raise StripeError(f"cpu: index '{name}' is not visible")
            term = env[name] if c == 1 else self.b.mul(env[name], ir.Constant(I64, c))
            v = term if v is None else self.b.add(v, term)
        if v is None:
            return ir.Constant(I64, a.const)
        return self.b.add(v, ir.Constant(I64, a.const)) if a.const else v

    def address(self, bind: Bind, env: dict[str, ir.Value]) -> ir.Value:
        return self.b.gep(
            bind.base, [self.affine(bind.offset, env)], source_etype=mem_type(bind.dtype)
        )

    def load(self, bind: Bind, env: dict[str, ir.Value]) -> ir.Value:
        v = self.b.load(self.address(bind, env), typ=mem_type(bind.dtype))
        return self.b.trunc(v, I1) if bind.dtype == "bool" else v

    def store(self, bind: Bind, env: dict[str, ir.Value], v: ir.Value) -> None:
        if bind.dtype == "bool":
            v = self.b.zext(v, I8)
        self.b.store(v, self.address(bind, env))

    # -- refinements -----------------------------------------------------------
    def bind_refs(
        self, blk: Block, prefs: dict[str, Bind], init: set[int] | None
    ) -> dict[str, Bind]:
        binds: dict[str, Bind] = {}
        for r in blk.refs:
            if r.dir == "none":
                slot = self.alloca_builder.alloca(
                    mem_type(r.shape.dtype), size=max(r.shape.extent, 1), name=self.fresh("alloc")
                )
                if r.shape.extent > 1:
                    slot.align = 64  # a cache line: vector rows of packed panels never split lines
                binds[r.into] = Bind(
                    slot, Affine(), r.shape.dtype, "", "skip" if init is not None else "plain", None
                )
                continue
            p = prefs[r.from_]
            off = p.offset
            for a, s in zip(r.access, r.shape.strides):
                off = off + a * s
            if init is not None:
                mode = (
                    "init"
                    if id(p) in init or p.mode == "init"
                    else ("skip" if r.dir != "in" else "read")
                )
            elif r.dir == "in":
                mode = "read"
            elif r.agg in ("", "assign") or p.mode == "plain" and p.agg == "":
                mode = "plain" if r.agg in ("", "assign") else "scope"
            else:
                mode = p.mode if p.mode in ("mem", "reg") else "scope"
            if r.dir == "inout" and r.agg not in ("", "assign") and mode == "scope":
                mode = "mem"
            binds[r.into] = Bind(p.base, off, r.shape.dtype, r.agg, mode, p.root)
        return binds

    # -- blocks ---------------------------------------------------------------
    def emit_block(
        self,
        blk: Block,
        env: dict[str, ir.Value],
        prefs: dict[str, Bind],
        top: bool = False,
        init: set[int] | None = None,
    ) -> None:
        binds = self.bind_refs(blk, prefs, init)
        if init is None and not (top and self.par is not None):
            plan = _register_tile_plan(blk, binds, self.vector_width)
            if plan is not None:
                self.register_tile(blk, env, binds, *plan)
                return
        scopes = [n for n, bd in binds.items() if bd.mode == "scope"]
        reg = None
        vlast = None
        if scopes:
            reg = _reg_candidate(blk, scopes)
            if reg is not None and not _injective(binds[reg].offset, blk):
                reg = None  # several points share an element: accumulate in memory
            for n in scopes:
                binds[n].mode = "reg" if n == reg else "mem"
            if reg is not None and init is None and self.vector_width > 1:
                vlast = self._prefer_memory(blk, binds, reg, self.par if top else None)
                if vlast is not None:
                    reg = None
            if any(n != reg for n in scopes):
                # Write the identity to every element the scope will touch.
                targets = _init_targets(prefs, blk, [n for n in scopes if n != reg])
                self.emit_block(blk, env, dict(prefs), top, init=targets)
        order = _loop_order(blk, binds, reg, self.par if top else None, vlast)
        if init is not None:
            order = [n for n in order if _needed_in_init(blk, n)]
        outer = order
        inner: list[str] = []
        if reg is not None:
            addr = set(binds[reg].offset.names)
            outer = [n for n in order if n in addr]
            inner = [n for n in order if n not in addr]
        vidx = None
        if init is None and self.vector_width > 1:
            cand = (inner or outer)[-1:]
            if cand and _vectorizable(blk, binds, cand[0]):
                vidx = cand[0]

        def body(env3: dict[str, ir.Value], lanes: int | None) -> None:
            self.stmts(blk, env3, binds, init, lanes, vidx)

        def point(env2: dict[str, ir.Value], lanes: int | None) -> None:
            if reg is None:
                body(env2, lanes)
                return
            bd = binds[reg]
            adt = _acc_dtype(bd.dtype)
            rt = reg_type(adt)
            bd.acc = self.alloca_builder.alloca(rt, name=self.fresh("acc"))
            self.b.store(identity(bd.agg, adt), bd.acc)
            if vidx is not None:
                bd.vacc = self.alloca_builder.alloca(
                    vec(rt, self.vector_width), name=self.fresh("vacc")
                )
                self.b.store(splat(identity(bd.agg, adt), self.vector_width), bd.vacc)
            # Without constraints on the reduction indices every output point has
            # reduction points, so no "was it reached" flag is needed.
            flagged = any(n in inner for c in blk.constraints for n in c.expr.names)
            bd.touched = None
            if flagged:
                bd.touched = self.alloca_builder.alloca(I1, name=self.fresh("touched"))
                self.b.store(ir.Constant(I1, 0), bd.touched)
            self.loops(blk, inner, env2, body, top, vector=vidx)
            result = self.b.load(bd.acc, typ=rt)
            if vidx is not None:
                lanes_v = self.b.load(bd.vacc, typ=vec(rt, self.vector_width))
                result = combine(
                    self.b, bd.agg, result, hreduce(self.b, bd.agg, lanes_v, adt), adt, self.fma
                )
            result = self.from_acc(result, bd.dtype)
            if flagged:
                with self.b.if_then(self.b.load(bd.touched, typ=I1)):
                    self.store(bd, env2, result)
            else:
                self.store(bd, env2, result)

        self.loops(
            blk, outer, env, point, top, guards_here=True, vector=vidx if reg is None else None
        )

    def register_tile(
        self,
        blk: Block,
        env: dict[str, ir.Value],
        binds: dict[str, Bind],
        out: str,
        vidx: str,
        unrolled: list[str],
    ) -> None:
        """A register tile: the output elements of the block's address indices live in
        vector registers (``vidx`` in lanes, ``unrolled`` indices fully unrolled)
        across the reduction loops; loaded (or set to the identity) before, stored after."""
        b = self.b
        bd = binds[out]
        w = self.vector_width
        adt = _acc_dtype(bd.dtype)
        rt = vec(reg_type(adt), w)
        combos = list(itertools.product(*[range(blk.idx(u).range) for u in unrolled]))
        chunks = range(blk.idx(vidx).range // w)
        red = [i.name for i in blk.idxs if i.name != vidx and i.name not in unrolled]

        def at(combo: tuple[int, ...], j: int, env0: dict[str, ir.Value]) -> dict[str, ir.Value]:
            env2 = dict(env0)
            for name, value in (*zip(unrolled, combo), (vidx, j * w)):
                base = blk.idx(name).affine
                c = ir.Constant(I64, value)
                env2[name] = b.add(self.affine(base, env0), c) if base is not None else c
            return env2

        slots = {}
        for combo in combos:
            for j in chunks:
                slot = self.alloca_builder.alloca(rt, name=self.fresh("tile"))
                if bd.mode == "mem":
                    b.store(self.to_acc(self.vload(bd, at(combo, j, env), w, vidx), bd.dtype), slot)
                else:
                    b.store(splat(identity(bd.agg, adt), w), slot)
                slots[combo, j] = slot
        mode = bd.mode

        def body(env3: dict[str, ir.Value], lanes: int | None) -> None:
            bd.mode = "reg"
            bd.touched = None
            for combo in combos:
                for j in chunks:
                    bd.vacc = slots[combo, j]
                    self.stmts(blk, at(combo, j, env3), binds, None, w, vidx)
            bd.mode = mode

        self.loops(blk, red, env, body, False, guards_here=True)
        bd.mode = "plain"
        for combo in combos:
            for j in chunks:
                tile = self.from_acc(b.load(slots[combo, j], typ=rt), bd.dtype)
                self.vstore(bd, at(combo, j, env), tile, w)
        bd.mode = mode

    def _prefer_memory(
        self, blk: Block, binds: dict[str, Bind], reg: str, par: str | None
    ) -> str | None:
        """Accumulating in a register is best when the reduction's innermost index can
        run in vector lanes (a row sum).  When it cannot (matmul's k walks B by rows),
        accumulate in memory instead, with a unit-stride output index innermost in
        vector lanes (matmul as rank-1 updates of C's rows).  Returns that index."""
        bd = binds[reg]
        addr = set(bd.offset.names)
        red = [i.name for i in blk.idxs if i.name not in addr]
        if not red or _vectorizable(blk, binds, red[-1]):
            return None
        unit = [i.name for i in blk.idxs if bd.offset.coeff(i.name) == 1]
        if not unit:
            return None
        bd.mode = "mem"
        if _vectorizable(blk, binds, unit[-1]):
            return unit[-1]
        bd.mode = "reg"
        return None

    def vload(
        self, bd: Bind, env: dict[str, ir.Value], lanes: int | None, vidx: str | None
    ) -> ir.Value:
        if lanes is None or bd.offset.coeff(vidx) == 0:  # type: ignore[arg-type]
            v = self.load(bd, env)
            return self.broadcast(v, lanes) if lanes else v
        v = self.b.load(
            self.address(bd, env), typ=vec(mem_type(bd.dtype), lanes), align=_bytes(bd.dtype)
        )
        return self.b.trunc(v, vec(I1, lanes)) if bd.dtype == "bool" else v

    def vstore(self, bd: Bind, env: dict[str, ir.Value], v: ir.Value, lanes: int | None) -> None:
        if lanes is None:
            self.store(bd, env, v)
            return
        if bd.dtype == "bool":
            v = self.b.zext(v, vec(I8, lanes))
        ptr = self.b.bitcast(self.address(bd, env), v.type.as_pointer())
        self.b.store(v, ptr, align=_bytes(bd.dtype))

    def to_acc(self, v: ir.Value, dt: str) -> ir.Value:
        """A value of dtype ``dt`` as its register accumulator holds it (f16: float)."""
        return self.b.fpext(v, vec(F32, lanes_of(v))) if dt == "f16" else v

    def from_acc(self, v: ir.Value, dt: str) -> ir.Value:
        """A register accumulator's value as dtype ``dt`` (f16: rounded once)."""
        return self.b.fptrunc(v, vec(reg_type("f16"), lanes_of(v))) if dt == "f16" else v

    def broadcast(self, v: ir.Value, lanes: int) -> ir.Value:
        t = ir.VectorType(v.type, lanes)
        one = self.b.insert_element(ir.Constant(t, ir.Undefined), v, ir.Constant(ir.IntType(32), 0))
        mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
        return self.b.shuffle_vector(one, ir.Constant(t, ir.Undefined), mask)

    def stmts(
        self,
        blk: Block,
        env: dict[str, ir.Value],
        binds: dict[str, Bind],
        init: set[int] | None,
        lanes: int | None = None,
        vidx: str | None = None,
    ) -> None:
        for r in blk.refs:
            if r.dir == "none" and init is None and not _overwritten_first(blk, r.into):
                bd = binds[r.into]
                size = max(r.shape.extent, 1)
                if size == 1:
                    self.b.store(ir.Constant(mem_type(bd.dtype), None), bd.base)
                else:
                    self._memset(bd.base, size * _bytes(bd.dtype))
        vals: dict[str, tuple[ir.Value, str]] = {}
        for s in blk.stmts:
            if isinstance(s, Block):
                self.emit_block(s, env, binds, init=init)
            elif isinstance(s, Store):
                bd = binds[s.ref]
                if init is not None:
                    if bd.mode == "init":
                        self.store(bd, env, identity(bd.agg, bd.dtype))
                    continue
                v = vals[s.value][0]
                if bd.mode == "reg":
                    slot = bd.vacc if lanes else bd.acc
                    v = self.to_acc(v, bd.dtype)
                    acc = self.b.load(slot, typ=v.type)
                    adt = _acc_dtype(bd.dtype)
                    self.b.store(combine(self.b, bd.agg, acc, v, adt, self.fma), slot)
                    if bd.touched is not None:
                        self.b.store(ir.Constant(I1, 1), bd.touched)
                elif bd.mode == "mem":
                    old = self.vload(bd, env, lanes, vidx)
                    self.vstore(bd, env, combine(self.b, bd.agg, old, v, bd.dtype, self.fma), lanes)
                else:
                    self.vstore(bd, env, v, lanes)
            elif init is not None:
                continue
            elif isinstance(s, Load):
                bd = binds[s.ref]
                vals[s.into] = (self.vload(bd, env, lanes, vidx), bd.dtype)
            elif isinstance(s, Constant):
                vals[s.into] = (splat(const(s.dtype, s.value), lanes), s.dtype)
            elif isinstance(s, LoadIndex):
                v = self.affine(s.expr, env)
                if lanes:
                    c = s.expr.coeff(vidx)  # type: ignore[arg-type]
                    steps = ir.Constant(ir.VectorType(I64, lanes), [c * i for i in range(lanes)])
                    v = self.b.add(self.broadcast(v, lanes), steps)
                vals[s.into] = (v, "i64")
            elif isinstance(s, Intrinsic):
                args = [vals[a][0] for a in s.inputs]
                dts = [vals[a][1] for a in s.inputs]
                vals[s.into] = (intrinsic(self.b, s.op, args, dts, s.dtype, self.fma), s.dtype)
            elif isinstance(s, Special):
                raise StripeError(f"cpu: special '{s.op}' inside a kernel is not supported yet")

    def _memset(self, ptr: ir.Value, nbytes: int) -> None:
        ptr = self.b.bitcast(ptr, I8.as_pointer())  # allocas of any dtype share one declaration
        args = [ptr, ir.Constant(I8, 0), ir.Constant(I64, nbytes), ir.Constant(I1, 0)]
        call_intrinsic(self.b, "llvm.memset", args, ret=ir.VoidType(), overloads=[PTR, I64])

    # -- loops ----------------------------------------------------------------
    def loops(
        self,
        blk: Block,
        order: list[str],
        env: dict[str, ir.Value],
        body: Callable[[dict[str, ir.Value], int | None], None],
        top: bool,
        guards_here: bool = False,
        vector: str | None = None,
    ) -> None:
        """Emit loops over ``order``; each constraint bounds the innermost loop it
        mentions; constraints on enclosing indices only become one guard."""
        pos = {n: i for i, n in enumerate(order)}
        own = blk_idx_names(blk)
        guards, per_loop = [], {n: [] for n in order}
        for c in blk.constraints:
            names = [n for n in c.expr.names if n in pos]
            if any(n in own and n not in pos and n not in env for n in c.expr.names):
                continue  # bounds a loop emitted by another call (the reduction loops)
            if names:
                per_loop[max(names, key=pos.__getitem__)].append(c)
            elif guards_here and not any(n in own for n in c.expr.names):
                guards.append(c)
        b = self.b

        def rec(k: int, env2: dict[str, ir.Value], lanes: int | None = None) -> None:
            if k == len(order):
                body(env2, lanes)
                return
            name = order[k]
            idx = blk.idx(name)
            base = idx.affine or Affine()
            lo: ir.Value = ir.Constant(I64, 0)
            hi: ir.Value = ir.Constant(I64, idx.range)
            for c in per_loop[name]:
                coef = c.expr.coeff(name)
                r = self.affine(c.expr - Affine.index(name, coef) + base * coef, env2)
                if coef > 0:
                    lo = _smax(b, lo, _ceildiv(b, b.neg(r), coef))
                else:
                    hi = _smin(b, hi, b.add(_floordiv(b, r, -coef), ir.Constant(I64, 1)))
            if top and name == self.par:
                lo = _smax(b, lo, self.start)
                hi = _smin(b, hi, self.end)
            base_v = self.affine(base, env2) if base.terms or base.const else None

            def inner(v: ir.Value, lanes: int | None = None) -> None:
                env3 = dict(env2)
                env3[name] = b.add(base_v, v) if base_v is not None else v
                rec(k + 1, env3, lanes)

            if name == vector and k == len(order) - 1:
                # Vector loop over whole chunks of lanes, then a scalar tail.
                w = self.vector_width
                span = _smax(b, b.sub(hi, lo), ir.Constant(I64, 0))
                main_end = b.add(lo, b.mul(b.udiv(span, ir.Constant(I64, w)), ir.Constant(I64, w)))
                self.loop(name, lo, main_end, lambda v: inner(v, w), step=w)
                self.loop(name, main_end, hi, inner)
            else:
                self.loop(name, lo, hi, inner)

        if guards:
            ok = None
            for c in guards:
                t = b.icmp_signed(">=", self.affine(c.expr, env), ir.Constant(I64, 0))
                ok = t if ok is None else b.and_(ok, t)
            with b.if_then(ok):
                rec(0, env)
        else:
            rec(0, env)

    def loop(
        self, name: str, lo: ir.Value, hi: ir.Value, body: Callable[[ir.Value], None], step: int = 1
    ) -> None:
        b = self.b
        pre = b.block
        head = self.fn.append_basic_block(self.fresh(f"{name}.head"))
        loop_body = self.fn.append_basic_block(self.fresh(f"{name}.body"))
        exit_ = self.fn.append_basic_block(self.fresh(f"{name}.exit"))
        b.branch(head)
        b.position_at_end(head)
        phi = b.phi(I64, name=name)
        phi.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", phi, hi), loop_body, exit_)
        b.position_at_end(loop_body)
        body(phi)
        nxt = b.add(phi, ir.Constant(I64, step), flags=("nsw",))
        phi.add_incoming(nxt, b.block)
        b.branch(head)
        b.position_at_end(exit_)


def _overwritten_first(blk: Block, name: str) -> bool:
    """Whether ``blk``'s first statement assigns every element of its ``none`` buffer
    ``name`` (a packed panel's copy), so zeroing it first would be wasted."""
    buf = blk.ref(name)
    first = blk.stmts[0] if blk.stmts else None
    if not isinstance(first, Block) or first.constraints or first.sub_blocks:
        return False
    if any(i.affine is not None for i in first.idxs):
        return False
    writes = [r for r in first.refs if r.from_ == name]
    if len(writes) != 1 or writes[0].dir != "out" or writes[0].agg != "assign":
        return False
    w = writes[0]
    if w.shape.strides != buf.shape.strides or any(s != 1 for s in w.shape.sizes):
        return False
    ranges = {i.name: i.range for i in first.idxs}
    # access[d] = one index of range sizes[d], each dimension its own index.
    seen = set()
    for a, size in zip(w.access, buf.shape.sizes):
        if a.const or len(a.terms) != 1:
            return False
        ((n, c),) = a.terms
        if c != 1 or n in seen or ranges.get(n) != size:
            return False
        seen.add(n)
    stored = [st for st in first.stmts if isinstance(st, Store) and st.ref == w.into]
    dense = TensorShape.dense(buf.shape.dtype, buf.shape.sizes)
    return len(stored) == 1 and dense.strides == buf.shape.strides


def _acc_dtype(dt: str) -> str:
    """The dtype a register accumulator of ``dt`` holds: float16 sums and products
    accumulate in float and round to float16 once, as NumPy's float16 reductions
    (``sum``, ``einsum``, ``matmul``) and the interpreter's fast path do; an
    accumulation in memory rounds after every step, as the general mode does."""
    return "f32" if dt == "f16" else dt


def _is_zero(v: ir.Value) -> bool:
    return isinstance(v, ir.Constant) and v.constant == 0


def _bytes(dt: str) -> int:
    from ..ir.dtypes import itemsize

    return itemsize(dt)


def _smax(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed(">", x, y), x, y)


def _smin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def _floordiv(b: ir.IRBuilder, x: ir.Value, d: int) -> ir.Value:
    if d == 1:
        return x
    dc = ir.Constant(I64, d)
    q = b.sdiv(x, dc)
    r = b.srem(x, dc)
    return b.select(b.icmp_signed("<", r, ir.Constant(I64, 0)), b.sub(q, ir.Constant(I64, 1)), q)


def _ceildiv(b: ir.IRBuilder, x: ir.Value, d: int) -> ir.Value:
    return b.neg(_floordiv(b, b.neg(x), d))
