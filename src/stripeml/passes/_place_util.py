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
(a statement reads it before earlier statements have written every element,
as isl decides) it is live from the block's start (``first = -1``): the arena
is zero at the start, like the interpreter's allocations, and no other
allocation may have used those bytes before.

* :func:`live_range` - that interval;
* :func:`peak_bytes` - per location, the bytes the program's allocations
  occupy as placed: ``max(offset + size)`` over placed allocations, plus the
  full size of every allocation without an offset (each its own buffer);
* :func:`live_bytes` - per location, the most bytes live at once (the lower
  bound any placement needs; first-fit may need more through fragmentation).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir.nodes import Block, Load, Program, Refinement, Special, Statement, Store
from ._memory import READ_KINDS, WRITE_KINDS, buffer_uses, covers, nbytes


def allocations(block: Block) -> list[Refinement]:
    return [r for r in block.refs if r.dir == "none"]


def live_range(block: Block, ref: Refinement, outer: Sequence[Block]) -> tuple[int, int]:
    """Statements of ``block`` over which ``ref`` (one of its allocations) is live.

    ``outer`` are the blocks enclosing ``block``.  ``-1`` as the start: live from
    the start of the block (its initial contents matter).  Unused: the whole block.
    """
    n = len(block.stmts)
    uses = buffer_uses(block.stmts, ref.into, ref.shape.sizes)
    named = [k for k, s in enumerate(block.stmts) if _names(s, ref.into)]
    if not named:
        return -1, max(n - 1, 0)
    first, last = named[0], named[-1]
    if _reads_initial(block, ref, outer, first, uses):
        first = -1
    return first, last


def _names(stmt: Statement, name: str) -> bool:
    """Whether ``stmt`` mentions the buffer ``name`` (a nested view of it counts, used or not)."""
    if isinstance(stmt, (Load, Store)):
        return stmt.ref == name
    if isinstance(stmt, Special):
        return name in stmt.inputs or name in stmt.outputs
    return isinstance(stmt, Block) and any(r.from_ == name for r in stmt.refs)


def _reads_initial(block: Block, ref: Refinement, outer: Sequence[Block], first: int, uses) -> bool:
    """Whether a statement may read ``ref`` before it has been written all over."""
    nest = (*outer, block)
    written = []
    for k in range(first, len(block.stmts)):
        here = [u for u in uses if u.stmt == k]
        if any(u.kind in READ_KINDS for u in here):
            return True
        new = [u for u in here if u.kind in WRITE_KINDS]
        if new:
            written += new
            if covers(written, nest, ref.shape.sizes):
                return False
    return False  # never read


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
    allocs = [(r, live_range(block, r, outer)) for r in allocations(block)]
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
