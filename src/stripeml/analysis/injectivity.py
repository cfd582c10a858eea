"""Injectivity of stores: does a block store any element of a buffer more than once?

An ``assign`` output may receive at most one value per element in its
aggregation scope (docs/stripe-ir.md, section 2.4); two stores to one element
are an error, not "the last one wins".  Every store of a block is an affine
access over the block's domain, so whether two of them meet is a question isl
answers exactly, before anything runs.

For the stores ``a`` and ``b`` through one view of ``block`` (traced through
nested blocks by :mod:`.access`), the pairs of points at which they reach one
element are the set the race checks of :mod:`.dependence` build (two copies
of the nest, primed ``p'`` and ``q'``, the indices of ``outer`` shared; a
special's whole view adds offsets ``x'``, ``y'``)::

    { (p, q) : p in D_a, q in D_b, elem_a(p) = elem_b(q) }

A pair is a collision when the two stores are different statements, or the
same statement at two different points (``p != q``, as a union of
lexicographic cases, ``p < q`` suffices by symmetry).  The block stores each
element at most once exactly when every such set is empty; otherwise the
lexicographically smallest pair is the witness (:class:`Collision`), so
messages are reproducible.

Requires: verified-enough IR (the view is declared, index names are unique
along the nest).  Guarantees: exact answers (isl, no approximation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import islpy as isl

from ..ir.affine import Affine
from ..ir.isl import constrain, dim_names
from ..ir.nodes import Block
from .access import Access, accesses
from .dependence import pair_set
from .domain import nest_names

__all__ = ["Collision", "collision", "stores_once"]

_SET = isl.dim_type.set

Point = tuple[tuple[str, int], ...]  # (index name, value), in nest order


@dataclass(frozen=True, slots=True)
class Collision:
    """Two stores to one element of ``buffer``: ``element`` from ``first`` and ``second``.

    ``first`` and ``second`` are points of the nest (``outer`` then the
    access's path), as ``(index, value)`` pairs in nest order; they differ
    unless the stores are different statements (``same_store`` is false).
    """

    buffer: str
    element: tuple[int, ...]
    first: Point
    second: Point
    same_store: bool


def stores_once(block: Block, ref: str, outer: Sequence[Block] = ()) -> bool:
    """Whether ``block`` stores each element of the buffer behind view ``ref`` at most
    once, at every point of ``outer``."""
    return collision(block, ref, outer) is None


def collision(block: Block, ref: str, outer: Sequence[Block] = ()) -> Collision | None:
    """Two stores through view ``ref`` of ``block`` that reach one element, or ``None``.

    Seen within one point of ``outer`` (the blocks enclosing ``block``,
    outermost first): stores at different points of ``outer`` are not
    compared.  ``ref`` names a view of ``block`` (``KeyError`` otherwise).
    """
    block.ref(ref)
    writes = [a for a in accesses(block) if a.ref == ref and a.write]
    if len(writes) == 1 and _plainly_injective(writes[0]):
        return None
    for i, a in enumerate(writes):
        for b in writes[i:]:
            found = _collide(a, b, outer)
            if found is not None:
                return found
    return None


def _plainly_injective(acc: Access) -> bool:
    """Whether ``acc``, one element per point, plainly reaches a different element
    at each point of its path, without isl: no index with an offset, every index
    of range 2 or more in exactly one dimension, and in each dimension the
    coefficients' sizes, smallest first, each beyond what the smaller ones reach
    (a mixed radix: the dimension's value decodes to its indices).  Sufficient,
    not necessary (``False``: isl decides, and finds the witness); constraints
    only take points away, and an index of an enclosing block is the same at
    both points compared.  An LSTM's 572 ``=`` contractions (copies of slices
    and gates) asked isl 0.15-0.2 s of its lowering."""
    if any(s != 1 for s in acc.sizes):
        return False
    ranges: dict[str, int] = {}
    for b in acc.path:
        for i in b.idxs:
            if i.affine is not None:
                return False
            ranges[i.name] = i.range
    seen: set[str] = set()
    for e in acc.exprs:
        radix = []
        for name, c in e.terms:
            if name not in ranges:
                continue  # an enclosing block's index
            if name in seen:
                return False
            seen.add(name)
            if ranges[name] >= 2:
                radix.append((abs(c), ranges[name]))
        reach = 0  # the largest difference the smaller coefficients make
        for c, r in sorted(radix):
            if c <= reach:
                return False
            reach += c * (r - 1)
    return all(name in seen for name, r in ranges.items() if r >= 2)


def _collide(a: Access, b: Access, outer: Sequence[Block]) -> Collision | None:
    if any(s == 0 for s in (*a.sizes, *b.sizes)):
        return None  # an empty view stores nothing
    met = pair_set(a, b, outer)
    if met.is_empty():
        return None
    if a is not b:
        return _witness(a, outer, met.to_set(), same=False)
    # The same store at two points: p < q lexicographically (p > q is the mirror).
    names = nest_names(a.path)
    cases = isl.Set.empty(met.get_space())
    for k, name in enumerate(names):
        eqs = []
        for m in names[:k]:
            d = Affine.index(f"p'{m}") - Affine.index(f"q'{m}")
            eqs += [d, -d]
        less = Affine.index(f"q'{name}") - Affine.index(f"p'{name}") - 1
        cases = cases.union(constrain(met, [*eqs, less]).to_set())
    if cases.is_empty():
        return None
    return _witness(a, outer, cases, same=True)


def _witness(a: Access, outer: Sequence[Block], pairs: isl.Set, *, same: bool) -> Collision:
    """The lexicographically smallest pair of ``pairs``, read back as a :class:`Collision`."""
    point = pairs.lexmin().sample_point()
    names = dim_names(pairs)
    env = {n: int(point.get_coordinate_val(_SET, k).to_python()) for k, n in enumerate(names)}
    shared = nest_names(outer)
    first = [(n, env[n]) for n in shared] + [(n, env[f"p'{n}"]) for n in nest_names(a.path)]
    # ``b``'s path may differ from ``a``'s; its indices are the q' dimensions.
    q_names = [n[2:] for n in names if n.startswith("q'")]
    second = [(n, env[n]) for n in shared] + [(n, env[f"q'{n}"]) for n in q_names]
    at = dict(first)
    element = tuple(
        int(e.evaluate(at)) + (env[f"x'{d}"] if a.sizes[d] != 1 else 0)
        for d, e in enumerate(a.exprs)
    )
    return Collision(a.buffer, element, tuple(first), tuple(second), same)
