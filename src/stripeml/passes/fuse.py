"""``fuse``: run producer/consumer kernels as one kernel, intermediates in registers.

Two rewrites of consecutive kernels at the program (root) level, applied
greedily from the first kernel on until none applies:

**pointwise producer into its consumer.**  ``P`` is tagged ``#eltwise`` (not
``#fill``); ``Q``, the next root statement, is tagged ``#eltwise`` (not
``#fill``) or ``#contraction``.  They fuse when

1. ``Q`` reads a buffer ``V`` that ``P`` writes, and ``P`` and ``Q`` are both
   *pointwise* on ``V`` (no constraints, no index offsets, one distinct index
   of coefficient 1 per dimension of size > 1, every index of range > 1 used:
   see :func:`~stripeml.passes._common.pointwise_dims`), which maps ``Q``'s
   points one to one onto ``P``'s;
2. every view of ``Q`` on a buffer ``P`` writes is an ``in`` view of one
   element at exactly the element ``P`` writes at the matching point, and
   ``P`` writes that buffer through one ``out``/``assign`` single-element view
   stored once by its own top-level statements (no nested block, no special);
3. ``Q`` writes no buffer that ``P`` reads or writes;
4. ``Q`` holds only scalar statements, and so does ``P`` when ``Q`` is a
   contraction.

The fused block keeps ``P``'s indices, takes both statement lists, and ``Q``'s
loads of ``V`` become ``P``'s stored scalar (``Q``'s scalars, refs and indices
are renamed).  When ``V`` is a root ``none`` temporary that no later statement
reads, ``P``'s store to it and its view disappear (the root temporary itself
is left to ``dce``).  With a contraction ``Q`` the fused block is that
contraction (``#contraction``, its aggregation) computing ``P``'s values on
the fly: softmax's ``exp`` feeding its row sum.

**contraction + elementwise consumer.**  ``C`` is a ``#contraction`` kernel with
scalar statements only, one ``out`` view (of buffer ``T``) and no view of
``T`` to read; ``E``, next, is ``#eltwise`` (not ``#fill``) with scalar
statements only.  They fuse when

1. ``C``'s output access is, per dimension, a distinct index with coefficient
   1 (an *output index*) or, for a dimension of size 1, the constant 0;
   ``C`` has no index offsets;
2. isl shows that every element of ``T`` is reached by some point of ``C``
   (so the register below, zero on the interpreter and undefined elsewhere,
   is always overwritten), and no earlier ``#fill`` block writes ``T``;
3. ``E`` is pointwise on ``T`` and reads it only through one-element ``in``
   views at that access;
4. ``E`` writes no buffer that ``C`` reads, nor ``T``.

The result is an outer block over ``E``'s indices (tags ``E``'s plus
``#fused``) whose first statement is an inner block ``#reduce`` (``C``'s tags
but ``#kernel``) over the remaining (reduction) indices of ``C``, aggregating
into a rank-0 ``none`` buffer of the outer block at location ``REGISTER``;
``E``'s statements then load that register.  Constraints of ``C`` that mention
a reduction index go to the inner block, the others (implied by coverage) stay
outside.  ``C``'s input views split per dimension: a dimension whose access
uses output indices only is pinned by the outer view (size 1); any other is a
full-size outer view indexed by the inner one.  ``T`` is still stored when it
is a program result or a later statement reads it.

Requires: verified IR.  Guarantees: the same results (every element any later
statement or the caller can observe has the same value), verified IR, and the
same object when nothing fused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ..ir.affine import Affine
from ..ir.nodes import Block, Load, Program, Refinement, Special, Statement, Store
from ._common import (
    WRITE_DIRS,
    defined_scalars,
    fresh,
    fresh_scalar,
    is_element,
    is_leaf,
    join_text,
    pointwise_dims,
    read_by_any,
    reads,
    rename_stmt,
    renamed_ref,
    substitute_access,
    writes,
)
from ._fuse_contraction import fuse_contraction
from .registry import register


@register
@dataclass(frozen=True)
class Fuse:
    """Fuse elementwise producers into their consumers and contractions into theirs.

    Options: ``eltwise`` (elementwise producer into an elementwise consumer),
    ``into_contraction`` (elementwise producer into a pointwise contraction),
    ``contraction`` (contraction into an elementwise consumer),
    ``unit_stride_reductions_only`` (only contractions whose innermost reduction
    index has unit stride in the inputs it reads fuse into their consumer).  The legality
    conditions are in the module docstring.
    """

    eltwise: bool = True
    into_contraction: bool = True
    contraction: bool = True
    # Fuse a contraction into its consumer only when its innermost reduction index
    # walks every input with unit stride (or not at all): the fused reduction then
    # runs in vector lanes (row sums, row maxima).  A matmul-like reduction is
    # faster as its own kernel until tiling fuses at tile level.
    unit_stride_reductions_only: bool = True
    name: ClassVar[str] = "fuse"

    def run(self, program: Program) -> Program:
        root = program.root
        stmts = list(root.stmts)
        changed = False
        i = 0
        while i + 1 < len(stmts):
            fused = self._fuse_pair(root, stmts, i)
            if fused is None:
                i += 1
                continue
            stmts[i : i + 2] = [fused]
            changed = True
            # The fused kernel may now also fuse with the kernel before it.
            i = max(i - 1, 0)
        if not changed:
            return program
        return Program(root.with_stmts(tuple(stmts)))

    def _fuse_pair(self, root: Block, stmts: Sequence[Statement], i: int) -> Block | None:
        a, b = stmts[i], stmts[i + 1]
        if not (isinstance(a, Block) and isinstance(b, Block)):
            return None
        if not (a.has_tags("kernel") and b.has_tags("kernel")):
            return None
        if "fill" in a.tags or "fill" in b.tags:
            return None
        later = stmts[i + 2 :]
        if "eltwise" in a.tags:
            if "eltwise" in b.tags and self.eltwise:
                return fuse_pointwise(a, b, later, root)
            if "contraction" in b.tags and self.into_contraction:
                return fuse_pointwise(a, b, later, root)
            return None
        if "contraction" in a.tags and "eltwise" in b.tags and self.contraction:
            if self.unit_stride_reductions_only and not unit_stride_reduction(a):
                return None
            return fuse_contraction(a, b, stmts[:i], later, root)
        return None


def unit_stride_reduction(c: Block) -> bool:
    """Whether ``c``'s innermost reduction index (the last index not in its output
    access) moves every input view by 0 or 1 elements, and some view by 1."""
    outs = [r for r in c.refs if r.dir in ("out", "inout")]
    in_output = {n for r in outs for a in r.access for n in a.names}
    reduction = [i.name for i in c.idxs if i.name not in in_output]
    if not reduction:
        return True
    last = reduction[-1]
    steps = {
        sum(a.coeff(last) * s for a, s in zip(r.access, r.shape.strides))
        for r in c.refs
        if r.dir == "in"
    }
    return steps <= {0, 1} and 1 in steps


def fuse_pointwise(p: Block, q: Block, later: Sequence[Statement], root: Block) -> Block | None:
    """``p`` and ``q`` as one block over ``p``'s indices, or ``None`` when illegal."""
    if not is_leaf(q) or ("contraction" in q.tags and not is_leaf(p)):
        return None
    if any(isinstance(s, Special) for s in p.stmts):
        return None
    p_out: dict[str, Refinement] = {}
    for r in p.refs:
        if r.dir in WRITE_DIRS:
            if r.from_ in p_out:
                return None
            p_out[r.from_] = r
    shared = [r for r in q.refs if r.from_ in p_out]
    if not shared or writes(q) & (reads(p) | set(p_out)):
        return None
    theta = _point_map(p, q, p_out[shared[0].from_], shared[0], root)
    if theta is None:
        return None
    values = _stored_values(p, p_out, shared, theta, root)
    if values is None:
        return None

    # Views of q: drop those of p's outputs, share identical inputs, rename the rest.
    p_loads = {s.ref: s.into for s in p.stmts if isinstance(s, Load)}
    taken = {r.into for r in p.refs}
    ref_map: dict[str, str] = {}
    reused: dict[str, str] = dict(values)  # q ref -> scalar of p that replaces its loads
    new_refs: list[Refinement] = []
    for r in q.refs:
        if r.into in values:
            continue
        moved = substitute_access(r, theta)
        twin = next((x for x in p.refs if x.dir == "in" and x == renamed_ref(moved, x.into)), None)
        if twin is not None:
            ref_map[r.into] = twin.into
            if twin.into in p_loads:
                reused[r.into] = p_loads[twin.into]
            continue
        into = fresh(r.into, taken)
        taken.add(into)
        ref_map[r.into] = into
        new_refs.append(renamed_ref(moved, into))

    q_stmts = _merge_scalars(q.stmts, defined_scalars(p.stmts), reused, ref_map, theta)
    dropped = {
        p_out[b].into
        for b in {r.from_ for r in shared}
        if root.ref(b).dir == "none" and not read_by_any(later, b)
    }
    refs = tuple(r for r in p.refs if r.into not in dropped) + tuple(new_refs)
    p_stmts = tuple(s for s in p.stmts if not (isinstance(s, Store) and s.ref in dropped))
    if "contraction" in q.tags:
        tags = q.tags | {"fused"}
    else:
        tags = p.tags | q.tags | {"fused"}
    return Block(
        idxs=p.idxs,
        refs=refs,
        stmts=p_stmts + tuple(q_stmts),
        constraints=p.constraints,
        tags=frozenset(tags),
        name=join_text(p.name, q.name, sep="_"),
        comment=join_text(p.comment, q.comment, sep="; "),
    )


def _point_map(
    p: Block, q: Block, written: Refinement, read: Refinement, root: Block
) -> dict[str, Affine] | None:
    """``q``'s indices as affines of ``p``'s, when both are pointwise on one buffer."""
    sizes = root.ref(written.from_).shape.sizes
    pd = pointwise_dims(p, written.access, sizes)
    qd = pointwise_dims(q, read.access, sizes)
    if pd is None or qd is None:
        return None
    theta = {i.name: Affine() for i in q.idxs}  # the indices left out have range 1
    for pn, qn in zip(pd, qd):
        if qn is not None:
            theta[qn] = Affine.index(pn) if pn is not None else Affine()
    return theta


def _stored_values(
    p: Block,
    p_out: dict[str, Refinement],
    shared: list[Refinement],
    theta: dict[str, Affine],
    root: Block,
) -> dict[str, str] | None:
    """For each view of ``q`` on an output of ``p``: the scalar ``p`` stores there."""
    values: dict[str, str] = {}
    for r in shared:
        w = p_out[r.from_]
        if r.dir != "in" or w.dir != "out" or w.agg != "assign":
            return None
        if not (is_element(r) and is_element(w)) or r.shape != w.shape:
            return None
        if tuple(a.substitute(theta) for a in r.access) != w.access:
            return None
        if pointwise_dims(p, w.access, root.ref(w.from_).shape.sizes) is None:
            return None
        stored = [s.value for s in p.stmts if isinstance(s, Store) and s.ref == w.into]
        nested = any(any(x.from_ == w.into for x in b.refs) for b in p.sub_blocks)
        if len(stored) != 1 or nested:
            return None
        values[r.into] = stored[0]
    return values


def _merge_scalars(
    stmts: Sequence[Statement],
    taken: set[str],
    loaded: dict[str, str],
    ref_map: dict[str, str],
    theta: dict[str, Affine],
) -> list[Statement]:
    """``stmts`` renamed to follow statements defining ``taken`` (SSA).

    Loads of a ref in ``loaded`` disappear: their scalar becomes the given one.
    """
    taken = set(taken)
    scalars: dict[str, str] = {}
    out: list[Statement] = []
    for s in stmts:
        if isinstance(s, Load) and s.ref in loaded:
            scalars[s.into] = loaded[s.ref]
            continue
        into = getattr(s, "into", None)
        if isinstance(into, str) and not isinstance(s, Block):
            new = fresh_scalar(into, taken)
            taken.add(new)
            if new != into:
                scalars[into] = new
        out.append(rename_stmt(s, scalars, ref_map, theta))
    return out
