"""``thread``: mark the index of each kernel that the CPU may split across threads.

For each root kernel the selector picks (and not already ``#thread``), the
candidate indices are those along which a split is proven race-free
(:func:`stripeml.analysis.dependence.race_free_indices`: no two points with
different values of the index write one element, or one writes what another
reads; decided with isl on the statements' accesses, through nested blocks,
so a ``#tiled`` kernel's tile indices qualify).  Among them the pass takes the
first, in the kernel's index order, with at least ``threads`` values; failing
that, the one with the most values (at least 2).  It then moves that index to
the front of the kernel's indices and adds the tag ``#thread``: the CPU
backend runs the values of the first index of a ``#thread`` block on
different threads.  Points are unordered, so reordering indices changes
nothing else.  A kernel with no race-free index of 2 or more values, or a
``threads`` below 2, is left as it is.

Requires: verified IR.  Guarantees: the same results and verified IR (only
the index order and a tag change), the same object when nothing is marked, a
fixed point (marked kernels are skipped), and for every ``#thread`` kernel a
race-free first index.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..analysis.dependence import race_free_indices
from ..analysis.select import parse_selector
from ..ir.nodes import Block, Program, Statement
from .registry import register


@register
@dataclass(frozen=True)
class Thread:
    """Mark a race-free index of each selected kernel for threads.

    Options: ``threads`` (how many threads the target runs; an index with at
    least that many values is preferred, and below 2 the pass does nothing),
    ``select`` (tag selector of the kernels, see
    :mod:`stripeml.analysis.select`).
    """

    threads: int = 4
    select: str = "kernel"
    name: ClassVar[str] = "thread"

    def __post_init__(self) -> None:
        parse_selector(self.select)

    def run(self, program: Program) -> Program:
        if self.threads < 2:
            return program
        wanted = parse_selector(self.select)
        stmts: list[Statement] = []
        for s in program.root.stmts:
            if isinstance(s, Block) and wanted(s.tags) and "thread" not in s.tags:
                index = choose_thread_index(s, self.threads)
                if index is not None:
                    s = mark_threaded(s, index)
            stmts.append(s)
        root = program.root.with_stmts(tuple(stmts))
        return program if root is program.root else Program(root)


def choose_thread_index(block: Block, threads: int) -> str | None:
    """The race-free index of ``block`` to split across ``threads`` threads, or ``None``."""
    ranges = {i.name: i.range for i in block.idxs}
    if not any(r >= 2 for r in ranges.values()):
        return None
    safe = [n for n in race_free_indices(block) if ranges[n] >= 2]
    if not safe:
        return None
    for n in safe:
        if ranges[n] >= threads:
            return n
    return max(safe, key=lambda n: ranges[n])  # first of the largest


def mark_threaded(block: Block, index: str) -> Block:
    """``block`` with ``index`` moved first and the tag ``#thread``."""
    first = block.idx(index)
    idxs = (first,) + tuple(i for i in block.idxs if i.name != index)
    return replace(block, idxs=idxs, tags=block.tags | {"thread"})
