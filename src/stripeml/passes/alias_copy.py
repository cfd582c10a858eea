"""``alias_copy``: a whole-buffer copy into part of another buffer becomes the
producer writing there.

A copy kernel ``Y[p + c] = X[p]`` over all of a root temporary ``X`` (a padded
convolution's zero-haloed input made by ``halo``, one part of a
concatenation) costs a pass over memory.  When nothing but the copy reads
``X`` afterwards, the kernels that use ``X`` before it (its producer) can use
``Y`` at the shifted position instead: every view of ``X`` becomes a view of
``Y`` at ``access + c`` (its nested views take ``Y``'s strides), the copy goes,
and so does ``X``.

Applies to a root kernel, a leaf without constraints or allocations, whose
only statements are ``$x = load(X)`` and ``Y = store($x)``, with:

* ``X`` a root temporary read at exactly the kernel's indices over its whole
  shape (index ``k`` of range ``X.sizes[k]`` for dimension ``k``);
* ``Y`` a root temporary (``none``, not constant) of the same dtype and
  location, written through an ``assign`` view at ``index + constant`` per
  dimension of ``X``, in the same order; ``Y`` may have more dimensions than
  ``X``, written at constant indices (``Y[t, d, n, h] = X[n, h]``: a step's
  row of an unrolled loop's output), and ``X``'s views then take them, at
  those constants and of size 1;
* ``X`` touched by no statement after the copy;
* ``Y`` touched by no statement before the copy except reads and writes whose
  bounding boxes miss the copied region (the ``#fill`` kernels of the halo, the
  other parts of a concatenation, the next step of an unrolled loop reading the
  row an earlier step wrote in place) and kernels that store only zeros (a
  concatenation's zero fill: one after the first statement using ``X`` moves
  before it, when nothing in between writes ``Y``); by none of the
  statements that use ``X`` (so ``Y`` still holds, at the copy, what it would
  have held);
* every view of ``X`` a view of a root kernel, refined further only by views of
  the same rank (nested blocks), and ``X`` not used by a special.

Then ``Y``'s copied region holds ``X``'s values when the copy would have
written them, and ``X``'s elements that nothing stored are ``Y``'s, zero like
``X``'s (both are fresh temporaries, and nothing else wrote there before).

Last, a zero fill (``#fill``) of a temporary that nothing touched before it
goes when no statement reads those zeros (later writes cover them first):
the temporary starts at zero, and the runtime need not zero it either.  A
concatenation's fill goes once its parts write it in place; a halo's border
fills stay (the convolution reads them).

Run after ``halo`` and ``alias_default``, before ``unroll``.

Requires: verified IR.  Guarantees: the same program results, verified IR,
the same object when nothing applies, a fixed point.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..analysis.liveness import live_range
from ..ir.affine import Affine, box_interval
from ..ir.nodes import (
    Block,
    Constant,
    Program,
    Refinement,
    Special,
    Statement,
    Store,
    TensorShape,
)
from ._common import copy_views, reads, rewrite_until_fixed, touches, writes
from .registry import register

Box = list[tuple[int, int]]  # per dimension, [lo, hi]


@register
@dataclass(frozen=True)
class AliasCopy:
    """Let a copied temporary's producer write the copy's destination (no options)."""

    name: ClassVar[str] = "alias_copy"
    layer_local: ClassVar[bool] = True

    def run(self, program: Program) -> Program:
        def at(root: Block, k: int) -> Block | None:
            found = _copy(root, k, root.stmts[k])
            return None if found is None else _alias(root, k, *found)

        root = _drop_covered_zero_fills(rewrite_until_fixed(program.root, at, resume=True))
        return program if root is program.root else Program(root)


def _drop_covered_zero_fills(root: Block) -> Block:
    """``root`` without the zero fills of fresh temporaries whose zeros nothing
    reads (later writes cover them first): a temporary starts at zero, and one
    whose initial contents nothing reads need not be zeroed either (a
    concatenation whose parts now write it in place).  Fills that something
    reads through (a halo's border) stay: they are cheaper than zeroing the
    whole buffer on every run."""
    buffers = {r.into: r for r in root.refs}
    k = 0
    while k < len(root.stmts):
        s = root.stmts[k]
        targets = writes(s) if isinstance(s, Block) and "fill" in s.tags else set()
        if len(targets) == 1 and isinstance(s, Block) and _zero_fill(s):
            (y,) = targets
            ref = buffers.get(y)
            fresh = not any(touches(t, y) for t in root.stmts[:k])
            if ref is not None and ref.dir == "none" and not ref.const and fresh:
                trial = replace(root, stmts=root.stmts[:k] + root.stmts[k + 1 :])
                if live_range(trial, ref, ())[0] >= 0:
                    root = trial
                    continue
        k += 1
    return root


#: Per dimension of ``Y``: the dimension of ``X`` it holds (``None``: one that
#: ``X`` lacks, written at a constant index), and the constant added.
Placement = tuple[tuple[int | None, int], ...]


def _copy(root: Block, k: int, s: Statement) -> tuple[Refinement, Refinement, Placement] | None:
    """``(X's root ref, Y's root ref, placement)`` when root statement ``k`` is a
    copy this pass applies to (the copy's own shape, see the module docstring)."""
    views = copy_views(s)
    if views is None or not isinstance(s, Block) or any(i.affine is not None for i in s.idxs):
        return None
    src, dst = views
    buffers = {r.into: r for r in root.refs}
    rx, ry = buffers.get(src.from_), buffers.get(dst.from_)
    if rx is None or ry is None or rx.into == ry.into:
        return None
    if rx.dir != "none" or ry.dir != "none" or rx.const or ry.const:
        return None
    if rx.shape.dtype != ry.shape.dtype or rx.location != ry.location:
        return None
    rank = len(rx.shape.sizes)
    if len(ry.shape.sizes) < rank or len(s.idxs) != rank:
        return None
    if src.shape.sizes != (1,) * rank or dst.shape.sizes != (1,) * len(ry.shape.sizes):
        return None
    for d, idx in enumerate(s.idxs):
        if idx.range != rx.shape.sizes[d] or src.access[d] != Affine.index(idx.name):
            return None
    placement: list[tuple[int | None, int]] = []
    held = 0  # X's dimensions placed so far, in order
    for a in dst.access:
        if not a.coeffs:
            placement.append((None, a.const))
        elif held < rank and a.coeffs == {s.idxs[held].name: 1}:
            placement.append((held, a.const))
            held += 1
        else:
            return None
    if held != rank:
        return None
    return rx, ry, tuple(placement)


def _alias(
    root: Block, k: int, rx: Refinement, ry: Refinement, placement: Placement
) -> Block | None:
    x, y = rx.into, ry.into
    before, after = root.stmts[:k], root.stmts[k + 1 :]
    if any(touches(s, x) for s in after):
        return None
    region = [(c, c + (1 if d is None else rx.shape.sizes[d]) - 1) for d, c in placement]
    first = next(i for i, s in enumerate(before) if touches(s, x))
    early: list[int] = []  # zero fills of the region to run before X's first use
    for i, s in enumerate(before):
        uses_x = x in reads(s) or x in writes(s)
        if isinstance(s, Special) and (uses_x or y in reads(s) or y in writes(s)):
            return None
        if not isinstance(s, Block):
            continue
        if uses_x and y in writes(s):
            return None
        if y in reads(s) and not _misses(s, y, region, reading=True):
            return None  # reads of Y elsewhere (an earlier step's row) see the same
        if y in writes(s) and not _misses(s, y, region):
            # Zeros stored before X's elements are: what X's unstored elements
            # hold.  A zero fill after X's first use moves before it, when no
            # statement in between writes Y (a concatenation's first part).
            if not _zero_fill(s):
                return None
            if i > first:
                if any(y in writes(t) for t in before[first:i]):
                    return None
                early.append(i)
    stmts: list[Statement] = [s for i, s in enumerate(before[:first])]
    stmts += [before[i] for i in early]
    for i, s in enumerate(before[first:], first):
        if i in early:
            continue
        if isinstance(s, Block) and any(r.from_ == x for r in s.refs):
            new = _retarget(s, x, ry, placement)
            if new is None:
                return None
            s = new
        stmts.append(s)
    refs = tuple(r for r in root.refs if r.into != x)
    return replace(root, refs=refs, stmts=(*stmts, *after))


def _zero_fill(kernel: Block) -> bool:
    """A leaf kernel that only stores the constant 0."""
    zeros = {c.into for c in kernel.stmts if isinstance(c, Constant) and c.value == 0}
    return all(
        isinstance(c, Constant) or (isinstance(c, Store) and c.value in zeros) for c in kernel.stmts
    ) and all(r.dir == "out" for r in kernel.refs)


def _misses(kernel: Block, y: str, region: Box, reading: bool = False) -> bool:
    """Whether every view of ``y`` the kernel writes (``reading``: reads) stays,
    on its index box, outside ``region`` (in some dimension)."""
    ranges = {i.name: i.range for i in kernel.idxs if i.affine is None}
    if len(ranges) != len(kernel.idxs):
        return False
    for r in kernel.refs:
        if r.from_ != y or (r.dir not in ("in", "inout") if reading else r.dir == "in"):
            continue
        for (lo, hi), a, n in zip(region, r.access, r.shape.sizes):
            if any(name not in ranges for name in a.names):
                return False
            a_lo, a_hi = box_interval(a, ranges)
            if a_hi + n - 1 < lo or a_lo > hi:
                break
        else:
            return False
    return True


def _retarget(kernel: Block, x: str, ry: Refinement, placement: Placement) -> Block | None:
    """``kernel`` with its views of ``x`` made views of ``ry`` placed by ``placement``
    (shifted, and given ``Y``'s extra dimensions at their constants)."""
    strides = ry.shape.strides
    refs: list[Refinement] = []
    stmts = list(kernel.stmts)
    for r in kernel.refs:
        if r.from_ != x:
            refs.append(r)
            continue
        access = tuple(Affine.constant(c) if d is None else r.access[d] + c for d, c in placement)
        refs.append(
            replace(r, from_=ry.into, access=access, shape=_placed(r.shape, placement, strides))
        )
        for i, s in enumerate(stmts):
            if isinstance(s, Block):
                nested = _restride(s, r.into, placement, strides)
                if nested is None:
                    return None
                stmts[i] = nested
    return replace(kernel, refs=tuple(refs), stmts=tuple(stmts))


def _placed(shape: TensorShape, placement: Placement, strides: tuple[int, ...]) -> TensorShape:
    """A view's ``shape`` of ``X``'s rank given ``Y``'s: size 1 in ``Y``'s extra
    dimensions, ``Y``'s strides."""
    sizes = tuple(1 if d is None else shape.sizes[d] for d, _ in placement)
    return replace(shape, sizes=sizes, strides=strides)


def _restride(
    block: Block, name: str, placement: Placement, strides: tuple[int, ...]
) -> Block | None:
    """``block`` with every view of ``name`` (and views of those, recursively)
    placed in ``Y`` (``Y``'s rank and strides, index 0 in its extra dimensions);
    ``None`` when one has another rank than ``X``."""
    if any(isinstance(s, Special) for s in block.stmts):
        return None
    refs: list[Refinement] = []
    mine: list[str] = []
    held = sum(d is not None for d, _ in placement)
    for r in block.refs:
        if r.from_ == name:
            if len(r.shape.strides) != held or len(r.access) != held:
                return None
            access = tuple(Affine() if d is None else r.access[d] for d, _ in placement)
            shape = _placed(r.shape, placement, strides)
            refs.append(replace(r, access=access, shape=shape))
            mine.append(r.into)
        else:
            refs.append(r)
    stmts: list[Statement] = []
    for s in block.stmts:
        if isinstance(s, Block):
            for n in mine:
                found = _restride(s, n, placement, strides)
                if found is None:
                    return None
                s = found
        stmts.append(s)
    return replace(block, refs=tuple(refs), stmts=tuple(stmts))
