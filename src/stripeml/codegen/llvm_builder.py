"""The LLVM function of one kernel, and how values, memory and loops are written in it.

:class:`KernelBuilder` owns the kernel's two functions (the ABI wrapper of
:mod:`.cpu_abi` and the ``noalias`` body it calls) and the builders; it turns
affine expressions into index arithmetic, refinements into loads and stores
(scalar or vector), and a block's indices into loop nests whose bounds come
from its constraints (each bounds the innermost loop it mentions, see
:func:`.plan.place_constraints`, so no guard remains inside a loop).  What
runs inside the loops, the Stripe semantics, is :mod:`.llvm_kernel`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import llvmlite.ir as ir

from ..analysis.canonical import kernel_buffers
from ..errors import StripeError
from ..ir.affine import Affine
from ..ir.dtypes import itemsize
from ..ir.nodes import Block
from .llvm_ops import call_intrinsic
from .llvm_plan import Bind, max_tile_vectors
from .llvm_types import F32, I1, I8, I64, PTR, lanes_of, mem_type, reg_type, vec
from .plan import bound_terms, place_constraints


def emit_wrapper(
    module: ir.Module,
    symbol: str,
    body: ir.Function,
    slots: list[int],
    bounds: Sequence[int] | None = None,
) -> None:
    """The ABI function ``symbol(void **buffers, start, end)``: loads
    ``buffers[slots[i]]`` for each pointer parameter of ``body`` and calls it.

    ``bounds``: the ranges of the body's runtime-bound indices
    (:func:`.llvm.runtime_bounds`), passed as constants; ``None`` when
    ``symbol`` is a body's entry, whose array holds them as 64-bit integers
    after the pointers (``args[len(slots) + k]``: the runtime gathers both,
    :attr:`.cpu_abi.KernelInfo.gather`)."""
    extra = len(body.function_type.args) - len(slots) - 2
    wrapper = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64]), symbol)
    wb = ir.IRBuilder(wrapper.append_basic_block("entry"))
    bufs, start, end = wrapper.args[:3]
    ptrs = []
    for slot in slots:
        at = wb.gep(bufs, [ir.Constant(I64, slot)], source_etype=PTR)
        ptrs.append(wb.load(at, typ=PTR))
    passed: list[ir.Value] = []
    if bounds is None:
        for k in range(extra):
            at = wb.gep(bufs, [ir.Constant(I64, len(slots) + k)], source_etype=PTR)
            passed.append(wb.load(at, typ=I64))
    else:
        passed = [ir.Constant(I64, n) for n in bounds]
    wb.call(body, [*ptrs, start, end, *passed])
    wb.ret_void()


class KernelBuilder:
    """The function of root kernel ``kernel`` in ``module``, named ``symbol``.

    The ABI wrapper loads the buffer pointers and calls a body whose pointer
    parameters are ``noalias`` (each root buffer appears once).  ``par`` (set
    by the caller before emitting) is the kernel's thread-split index, whose
    loop runs only ``[start, end)``.  With ``body_only`` the function
    ``symbol(void **args, start, end)`` takes the kernel's own pointer array,
    ``args[i]`` the i-th buffer in
    :func:`stripeml.analysis.canonical.kernel_buffers` order (a wrapper
    elsewhere builds it; see :func:`.llvm.generate`), and after ``end`` the
    ranges of ``bounds``, indices of ``kernel`` whose loops run to that value
    instead of a constant (:func:`.llvm.runtime_bounds`).  The body is inlined
    into that function either way: LLVM optimises the same code as when the
    wrapper and body share a module (compiled on their own, the body of a
    grouped convolution got 64-bit gathers and 13% more instructions).
    """

    def __init__(
        self,
        module: ir.Module,
        root: Block,
        kernel: Block,
        symbol: str,
        vector_width: int,
        fma: bool = False,
        body_only: bool = False,
        vector_registers: int = 16,
        int8_dot: bool = False,
        bounds: Sequence[str] = (),
    ):
        self.module = module
        self.int8_dot = int8_dot
        # Accumulators a register tile may keep (the ISA's registers less operands).
        self.tile_vectors = max_tile_vectors(vector_registers)
        self.fma = fma
        self.root = root
        self.kernel = kernel
        self.symbol = symbol
        self.vector_width = vector_width
        self.par: str | None = None
        self.par_grain = 1  # the vector width when the split index runs in lanes
        # Run the split index's chunk from its far end when the chunk lies in the
        # back half of its range (set by the caller: a kernel whose prefetching tile
        # streams its panels along the split index, ``llvm_prefetch.streams_split``);
        # ``split_back`` is then that test's value, for the tile's prefetches
        self.reverse_split = False
        self.split_back: ir.Value | None = None
        # Bind an index of range 1 to 0 instead of looping over it (``loops``): set for
        # the bodies compiled at O1, where the object code is the same either way
        self.no_one_trip_loops = False
        # ... only for the kernel's own block's indices (``top``): set for the O3
        # bodies whose own indices take runtime bounds (``.llvm.runtime_bounds``)
        self.no_one_trip_top_loops = False
        used = list(kernel_buffers(kernel))
        self.used = used
        bounds = tuple(bounds)
        body_ty = ir.FunctionType(
            ir.VoidType(), [PTR] * len(used) + [I64, I64] + [I64] * len(bounds)
        )
        self.fn = ir.Function(module, body_ty, symbol + ".body")
        self.fn.linkage = "internal"
        self.fn.attributes.add("alwaysinline")
        if body_only:  # the entry takes the kernel's own pointers: args[i] is used[i]
            emit_wrapper(module, symbol, self.fn, list(range(len(used))))
        else:
            root_index = {r.into: i for i, r in enumerate(root.refs)}
            emit_wrapper(
                module,
                symbol,
                self.fn,
                [root_index[name] for name in used],
                [kernel.idx(n).range for n in bounds],
            )
        for a in self.fn.args[: len(used)]:
            a.add_attribute("noalias")
        self.entry = self.fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(self.entry)
        first = self.fn.append_basic_block("start")
        self.b = ir.IRBuilder(first)
        self.start, self.end = self.fn.args[len(used)], self.fn.args[len(used) + 1]
        # The kernel's indices whose loops run to a bound passed at run time (the
        # body's parameters after ``end``) instead of their range as a constant.
        self.bound_args: dict[str, ir.Value] = {
            n: self.fn.args[len(used) + 2 + k] for k, n in enumerate(bounds)
        }
        self.root_binds = {
            name: Bind(self.fn.args[i], Affine(), root.ref(name).shape.dtype, "", "read", name)
            for i, name in enumerate(used)
        }
        self.counter = 0
        # Affine partial sums already emitted, by (basic block, terms): see :meth:`affine`.
        self._sums: dict[tuple[object, tuple[tuple[int, int], ...]], ir.Value] = {}
        # id of a token -> (index, constant, the token: held, so its id is never reused)
        self.shifted: dict[int, tuple[ir.Value, int, ir.Value]] = {}  # see ``shift``
        # Loads already emitted in one step of a register tile (see ``vload``), and the
        # root buffer it writes, whose loads are never shared
        self.load_memo: dict[tuple[object, ...], ir.Value] | None = None
        self.load_memo_skip: str | None = None
        # A register tile's accumulators within one trip of its unrolled reduction loop:
        # id(slot) -> (slot, running value), loaded at the trip's first step and stored
        # after its last (``llvm_tile.emit_register_tile``), not at every step
        self.held_accs: dict[int, tuple[ir.Value, ir.Value]] | None = None

    def fresh(self, prefix: str) -> str:
        """A new value or block name starting with ``prefix``."""
        self.counter += 1
        return f"{prefix}.{self.counter}"

    # -- values ---------------------------------------------------------------
    def affine(self, a: Affine, env: dict[str, ir.Value]) -> ir.Value:
        """The i64 value of ``a`` with the indices bound in ``env``.

        Indices bound to constants (the rows of an unrolled tile) fold into the
        constant, and each partial sum of the other terms is emitted once per
        basic block (a value defined earlier in a block dominates every later
        use in it): a register tile's loads and stores differ only in those
        constants.  ResNet-50's bodies had half their instructions in address
        arithmetic repeated per access, which LLVM merged again; emitted once,
        the code generator takes 23-32% less time and LLVM the same."""
        v: ir.Value | None = None
        const = a.const
        key: tuple[tuple[int, int], ...] = ()
        for name, c in a.terms:
            if name not in env:
                raise StripeError(f"cpu: index '{name}' is not visible")
            value = env[name]
            if isinstance(value, ir.Constant) and isinstance(value.constant, int):
                const += c * value.constant
                continue
            shifted = self.shifted.get(id(value))
            if shifted is not None:  # a copy of an unrolled loop's body: its index plus a constant
                value, add, _ = shifted
                const += c * add
            key += ((id(value), c),)  # the values live as long as the function
            v = self._sum_once(key, self._term_added, v, value, c)
        if v is None:
            return ir.Constant(I64, const)
        if not const:
            return v
        # (0, const): no index has id 0
        return self._sum_once((*key, (0, const)), self.b.add, v, ir.Constant(I64, const))

    def shift(self, value: ir.Value, add: int) -> ir.Value:
        """``value + add`` (an index in a copy of an unrolled loop's body), which
        :meth:`affine` folds into its constant: every copy's addresses share the
        loop's partial sums and differ only in constant offsets."""
        if not add:
            return value
        # a token, never inserted in a block: only ``affine`` reads it (anything else
        # would name an undefined value, which LLVM's parser rejects)
        v = ir.Instruction(self.b.block, I64, "add", [value, ir.Constant(I64, add)])
        self.shifted[id(v)] = (value, add, v)
        return v

    def _sum_once(
        self, key: tuple[tuple[int, int], ...], make: Callable[..., ir.Value], *args: Any
    ) -> ir.Value:
        """The partial sum ``key`` emitted in the current block: ``make(*args)`` the
        first time."""
        at = (self.b.block, key)
        found = self._sums.get(at)
        if found is None:
            found = self._sums[at] = make(*args)
        return found

    def _term_added(self, v: ir.Value | None, value: ir.Value, c: int) -> ir.Value:
        term = value if c == 1 else self.b.mul(value, ir.Constant(I64, c))
        return term if v is None else self.b.add(v, term)

    def address(self, bind: Bind, env: dict[str, ir.Value]) -> ir.Value:
        """A pointer to the element at ``bind``'s origin."""
        return self.b.gep(
            bind.base, [self.affine(bind.offset, env)], source_etype=mem_type(bind.dtype)
        )

    def load(self, bind: Bind, env: dict[str, ir.Value]) -> ir.Value:
        """The scalar at ``bind``'s origin (a bool byte becomes an i1)."""
        v = self.b.load(self.address(bind, env), typ=mem_type(bind.dtype))
        return self.b.trunc(v, I1) if bind.dtype == "bool" else v

    def store(self, bind: Bind, env: dict[str, ir.Value], v: ir.Value) -> None:
        """Store scalar ``v`` at ``bind``'s origin."""
        if bind.dtype == "bool":
            v = self.b.zext(v, I8)
        self.b.store(v, self.address(bind, env))

    def vload(
        self, bd: Bind, env: dict[str, ir.Value], lanes: int | None, vidx: str | None
    ) -> ir.Value:
        """The value at ``bd``'s origin: ``lanes`` consecutive elements along ``vidx``
        (or one broadcast when the view does not move with ``vidx``), else a scalar.

        While :attr:`load_memo` is set (one step of a register tile, whose statements
        store only into its accumulators), a load of the same element, width and
        buffer in the same basic block is emitted once: a 7 x 2 tile's step loads
        each row's scalar and broadcasts it once, not once per vector, and each
        panel vector once, not once per row (LLVM merged them again; a quarter
        fewer instructions for the Python code generator to build and print)."""
        memo = self.load_memo
        if memo is None or bd.root == self.load_memo_skip:
            return self._vload(bd, env, lanes, vidx)
        off = self.affine(bd.offset, env)
        spot = ("c", off.constant) if isinstance(off, ir.Constant) else ("v", id(off))
        key = (id(self.b.block), id(bd.base), bd.dtype, spot, lanes, vidx)
        found = memo.get(key)
        if found is None:
            found = memo[key] = self._vload(bd, env, lanes, vidx)
        return found

    def _vload(
        self, bd: Bind, env: dict[str, ir.Value], lanes: int | None, vidx: str | None
    ) -> ir.Value:
        if lanes is None or vidx is None or bd.offset.coeff(vidx) == 0:
            v = self.load(bd, env)
            return self.broadcast(v, lanes) if lanes else v
        v = self.b.load(
            self.address(bd, env), typ=vec(mem_type(bd.dtype), lanes), align=itemsize(bd.dtype)
        )
        return self.b.trunc(v, vec(I1, lanes)) if bd.dtype == "bool" else v

    def vstore(self, bd: Bind, env: dict[str, ir.Value], v: ir.Value, lanes: int | None) -> None:
        """Store ``v`` (a vector of ``lanes`` consecutive elements, or a scalar)."""
        if lanes is None:
            self.store(bd, env, v)
            return
        if bd.dtype == "bool":
            v = self.b.zext(v, vec(I8, lanes))
        ptr = self.b.bitcast(self.address(bd, env), v.type.as_pointer())
        self.b.store(v, ptr, align=itemsize(bd.dtype))

    def to_acc(self, v: ir.Value, dt: str) -> ir.Value:
        """A value of dtype ``dt`` as its register accumulator holds it (f16: float)."""
        return self.b.fpext(v, vec(F32, lanes_of(v))) if dt == "f16" else v

    def from_acc(self, v: ir.Value, dt: str) -> ir.Value:
        """A register accumulator's value as dtype ``dt`` (f16: rounded once)."""
        return self.b.fptrunc(v, vec(reg_type("f16"), lanes_of(v))) if dt == "f16" else v

    def broadcast(self, v: ir.Value, lanes: int) -> ir.Value:
        """Scalar ``v`` in every one of ``lanes`` lanes."""
        undef, mask = _broadcast_constants(v.type, lanes)
        one = self.b.insert_element(undef, v, _I32_ZERO)
        return self.b.shuffle_vector(one, undef, mask)

    def memset(self, ptr: ir.Value, nbytes: int) -> None:
        """Zero ``nbytes`` bytes at ``ptr``."""
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
        mentions; constraints on enclosing indices only become one guard.

        ``vector``: when it is the innermost index, its loop runs in whole
        chunks of ``vector_width`` lanes, then a scalar tail; ``body`` gets the
        lane count (``None`` when scalar).
        """
        guards, per_loop = place_constraints(blk, order, env, guards_here)
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
            if top and name in self.bound_args:
                hi = self.bound_args[name]  # equal to idx.range: the caller passes it
            whole = hi
            for c in per_loop[name]:
                coef, rest = bound_terms(c, name, base)
                r = self.affine(rest, env2)
                if coef > 0:
                    lo = _smax(b, lo, _ceildiv(b, b.neg(r), coef))
                else:
                    hi = _smin(b, hi, b.add(_floordiv(b, r, -coef), ir.Constant(I64, 1)))
            top_split = top and name == self.par
            if top_split:
                lo = _smax(b, lo, self.start)
                hi = _smin(b, hi, self.end)
            base_v = self.affine(base, env2) if base.terms or base.const else None

            def inner(v: ir.Value, lanes: int | None = None) -> None:
                env3 = dict(env2)
                env3[name] = b.add(base_v, v) if base_v is not None else v
                rec(k + 1, env3, lanes)

            if (
                (self.no_one_trip_loops or (top and self.no_one_trip_top_loops))
                and idx.range == 1
                and not per_loop[name]
                and name != vector
                and not top_split
            ):
                # One iteration: the index is 0, no loop (LLVM deletes it, at a cost)
                env3 = dict(env2)
                env3[name] = base_v if base_v is not None else ir.Constant(I64, 0)
                rec(k + 1, env3, lanes)
            elif (
                name == vector
                and k == len(order) - 1
                and top_split
                and self.par_grain == self.vector_width
                and idx.range % self.vector_width == 0
                and not per_loop[name]
            ):
                # The thread-split index in lanes, a range of whole vectors: callers cut
                # it at multiples of the grain (KernelInfo.grain, runtime.chunking), so
                # every span is whole vectors and a scalar tail would never run (LLVM
                # spent as long on a Winograd transform's tail as on its vector loop)
                self.loop(
                    name, lo, hi, lambda v: inner(v, self.vector_width), step=self.vector_width
                )
            elif name == vector and k == len(order) - 1:
                # Vector loop over whole chunks of lanes, then a scalar tail.
                w = self.vector_width
                span = _smax(b, b.sub(hi, lo), ir.Constant(I64, 0))
                main_end = b.add(lo, b.mul(b.udiv(span, ir.Constant(I64, w)), ir.Constant(I64, w)))
                self.loop(name, lo, main_end, lambda v: inner(v, w), step=w)
                self.loop(name, main_end, hi, inner)
            elif top_split and self.reverse_split:
                self.split_loop(name, lo, hi, whole, inner)
            else:
                self.loop(name, lo, hi, inner)

        try:
            if guards:
                ok = None
                for c in guards:
                    t = b.icmp_signed(">=", self.affine(c.expr, env), ir.Constant(I64, 0))
                    ok = t if ok is None else b.and_(ok, t)
                with b.if_then(ok):
                    rec(0, env)
            else:
                rec(0, env)
        finally:
            # ``rec`` calls itself through its closure cell: emptying the cell lets
            # reference counting free it, and the emitter and IR objects it holds,
            # now rather than at Python's next cycle collection (``release``).
            rec = None  # type: ignore[assignment]  # noqa: F841

    def split_loop(
        self,
        name: str,
        lo: ir.Value,
        hi: ir.Value,
        whole: ir.Value,
        body: Callable[[ir.Value], None],
    ) -> None:
        """The thread-split index's loop over its chunk ``[lo, hi)``, run downwards
        when the chunk lies in the back half of the index's range ``[0, whole)``
        (``start + end > whole``).  The pool's caller claims chunks from the front
        and its workers from the back (runtime/native_pool.py), so each thread then
        runs its panels in the order it claims them, and the next panel a tile
        prefetches (``split_back``: the one below) is the one that thread runs
        next.  The split index is race-free, so the order changes no result."""
        b = self.b
        back = b.icmp_signed(">", b.add(self.start, self.end), whole)
        self.split_back = back
        # v = first + step * i over i in [0, hi - lo): an affine function of the
        # loop's counter with invariant first and step, which LLVM's scalar
        # evolution follows into every address (a select between v and its mirror
        # it does not: ResNet-50's LLVM time grew 7% with one)
        one = ir.Constant(I64, 1)
        first = b.select(back, b.sub(hi, one), lo)
        step = b.select(back, ir.Constant(I64, -1), one)
        trips = _smax(b, b.sub(hi, lo), ir.Constant(I64, 0))
        self.loop(name, ir.Constant(I64, 0), trips, lambda i: body(b.add(first, b.mul(step, i))))

    def loop(
        self, name: str, lo: ir.Value, hi: ir.Value, body: Callable[[ir.Value], None], step: int = 1
    ) -> None:
        """One counted loop ``lo <= v < hi`` (step ``step``); ``body(v)`` emits its body."""
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


_I32_ZERO = ir.Constant(ir.IntType(32), 0)


@cache
def _broadcast_constants(element: ir.Type, lanes: int) -> tuple[ir.Constant, ir.Constant]:
    """The undefined vector and the all-zero shuffle mask a broadcast of an
    ``element`` to ``lanes`` lanes uses: made once (llvmlite builds a constant
    vector element by element, and a kernel broadcasts thousands of scalars;
    constants are immutable values, shared by every instruction that uses them)."""
    t = ir.VectorType(element, lanes)
    return ir.Constant(t, ir.Undefined), ir.Constant(
        ir.VectorType(ir.IntType(32), lanes), [0] * lanes
    )


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
