"""The cost model autotile uses: bytes moved, FLOPs, and whether a tile fits.

For a kernel and candidate tile sizes (one per index; an index left out is
whole), one tile is the box of points ``t_i`` long in each index.  Per tile:

* **bytes moved** between a memory level and the next: for every view, its
  :func:`~.footprint.box_footprint` in whole lines of ``line_bytes`` (the
  run along the unit-stride dimension is rounded up to lines, and moves one
  line more when successive tiles start at different offsets within a line;
  without a unit-stride dimension each element takes its own lines).  Inputs are loaded once per
  tile, however many of the tile's points read an element: an input whose
  access does not depend on an index is not reloaded along it.  Outputs are
  written once per tile, and also read back first when a reduction index is
  split (the partial sums of earlier tiles) or when the view is ``inout``;
* **FLOPs**: points of a full tile times the scalar operations per point
  (intrinsics, nested blocks counted by their index boxes; at least 1);
* **footprint bytes**: the line-rounded bytes the tile keeps resident, which
  must fit the budget (``fits``); they grow with every tile size, so the
  all-ones tile has the least.

Totals over the whole kernel count ``ceil(range/t)`` tiles per index: a
ragged last tile moves as much as a full one, so tile sizes that divide the
ranges are cheaper at equal size.  ``compute_per_byte`` is the ratio of the
totals; autotile minimises ``total_bytes`` (the FLOPs are fixed).

Requires: a block whose views are verified.  Guarantees: plain integer
arithmetic, no isl (a candidate costs microseconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..ir.dtypes import itemsize
from ..ir.nodes import Block, Intrinsic
from .footprint import box_footprint

__all__ = ["CostModel", "TileCost", "scalar_ops"]


@dataclass(frozen=True, slots=True)
class TileCost:
    """The cost of one tiling (see the module docstring)."""

    tiles: tuple[tuple[str, int], ...]
    tile_count: int
    parallel_tiles: int
    footprint_bytes: int
    bytes_per_tile: int
    flops_per_tile: int
    total_bytes: int
    total_flops: int

    @property
    def compute_per_byte(self) -> float:
        return self.total_flops / max(self.total_bytes, 1)

    def fits(self, budget: float) -> bool:
        """Whether the tile's footprint fits in ``budget`` bytes."""
        return self.footprint_bytes <= budget


def scalar_ops(block: Block) -> int:
    """Scalar operations per point of ``block``: its intrinsics plus nested blocks' (times their boxes)."""
    n = 0
    for s in block.stmts:
        if isinstance(s, Intrinsic):
            n += 1
        elif isinstance(s, Block):
            box = 1
            for i in s.idxs:
                box *= i.range
            n += box * scalar_ops(s)
    return n


@dataclass(frozen=True, slots=True)
class _View:
    access: tuple
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    itemsize: int
    output: bool
    inout: bool


class CostModel:
    """Costs of tilings of one block; build once, :meth:`evaluate` many times."""

    def __init__(self, block: Block, line_bytes: int = 64) -> None:
        self.block = block
        self.line_bytes = max(1, line_bytes)
        self.ranges = {i.name: i.range for i in block.idxs}
        self.views = [
            _View(
                r.access,
                r.shape.sizes,
                r.shape.strides,
                itemsize(r.shape.dtype),
                r.dir in ("out", "inout"),
                r.dir == "inout",
            )
            for r in block.refs
            if r.dir != "none"
        ]
        written = {n for v in self.views if v.output for a in v.access for n in a.names}
        #: indices that select which output element is written (splitting them is parallel)
        self.output_indices = tuple(n for n in self.ranges if n in written)
        #: the others: several of their values aggregate into one output element
        self.reduction_indices = tuple(n for n in self.ranges if n not in written)
        self.ops = max(1, scalar_ops(block))

    def _lines(self, view: _View, tiles: Mapping[str, int]) -> tuple[int, int]:
        """Lines the view's footprint occupies, and lines a tile moves (alignment included)."""
        sizes = box_footprint(view.access, view.sizes, tiles).sizes
        if any(s <= 0 for s in sizes):
            return 0, 0
        unit = next((d for d, st in enumerate(view.strides) if abs(st) == 1), None)
        # Without a unit-stride run every element starts its own line(s).
        count = 1 if unit is not None else -(-view.itemsize // self.line_bytes)
        straddle = False
        for d, s in enumerate(sizes):
            if d == unit:
                count *= -(-s * view.itemsize // self.line_bytes)
                # Tiles whose origins move by a step that is not a whole number of
                # lines start at varying alignments: a run may straddle one more line.
                straddle = any(
                    abs(c) * tiles[n] * view.itemsize % self.line_bytes
                    for n, c in view.access[d].terms
                    if n in tiles and tiles[n] < self.ranges.get(n, 0)
                )
            else:
                count *= s
        if straddle and unit is not None:  # only the unit-stride run straddles
            runs = count // -(-sizes[unit] * view.itemsize // self.line_bytes)
            return count, count + runs
        return count, count

    def evaluate(self, tiles: Mapping[str, int]) -> TileCost:
        """The cost of tiling with ``tiles`` (index -> tile size; missing = whole)."""
        t = {n: min(max(1, tiles.get(n, r)), r) for n, r in self.ranges.items()}
        split_reduction = any(t[n] < self.ranges[n] for n in self.reduction_indices)
        resident = moved = 0
        for v in self.views:
            lines, transferred = self._lines(v, t)
            resident += lines * self.line_bytes
            b = transferred * self.line_bytes
            moved += 2 * b if v.output and (v.inout or split_reduction) else b
        count = parallel = 1
        points = total_points = 1
        for n, r in self.ranges.items():
            k = -(-r // t[n])
            count *= k
            if n in self.output_indices:
                parallel *= k
            points *= t[n]
            total_points *= r
        return TileCost(
            tiles=tuple(t.items()),
            tile_count=count,
            parallel_tiles=parallel,
            footprint_bytes=resident,
            bytes_per_tile=moved,
            flops_per_tile=points * self.ops,
            total_bytes=count * moved,
            total_flops=total_points * self.ops,
        )
