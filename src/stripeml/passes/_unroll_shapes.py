"""Small shape helpers of ``unroll`` (``passes/unroll.py``): which vectors divide a
range, a 2-D row pair, a kernel restricted to part of an index, how inputs read
the vector index, whether it is one panel of a wider dimension."""

from __future__ import annotations

from dataclasses import replace

from ..analysis.access import index_stride
from ..ir.affine import Affine
from ..ir.nodes import Block, Refinement


def packable(r: Refinement, v: str) -> bool:
    """Whether ``r`` reads ``v`` at stride 0 or 1, or through exactly one dimension
    with coefficient 1 (a panel can then be packed with that dimension innermost)."""
    if index_stride(r, v) in (0, 1):
        return True
    dims = [a.coeff(v) for a in r.access if a.coeff(v)]
    return dims == [1]


def vectors_dividing(cap: int, n: int, w: int) -> int:
    """The most vectors of ``w`` lanes, at most ``cap``, whose tile divides ``n``
    (or 1, or 0 when ``n < w``, when none does: the caller checks)."""
    vec = min(cap, n // w)
    while vec > 1 and n % (vec * w):
        vec -= 1
    return vec


def two_rows(
    cands: list[str], ranges: dict[str, int], rows: int
) -> tuple[str, tuple[str, int]] | None:
    """``(u, (u2, r2))``: row indices for a 2-D register tile of ``rows`` points,
    ``rows // r2`` along ``u`` (the innermost candidate that divides, for contiguous
    pixels) and ``r2`` along ``u2``; ``None`` when no pair divides."""
    for r2 in range(2, rows):
        if rows % r2:
            continue
        r1 = rows // r2
        for u in reversed(cands):
            if ranges[u] % r1 or ranges[u] < r1:
                continue
            for u2 in reversed(cands):
                if u2 != u and ranges[u2] % r2 == 0 and ranges[u2] >= r2:
                    return u, (u2, r2)
    return None


def restrict(k: Block, u: str, start: int, count: int, name: str) -> Block:
    """``k`` over the points ``start <= u < start + count`` (``u`` renumbered from 0)."""
    shift = {u: Affine.index(u) + start}
    return replace(
        k,
        idxs=tuple(replace(i, range=count) if i.name == u else i for i in k.idxs),
        refs=tuple(replace(r, access=tuple(a.substitute(shift) for a in r.access)) for r in k.refs),
        name=name,
    )


def moves(r: Refinement, n: str) -> bool:
    """Whether view ``r``'s access depends on index ``n``."""
    return any(a.coeff(n) != 0 for a in r.access)


def panel_of_wider(out: Refinement, v: str, ranges: dict[str, int]) -> bool:
    """Whether ``out``'s dimension along ``v`` moves with another index too (``32 *
    j_b + j_c``: ``v`` is one panel of a wider dimension, as ``nest`` lays out
    attention's keys), so the tile is narrow by layout, not because the data is
    (a convolution's 16 output channels)."""
    for a in out.access:
        if a.coeff(v):
            return any(n != v and ranges.get(n, 1) >= 2 for n in a.names)
    return False
