"""``unroll``'s splits of a kernel into two root kernels over disjoint parts of one
index (module docstring of :mod:`.unroll`: "Ragged rows" and the ragged vector
index): the head tiled as usual, the rest apart, each part its own aggregation
scope.  Functions of the pass object, which they call back to tile each part."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..ir.nodes import Block
from ._common import fresh
from ._const_panels import PanelLayouts
from ._unroll_shapes import restrict

if TYPE_CHECKING:
    from .unroll import Unroll

#: A mixed tile's rows along any index: the CPU code generator unrolls a register
#: tile's indices other than its vector index up to 8 points
#: (``codegen/llvm_plan.MAX_UNROLL``); a taller mixed tile would run as loops,
#: its narrower lanes scalar (Inception-v1's 13 x 13 x 512 -> 24 convolution in
#: tiles of 12 rows by 24 channels took 5x the time).
MIXED_ROWS = 8


def split_rows(
    unroll: Unroll,
    root: Block,
    k: Block,
    u: str,
    laid: PanelLayouts | None = None,
    other_rows: bool = False,
) -> list[Block] | None:
    """Tile rows ``[0, R - R % rows)`` of ``u`` with ``rows`` and the rest apart;
    with ``other_rows`` (another row index of more than ``rows`` points) the
    rest is tiled along that one like any kernel."""
    total = k.idx(u).range
    rem = total % unroll.rows
    head = restrict(k, u, 0, total - rem, k.name)
    taken = {s.name for s in root.stmts if isinstance(s, Block)}
    tail = restrict(k, u, total - rem, rem, fresh(f"{k.name}_rest", taken))
    state = laid.snapshot() if laid is not None else None
    first = unroll._tile(root, head, u, laid)
    # Each panel meets one remainder tile: packing buys nothing.  Wider tiles
    # measured ~2x faster for 2 rows of a 1024-wide GEMM (fewer strided panels).
    # With another row index (the last column of a 13 x 13 image) the rest has
    # rows of its own: full tiles along it read each panel once, where
    # rem-row tiles would read every panel once per point of that index
    # (SqueezeNet's 13 x 13 x 512 -> 1000 classifier: 0.27 ms for its rest).
    rest = replace(unroll, rows=rem, vectors=max(1, unroll.max_vectors // rem), pack_max_bytes=0)
    if other_rows:
        rest = unroll
    elif laid is not None:
        # The head laid its constant weights out in panels: the rest reads those
        # (in cache) rather than the plain weights, which no other kernel reads
        # (SqueezeNet's 13 x 13 corner pixels: 71 us for 590 KB of cold weights).
        widths = laid.widths(tail)
        if widths:
            vec = widths[-1] // unroll.vector_width
            rest = replace(rest, vectors=vec, max_vectors=max(vec, rem * vec))
    second = rest._tile(
        laid.root if laid is not None else root, tail, None if other_rows else u, laid
    )
    if second is None and rest.pack_max_bytes != unroll.pack_max_bytes:
        # An input read across the vector index can only be tiled packed.
        packed = replace(rest, pack_max_bytes=unroll.pack_max_bytes)
        second = packed._tile(laid.root if laid is not None else root, tail, u, laid)
    if first is None or second is None:
        if laid is not None and state is not None:
            laid.restore(state)
        return None
    return first + second


def split_vector(
    unroll: Unroll,
    root: Block,
    k: Block,
    v: str,
    row: str | None,
    laid: PanelLayouts | None,
    group: int = 1,
) -> list[Block] | None:
    """Tile ``v``'s ``[0, R - R % w)`` with this pass's vectors and the last
    ``R % w`` points apart, in vectors of the widest power-of-two lanes (at least
    4) that divide them, as many as the rest holds (the tile's rows permitting);
    fewer lanes than that leave the rest untiled, for ``vectorize``.
    With ``group`` vectors (``R`` whole vectors): ``[0, R - R % (group * w))``
    and the rest as one tile of whole vectors."""
    w = unroll.vector_width
    total = k.idx(v).range
    rem = total % (w * group)
    head = restrict(k, v, 0, total - rem, k.name)
    state = laid.snapshot() if laid is not None else None
    first = unroll._tile(root, head, row, laid)
    if first is None:
        if laid is not None and state is not None:
            laid.restore(state)
        return None
    taken = {s.name for s in root.stmts if isinstance(s, Block)} | {b.name for b in first}
    tail = restrict(k, v, total - rem, rem, fresh(f"{k.name}_lanes", taken))
    lanes = rem & -rem  # the largest power of two dividing rem
    second: list[Block] = [tail]
    if group > 1:
        # One panel of ``rem // w`` vectors: packing buys nothing.
        rest = replace(unroll, vectors=rem // w, pack_max_bytes=0)
        second = rest._tile(laid.root if laid is not None else root, tail, row, laid) or [tail]
    elif lanes >= 4:
        # Each panel meets one remainder tile: packing buys nothing.  All of the
        # rest's vectors in one tile (12 points: 3 of 4 lanes), so each row value
        # is broadcast once for them (ShuffleNet's grouped 1x1 convolutions, 28
        # channels a group: 51 -> 41 us for 7-row tiles of 12 instead of 4).
        rest = replace(unroll, vector_width=lanes, vectors=rem // lanes, pack_max_bytes=0)
        second = rest._tile(laid.root if laid is not None else root, tail, row, laid) or [tail]
    return first + second


def mixed_tile(
    unroll: Unroll,
    root: Block,
    k: Block,
    v: str,
    row: str | None,
    laid: PanelLayouts | None,
) -> list[Block] | None:
    """``k`` tiled whole along a ragged vector index ``v`` (``R`` points, whole vectors
    of ``w`` and ``R % w`` more): one tile as wide as ``R``, whose registers are
    ``R // w`` whole vectors and a narrower one (the code generator's
    ``lane_chunks``), when ``R`` takes at most ``unroll.mixed_vectors`` registers
    and at least two rows of them fit the accumulators; else None.  Each input
    value read across the rows then serves all ``R`` points once, where a split
    reads it again for the rest (ShuffleNet's grouped 1 x 1 convolutions, 28
    channels a group: 16 + 12)."""
    total = k.idx(v).range
    regs = -(-total // unroll.vector_width)
    if regs > unroll.mixed_vectors or 2 * regs > unroll.max_vectors:
        return None
    budget = min(unroll.max_vectors // regs, MIXED_ROWS)
    wide = replace(
        unroll,
        vector_width=total,
        vectors=1,
        rows=max(1, min(budget, unroll.rows * unroll.vectors // regs)),
        max_vectors=budget,
        max_rows=min(unroll.max_rows, MIXED_ROWS),
        vector_groups=0,
        mixed_vectors=0,
    )
    return wide._tile(root, k, row, laid)
