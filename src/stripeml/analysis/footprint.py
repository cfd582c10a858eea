"""Footprints: the box of elements a refinement's accesses touch over one tile.

A *tiling* of a block gives each index ``i`` a tile size ``t_i``: the tile
with origin ``o`` holds the points ``i = base_i + t_i*o_i + l_i`` with
``0 <= l_i < t_i`` (``base_i`` is the index's offset, usually 0).  For a view
``R`` with access ``A`` and element sizes ``s``, the tile touches the parent
elements ``A(i) + [0, s)``; relative to ``A`` at the tile origin (``l = 0``)
that is ``sum_i c_i*l_i + [0, s)`` per dimension.  The **footprint** is the
box hull of these offsets: per dimension the least and greatest offset.

Example: a 3x3 convolution ``I[x + kx, y + ky]`` over a tile of 8x8 outputs
(``kx``, ``ky`` whole) touches a 10x10 window at offsets ``0..9``.

* :func:`box_footprint` is plain arithmetic over the full tile box (every
  ``l_i`` in ``0..t_i-1``); it ignores constraints and is what the cost model
  evaluates for thousands of candidate tilings.
* :func:`footprint` is exact (isl): the hull over every tile of the block's
  domain, constraints and enclosing blocks included, so it is never larger
  than the box (padded convolutions and triangular domains give less).

Requires: verified IR.  Guarantees: ``footprint`` is the exact hull of the
offsets over the domain; ``box_footprint`` contains it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..ir.affine import Affine
from ..ir.isl import affine_range, constrain, index_bounds
from ..ir.nodes import Block, Refinement
from .domain import domain_in, nest_names

__all__ = ["Footprint", "box_footprint", "footprint", "footprints", "tile_substitution"]


@dataclass(frozen=True, slots=True)
class Footprint:
    """Per dimension the offsets ``lo[d] .. hi[d]`` (inclusive) from the tile's origin access."""

    lo: tuple[int, ...]
    hi: tuple[int, ...]

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(h - lo + 1 for lo, h in zip(self.lo, self.hi))

    @property
    def elements(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n


def box_footprint(
    access: Sequence[Affine], sizes: Sequence[int], tiles: Mapping[str, int]
) -> Footprint:
    """The footprint of ``access + [0, sizes)`` when each index ``i`` in ``tiles``
    takes ``t_i`` consecutive values from the tile origin (other names are fixed)."""
    lo: list[int] = []
    hi: list[int] = []
    for expr, size in zip(access, sizes):
        a = b = 0
        for name, c in expr.terms:
            span = c * (tiles.get(name, 1) - 1)
            if span < 0:
                a += span
            else:
                b += span
        lo.append(a)
        hi.append(b + size - 1)
    return Footprint(tuple(lo), tuple(hi))


def tile_substitution(
    block: Block, tiles: Mapping[str, int], outer_name, inner_name
) -> dict[str, Affine]:
    """Each index ``i`` of ``block`` as ``base_i + t_i*outer(i) + inner(i)``.

    ``outer_name(i)`` and ``inner_name(i)`` name the tile index and the index
    within the tile; an index missing from ``tiles`` is one whole tile (its
    tile index is then always 0).
    """
    out: dict[str, Affine] = {}
    for idx in block.idxs:
        t = tiles.get(idx.name, idx.range)
        base = idx.affine if idx.affine is not None else Affine()
        out[idx.name] = (
            base + Affine.index(outer_name(idx.name), t) + Affine.index(inner_name(idx.name))
        )
    return out


def footprint(
    block: Block,
    ref: Refinement | str,
    tiles: Mapping[str, int],
    outer: Sequence[Block] = (),
) -> Footprint | None:
    """Exact footprint of ``block``'s view ``ref`` over every tile of its domain.

    ``outer`` are the enclosing blocks (outermost first).  ``None`` when the
    domain is empty.
    """
    result = footprints(block, tiles, outer, only=(ref,))
    return next(iter(result.values()), None)


def footprints(
    block: Block,
    tiles: Mapping[str, int],
    outer: Sequence[Block] = (),
    only: Sequence[Refinement | str] | None = None,
) -> dict[str, Footprint]:
    """Exact footprints of ``block``'s views (all of them, or those in ``only``).

    Empty when the block's domain is empty.
    """

    def o(n: str) -> str:
        return f"{n}'o"

    def l(n: str) -> str:  # noqa: E743 - the index within the tile
        return f"{n}'l"

    theta = tile_substitution(block, tiles, o, l)
    names = nest_names(outer) + tuple(f(i.name) for i in block.idxs for f in (o, l))
    domain = domain_in(names, outer)
    exprs: list[Affine] = []
    for idx in block.idxs:
        t = tiles.get(idx.name, idx.range)
        exprs += [Affine.index(l(idx.name)), Affine.constant(t - 1) - Affine.index(l(idx.name))]
        exprs += [e.substitute(theta) for e in index_bounds(idx)]
    exprs += [c.expr.substitute(theta) for c in block.constraints]
    domain = constrain(domain, exprs)
    if domain.is_empty():
        return {}
    wanted = None if only is None else {r if isinstance(r, str) else r.into for r in only}
    inner = {i.name: Affine.index(l(i.name)) for i in block.idxs}
    out: dict[str, Footprint] = {}
    for r in block.refs:
        if r.dir == "none" or (wanted is not None and r.into not in wanted):
            continue
        lo: list[int] = []
        hi: list[int] = []
        for expr, size in zip(r.access, r.shape.sizes):
            # The offset from the origin access is linear in the within-tile indices.
            local = Affine.build({n: c for n, c in expr.terms if n in inner})
            rng = affine_range(domain, local.substitute(inner))
            assert rng is not None  # bounded: every within-tile index is
            lo.append(rng[0])
            hi.append(rng[1] + size - 1)
        out[r.into] = Footprint(tuple(lo), tuple(hi))
    return out
