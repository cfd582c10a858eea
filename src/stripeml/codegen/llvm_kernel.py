"""One root kernel block as LLVM IR: blocks, refinements, statements, aggregation.

Blocks become loop nests (:class:`.llvm_builder.KernelBuilder`); refinements
become a base pointer plus an element offset that is an affine function of the
indices (:func:`.plan.view_offset`); ``none`` refinements become stack
allocations, zeroed per point (unless the block's first statement overwrites
them whole).

Aggregation (the scope rule of docs/stripe-ir.md, decided by :mod:`.plan`): a
block whose output view aggregates while its parent does not is a *scope*.
When the scope is a leaf block with a single store, its loops are ordered with
the store's address indices outside and the rest inside, and the value
accumulates in a register (in vector lanes too when the reduction's innermost
index vectorises), stored once per element if any point reached it.  A leaf
whose reduction does not vectorise keeps a *register tile* of outputs instead
(:mod:`.llvm_tile`), or accumulates in memory with a unit-stride output index
in vector lanes.  Otherwise the scope first writes the aggregation's identity
to every element it will touch (a copy of its loop nest that only stores),
then accumulates in memory.
"""

from __future__ import annotations

import llvmlite.ir as ir

from ..errors import StripeError
from ..ir.dtypes import itemsize
from ..ir.nodes import (
    Block,
    Constant,
    Intrinsic,
    Load,
    LoadIndex,
    Special,
    Store,
    TensorShape,
    work_estimate,
)
from .cpu_abi import KernelInfo
from .llvm_builder import KernelBuilder
from .llvm_ops import combine, hreduce, intrinsic
from .llvm_plan import (
    Bind,
    loop_order,
    parallel_index,
    register_tile_plan,
    vectorizable,
)
from .llvm_prefetch import streams_split
from .llvm_tile import emit_register_tile, emit_unrolled, unrolled_epilogue_plan
from .llvm_transpose import emit_transpose, transpose_plan
from .llvm_types import I1, I64, acc_dtype, const, identity, mem_type, reg_type, splat, vec
from .plan import (
    deferred_scope,
    init_targets,
    injective,
    needed_in_init,
    needs_touched_flag,
    register_scope,
    split_by_address,
    views,
)


class KernelEmitter(KernelBuilder):
    """Emits root kernel ``kernel`` as the function ``symbol`` (see :class:`KernelBuilder`)."""

    #: Emit a register tile's small ``epilogue`` straight-line (``llvm_tile.emit_unrolled``):
    #: set for the bodies compiled at O1, whose loops LLVM does not unroll (at O3 it
    #: unrolls that loop itself, and the object code is the same either way).
    unroll_epilogues = False

    def run(self) -> KernelInfo:
        """Emit the kernel; its metadata for the runtime."""
        par = parallel_index(self.kernel)
        self.par = par
        self.par_grain = 1
        self.reverse_split = streams_split(self.kernel, par)
        self.emit_block(self.kernel, {}, self.root_binds, top=True)
        self.b.ret_void()
        self.alloca_builder.branch(self.fn.blocks[1])
        extent = self.kernel.idx(par).range if par else 1
        return KernelInfo(
            self.symbol,
            self.kernel.name,
            extent,
            par is not None,
            work_estimate(self.kernel),
            self.par_grain,
        )

    # -- refinements -----------------------------------------------------------
    def bind_refs(
        self, blk: Block, prefs: dict[str, Bind], init: set[int] | None
    ) -> dict[str, Bind]:
        """``blk``'s refinements (:func:`.plan.views`) as LLVM values: views share
        their parent's pointer, allocations are stack slots of the kernel."""
        binds: dict[str, Bind] = {}
        for r, p, off, mode in views(blk, prefs, init):
            if p is None:
                slot = self.alloca_builder.alloca(
                    mem_type(r.shape.dtype), size=max(r.shape.extent, 1), name=self.fresh("alloc")
                )
                if r.shape.extent > 1:
                    slot.align = 64  # a cache line: vector rows of packed panels never split lines
                binds[r.into] = Bind(slot, off, r.shape.dtype, "", mode, None)
            else:
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
        """Emit ``blk`` (or, with ``init``, its identity-writing copy) at ``env``."""
        binds = self.bind_refs(blk, prefs, init)
        if init is None:
            moved = transpose_plan(blk, binds, self.vector_width)
            if moved is not None:
                emit_transpose(self, blk, env, binds, moved, top)
                return
        if init is None and not (top and self.par is not None):
            plan = register_tile_plan(blk, binds, self.vector_width, self.tile_vectors)
            if plan is not None:
                emit_register_tile(self, blk, env, binds, *plan)
                return
            # (At O3 too for a narrower-lane epilogue, which LLVM's loop vectoriser
            # ran across its rows with gathers and scatters.)
            flat = unrolled_epilogue_plan(
                blk,
                binds,
                self.vector_width,
                self.tile_vectors,
                narrow_only=not self.unroll_epilogues,
            )
            if flat is not None:
                emit_unrolled(self, blk, env, binds, *flat)
                return
        scopes = [n for n, bd in binds.items() if bd.mode == "scope"]
        if scopes and init is None and deferred_scope(blk, scopes):
            scopes = []  # the child block is each element's scope (it stays "scope")
        reg = None
        vlast = None
        if scopes:
            reg = register_scope(blk, {n: binds[n].offset for n in scopes})
            if reg is None:
                reg = _scope_beside_assignments(blk, binds, scopes)
            for n in scopes:
                binds[n].mode = "reg" if n == reg else "mem"
            # (not for a dtype whose register accumulator is wider, float16: summed in
            # memory it would round at every step, 3% off over 512 terms)
            if (
                reg is not None
                and init is None
                and self.vector_width > 1
                and acc_dtype(binds[reg].dtype) == binds[reg].dtype
            ):
                vlast = self._prefer_memory(blk, binds, reg, self.par if top else None)
                if vlast is not None:
                    reg = None
            if any(n != reg for n in scopes):
                # Write the identity to every element the scope will touch.
                targets = init_targets(prefs, blk, [n for n in scopes if n != reg])
                self.emit_block(blk, env, dict(prefs), top, init=targets)
        order = loop_order(blk, binds, reg, self.par if top else None, vlast)
        if init is not None:
            written = {n for n, bd in binds.items() if bd.mode == "init"}
            order = [n for n in order if needed_in_init(blk, n, written)]
        elif (
            reg is None
            and self.vector_width > 1
            and order
            and not vectorizable(blk, binds, order[-1])
        ):
            # The thread split may have taken the vector index outermost (the only
            # race-free index of an elementwise kernel fused with a reduction over
            # pixels): run it innermost instead, each thread's chunk in lanes.
            lanes = [n for n in order[:-1] if vectorizable(blk, binds, n)]
            if lanes:
                order.remove(lanes[-1])
                order.append(lanes[-1])
        outer = order
        inner: list[str] = []
        if reg is not None:
            outer, inner = split_by_address(order, binds[reg].offset)
        vidx = None
        if init is None and self.vector_width > 1:
            cand = (inner or outer)[-1:]
            if cand and vectorizable(blk, binds, cand[0]):
                vidx = cand[0]

        if top and vidx is not None and vidx == self.par:
            self.par_grain = self.vector_width  # thread chunks of whole vectors, no scalar tails

        def body(env3: dict[str, ir.Value], lanes: int | None) -> None:
            self.stmts(blk, env3, binds, init, lanes, vidx)

        def point(env2: dict[str, ir.Value], lanes: int | None) -> None:
            if reg is None:
                body(env2, lanes)
                return
            bd = binds[reg]
            adt = acc_dtype(bd.dtype)
            rt = reg_type(adt)
            bd.acc = self.alloca_builder.alloca(rt, name=self.fresh("acc"))
            self.b.store(identity(bd.agg, adt), bd.acc)
            if vidx is not None:
                bd.vacc = self.alloca_builder.alloca(
                    vec(rt, self.vector_width), name=self.fresh("vacc")
                )
                self.b.store(splat(identity(bd.agg, adt), self.vector_width), bd.vacc)
            flagged = needs_touched_flag(blk, inner)
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
        if not red or vectorizable(blk, binds, red[-1]):
            return None
        unit = [i.name for i in blk.idxs if bd.offset.coeff(i.name) == 1]
        if not unit:
            return None
        bd.mode = "mem"
        if vectorizable(blk, binds, unit[-1]):
            return unit[-1]
        bd.mode = "reg"
        return None

    # -- statements -----------------------------------------------------------
    def stmts(
        self,
        blk: Block,
        env: dict[str, ir.Value],
        binds: dict[str, Bind],
        init: set[int] | None,
        lanes: int | None = None,
        vidx: str | None = None,
    ) -> None:
        """``blk``'s statements at one point (``lanes`` points along ``vidx``)."""
        for r in blk.refs:
            if r.dir == "none" and init is None and not _overwritten_first(blk, r.into):
                bd = binds[r.into]
                size = max(r.shape.extent, 1)
                if size == 1:
                    self.b.store(ir.Constant(mem_type(bd.dtype), None), bd.base)
                else:
                    self.memset(bd.base, size * itemsize(bd.dtype))
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
                    adt = acc_dtype(bd.dtype)
                    held = self.held_accs
                    if held is not None and slot is not None:  # a register tile's trip
                        _, acc = held.get(id(slot)) or (slot, self.b.load(slot, typ=v.type))
                        held[id(slot)] = (slot, combine(self.b, bd.agg, acc, v, adt, self.fma))
                        continue
                    acc = self.b.load(slot, typ=v.type)
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
                    c = s.expr.coeff(vidx) if vidx is not None else 0
                    steps = ir.Constant(ir.VectorType(I64, lanes), [c * i for i in range(lanes)])
                    v = self.b.add(self.broadcast(v, lanes), steps)
                vals[s.into] = (v, "i64")
            elif isinstance(s, Intrinsic):
                args = [vals[a][0] for a in s.inputs]
                dts = [vals[a][1] for a in s.inputs]
                vals[s.into] = (
                    intrinsic(self.b, s.op, args, dts, s.dtype, self.fma, self.int8_dot),
                    s.dtype,
                )
            elif isinstance(s, Special):
                raise StripeError(f"cpu: special '{s.op}' inside a kernel is not supported yet")


def _overwritten_first(blk: Block, name: str) -> bool:
    """Whether ``blk``'s first statement assigns every element of its ``none`` buffer
    ``name`` (a packed panel's copy), or the first statement that mentions it is a
    block that writes all of it through one view (a ``nest``'s intermediates: an
    assignment, or an aggregation whose scope is that block, which leaves no element
    at its previous contents), so zeroing it first would be wasted."""
    buf = blk.ref(name)
    if _written_whole_first(blk, name, buf.shape.sizes):
        return True
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


def _written_whole_first(blk: Block, name: str, sizes: tuple[int, ...]) -> bool:
    """The second case of :func:`_overwritten_first` (decided with isl)."""
    from ..analysis.coverage import writes_all

    for st in blk.stmts:
        if not isinstance(st, Block):
            if name in _mentions(st):
                return False
            continue
        views = [r for r in st.refs if r.from_ == name]
        if not views:
            continue
        if len(views) != 1 or views[0].dir != "out" or st.constraints:
            return False
        return writes_all(st, views[0].into, sizes, (blk,))
    return False


def _mentions(st: object) -> set[str]:
    return (
        {getattr(st, "ref", "")} | set(getattr(st, "inputs", ())) | set(getattr(st, "outputs", ()))
    )


def _scope_beside_assignments(blk: Block, binds: dict[str, Bind], scopes: list[str]) -> str | None:
    """The one scope of leaf ``blk`` that may accumulate in a register although the
    block also assigns other outputs (:func:`.plan.register_scope` wants a single
    store): a nest's fused kernel that writes the masked scores and their row
    maximum, ``T47 = T44 * C + M; T48 = >(T47)``.  Its store must be the scope's
    only one, at an :func:`~.plan.injective` address, and the block's own order of
    indices must already run that address outside the reduction, so the points
    run in the same order as when it accumulates in memory (an assignment whose
    buffer aliases an input, ``nest``'s in-place intermediates, sees the same
    reads).  The reduction then runs in vector lanes with the assignments'
    stores, and no pass writes the identity first (in memory, LLVM vectorised
    the scalar loop of ``llvm.maximum``: about seven instructions a vector).
    Softmax's ``exp`` and row sum and a layer norm's sums beside their
    assignments take the same path: their sums then run in one vector
    accumulator, in another order than LLVM's four (``reassoc``: the last bits
    may differ)."""
    if len(scopes) != 1 or blk.sub_blocks or any(isinstance(s, Special) for s in blk.stmts):
        return None
    (name,) = scopes
    if any(isinstance(s, Load) and s.ref == name for s in blk.stmts):
        return None  # read back before its register is stored
    stores = [s for s in blk.stmts if isinstance(s, Store)]
    if sum(s.ref == name for s in stores) != 1:
        return None
    for s in stores:
        if s.ref != name:
            ref = blk.ref(s.ref)
            if binds[s.ref].mode != "plain" or ref.dir != "out" or ref.agg not in ("", "assign"):
                return None
    offset = binds[name].offset
    names = [i.name for i in blk.idxs]
    if names != [n for n in names if n in offset.names] + [
        n for n in names if n not in offset.names
    ]:
        return None
    return name if injective(offset, blk) else None
