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
allocations are private to a point and never race.  Most of those sets are
never built: where one dimension of a pair's elements proves that the points
agree on an index (:func:`agreeing_indices`, the affine's terms read as a
mixed-radix number's digits), isl is not asked about it.

Requires: verified IR.  Guarantees: exact answers (isl, no approximation; the
proofs without isl only say what isl would).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import islpy as isl

from ..ir.affine import Affine
from ..ir.isl import constrain
from ..ir.nodes import Block
from .access import Access, accesses
from .domain import domain_in, nest_inequalities, nest_names

__all__ = ["Race", "agreeing_indices", "pair_set", "races", "race_free", "race_free_indices"]


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


def _pairs(block: Block) -> Iterator[tuple[Access, Access]]:
    """The pairs of ``block``'s accesses that may conflict: one buffer, a write
    among them, neither empty (each pair once, an access with itself too)."""
    accs = accesses(block)
    for i, a in enumerate(accs):
        for b in accs[i:]:
            if a.buffer != b.buffer or not (a.write or b.write):
                continue
            if any(sa == 0 for sa in a.sizes) or any(sb == 0 for sb in b.sizes):
                continue
            yield a, b


def _meetings(block: Block, outer: Sequence[Block]) -> list[tuple[Access, Access, isl.BasicSet]]:
    out = []
    for a, b in _pairs(block):
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
    """The indices of ``block`` (in its order) along which a split is race-free.

    The same answer as asking isl of every pair of accesses, sooner: where one
    dimension of a pair's elements proves that two points meeting there agree
    on an index (:func:`agreeing_indices`), isl is not asked about that index,
    and a pair proven so for every index is not built at all."""
    names = [i.name for i in block.idxs]
    shared = frozenset(nest_names(outer))
    # one value: the same at any two points (an offset reads only shared indices)
    single = frozenset(i.name for i in block.idxs if i.range == 1)
    left: list[tuple[isl.BasicSet, frozenset[str]]] = []
    for a, b in _pairs(block):
        agree = agreeing_indices(a, b, shared) | single
        if all(n in agree for n in names):
            continue
        met = pair_set(a, b, outer)
        if not met.is_empty():
            left.append((met, agree))
    return tuple(
        n for n in names if not any(n not in agree and _differ(met, n) for met, agree in left)
    )


def agreeing_indices(a: Access, b: Access, shared: frozenset[str] = frozenset()) -> frozenset[str]:
    """Indices on which any two points where ``a`` and ``b`` touch one element agree,
    proven from the element expressions alone (a subset of the exact answer).

    In a dimension where both touch one element (size 1) through the same
    affine ``E``, a meeting has ``E(p) = E(q)``.  The indices of ``shared`` (the
    enclosing blocks', common to both points) cancel; every other index ``i``
    of ``E``, with no offset, differs between the points by at most its range
    minus 1.  Taking ``E``'s terms by decreasing ``|c|``: when ``|c|`` exceeds
    the sum of ``|c_j| * (range_j - 1)`` over the terms after it, the term's
    index agrees (the rest cannot make up one step of it), and so on down the
    terms as long as that holds: a mixed-radix number's digits.  Constraints
    only remove points, so they change none of this."""
    spans: dict[str, int | None] = {}
    for blk in (*a.path, *b.path):
        for idx in blk.idxs:
            span = None if idx.affine is not None else idx.range - 1
            old = spans.get(idx.name, 0)
            spans[idx.name] = None if old is None or span is None else max(old, span)
    agree: set[str] = set()
    for d, (ea, eb) in enumerate(zip(a.exprs, b.exprs)):
        if a.sizes[d] != 1 or b.sizes[d] != 1 or ea != eb:
            continue
        terms: list[tuple[int, int, str]] = []
        for n, c in ea.terms:
            if n in shared:
                continue
            span = spans.get(n)
            if span is None:
                break
            terms.append((abs(c), span, n))
        else:
            terms.sort(reverse=True)
            rest = sum(c * span for c, span, _ in terms)
            for c, span, n in terms:
                rest -= c * span
                if c <= rest:
                    break
                agree.add(n)
    return frozenset(agree)
