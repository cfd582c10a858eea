"""``unroll``'s row choices for a kernel whose row ranges the tile's rows do not
divide (module docstring of :mod:`.unroll`: "Taller tiles", "Short rows"): a
taller tile that divides a range, else a shorter one, else every range whole.
Functions of the pass object, which they call back to tile the kernel."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from ..ir.dtypes import itemsize
from ..ir.nodes import Block, Refinement
from ._const_panels import PanelLayouts

if TYPE_CHECKING:
    from .unroll import Unroll


def other_rows(
    unroll: Unroll,
    root: Block,
    k: Block,
    ranges: dict[str, int],
    red: list[str],
    row_ok: list[str],
    panel_ins: list[Refinement],
    laid: PanelLayouts | None,
) -> list[Block] | None:
    """``k`` tiled with other rows than ``unroll.rows``, which divide none of the
    row ranges ``row_ok`` (None: the caller splits the rows or leaves ``k``);
    the vector index's range is whole vectors (the caller checked)."""
    # A row range with a divisor up to ``max_rows`` (7 rows of a 7x7 or 14x14
    # image) is tiled whole with taller, narrower tiles: one kernel that reads
    # its weights once, instead of a main part and a remainder that both do;
    # then one up to ``long_rows`` (8 of 128 tokens; 8 rows of 56 ran 2-8% slower).
    for d in [
        *range(unroll.max_rows, unroll.rows, -1),
        *_longer(unroll, ranges, red, panel_ins, laid),
    ]:
        whole = [n for n in row_ok if ranges[n] % d == 0]
        if whole:
            vectors = max(1, min(unroll.vectors, unroll.max_vectors // d))
            tiled = replace(unroll, rows=d, vectors=vectors)._tile(root, k, whole[0], laid)
            if tiled is not None:
                return tiled
    # A tile of more than 4 rows (see ``shaped``) takes fewer rows that
    # divide the range, with the vectors the accumulators allow, before a
    # split whose remainder reads the weights again (BERT's 128 tokens
    # without ``long_rows``: 4 x 6 vectors, not 21 tiles of 6 rows and a 2-row
    # rest; 4 x 4 took 1.26x onnxruntime's time where 4 x 6 took 1.11x).  The
    # panels are then wider: a sequence length 6 divides (384) lays the
    # weights out again, at its own width; the powers of two share one layout.
    for d in range(unroll.rows - 1, 3, -1):
        whole = [n for n in row_ok if ranges[n] % d == 0]
        if whole:
            shorter = replace(unroll, rows=d, vectors=max(1, unroll.max_vectors // d))
            tiled = shorter._tile(root, k, whole[-1], laid)
            if tiled is not None:
                return tiled
    # Every row range shorter than the tile's rows (a 3 x 3 convolution's
    # weight gradient, whose output pixels are its taps): the longest of
    # them is the tile's rows, whole, rather than a tile of one row
    # whose accumulators wait on each other's adds.
    short = [n for n in row_ok if 1 < ranges[n] < unroll.rows]
    if short and all(ranges[n] <= unroll.rows for n in row_ok):
        longest = max(short, key=lambda n: ranges[n])
        d = ranges[longest]
        small = replace(
            unroll, rows=d, vectors=max(1, min(unroll.vectors, unroll.max_vectors // d))
        )
        return small._tile(root, k, longest, laid)
    return None


def _longer(
    unroll: Unroll,
    ranges: dict[str, int],
    red: list[str],
    panel_ins: list[Refinement],
    laid: PanelLayouts | None,
) -> range:
    """Rows past ``max_rows``, up to ``long_rows``, for tiles whose panels are
    constants laid out once (4-row tiles of an input's panel are twice as many,
    enough to pack a strided panel: a 64 x 1024 @ 1024 x 1024 of two inputs
    took 2x in 8-row tiles) and larger than half of ``long_rows_bytes`` (a
    Winograd product's short panels, in L1 whatever the rows, ran 2-6% slower)."""
    if unroll.long_rows <= unroll.max_rows or unroll.max_rows <= unroll.rows:
        return range(0)
    if laid is None or not all(r.from_ in laid.params for r in panel_ins):
        return range(0)
    lanes = unroll.vector_width * max(
        1, min(unroll.vectors, unroll.max_vectors // unroll.long_rows)
    )
    size = max(itemsize(r.shape.dtype) for r in panel_ins)
    if 2 * math.prod(ranges[n] for n in red) * lanes * size <= unroll.long_rows_bytes:
        return range(0)
    return range(unroll.long_rows, unroll.max_rows, -1)
