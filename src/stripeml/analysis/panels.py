"""Streamed panels: which input of a register tile a kernel reads panel after panel,
re-reading each panel once per value of its other indices.

A tiled product (``unroll``) runs its register tile over column *panels* of
its vector operand: a matmul ``[n_b, m_o]`` reads panel ``n_b`` (the reduction
times the tile's lanes, laid out densely) once for every row block ``m_o``.
When the panels together exceed a core's cache, every panel's first pass comes
from memory beyond it, at that memory's speed, and its other passes from the
cache; the ``prefetch`` pass and the CPU code generator spread the next
panel's fetch over the current panel's passes instead (docs/cpu-backend.md,
"Prefetching the next panel").  This module answers the structural question
both ask: :func:`streamed_panel`.

Requires: verified IR.  Guarantees: an answer only for a register tile that is
a direct child of its kernel, whose panel index comes before every pass index
in the kernel's index order (the order its loops run in).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.dtypes import itemsize
from ..ir.nodes import Block, Refinement
from .access import index_stride


@dataclass(frozen=True, slots=True)
class StreamedPanel:
    """``ref`` (the tile's refinement) moves ``stride`` elements to the next panel
    when the kernel's index ``index`` grows by one; the kernel's indices ``passes``
    (range 2 or more, in the kernel's order) leave it where it is, so each of their
    ``count`` points reads the whole panel again.  ``source``: the kernel's
    refinement that ``ref`` views."""

    ref: str
    source: str
    index: str
    stride: int
    passes: tuple[str, ...]
    count: int
    dtype: str

    @property
    def panel_bytes(self) -> int:
        """Bytes from one panel to the next: a dense panel's size."""
        return self.stride * itemsize(self.dtype)


def streamed_panel(kernel: Block, tile: Block) -> StreamedPanel | None:
    """The panel ``tile`` (a ``#register_tile`` child of ``kernel``) streams, if any:
    an input read along the tile's vector index (its last) in unit stride, whose
    kernel view moves with an index of ``kernel`` (the largest such stride),
    re-read over at least two points of the kernel's other indices."""
    if (
        "register_tile" not in tile.tags
        or not tile.idxs
        or all(s is not tile for s in kernel.stmts)
    ):
        return None
    vidx = tile.idxs[-1].name
    sources = {r.into: r for r in kernel.refs}
    order = [i.name for i in kernel.idxs]
    best: tuple[int, str, Refinement, Refinement] | None = None
    for r in tile.refs:
        source = sources.get(r.from_ or r.into)
        if r.dir != "in" or source is None or index_stride(r, vidx) != 1:
            continue
        for i in kernel.idxs:
            if i.range < 2 or i.affine is not None:
                continue
            s = index_stride(source, i.name)
            if s > 0 and (best is None or s > best[0]):
                best = (s, i.name, r, source)
    if best is None:
        return None
    stride, index, r, source = best
    passes = tuple(
        i.name
        for i in kernel.idxs
        if i.range >= 2 and index_stride(source, i.name) == 0 and i.affine is None
    )
    count = 1
    for name in passes:
        count *= kernel.idx(name).range
    if count < 2 or any(order.index(p) < order.index(index) for p in passes):
        return None
    return StreamedPanel(r.into, source.into, index, stride, passes, count, r.shape.dtype)
