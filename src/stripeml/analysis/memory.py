"""How much of each memory a program's allocations occupy.

:func:`peak_bytes` is what ``stripeml ir --report`` prints next to the
traffic, ``exe.peak_bytes`` returns and ``Place.peak_bytes`` reports: per
location, the bytes the program's ``none`` allocations need at once.  Where
the ``place`` pass has given allocations offsets, the peak is the highest
byte any of them reaches (``max(offset + size)``: placement already overlaps
buffers that are never live together); allocations without an offset are
counted as if each had its own space (their plain sum).  The lower bound any
placement needs is :func:`.liveness.live_bytes`.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..ir.dtypes import itemsize
from ..ir.nodes import Block, Program, Refinement, walk_blocks


def own_allocations(block: Block) -> list[Refinement]:
    """The ``none`` refinements of ``block`` itself (not of its nested blocks)."""
    return [r for r in block.refs if r.dir == "none"]


def allocations(program: Program) -> Iterator[Refinement]:
    """Every ``none`` refinement of the program, parents first."""
    for block in walk_blocks(program.root):
        yield from own_allocations(block)


def allocation_bytes(ref: Refinement) -> int:
    """Bytes spanned by one instance of an allocation (its extent times its element size)."""
    return ref.shape.extent * itemsize(ref.shape.dtype)


def peak_bytes(program: Program) -> dict[str, int]:
    """Bytes the allocations need per location: ``{"DRAM": ..., "SRAM": ...}``.

    Placed allocations (``offset`` set) contribute ``max(offset + size)`` of
    their location; unplaced ones add their size.  Parameters (``in``/``out``)
    are not allocations and do not count.  One instance per allocation: a
    block's buffers are counted once, however many points the block has.
    """
    placed: dict[str, int] = {}
    unplaced: dict[str, int] = {}
    for ref in allocations(program):
        size = allocation_bytes(ref)
        if ref.offset is not None:
            placed[ref.location] = max(placed.get(ref.location, 0), ref.offset + size)
        else:
            unplaced[ref.location] = unplaced.get(ref.location, 0) + size
    return {
        loc: placed.get(loc, 0) + unplaced.get(loc, 0)
        for loc in dict.fromkeys([*placed, *unplaced])
    }


def is_placed(program: Program) -> bool:
    """Whether any allocation has an offset (the ``place`` pass has run)."""
    return any(ref.offset is not None for ref in allocations(program))
