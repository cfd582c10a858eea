"""An independent checker of ``place``: no two simultaneously live allocations overlap.

Brute force over every pair of placed allocations of one location, with
liveness recomputed here from scratch (not with the pass's helpers): an
allocation of block ``B`` is live over the statements of ``B`` from the first
that mentions it to the last (a load, store or special naming it, or a nested
block with a view of it).  Two allocations can be live at the same time when

* they belong to the same block and their intervals intersect, or
* one belongs to an enclosing block of the other's, and is live at the
  statement of that block that (transitively) holds the other's block.

Allocations in different statements of a common block never are (statements
run one after the other).  Offsets must also be multiples of the element size.

The one sharing allowed: the result of a ``bitview`` special at exactly its
source's bytes (``place`` does this so the special copies nothing), checked
here on its own terms: same block, same region, the special is the only
statement writing the result, and nothing writes the source after it.
"""

from __future__ import annotations

from dataclasses import dataclass

from stripeml.ir import Block, Load, Program, Special, Store
from stripeml.ir.dtypes import itemsize


@dataclass(frozen=True)
class Placed:
    path: tuple[int, ...]  # statement indices from the root to the declaring block
    name: str
    location: str
    start: int
    end: int
    first: int
    last: int


def _mentions(stmt, name: str) -> bool:
    if isinstance(stmt, (Load, Store)):
        return stmt.ref == name
    if isinstance(stmt, Special):
        return name in stmt.inputs or name in stmt.outputs
    if isinstance(stmt, Block):
        return any(r.from_ == name for r in stmt.refs)
    return False


def placed_allocations(program: Program) -> list[Placed]:
    out: list[Placed] = []

    def visit(block: Block, path: tuple[int, ...]) -> None:
        for r in block.refs:
            if r.dir != "none" or r.offset is None:
                continue
            hits = [k for k, s in enumerate(block.stmts) if _mentions(s, r.into)]
            first, last = (hits[0], hits[-1]) if hits else (0, len(block.stmts))
            size = r.shape.extent * itemsize(r.shape.dtype)
            out.append(Placed(path, r.into, r.location, r.offset, r.offset + size, first, last))
        for k, s in enumerate(block.stmts):
            if isinstance(s, Block):
                visit(s, (*path, k))

    visit(program.root, ())
    return out


def _together(a: Placed, b: Placed) -> bool:
    if a.path == b.path:
        return a.first <= b.last and b.first <= a.last
    for x, y in ((a, b), (b, a)):
        if y.path[: len(x.path)] == x.path:  # x's block encloses y's
            k = y.path[len(x.path)]
            return x.first <= k <= x.last
    return False


def _writes(stmt, name: str) -> bool:
    if isinstance(stmt, Store):
        return stmt.ref == name
    if isinstance(stmt, Special):
        return name in stmt.outputs
    if isinstance(stmt, Block):
        return any(r.from_ == name and r.dir in ("out", "inout") for r in stmt.refs)
    return False


def _block_at(program: Program, path: tuple[int, ...]) -> Block:
    block = program.root
    for k in path:
        block = block.stmts[k]
    return block


def _sanctioned_view(program: Program, a: Placed, b: Placed) -> bool:
    """Whether ``a`` and ``b`` are a bitview's source and result at the same bytes
    under the rules above (either order)."""
    if a.path != b.path or (a.start, a.end) != (b.start, b.end):
        return False
    stmts = _block_at(program, a.path).stmts
    for x, y in ((a, b), (b, a)):
        for k, s in enumerate(stmts):
            if not (isinstance(s, Special) and s.op == "bitview" and s.outputs == (y.name,)):
                continue
            if s.inputs != (x.name,):
                continue
            if [j for j, t in enumerate(stmts) if _writes(t, y.name)] != [k]:
                continue
            if any(_writes(t, x.name) for t in stmts[k + 1 :]):
                continue
            return True
    return False


def overlaps(program: Program) -> list[str]:
    """Every violation, as text (empty when the placement is sound)."""
    found = []
    items = placed_allocations(program)
    for i, a in enumerate(items):
        for b in items[i + 1 :]:
            if a.location != b.location or a.start >= b.end or b.start >= a.end:
                continue
            if a.end == a.start or b.end == b.start:
                continue
            if _together(a, b) and not _sanctioned_chain(program, items, a, b):
                found.append(f"{a.location}: {a.name}@{a.path} overlaps {b.name}@{b.path}")
    return found


def _sanctioned_chain(program: Program, items: list[Placed], a: Placed, b: Placed) -> bool:
    """A bitview of ``a`` is ``b`` (or the reverse), or both are views, link by
    link, of one source (a chain of bitviews shares one region)."""
    if _sanctioned_view(program, a, b):
        return True
    same = [c for c in items if c.path == a.path and (c.start, c.end) == (a.start, a.end)]
    linked = {a.name}
    grew = True
    while grew:
        grew = False
        for c in same:
            if c.name not in linked and any(
                _sanctioned_view(program, d, c) for d in same if d.name in linked
            ):
                linked.add(c.name)
                grew = True
    return b.name in linked


def misaligned(program: Program) -> list[str]:
    """Allocations whose offset is not a multiple of their element size."""
    out = []

    def visit(block: Block) -> None:
        for r in block.refs:
            if r.dir == "none" and r.offset is not None and r.offset % itemsize(r.shape.dtype):
                out.append(r.into)
        for s in block.sub_blocks:
            visit(s)

    visit(program.root)
    return out


def assert_placed_soundly(program: Program) -> None:
    assert not overlaps(program), overlaps(program)
    assert not misaligned(program), misaligned(program)
