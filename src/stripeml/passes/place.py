"""``place``: give allocations byte offsets so that buffers live at the same time never overlap.

For each planned location (option ``locations``), every ``none`` allocation
(root temporaries and allocations of blocks) gets an ``offset`` in that
location's arena (the memory model and liveness are described in
:mod:`stripeml.analysis.liveness`):

1. within a block, each allocation is live over the statements from the first
   that uses it to the last (from the block's start when its initial contents
   may be read);
2. the block's allocations are placed greedily, largest first (ties in
   declaration order), each at the lowest offset, aligned to
   ``lcm(alignment, element size)``, that overlaps neither an allocation of
   the block placed before it whose live range intersects its own, nor
   anything reserved by the enclosing blocks;
3. a nested block at statement ``k`` reserves, in addition to what its block
   inherited, the allocations of its block live at ``k``.

So two allocations share bytes only when no statement of their common
enclosing block needs both: one is dead before the other is first written
(and the later one's initial contents are not read).

Constant temporaries (:mod:`stripeml.analysis.constness`: computed from
constant parameters alone, so a backend may compute them once and keep them
across runs) are live for the program's whole life: they get no offset, and
so no bytes of an arena that other buffers reuse.

Options: ``locations`` (the memories to plan, a list or a comma-separated
string; empty: every location but ``REGISTER``), ``alignment`` (bytes),
``root_only`` (plan the root's allocations only, the program temporaries;
nested blocks are not visited: the CPU target, whose kernels keep nested
allocations on the stack).

``Place.peak_bytes(program)`` (:func:`stripeml.analysis.memory.peak_bytes`)
reports the bytes each location needs as placed; ``Place.live_bytes`` the
lower bound; ``Place.initial_reads(program)`` the root allocations whose
initial (zero) contents may be read (both :mod:`stripeml.analysis.liveness`).

Requires: verified IR.  Guarantees: the same results (offsets change where
buffers live, never what they hold), verified IR, offsets that never make two
simultaneously live allocations of one location overlap, the same object when
every offset was already the one computed, a fixed point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

from ..analysis.constness import constness
from ..analysis.liveness import initial_reads, live_bytes, live_ranges
from ..analysis.memory import allocation_bytes, own_allocations, peak_bytes
from ..ir.dtypes import itemsize
from ..ir.nodes import Block, Program, Refinement
from .registry import check_location_names, check_positive, register

Region = tuple[int, int]  # [start, end) in bytes


@register
@dataclass(frozen=True)
class Place:
    """Liveness-based offsets for the allocations of ``locations`` (empty: all but REGISTER)."""

    locations: tuple[str, ...] = ()
    alignment: int = 64
    root_only: bool = False
    name: ClassVar[str] = "place"
    peak_bytes = staticmethod(peak_bytes)
    live_bytes = staticmethod(live_bytes)
    initial_reads = staticmethod(initial_reads)

    def __post_init__(self) -> None:
        check_positive(self, "alignment")
        object.__setattr__(self, "locations", check_location_names(self, "locations"))

    def run(self, program: Program) -> Program:
        kept = constness(program).temporaries
        root = self._place(program.root, (), {}, kept)
        return program if root is program.root else Program(root)

    def _planned(self, location: str) -> bool:
        if self.locations:
            return location in self.locations
        return location != "REGISTER"

    def _place(
        self,
        block: Block,
        outer: tuple[Block, ...],
        reserved: dict[str, list[Region]],
        kept: frozenset[str] = frozenset(),
    ) -> Block:
        allocs = [
            r for r in own_allocations(block) if self._planned(r.location) and r.into not in kept
        ]
        live = live_ranges(block, allocs, outer)
        order = sorted(range(len(allocs)), key=lambda k: (-allocation_bytes(allocs[k]), k))
        placed: dict[str, Region] = {}
        done: list[tuple[Refinement, Region]] = []  # placed allocations, in placing order
        for k in order:
            r = allocs[k]
            a, b = live[r.into]
            busy = list(reserved.get(r.location, []))
            for other, region in done:
                if other.location == r.location:
                    c, d = live[other.into]
                    if a <= d and c <= b:
                        busy.append(region)
            align = math.lcm(max(self.alignment, 1), itemsize(r.shape.dtype))
            size = allocation_bytes(r)
            start = _first_fit(busy, size, align)
            placed[r.into] = (start, start + size)
            done.append((r, placed[r.into]))

        stmts = list(block.stmts)
        if not self.root_only:
            for k, s in enumerate(stmts):
                if not isinstance(s, Block):
                    continue
                inner = {loc: list(regions) for loc, regions in reserved.items()}
                for r in allocs:
                    a, b = live[r.into]
                    if a <= k <= b:
                        inner.setdefault(r.location, []).append(placed[r.into])
                stmts[k] = self._place(s, (*outer, block), inner)
        refs = tuple(
            _with_offset(r, placed[r.into][0] if r.into in placed else None)
            if r.into in placed or r.into in kept
            else r
            for r in block.refs
        )
        same_refs = all(a is b for a, b in zip(refs, block.refs))
        if same_refs and all(a is b for a, b in zip(stmts, block.stmts)):
            return block
        return replace(block, refs=refs, stmts=tuple(stmts))


def _with_offset(ref: Refinement, offset: int | None) -> Refinement:
    return ref if ref.offset == offset else replace(ref, offset=offset)


def _first_fit(busy: list[Region], size: int, align: int) -> int:
    """The lowest multiple of ``align`` where ``size`` bytes overlap none of ``busy``.

    One sweep over ``busy`` by start: the candidate only ever moves past the end
    of a region it overlaps (rounded up to ``align``), so the first candidate
    that fits before the next region's start is the lowest that fits at all.
    """
    start = 0
    for s, e in sorted(busy):
        if start + size <= s:
            break
        if e > start:
            start = -(-e // align) * align
    return start
