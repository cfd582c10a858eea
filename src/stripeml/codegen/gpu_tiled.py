"""Printing a ``tiled`` kernel (see :mod:`.gpu_plan`): tiles on work-groups.

One work-group runs one point of the kernel's race-free (tile) indices; its
other indices are loops every work-item of the group runs together (uniform
bounds, so barriers are legal inside them).  Each leaf block (a ``cache``
copy, the ``#tile`` compute) spreads the points of its race-free indices over
the work-items (``t = local_id + j * group_size``), runs its remaining indices
as loops inside, and ends with a barrier.  The kernel's own allocations
(``SHARED`` tiles) are group-shared memory: one arena laid out by the ``place``
pass's offsets when every allocation has one, else one array each.  An
aggregating output lives in registers: work-item ``local_id`` owns the
elements of its ``j``-th point of the storing leaf (``acc[j]``) across all the
serial loops, and writes them once at the end (only those some point stored).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import StripeError
from ..ir.dtypes import itemsize
from ..ir.nodes import Block
from .gpu_plan import KernelPlan
from .plan import view_offset

if TYPE_CHECKING:
    from .cstyle_kernel import KernelPrinter


def emit_tiled(p: KernelPrinter, plan: KernelPlan) -> None:
    """Print the body of tiled kernel ``p.kernel`` as ``plan`` maps it (see the module)."""
    s, w, kernel = p.s, p.w, p.kernel
    gs = plan.group_size
    w(f"const long grp = (long){s.group_id};")
    w(f"const long lid = (long){s.local_id};")
    env: dict[str, str] = {}
    p.decompose("grp", list(plan.parallel), kernel, env)
    par = set(plan.parallel)
    uniform = [c for c in kernel.constraints if set(c.expr.names) <= par]
    if uniform:
        cond = " && ".join(f"{p.aff(c.expr, env)} >= 0" for c in uniform)
        w(f"if (!({cond})) return;  // the whole group: no point in this tile")
    _declare_shared(p, kernel)
    binds = p.bind_refs(kernel, p.root_binds, None)
    # A tiled plan exists only when every statement of the kernel is a leaf block.
    blocks = [b for b in kernel.stmts if isinstance(b, Block)]
    flagged = bool(kernel.constraints) or any(b.constraints for b in blocks)
    leaves = {id(b): lp for b, lp in zip(blocks, plan.leaves)}
    accs: dict[str, tuple[str, str | None, int]] = {}
    for name in plan.registers:
        bd = binds[name]
        lp = next(lp for lp in plan.leaves if lp.accumulates == name)
        acc = p.fresh(f"acc_{name}")
        touched = p.fresh(f"touched_{name}") if flagged else None
        n = lp.per_thread * lp.strip_range
        w(f"{s.reg_type(bd.dtype)} {acc}[{n}];")
        if touched:
            w(f"bool {touched}[{n}];")
        w(
            f"for (int j = 0; j < {n}; ++j) {{ {acc}[j] = {s.identity(bd.agg, bd.dtype)};"
            + (f" {touched}[j] = false;" if touched else "")
            + " }"
        )
        bd.mode = "reg"
        accs[name] = (acc, touched, n)

    def body(env2: dict[str, str]) -> None:
        for leaf in blocks:
            lp = leaves[id(leaf)]
            j = p.fresh("j")
            if lp.accumulates is not None:
                acc, touched, _ = accs[lp.accumulates]
                bd = binds[lp.accumulates]
                if lp.strip is not None:  # acc[j * strip + <strip index>]
                    bd.acc = f"{acc}[{j} * {lp.strip_range} + "
                    bd.touched = f"{touched}[{j} * {lp.strip_range} + " if touched else None
                    bd.acc_index = lp.strip
                else:
                    bd.acc = f"{acc}[{j}]"
                    bd.touched = f"{touched}[{j}]" if touched else None
            w(s.unroll)
            w.open(f"for (int {j} = 0; {j} < {lp.per_thread}; ++{j})")
            t = p.fresh("t")
            w(f"const long {t} = lid + {j} * {gs};")
            if lp.per_thread * gs != lp.points:
                w.open(f"if ({t} < {lp.points})")
            env3 = dict(env2)
            p.decompose(t, list(lp.threads), leaf, env3)
            p.emit_block(leaf, env3, binds, pinned=set(lp.threads), innermost=lp.strip)
            if lp.per_thread * gs != lp.points:
                w.close()
            w.close()
            w(s.barrier)

    p.loops(kernel, list(plan.serial), env, body, guards_here=False)
    # Each work-item writes the elements it accumulated.
    for name, (acc, touched, _n) in accs.items():
        lp = next(lp for lp in plan.leaves if lp.accumulates == name)
        leaf = next(b for b in blocks if leaves[id(b)] is lp)
        view = next(v for v in leaf.refs if v.from_ == name)
        bd = binds[name]
        off = view_offset(bd.offset, view)
        w.open(f"for (int j = 0; j < {lp.per_thread}; ++j)")
        w("const long t = lid + j * " + str(gs) + ";")
        w.open(f"if (t < {lp.points})")
        env3 = dict(env)
        p.decompose("t", list(lp.threads), leaf, env3)
        slot = "j"
        if lp.strip is not None:
            w.open(f"for (long r = 0; r < {lp.strip_range}; ++r)")
            env3[lp.strip] = "r"
            slot = f"j * {lp.strip_range} + r"
        value = f"{acc}[{slot}]" if bd.dtype != "bool" else f"(uchar){acc}[{slot}]"
        guard = f"if ({touched}[{slot}]) " if touched else ""
        w(f"{guard}{bd.base}[{p.aff(off, env3)}] = {value};")
        if lp.strip is not None:
            w.close()
        w.close()
        w.close()


def _declare_shared(p: KernelPrinter, kernel: Block) -> None:
    """Group-shared memory for the kernel's allocations (an arena when placed)."""
    s, w = p.s, p.w
    allocs = [r for r in kernel.refs if r.dir == "none"]
    if not allocs:
        return
    sizes = {id(r): max(r.shape.extent, 1) * itemsize(r.shape.dtype) for r in allocs}
    placed = [(r, r.offset) for r in allocs if r.offset is not None]
    if len(placed) == len(allocs):
        total = max(offset + sizes[id(r)] for r, offset in placed)
        arena = p.fresh("smem")
        w(f"{s.local_decl} uchar {arena}[{total}] __attribute__((aligned(64)));")
        for r, offset in placed:
            name = p.fresh(r.into)
            t = p.typ(r.shape.dtype)
            w(f"{s.local_pointer} {t}* {name} = ({s.local_pointer} {t}*)({arena} + {offset});")
            p.local_arrays[id(r)] = name
    else:
        total = sum(sizes.values())
        for r in allocs:
            name = p.fresh(r.into)
            w(f"{s.local_decl} {p.typ(r.shape.dtype)} {name}[{max(r.shape.extent, 1)}];")
            p.local_arrays[id(r)] = name
    if p.max_shared and total > p.max_shared:
        raise StripeError(
            f"{s.name}: kernel '{kernel.name}' needs {total} bytes of shared memory, "
            f"the target has {p.max_shared}"
        )
    p.shared_bytes = total
