"""Liveness of allocations: over which statements of its block each ``none`` buffer is live.

**The memory model.**  Each location (``DRAM``, ``SRAM``, ``L1`` ...) is one
arena of bytes for one execution: the root's statements, and for a nested
block one point of it (parallel points each get their own copy: that is the
business of whoever runs points in parallel).  An allocation's ``offset`` is
absolute in that arena; allocations of a nested block lie beside everything of
the enclosing blocks still live when it runs, like a stack.

**Liveness.**  Within its block, an allocation is live over the statement
indices ``[first, last]`` of the statements that name it (a load, store or
special of it, or a nested block with a view of it).  When its initial
contents may be read (a statement reads it before earlier statements have
written every element: :func:`.coverage.covers`) it is live from the block's
start (``first = -1``): the arena is zero at the start, like the
interpreter's allocations, and no other allocation may have used those bytes
before.

* :func:`live_range` - that interval; :func:`live_ranges` for several
  allocations of one block (the statements naming each buffer are indexed
  once, so a block of ``n`` statements costs ``O(n)``, not ``O(n^2)``);
* :func:`initial_reads` - the root allocations whose initial contents may be
  read (what a runtime reusing its arena across executions must zero again);
* :func:`written_outputs` - the root outputs written all over before any read
  (what a runtime may allocate without zeroing);
* :func:`live_bytes` - per location, the most bytes live at once (the lower
  bound any placement needs; first-fit may need more through fragmentation;
  what the allocations occupy as placed is :func:`.memory.peak_bytes`).

Requires: verified IR.  Guarantees: exact coverage answers (so a buffer is
live from the start only when some element may really be read first).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..ir.nodes import Block, Load, Program, Refinement, Special, Store
from .access import Access, uses
from .coverage import covers
from .memory import allocation_bytes, own_allocations

__all__ = ["initial_reads", "live_bytes", "live_range", "live_ranges", "written_outputs"]


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
        found = uses(block.stmts, ref.into, ref.shape.sizes, at)
        first = -1 if _reads_initial(block, ref, outer, found) else at[0]
        out[ref.into] = (first, at[-1])
    return out


def initial_reads(program: Program) -> frozenset[str]:
    """The root temporaries whose initial contents may be read (live from the start).

    Under the memory model they read zeros: a runtime that reuses an arena from
    one execution to the next must zero these (and only these) again.
    """
    root = program.root
    ranges = live_ranges(root, own_allocations(root), ())
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


def _reads_initial(
    block: Block, ref: Refinement, outer: Sequence[Block], found: list[Access]
) -> bool:
    """Whether a statement may read ``ref`` before it has been written all over."""
    return _first_full_write(block, ref, outer, found) == "read"


def _first_full_write(
    block: Block, ref: Refinement, outer: Sequence[Block], found: list[Access]
) -> str:
    """What comes first for ``ref`` among ``found`` (its accesses, by statement):
    ``"read"`` (an element may be read before every element was written),
    ``"written"`` (every element written, nothing read before) or ``"partial"``
    (never read, never written all over)."""
    nest = (*outer, block)
    written: list[Access] = []
    for k in sorted({a.stmt for a in found}):
        here = [a for a in found if a.stmt == k]
        if any(a.read for a in here):
            return "read"
        new = [a for a in here if a.write]
        if not new:
            continue
        written += new
        if covers(written, nest, ref.shape.sizes):
            return "written"
    return "partial"


def written_outputs(program: Program) -> frozenset[str]:
    """The root's ``out`` buffers whose every element the statements write before
    any reads one: their initial contents never show, so a runtime may hand
    them to the kernels uninitialised (the others read zeros: elements never
    stored, or aggregated into)."""
    root = program.root
    named = _naming_statements(root)
    out = set()
    for ref in root.refs:
        at = named.get(ref.into)
        if ref.dir != "out" or not at:
            continue
        found = uses(root.stmts, ref.into, ref.shape.sizes, at)
        if _first_full_write(root, ref, (), found) == "written":
            out.add(ref.into)
    return frozenset(out)


def live_bytes(program: Program) -> dict[str, int]:
    """Per location, the most bytes of allocations live at one time (stack discipline)."""
    return _need(program.root, ())


def _need(block: Block, outer: tuple[Block, ...]) -> dict[str, int]:
    refs = own_allocations(block)
    ranges = live_ranges(block, refs, outer)
    allocs = [(r, ranges[r.into]) for r in refs]
    best: dict[str, int] = {}
    for k in range(max(len(block.stmts), 1)):
        here: dict[str, int] = {}
        for r, (a, b) in allocs:
            if a <= k <= b:
                here[r.location] = here.get(r.location, 0) + allocation_bytes(r)
        stmt = block.stmts[k] if block.stmts else None
        if isinstance(stmt, Block):
            for loc, size in _need(stmt, (*outer, block)).items():
                here[loc] = here.get(loc, 0) + size
        for loc, size in here.items():
            best[loc] = max(best.get(loc, 0), size)
    return best
