"""``localize``: declare each allocation where it is used, no larger than what is used.

Two rewrites of ``none`` allocations (root temporaries included), top-down:

**sink.**  An allocation ``X`` of block ``B`` whose every use is inside one
nested block ``C`` (one statement of ``B``), through exactly one view ``V`` of
``C``, moves into ``C``: ``V`` becomes a ``none`` allocation of ``C`` with
``V``'s sizes, a dense layout and ``X``'s location, and the views below it take
the dense strides.  It then tries to sink further into ``C``'s blocks.

  Legality, from the IR's semantics.  ``X`` is fresh per point of ``B`` and
  ``C`` is ``X``'s only user, so ``C`` reads ``X``'s initial contents and
  nothing observes what ``C`` writes to it once ``C`` is done.  Inside ``C``,
  ``V`` (a view of an allocation) opens an aggregation scope: values stored
  under ``C`` reach ``X`` only when ``C`` ends, and every load under ``C``
  sees ``X`` as it was before ``C``.  After the move, ``X`` is fresh per point
  of ``C`` and stores to it are plain writes, visible to later loads of the
  same point.  The two agree exactly when ``C`` only reads ``X`` or only
  writes it, which is the condition checked (loads, ``in`` views, special
  inputs and the prior values of ``inout`` views are reads).  So a root
  temporary that one kernel both writes and reads is *not* moved: that
  kernel reads the temporary's contents from before it ran.  Data that flows
  from a producer to a consumer lives in an allocation of the innermost block
  holding both as statements, which is where lowering and ``fuse`` put it.

**shrink.**  An allocation ``X`` of ``B`` whose uses (the boxes of the views
that nested blocks take of it, and the origin element for ``B``'s own loads
and stores) stay, at each point of ``B``, inside a box smaller than ``X``
becomes that box, with a dense layout: per dimension the box starts at
``lo(p)``, the minimum over the uses at the point ``p`` of ``B`` (when isl
gives it as one affine function of the enclosing indices, else a constant),
and spans the largest extent needed.  Views of ``X`` start ``lo(p)`` earlier;
they and all views below them take the dense strides.  Legality: at each
point the used elements keep their relative positions and distinct elements
stay distinct, and nothing outside the box was ever touched.  Not applied
when a special uses ``X`` (it touches the whole buffer).

Requires: verified IR.  Guarantees: the same results, verified IR, the same
object when nothing moved or shrank, a fixed point.  The allocation's
``offset`` is kept by a shrink (the smaller buffer fits its old place) and
dropped by a sink (it belongs to another block): run ``place`` after.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import islpy as isl

from ..analysis.access import Access, elem_names, touched_union, uses
from ..ir.affine import Affine
from ..ir.isl import affine_to_aff, dim_names
from ..ir.nodes import Block, Load, Program, Refinement, Special, Statement, Store, TensorShape
from ._rewrite import dense_strides, retarget
from .registry import register

_SET = isl.dim_type.set
_PARAM = isl.dim_type.param


@register
@dataclass(frozen=True)
class Localize:
    """Move allocations into the one block that uses them and shrink them to their footprint."""

    name: ClassVar[str] = "localize"
    layer_local: ClassVar[bool] = True

    def run(self, program: Program) -> Program:
        root = _localize(program.root, ())
        return program if root is program.root else Program(root)


def _localize(block: Block, outer: tuple[Block, ...]) -> Block:
    original = block
    for ref in block.refs:
        if ref.dir == "none":
            block = _sink(block, ref)
    nest = (*outer, block)
    stmts = tuple(_localize(s, nest) if isinstance(s, Block) else s for s in block.stmts)
    if any(a is not b for a, b in zip(stmts, block.stmts)):
        block = replace(block, stmts=stmts)
    for ref in block.refs:
        if ref.dir == "none":
            block = _shrink(block, ref, outer)
    return original if block == original else block


# -- sink ------------------------------------------------------------------------------------


def _sink(block: Block, ref: Refinement) -> Block:
    """``block`` with ``ref`` moved into its only user, when legal (else ``block``)."""
    found = uses(block.stmts, ref.into, ref.shape.sizes)
    users = {u.stmt for u in found}
    if len(users) != 1:
        return block
    k = users.pop()
    child = block.stmts[k]
    read_and_written = any(u.read for u in found) and any(u.write for u in found)
    if not isinstance(child, Block) or read_and_written:
        return block
    views = [r for r in child.refs if r.from_ == ref.into]
    if len(views) != 1:
        return block
    view = views[0]
    shape = TensorShape.dense(view.shape.dtype, view.shape.sizes)
    alloc = Refinement("none", view.into, shape, location=ref.location)
    child = replace(
        child,
        refs=tuple(alloc if r is view else r for r in child.refs),
        stmts=retarget(child.stmts, view.into, view.into, shape.strides),
    )
    return replace(
        block,
        refs=tuple(r for r in block.refs if r is not ref),
        stmts=(*block.stmts[:k], child, *block.stmts[k + 1 :]),
    )


# -- shrink ----------------------------------------------------------------------------------


def _shrink(block: Block, ref: Refinement, outer: tuple[Block, ...]) -> Block:
    boxes = _boxes(block.stmts, ref)
    if not boxes:
        return block
    nest = (*outer, block)
    rank = ref.shape.rank
    used = touched_union(boxes, nest, rank)
    n_outer = sum(len(b.idxs) for b in nest)
    names = list(dim_names(used)[:n_outer])
    lows, widths = [], []
    for d, e in enumerate(elem_names(rank)):
        lo = _start(used, n_outer, d, names)
        span = _range(used, Affine.index(e) - lo)
        if span is None:
            return block
        lows.append(lo)
        widths.append(span[1] + 1)
    if tuple(widths) == ref.shape.sizes:
        return block
    shape = TensorShape.dense(ref.shape.dtype, tuple(widths))
    new = replace(ref, shape=shape)
    stmts = retarget(block.stmts, ref.into, ref.into, dense_strides(widths), shift=lows)
    return replace(block, refs=tuple(new if r is ref else r for r in block.refs), stmts=stmts)


def _boxes(stmts: Sequence[Statement], ref: Refinement) -> list[Access] | None:
    """The boxes ``stmts`` use of ``ref``: nested views (whole), and the origin for direct
    loads and stores; ``None`` when a special uses it."""
    rank = ref.shape.rank
    zero = tuple(Affine() for _ in range(rank))
    ones = tuple(1 for _ in range(rank))
    name = ref.into
    out: list[Access] = []
    for k, s in enumerate(stmts):
        if isinstance(s, (Load, Store)) and s.ref == name:
            kind = "load" if isinstance(s, Load) else "store"
            out.append(Access(name, name, kind, k, (), zero, ones))
        elif isinstance(s, Special) and name in s.inputs + s.outputs:
            return None
        elif isinstance(s, Block):
            for r in s.refs:
                if r.from_ == name:
                    out.append(Access(name, r.into, "view", k, (s,), r.access, r.shape.sizes))
    return out


def _start(used: isl.Set, n_outer: int, d: int, names: list[str]) -> Affine:
    """The minimum of element dimension ``d`` over ``used`` as an affine of the outer
    indices when isl gives one piece without divisions; else the overall minimum."""
    params = used.move_dims(_PARAM, 0, _SET, 0, n_outer)
    pieces = params.dim_min(d).get_pieces()
    if len(pieces) == 1:
        aff = pieces[0][1]
        if aff.dim(isl.dim_type.div) == 0 and aff.get_denominator_val().to_python() == 1:
            coeffs = {
                names[i]: aff.get_coefficient_val(_PARAM, i).to_python() for i in range(n_outer)
            }
            return Affine.build(coeffs, aff.get_constant_val().to_python())
    lo = _range(used, Affine.index(elem_names(d + 1)[d]))
    return Affine.constant(lo[0] if lo else 0)


def _range(used: isl.Set, expr: Affine) -> tuple[int, int] | None:
    aff = affine_to_aff(expr, used.get_space())
    lo, hi = used.min_val(aff), used.max_val(aff)
    if not (lo.is_int() and hi.is_int()):
        return None
    return lo.to_python(), hi.to_python()
