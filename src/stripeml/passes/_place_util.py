"""Liveness and memory accounting of allocations (used by ``place``; not a pass).

**The memory model.**  Each location (``DRAM``, ``SRAM``, ``L1`` ...) is one
arena of bytes for one execution: the root's statements, and for a nested
block one point of it (parallel points each get their own copy: that is the
business of whoever runs points in parallel).  An allocation's ``offset`` is
absolute in that arena; allocations of a nested block lie beside everything of
the enclosing blocks still live when it runs, like a stack.

**Liveness.**  Within its block, an allocation is live over the statement
indices ``[first, last]`` of the statements that name it (a load, store or
special of it, or a nested block with a view of it).  When its initial contents may be read
(a statement reads it before earlier statements have written every element:
exactly by boxes when every write plainly touches a box, else by isl) it is live from the block's start
(``first = -1``): the arena is zero at the start, like the interpreter's
allocations, and no other allocation may have used those bytes before.

* :func:`live_range` - that interval; :func:`live_ranges` for several
  allocations of one block (the statements naming each buffer are indexed
  once, so a block of ``n`` statements costs ``O(n)``, not ``O(n^2)``);
* :func:`initial_reads` - the root allocations whose initial contents may be
  read (what a runtime reusing its arena across executions must zero again);
* :func:`peak_bytes` - per location, the bytes the program's allocations
  occupy as placed: ``max(offset + size)`` over placed allocations, plus the
  full size of every allocation without an offset (each its own buffer);
* :func:`live_bytes` - per location, the most bytes live at once (the lower
  bound any placement needs; first-fit may need more through fragmentation).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from ..ir.nodes import Block, Load, Program, Refinement, Special, Store
from ._memory import READ_KINDS, WRITE_KINDS, Use, buffer_uses, covers, nbytes


def allocations(block: Block) -> list[Refinement]:
    return [r for r in block.refs if r.dir == "none"]


def live_range(block: Block, ref: Refinement, outer: Sequence[Block]) -> tuple[int, int]:
    """Statements of ``block`` over which ``ref`` (one of its allocations) is live.

    ``outer`` are the blocks enclosing ``block``.  ``-1`` as the start: live from
    the start of the block (its initial contents matter).  Unused: the whole block.
    """
    return live_ranges(block, [ref], outer)[ref.into]


def live_ranges(
    block: Block, refs: Sequence[Refinement], outer: Sequence[Block]
) -> dict[str, tuple[int, int]]:
    """:func:`live_range` of each of ``refs`` (allocations of ``block``), by name.

    The statements naming each buffer are indexed once for the block, and only
    those are searched for uses, so a long block costs linear time, not
    quadratic.
    """
    if not refs:
        return {}
    n = len(block.stmts)
    named = _naming_statements(block)
    out: dict[str, tuple[int, int]] = {}
    for ref in refs:
        at = named.get(ref.into)
        if not at:
            out[ref.into] = (-1, max(n - 1, 0))
            continue
        uses = [
            replace(u, stmt=k)
            for k in at
            for u in buffer_uses((block.stmts[k],), ref.into, ref.shape.sizes)
        ]
        first = -1 if _reads_initial(block, ref, outer, uses) else at[0]
        out[ref.into] = (first, at[-1])
    return out


def initial_reads(program: Program) -> frozenset[str]:
    """The root temporaries whose initial contents may be read (live from the start).

    Under the memory model they read zeros: a runtime that reuses an arena from
    one execution to the next must zero these (and only these) again.
    """
    root = program.root
    ranges = live_ranges(root, allocations(root), ())
    return frozenset(name for name, (first, _) in ranges.items() if first < 0)


def _naming_statements(block: Block) -> dict[str, list[int]]:
    """Buffer name -> indices of the statements that mention it (a nested view counts)."""
    named: dict[str, list[int]] = {}
    for k, s in enumerate(block.stmts):
        if isinstance(s, (Load, Store)):
            names: Iterable[str] = (s.ref,)
        elif isinstance(s, Special):
            names = (*s.inputs, *s.outputs)
        elif isinstance(s, Block):
            names = (r.from_ for r in s.refs if r.from_)
        else:
            continue
        for name in names:
            at = named.setdefault(name, [])
            if not at or at[-1] != k:
                at.append(k)
    return named


def _reads_initial(block: Block, ref: Refinement, outer: Sequence[Block], uses: list[Use]) -> bool:
    """Whether a statement may read ``ref`` before it has been written all over."""
    nest = (*outer, block)
    sizes = ref.shape.sizes
    written: list[Use] = []
    boxes: list[Box | None] = []
    for k in sorted({u.stmt for u in uses}):
        here = [u for u in uses if u.stmt == k]
        if any(u.kind in READ_KINDS for u in here):
            return True
        new = [u for u in here if u.kind in WRITE_KINDS]
        if not new:
            continue
        written += new
        boxes += [_box(u) for u in new]
        known = [b for b in boxes if b is not None]
        if _boxes_cover(known, sizes):
            return False
        if len(known) < len(boxes) and covers(written, nest, sizes):
            return False
    return False  # never read


Box = tuple[tuple[int, int], ...]  # per dimension, the half-open interval [lo, hi)


def _box(use: Use) -> Box | None:
    """The elements ``use`` touches, when that is plainly a box the same at every outer point.

    A fast exact answer that spares isl the common cases (a kernel storing
    every element, a halo's fill slabs and interior copy, a special writing
    its whole output): the blocks of the use's path have no constraints and
    plain index ranges, and each dimension's offset is a constant plus
    positive multiples of distinct indices of those blocks (each in one
    dimension only) whose values, with the box's own extent, reach every
    position from the constant on without a gap.  ``None``: not of that form
    (isl decides).
    """
    ranges: dict[str, int] = {}
    for b in use.path:
        if b.constraints:
            return None
        for i in b.idxs:
            if i.affine is not None or i.range < 1:
                return None
            ranges[i.name] = i.range
    seen: set[str] = set()
    box = []
    for off, extent in zip(use.offset, use.sizes):
        steps = [(1, extent)]
        for name, coeff in off.terms:
            if name not in ranges or name in seen or coeff < 0:
                return None
            seen.add(name)
            steps.append((coeff, ranges[name]))
        if extent < 1:
            return None
        reach = 0  # every position const .. const + reach is touched, none beyond
        for coeff, count in sorted(steps):
            if coeff > reach + 1:
                return None
            reach += coeff * (count - 1)
        box.append((off.const, off.const + reach + 1))
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


def walk(block: Block, outer: tuple[Block, ...] = ()):
    """Yield ``(block, enclosing blocks)`` for ``block`` and every nested block."""
    yield block, outer
    for s in block.stmts:
        if isinstance(s, Block):
            yield from walk(s, (*outer, block))


def peak_bytes(program: Program) -> dict[str, int]:
    """Per location, bytes occupied by the allocations as placed (see the module docstring)."""
    ends: dict[str, int] = {}
    loose: dict[str, int] = {}
    for block, _outer in walk(program.root):
        for r in allocations(block):
            size = nbytes(r.shape)
            if r.offset is None:
                loose[r.location] = loose.get(r.location, 0) + size
            else:
                ends[r.location] = max(ends.get(r.location, 0), r.offset + size)
    return {loc: ends.get(loc, 0) + loose.get(loc, 0) for loc in sorted(set(ends) | set(loose))}


def live_bytes(program: Program) -> dict[str, int]:
    """Per location, the most bytes of allocations live at one time (stack discipline)."""
    return _need(program.root, ())


def _need(block: Block, outer: tuple[Block, ...]) -> dict[str, int]:
    refs = allocations(block)
    ranges = live_ranges(block, refs, outer)
    allocs = [(r, ranges[r.into]) for r in refs]
    best: dict[str, int] = {}
    for k in range(max(len(block.stmts), 1)):
        here: dict[str, int] = {}
        for r, (a, b) in allocs:
            if a <= k <= b:
                here[r.location] = here.get(r.location, 0) + nbytes(r.shape)
        stmt = block.stmts[k] if block.stmts else None
        if isinstance(stmt, Block):
            for loc, size in _need(stmt, (*outer, block)).items():
                here[loc] = here.get(loc, 0) + size
        for loc, size in here.items():
            best[loc] = max(best.get(loc, 0), size)
    return best
