"""One root kernel block as a C-style kernel function: blocks, loops, statements.

:class:`KernelPrinter` walks a kernel in a dialect (:class:`.cstyle.CStyle`)
once :mod:`.gpu_plan` has mapped its points onto work-items:

* ``naive``: each work-item decodes its global id into the kernel's parallel
  indices and runs the kernel's other indices as loops;
* ``tiled``: :mod:`.gpu_tiled` prints the group's loops, local memory and
  barriers, and calls back here for each leaf block;
* blocks become loop nests, constraints become loop bounds (each bounds the
  innermost loop it mentions) or guards, refinements become a pointer plus an
  affine element offset (:func:`.plan.view_offset`), ``none`` allocations
  private arrays (or local memory for a tiled kernel's own buffers), zeroed
  per point;
* aggregation follows the scope rule of ``docs/stripe-ir.md`` as decided by
  :mod:`.plan`: a leaf scope with one store at an injective address
  accumulates in a register and stores once (if any point reached it); any
  other scope first writes the aggregation's identity to every element it
  touches, then accumulates in memory.  Points that store to one element
  always run on one work-item (the parallel indices are proven race-free with
  isl), so no atomics are needed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..analysis.canonical import kernel_buffers
from ..errors import StripeError
from ..ir.affine import Affine
from ..ir.nodes import Block, Constant, Intrinsic, Load, LoadIndex, Special, Store
from .gpu_abi import KernelInfo
from .gpu_plan import KernelPlan, plan_kernel
from .gpu_tiled import emit_tiled
from .plan import (
    bound_terms,
    init_targets,
    needed_in_init,
    needs_touched_flag,
    place_constraints,
    register_scope,
    sanitize,
    split_by_address,
    views,
)

if TYPE_CHECKING:
    from .cstyle import CStyle


@dataclass
class CBind:
    """A refinement as seen by generated C: an element of array ``base`` at ``offset``."""

    base: str  # C pointer (or array) name of the underlying memory
    offset: Affine  # element offset of the view's origin
    dtype: str
    agg: str
    mode: str  # one of plan.MODES
    acc: str | None = None  # register accumulator (mode reg)
    # A register strip (tiled kernels): the accumulator is acc[... + strip index].
    acc_index: str | None = None
    touched: str | None = None


@dataclass
class Writer:
    """Indented lines of C; :meth:`open` and :meth:`close` nest braces."""

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


class KernelPrinter:
    """Prints root kernel ``kernel`` of ``root`` as the function ``symbol``.

    ``helpers`` collects the helper functions the kernels call (shared by the
    whole source); ``max_group_size``, ``max_shared`` and ``strip`` are the
    options of :func:`.cstyle.generate`.
    """

    def __init__(
        self,
        style: CStyle,
        root: Block,
        kernel: Block,
        symbol: str,
        helpers: dict[str, str],
        max_group_size: int,
        max_shared: int = 0,
        strip: int = 0,
    ) -> None:
        self.s = style
        self.root = root
        self.kernel = kernel
        self.symbol = symbol
        self.helpers = helpers
        self.max_group_size = max_group_size
        self.max_shared = max_shared
        self.strip = strip
        self.w = Writer()
        self.counter = 0
        self.uses_f64 = False
        self.shared_bytes = 0
        self.local_arrays: dict[int, str] = {}  # id(ref) -> C name, for tiled kernels
        self.used = kernel_buffers(kernel)
        index = {r.into: i for i, r in enumerate(root.refs)}
        self.buffer_ids = tuple(index[u] for u in self.used)
        self.root_binds: dict[str, CBind] = {}
        for u in self.used:
            shape = root.ref(u).shape
            # A negative stride walks down from the last element: the view's
            # origin is that many elements above the buffer's base pointer.
            origin = sum(
                (n - 1) * -st for n, st in zip(shape.sizes, shape.strides) if st < 0 and n > 0
            )
            self.root_binds[u] = CBind(
                f"b_{sanitize(u)}", Affine.constant(origin), shape.dtype, "", "read"
            )

    # -- names and helpers ---------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        """A new C name starting with ``prefix``."""
        self.counter += 1
        return f"{sanitize(prefix)}_{self.counter}"

    def need(self, kind: str, dt: str, src: str = "") -> str:
        """The name of helper function ``kind`` (see :meth:`.CStyle.helper`), defined once."""
        name, text = self.s.helper(kind, dt, src)
        self.helpers.setdefault(name, text)
        return name

    def aff(self, a: Affine, env: dict[str, str]) -> str:
        """The C expression of ``a`` with the indices bound in ``env``."""
        parts = []
        for name, c in a.terms:
            if name not in env:
                raise StripeError(f"{self.s.name}: index '{name}' is not visible")
            parts.append(env[name] if c == 1 else f"{c}*{env[name]}")
        if a.const or not parts:
            parts.append(str(a.const))
        return "(" + " + ".join(parts) + ")" if len(parts) > 1 else parts[0]

    def elem(self, bd: CBind, env: dict[str, str]) -> str:
        """The element at ``bd``'s origin, as an lvalue."""
        return f"{bd.base}[{self.aff(bd.offset, env)}]"

    def typ(self, dt: str) -> str:
        """The C type of ``dt`` (noting that the source needs float64)."""
        if dt == "f64":
            self.uses_f64 = True
        return self.s.ctype(dt)

    # -- driver -------------------------------------------------------------------------
    def run(self) -> tuple[str, KernelInfo]:
        """The kernel function's text and its launch metadata."""
        plan = plan_kernel(self.kernel, self.max_group_size, strip=self.strip)
        params = []
        for u in self.used:
            dt = self.root.ref(u).shape.dtype
            params.append(
                f"{self.s.global_qualifier} {self.typ(dt)}* {self.s.restrict} {self.root_binds[u].base}".strip()
            )
        if plan.mapping == "tiled":
            emit_tiled(self, plan)
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
        """One work-item per point of the kernel's parallel indices."""
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
    def bind_refs(
        self, blk: Block, prefs: dict[str, CBind], init: set[int] | None
    ) -> dict[str, CBind]:
        """``blk``'s refinements (:func:`.plan.views`) as C arrays: views index their
        parent's array; allocations are private arrays, or local memory of a
        tiled kernel (``local_arrays``); a register accumulator passes down."""
        binds: dict[str, CBind] = {}
        for r, p, off, mode in views(blk, prefs, init):
            if p is None:
                name = self.local_arrays.get(id(r)) or self.fresh(r.into)
                binds[r.into] = CBind(name, off, r.shape.dtype, "", mode)
                continue
            bd = CBind(p.base, off, r.shape.dtype, r.agg, mode)
            if mode == "reg":
                bd.acc, bd.touched, bd.acc_index = p.acc, p.touched, p.acc_index
            binds[r.into] = bd
        return binds

    # -- blocks -------------------------------------------------------------------------
    def emit_block(
        self,
        blk: Block,
        env: dict[str, str],
        prefs: dict[str, CBind],
        pinned: Collection[str] = frozenset(),
        init: set[int] | None = None,
        innermost: str | None = None,
    ) -> None:
        """Print ``blk`` (or, with ``init``, its identity-writing copy) at ``env``.

        ``pinned``: indices of ``blk`` bound in ``env`` already (work-item
        indices), not looped over; ``innermost``: an index to loop innermost
        (a register strip).
        """
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
                targets = init_targets(prefs, blk, mem)
                self.emit_block(blk, env, prefs, pinned, init=targets)
        order = [i.name for i in blk.idxs if i.name not in pinned]
        if innermost in order:
            order.remove(innermost)
            order.append(innermost)
        if init is not None:
            order = [n for n in order if needed_in_init(blk, n)]
        outer = order
        inner: list[str] = []
        if reg is not None:
            outer, inner = split_by_address(order, binds[reg].offset)

        def body(env3: dict[str, str]) -> None:
            self.stmts(blk, env3, binds, init)

        def point(env2: dict[str, str]) -> None:
            if reg is None:
                body(env2)
                return
            bd = binds[reg]
            bd.acc = self.fresh("acc")
            self.w(f"{self.s.reg_type(bd.dtype)} {bd.acc} = {self.s.identity(bd.agg, bd.dtype)};")
            flagged = needs_touched_flag(blk, inner)
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
        self,
        blk: Block,
        order: list[str],
        env: dict[str, str],
        body: Callable[[dict[str, str]], None],
        guards_here: bool,
    ) -> None:
        """Loops over ``order``; each constraint bounds the innermost loop it mentions;
        constraints on enclosing (or pinned) indices only become one guard."""
        # Every name bound in env is visible, pinned work-item indices included.
        guards, per_loop = place_constraints(blk, order, env, guards_here, bound_own=env)
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
                coef, rest_a = bound_terms(c, name, base)
                rest = self.aff(rest_a, env2)
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
    def stmts(
        self, blk: Block, env: dict[str, str], binds: dict[str, CBind], init: set[int] | None
    ) -> None:
        """``blk``'s statements at one point (with ``init``: only the identity stores)."""
        w = self.w
        s = self.s
        if init is None:
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
                if init is not None:
                    if bd.mode == "init":
                        w(f"{self.elem(bd, env)} = {s.identity(bd.agg, bd.dtype)};")
                    continue
                v = vals[st.value][0]
                if bd.mode == "reg":
                    acc, touched = bd.acc, bd.touched
                    assert acc is not None  # every register bind has its accumulator
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
            elif init is not None:
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


def _fold(fn: str, xs: list[str]) -> str:
    """``sm_max(a, sm_max(b, c))`` over index expressions (helpers of the prelude)."""
    out = xs[0]
    for x in xs[1:]:
        out = f"sm_{fn}({out}, {x})"
    return out
