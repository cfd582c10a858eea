"""Race checks for a parallel split of a block along one of its indices.

Splitting a block's points across threads by the value of index ``v`` is
race-free when no two points with *different* values of ``v`` touch one
element of a buffer of the block's parent where at least one of them writes:
no two writes (an aggregation across threads would need atomics), no write of
what another point reads.  Points with equal ``v`` run on one thread, in any
order, as the block's semantics already allow.

The accesses are those of the statements (:mod:`.access`), traced through
nested blocks, so a tiled kernel whose outer view spans a whole dimension is
judged by the elements its inner stores really reach.  For each pair of
accesses to one buffer (one of them a write) the question is an isl set over
two copies of the nest (indices primed ``p'`` and ``q'``; the enclosing
blocks' indices are shared, as the split happens within one of their points)::

    { (p, q) : p in D, q in D, elem_a(p) + x = elem_b(q) + y, p'v != q'v }

with ``x``, ``y`` ranging over a special's whole views; the split is safe when
every such set is empty.  Accesses through the block's own ``none``
allocations are private to a point and never race.

Requires: verified IR.  Guarantees: exact answers (isl, no approximation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import islpy as isl

from ..ir.affine import Affine
from ..ir.isl import constrain
from ..ir.nodes import Block
from .access import Access, accesses
from .domain import domain_in, nest_inequalities, nest_names

__all__ = ["Race", "pair_set", "races", "race_free", "race_free_indices"]


@dataclass(frozen=True, slots=True)
class Race:
    """Two accesses (one a write) that points differing in ``index`` may make to one element."""

    index: str
    first: Access
    second: Access


def _p(name: str) -> str:
    return f"p'{name}"


def _q(name: str) -> str:
    return f"q'{name}"


def pair_set(a: Access, b: Access, outer: Sequence[Block]) -> isl.BasicSet:
    """Pairs of points (``a``'s, ``b``'s) at which ``a`` and ``b`` meet on one element."""
    a_names, b_names = nest_names(a.path), nest_names(b.path)
    pa = {n: _p(n) for n in a_names}
    qb = {n: _q(n) for n in b_names}
    rank = len(a.exprs)
    xs = [f"x'{d}" for d in range(rank) if a.sizes[d] != 1]
    ys = [f"y'{d}" for d in range(rank) if b.sizes[d] != 1]
    names = nest_names(outer) + tuple(pa.values()) + tuple(qb.values()) + tuple(xs) + tuple(ys)
    domain = domain_in(names, outer)
    exprs = [e.rename(pa) for e in nest_inequalities(a.path)]
    exprs += [e.rename(qb) for e in nest_inequalities(b.path)]
    for d in range(rank):
        left = a.exprs[d].rename(pa)
        right = b.exprs[d].rename(qb)
        if a.sizes[d] != 1:
            x = Affine.index(f"x'{d}")
            left = left + x
            exprs += [x, Affine.constant(a.sizes[d] - 1) - x]
        if b.sizes[d] != 1:
            y = Affine.index(f"y'{d}")
            right = right + y
            exprs += [y, Affine.constant(b.sizes[d] - 1) - y]
        exprs += [left - right, right - left]
    return constrain(domain, exprs)


def _meetings(block: Block, outer: Sequence[Block]) -> list[tuple[Access, Access, isl.BasicSet]]:
    accs = accesses(block)
    out = []
    for i, a in enumerate(accs):
        for b in accs[i:]:
            if a.buffer != b.buffer or not (a.write or b.write):
                continue
            if any(sa == 0 for sa in a.sizes) or any(sb == 0 for sb in b.sizes):
                continue
            met = pair_set(a, b, outer)
            if not met.is_empty():
                out.append((a, b, met))
    return out


def _differ(met: isl.BasicSet, index: str) -> bool:
    v_p, v_q = Affine.index(_p(index)), Affine.index(_q(index))
    return not (
        constrain(met, [v_p - v_q - 1]).is_empty() and constrain(met, [v_q - v_p - 1]).is_empty()
    )


def races(block: Block, index: str, outer: Sequence[Block] = ()) -> list[Race]:
    """The pairs of accesses that race when ``block`` is split along ``index``."""
    if index not in {i.name for i in block.idxs}:
        raise KeyError(f"{index!r} is not an index of the block")
    return [Race(index, a, b) for a, b, met in _meetings(block, outer) if _differ(met, index)]


def race_free(block: Block, index: str, outer: Sequence[Block] = ()) -> bool:
    """Whether splitting ``block`` along ``index`` across threads is race-free."""
    return not races(block, index, outer)


def race_free_indices(block: Block, outer: Sequence[Block] = ()) -> tuple[str, ...]:
    """The indices of ``block`` (in its order) along which a split is race-free."""
    meetings = _meetings(block, outer)
    return tuple(
        i.name for i in block.idxs if not any(_differ(met, i.name) for _, _, met in meetings)
    )
