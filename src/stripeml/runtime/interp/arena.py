"""Arena mode (``run(..., arena=True)``): placed allocations really share memory.

Normally every allocation gets its own zeroed storage and ``offset`` is
ignored.  In arena mode, every ``none`` allocation with an ``offset`` lives at
that byte offset of one block of bytes per memory location:

* root temporaries: one arena per location for the whole run, of
  ``max(offset + size)`` bytes, zeroed once at the start;
* allocations of a block: for each chunk of points, one frame per location
  and point, spanning the block's placed allocations in that location,
  zeroed when the chunk starts (allocations are fresh per point).

Buffers whose placements overlap then share bytes, so a placement that lets
two buffers live at the same time overlap makes the run compute garbage:
this is how the tests check ``place`` on the interpreter.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ...ir.dtypes import to_numpy
from ...ir.nodes import Refinement
from .frame import alloc_origin

_FRAME_ALIGN = 16  # bytes: a multiple of every element size


def _nbytes(ref: Refinement) -> int:
    return ref.shape.extent * to_numpy(ref.shape.dtype).itemsize


def _placed(refs: Iterable[Refinement]) -> dict[str, list[tuple[Refinement, int]]]:
    """The placed allocations with their offsets, per location."""
    groups: dict[str, list[tuple[Refinement, int]]] = {}
    for r in refs:
        if r.dir == "none" and r.offset is not None:
            groups.setdefault(r.location, []).append((r, r.offset))
    return groups


def root_storages(refs: Iterable[Refinement]) -> dict[str, np.ndarray]:
    """Flat storage of every placed root temporary: a typed view of its location's arena."""
    out: dict[str, np.ndarray] = {}
    for group in _placed(refs).values():
        arena = np.zeros(max(start + _nbytes(r) for r, start in group), dtype=np.uint8)
        for r, start in group:
            out[r.into] = arena[start : start + _nbytes(r)].view(to_numpy(r.shape.dtype))
    return out


def block_storages(
    allocs: Iterable[Refinement], points: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``(storage, base)`` of each placed allocation of a block, for ``points`` points.

    ``base[p]`` is the flat element offset of the allocation's element 0 at
    point ``p``; allocations in one location share one frame per point.
    """
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for group in _placed(allocs).values():
        lo = min(offset for _, offset in group)
        hi = max(offset + _nbytes(r) for r, offset in group)
        frame = -(-(hi - lo) // _FRAME_ALIGN) * _FRAME_ALIGN
        frames = np.zeros(points * frame, dtype=np.uint8)
        for r, offset in group:
            item = to_numpy(r.shape.dtype).itemsize
            if (offset - lo) % item:
                continue  # misaligned for its dtype: the caller gives it its own storage
            storage = frames.view(to_numpy(r.shape.dtype))
            start = (offset - lo) // item + alloc_origin(r.shape.sizes, r.shape.strides)
            base = np.arange(points, dtype=np.int64) * (frame // item) + start
            out[r.into] = (storage, base)
    return out
