"""Coverage: do some accesses touch every element of a buffer, at every point of a nest?

The one question behind "may this buffer's initial contents be read"
(liveness), "does the compute store all of a cached view" (``cache``) and
"does a block write every element of the buffer its view refines" (an
element nobody writes keeps its previous contents).  :func:`covers` answers
it for :mod:`.access` accesses seen from the last block of ``outer``:

1. a quick exact test, without isl, when every access plainly touches the
   same box at every point of ``outer`` (:func:`_box`; a kernel storing every
   element, a halo's fill slabs and interior copy, a special writing its
   whole output), or is one of a group that does together (:func:`_boxes`:
   the stores of a Winograd output transform, ``4*t + a`` for every ``a`` in
   ``0..3``, strided each but a box as a group): the union of the boxes
   must hold the whole buffer (:func:`_boxes_cover`, dimension by dimension);
2. otherwise isl: the box ``[0, sizes)`` at every point of ``outer`` is a
   subset of the union of the touched sets.  Its answers are remembered by
   what the sets are made of (each access's offsets, extents and the indices
   and constraints of its blocks, the outer blocks' and the sizes), not by
   buffer or block names: a model's repeated layers ask isl once (the light
   ResNet-50's ``place``: 11 questions, 3 distinct).

:func:`writes_all`, :func:`written` and :func:`unwritten` ask it of a
block's writes through one of its views.

Requires: verified IR.  Guarantees: exact answers (the quick test decides
only where it is exact, isl the rest).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import islpy as isl

from ..ir.affine import Affine
from ..ir.nodes import Block, Constraint, Index
from .access import Access, accesses, box_set, touched_union

__all__ = ["covers", "unwritten", "writes_all", "written"]

Box = tuple[tuple[int, int], ...]  # per dimension, the half-open interval [lo, hi)


def covers(accs: Sequence[Access], outer: Sequence[Block], sizes: Sequence[int]) -> bool:
    """Whether, at every point of ``outer``, ``accs`` together touch every element of
    ``[0, sizes)`` (``accs`` seen from the last block of ``outer``)."""
    boxes = _boxes(accs)
    known = [b for b in boxes if b is not None]
    if _boxes_cover(known, sizes):
        return True
    if len(known) == len(boxes) and _plainly_nonempty(outer):
        return False  # the same boxes at every point of outer, and there is one
    question = (
        tuple(_domain_of(b) for b in outer),
        tuple((a.exprs, a.sizes, tuple(_domain_of(b) for b in a.path)) for a in accs),
    )
    return _covers_isl(question, tuple(sizes))


# A block as :func:`..ir.isl.block_domain` reads it: its indices and constraints.
_Domain = tuple[tuple[Index, ...], tuple[Constraint, ...]]
_Question = tuple[
    tuple[_Domain, ...],
    tuple[tuple[tuple[Affine, ...], tuple[int, ...], tuple[_Domain, ...]], ...],
]


def _domain_of(block: Block) -> _Domain:
    return block.idxs, block.constraints


@lru_cache(maxsize=4096)
def _covers_isl(question: _Question, sizes: tuple[int, ...]) -> bool:
    """:func:`covers` by isl, for the accesses and outer blocks ``question``
    describes (:func:`covers`): the sets depend on nothing else of them."""
    outer_domains, parts = question
    outer = [Block(idxs=i, constraints=c) for i, c in outer_domains]
    accs = [
        Access("", "", "", 0, tuple(Block(idxs=i, constraints=c) for i, c in path), exprs, extent)
        for exprs, extent, path in parts
    ]
    return box_set(outer, sizes).is_subset(touched_union(accs, outer, len(sizes)))


def _boxes(accs: Sequence[Access]) -> list[Box | None]:
    """The boxes of ``accs`` (:func:`_box`), one per access or, for a group of
    accesses alike but for their offsets' constants, one for the group.

    A group (the same blocks on its path, extents and offsets up to their
    constants) whose constants are every combination of a run of consecutive
    integers per dimension touches what one access would with, in each
    dimension, one more index of coefficient 1 over that run: a Winograd
    output transform's 16 stores ``(4*t + a, 4*s + b)``, ``a, b`` in
    ``0..3``, strided each, are the box ``[0, 4*T) x [0, 4*S)`` together.
    Exact: the union over the product of the runs is that box, and a group
    of any other shape gives each access's own :func:`_box`.
    """
    groups: dict[tuple[object, ...], list[Access]] = {}
    for a in accs:
        key = (tuple(map(id, a.path)), a.sizes, tuple(e.terms for e in a.exprs))
        groups.setdefault(key, []).append(a)
    out: list[Box | None] = []
    for group in groups.values():
        if len(group) > 1:
            consts = {tuple(e.const for e in a.exprs) for a in group}
            runs = [sorted({c[d] for c in consts}) for d in range(len(group[0].exprs))]
            if all(r[-1] - r[0] == len(r) - 1 for r in runs) and len(consts) == math.prod(
                len(r) for r in runs
            ):
                out.append(_box(group[0], tuple((r[0], len(r)) for r in runs)))
                continue
        out += [_box(a) for a in group]
    return out


def _box(acc: Access, runs: Sequence[tuple[int, int]] = ()) -> Box | None:
    """The elements ``acc`` touches, when that is plainly a box the same at every outer point.

    A fast exact answer that spares isl the common cases: the blocks of the
    access's path have no constraints and plain index ranges, and each
    dimension's offset is a constant plus positive multiples of distinct
    indices of those blocks (each in one dimension only) whose values, with
    the box's own extent, reach every position from the constant on without
    a gap.  ``None``: not of that form (isl decides).

    ``runs``: per dimension, ``(first, count)``: the offset's constant takes
    every value ``first .. first + count - 1`` instead of its own (a group's,
    :func:`_boxes`).
    """
    ranges: dict[str, int] = {}
    for b in acc.path:
        if b.constraints:
            return None
        for i in b.idxs:
            if i.affine is not None or i.range < 1:
                return None
            ranges[i.name] = i.range
    seen: set[str] = set()
    box = []
    for d, (off, extent) in enumerate(zip(acc.exprs, acc.sizes)):
        const, count = runs[d] if runs else (off.const, 1)
        steps = [(1, extent), (1, count)]
        for name, coeff in off.terms:
            if name not in ranges or name in seen or coeff < 0:
                return None
            seen.add(name)
            steps.append((coeff, ranges[name]))
        if extent < 1:
            return None
        reach = 0  # every position const .. const + reach is touched, none beyond
        for coeff, n in sorted(steps):
            if coeff > reach + 1:
                return None
            reach += coeff * (n - 1)
        box.append((const, const + reach + 1))
    return tuple(box)


def _boxes_cover(boxes: Sequence[Box], sizes: Sequence[int]) -> bool:
    """Whether the union of ``boxes`` holds every element of ``[0, sizes)``.

    Dimension by dimension: cut the first dimension where any box starts or
    ends, and for each piece ask whether the boxes spanning it cover the rest.
    """
    if not sizes:
        return bool(boxes)
    size = sizes[0]
    if size <= 0:
        return True
    cuts = {0, size}
    for b in boxes:
        lo, hi = b[0]
        cuts.update(min(max(x, 0), size) for x in (lo, hi))
    points = sorted(cuts)
    for lo, hi in zip(points, points[1:]):
        inside = [b[1:] for b in boxes if b[0][0] <= lo and hi <= b[0][1]]
        if not _boxes_cover(inside, sizes[1:]):
            return False
    return True


def _plainly_nonempty(outer: Sequence[Block]) -> bool:
    """Whether the nest ``outer`` plainly has a point (``False``: maybe not, isl decides).

    Index offsets only shift a range, so a nest without constraints and with
    no empty range has a point.  (Without one, every answer is "covered".)
    """
    return all(not b.constraints and all(i.range >= 1 for i in b.idxs) for b in outer)


def _writes_through(block: Block, ref: str) -> list[Access]:
    return [a for a in accesses(block) if a.ref == ref and a.write]


def written(block: Block, ref: str, outer: Sequence[Block] = ()) -> isl.Set:
    """``{(outer indices, e) : e is written through view ref}`` (``e`` one dim per buffer dim)."""
    return touched_union(_writes_through(block, ref), outer, len(block.ref(ref).access))


def unwritten(block: Block, ref: str, sizes: Sequence[int], outer: Sequence[Block] = ()) -> isl.Set:
    """Elements of the parent buffer (of ``sizes``) that ``block`` never writes through ``ref``."""
    return box_set(outer, sizes).subtract(written(block, ref, outer))


def writes_all(block: Block, ref: str, sizes: Sequence[int], outer: Sequence[Block] = ()) -> bool:
    """Whether ``block`` writes every element of the parent buffer through view ``ref``."""
    return covers(_writes_through(block, ref), outer, sizes)
