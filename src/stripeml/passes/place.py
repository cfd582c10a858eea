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

One exception, by design: the result ``Y`` of a ``bitview`` special (the same
bytes read as another dtype) gets the bytes of its source ``X`` itself, so
the special copies nothing (the runtime skips a special whose result is its
source's memory), when both are dense row-major temporaries of the block, of
one location and one byte size, the special is the only statement writing
``Y``, and nothing writes ``X`` after it (a chain of bitviews shares one
region).  ``X`` and ``Y`` are then one allocation, live from the first use
of either to the last.  (Quantised models view each layer's uint8
activations as int32 words for the ``dot4`` convolutions: ResNet-50 int8
has 53 such views of 0.2-0.8 MB per run.)

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
from ..ir.nodes import Block, Program, Refinement, Special, TensorShape
from ._common import writes
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
        alias = bitview_aliases(block, allocs)
        for y, x in alias.items():  # one allocation: live from the first use of either
            (a, b), (c, d) = live[x], live[y]
            live[x] = (min(a, c), max(b, d))
        for y, x in alias.items():
            live[y] = live[x]
        order = sorted(range(len(allocs)), key=lambda k: (-allocation_bytes(allocs[k]), k))
        placed: dict[str, Region] = {}
        done: list[tuple[Refinement, Region]] = []  # placed allocations, in placing order
        for k in order:
            r = allocs[k]
            if r.into in alias:
                continue
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
        for y, x in alias.items():
            placed[y] = placed[x]

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


def bitview_aliases(block: Block, allocs: list[Refinement]) -> dict[str, str]:
    """``{Y: X}`` for the ``bitview`` specials of ``block`` whose result ``Y``
    may take the bytes of its source ``X`` (the rules in the module docstring);
    ``X`` is the first source of a chain of views."""
    by_name = {r.into: r for r in allocs}
    writers: dict[str, list[int]] = {}
    for k, stmt in enumerate(block.stmts):
        for name in writes(stmt):
            writers.setdefault(name, []).append(k)
    alias: dict[str, str] = {}
    for k, stmt in enumerate(block.stmts):
        if not (isinstance(stmt, Special) and stmt.op == "bitview"):
            continue
        if len(stmt.inputs) != 1 or len(stmt.outputs) != 1:
            continue
        x, y = stmt.inputs[0], stmt.outputs[0]
        rx, ry = by_name.get(x), by_name.get(y)
        if rx is None or ry is None or x == y or y in alias or rx.location != ry.location:
            continue
        if not (_row_major(rx) and _row_major(ry)):
            continue
        if allocation_bytes(rx) != allocation_bytes(ry) or writers.get(y) != [k]:
            continue
        first = alias.get(x, x)
        if any(j > k for name in (x, first) for j in writers.get(name, [])):
            continue
        alias[y] = first
    return alias


def _row_major(ref: Refinement) -> bool:
    """Dense row-major: its bytes in storage order are its elements in order."""
    return ref.shape == TensorShape.dense(ref.shape.dtype, ref.shape.sizes)


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
