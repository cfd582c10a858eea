"""The contraction + elementwise rewrite of ``fuse`` (legality: see ``fuse.py``).

::

    block C [m, n, k] #contraction (in A[m, k], in B[k, n], out T[m, n]:add)
    block E [i0, i1] #eltwise (in T[i0, i1], in Bias[i1], out R[i0, i1]:assign)

becomes::

    block C_E [i0, i1] #eltwise #fused #kernel (
        in A[i0, 0] (1, K)   in B[0, i1] (K, 1)   in Bias[i1]   out R[i0, i1]:assign
        none T () @REGISTER
    ) {
      block C [k] #contraction #reduce (in A[0, k], in B[k, 0], out T[]:add) { ... }
      $T = load(T)
      ... E's statements ...
    }
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from ..analysis.ranges import Bound, covers
from ..ir.affine import Affine, box_interval
from ..ir.nodes import (
    Block,
    Constraint,
    Index,
    Load,
    Refinement,
    Statement,
    Store,
    TensorShape,
)
from ._common import (
    WRITE_DIRS,
    defined_scalars,
    fresh,
    is_element,
    is_leaf,
    join_text,
    pointwise_dims,
    reads,
    rename_stmt,
    renamed_ref,
    single_index,
    writes,
)

REGISTER = "REGISTER"
_HUGE = 1 << 62


def fuse_contraction(
    c: Block,
    e: Block,
    filled: Collection[str],
    read_later: Callable[[str], bool],
    root_refs: Mapping[str, Refinement],
) -> Block | None:
    """Contraction ``c`` and its elementwise consumer ``e`` as one block, or ``None``.

    ``filled``: the buffers that ``#fill`` blocks before ``c`` write (:func:`fill_writes`);
    ``read_later(buffer)``: whether a root statement after ``e`` reads it;
    ``root_refs``: the root's refinements by name."""
    if not (is_leaf(c) and is_leaf(e)) or any(i.affine is not None for i in c.idxs):
        return None
    outs = [r for r in c.refs if r.dir in WRITE_DIRS]
    if len(outs) != 1 or outs[0].dir != "out" or not is_element(outs[0]):
        return None
    out = outs[0]
    target = out.from_
    if any(r.dir not in ("in", "out") for r in c.refs) or target in reads(c):
        return None
    if writes(e) & (reads(c) | {target}):
        return None
    e_views = [r for r in e.refs if r.from_ == target]
    if not e_views or any(r.dir != "in" or r != renamed_ref(e_views[0], r.into) for r in e_views):
        return None
    sizes = root_refs[target].shape.sizes
    e_dims = pointwise_dims(e, e_views[0].access, sizes)
    out_dims = _output_dims(c, out.access, sizes)
    if e_dims is None or out_dims is None or not is_element(e_views[0]):
        return None
    if target in filled:
        return None
    if not _covered(c, out.access, sizes):
        return None

    outer_names = {i.name for i in e.idxs}
    theta: dict[str, Affine] = {}
    for o, d in zip(out_dims, e_dims):
        if o is not None:
            theta[o] = Affine.index(d) if d is not None else Affine()
    reduction: list[Index] = []
    for i in c.idxs:
        if i.name not in theta:
            name = fresh(i.name, outer_names | {x.name for x in reduction})
            theta[i.name] = Affine.index(name)
            reduction.append(Index(name, i.range))
    red_names = {i.name for i in reduction}
    red_ranges = {i.name: i.range for i in reduction}
    out_ranges = {i.name: i.range for i in e.idxs}

    inner_cons, outer_cons = [], []
    for con in c.constraints:
        expr = con.expr.substitute(theta)
        if set(expr.names) & red_names:
            inner_cons.append(Constraint(expr))
        elif expr.is_constant:
            if expr.const < 0:  # pragma: no cover - coverage rules out an empty domain
                return None
        else:
            outer_cons.append(Constraint(expr))

    # Names in the outer block: e's views stay; the register and c's views are new.
    keep = root_refs[target].dir != "none" or read_later(target)
    e_kept = [r for r in e.refs if r.from_ != target]
    taken = {r.into for r in e_kept}
    if keep:
        view_name = fresh(e_views[0].into, taken)
        taken.add(view_name)
        acc = fresh(f"{e_views[0].into}_acc", taken)
    else:
        view_name = ""
        acc = fresh(e_views[0].into, taken)
    taken.add(acc)

    outer_in: list[Refinement] = []
    inner_refs: list[Refinement] = []
    for r in c.refs:
        if r.dir != "in":
            continue
        o_ref, i_access = _split_view(
            r, theta, red_ranges, out_ranges, root_refs[r.from_].shape.sizes
        )
        twin = next((x for x in outer_in if x == renamed_ref(o_ref, x.into)), None)
        if twin is None:
            twin = renamed_ref(o_ref, fresh(r.into, taken))
            taken.add(twin.into)
            outer_in.append(twin)
        inner_refs.append(Refinement("in", r.into, r.shape, twin.into, i_access))
    reg_shape = TensorShape(out.shape.dtype, (), ())
    inner_refs.append(Refinement("out", out.into, reg_shape, acc, (), out.agg))
    inner = Block(
        idxs=tuple(reduction),
        refs=tuple(inner_refs),
        stmts=tuple(rename_stmt(s, {}, {}, theta) for s in c.stmts),
        constraints=tuple(inner_cons),
        tags=frozenset((c.tags - {"kernel"}) | {"reduce"}),
        name=c.name,
        comment=c.comment,
    )

    refs = outer_in + e_kept
    if keep:
        refs.append(_store_view(e_views[0], view_name))
    refs.append(Refinement("none", acc, reg_shape, location=REGISTER))
    stmts = _consumer_stmts(e, {r.into for r in e_views}, acc, view_name)
    return Block(
        idxs=e.idxs,
        refs=tuple(refs),
        stmts=(inner, *stmts),
        constraints=tuple(outer_cons),
        tags=frozenset(e.tags | {"kernel", "fused"}),
        name=join_text(c.name, e.name, sep="_"),
        comment=join_text(c.comment, e.comment, sep="; "),
    )


def fill_writes(stmt: Statement) -> set[str]:
    """The root buffers ``stmt`` writes when it is a ``#fill`` block (else none):
    a contraction whose output an earlier fill wrote does not fuse."""
    if isinstance(stmt, Block) and "fill" in stmt.tags:
        return writes(stmt)
    return set()


def _store_view(read: Refinement, into: str) -> Refinement:
    """An ``out``/``assign`` view at the element ``read`` sees."""
    return Refinement("out", into, read.shape, read.from_, read.access, "assign")


def _output_dims(
    c: Block, access: Sequence[Affine], sizes: Sequence[int]
) -> tuple[str | None, ...] | None:
    """Per dimension, the output index of ``c`` (``None``: the constant 0 of a size-1 dim)."""
    dims: list[str | None] = []
    for expr, size in zip(access, sizes):
        name = single_index(expr)
        if name is not None and name not in dims:
            dims.append(name)
        elif expr.is_constant and expr.const == 0 and size == 1:
            dims.append(None)
        else:
            return None
    return tuple(dims)


def _covered(c: Block, access: Sequence[Affine], sizes: Sequence[int]) -> bool:
    """Whether every element of the output is reached by some point of ``c`` (isl)."""
    names = [i.name for i in c.idxs]
    bounds = [Bound(Affine.index(i.name), i.range - 1, i.name) for i in c.idxs]
    bounds += [Bound(con.expr, _HUGE, "constraint") for con in c.constraints]
    return covers(names, bounds, list(access), list(sizes))


def _split_view(
    r: Refinement,
    theta: dict[str, Affine],
    inner: dict[str, int],
    outer: dict[str, int],
    parent_sizes: Sequence[int],
) -> tuple[Refinement, tuple[Affine, ...]]:
    """The outer view of ``r`` and the inner view's access into it.

    ``inner`` and ``outer`` map the reduction and output indices to their
    ranges.  A dimension accessed through output indices only is pinned
    outside (size 1).  Otherwise the outer view spans what the reduction
    indices reach from the outer point (over their whole ranges), when that
    window stays in bounds for every outer point, else the whole dimension.
    """
    outer_access, inner_access, outer_sizes = [], [], []
    for a, size, full in zip(r.access, r.shape.sizes, parent_sizes):
        a = a.substitute(theta)
        part = Affine(tuple((n, k) for n, k in a.terms if n in inner))
        if not part.terms:
            outer_access.append(a)
            inner_access.append(Affine())
            outer_sizes.append(size)
            continue
        lo, hi = box_interval(part, inner)
        start = a - part + lo
        first, last = box_interval(start, outer)
        if first >= 0 and last + (hi - lo) + size <= full:
            outer_access.append(start)
            inner_access.append(part - lo)
            outer_sizes.append(hi - lo + size)
        else:
            outer_access.append(Affine())
            inner_access.append(a)
            outer_sizes.append(full)
    shape = TensorShape(r.shape.dtype, tuple(outer_sizes), r.shape.strides)
    view = Refinement("in", r.into, shape, r.from_, tuple(outer_access))
    return view, tuple(inner_access)


def _consumer_stmts(e: Block, views: set[str], acc: str, store_to: str) -> list[Statement]:
    """``e``'s statements loading the register instead of the contraction's output.

    With ``store_to``, the register's value is also stored to that view.
    """
    out: list[Statement] = []
    value = None
    for s in e.stmts:
        if isinstance(s, Load) and s.ref in views:
            if value is None:
                value = s.into
                out.append(Load(value, acc))
                if store_to:
                    out.append(Store(store_to, value))
                continue
            out.append(Load(s.into, acc))  # a second load of the same value
            continue
        out.append(s)
    if value is None and store_to:
        value = fresh(f"${acc}", defined_scalars(e.stmts))
        out[:0] = [Load(value, acc), Store(store_to, value)]
    return out
