"""Sets of block points, and affine expressions evaluated over them.

The points of one chunk of a block are ``G`` consecutive points of the parent
chunk times a sub-box of the block's own index box, filtered by the
constraints.  Affines are evaluated on that grid by broadcasting (one axis per
index, never a Python loop per point), then flattened and compressed by the
constraint mask: the result has one entry per point, in the same order for
every expression, so scalars, offsets and index values line up.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from ...ir.affine import Affine
from ...ir.nodes import Block


class Points:
    """The points of the root block: exactly one, where all affines are constant."""

    n = 1

    def eval(self, aff: Affine, extra: np.ndarray | None = None) -> np.ndarray:
        """``aff`` at every point, as int64 of shape ``(n,)``.

        ``extra`` (one value per point of the *parent* level) is added first.
        """
        out = np.full(1, aff.const, dtype=np.int64)
        return out if extra is None else out + extra

    def index_names(self) -> frozenset[str]:
        return frozenset()


class BoxPoints(Points):
    """Points ``parent[g0:g1] x box``, filtered by ``block``'s constraints.

    ``offsets[name]`` is the index's affine offset at every parent point (or 0).
    ``starts``/``lens`` select the sub-box of local index values (0-based).
    """

    def __init__(
        self,
        parent: Points,
        g0: int,
        g1: int,
        names: Sequence[str],
        offsets: Sequence[np.ndarray | int],
        starts: Sequence[int],
        lens: Sequence[int],
        block: Block,
    ) -> None:
        self.parent = parent
        self.g0, self.g1 = g0, g1
        self.names = tuple(names)
        self.axis = {name: k for k, name in enumerate(self.names)}
        self.offsets = tuple(offsets)
        self.starts = tuple(starts)
        self.lens = tuple(lens)
        self.shape = (g1 - g0, *self.lens)
        # Own axes before `_split` go with the parent axis, the others apart.
        self._split = 0
        size = g1 - g0
        total = int(np.prod(self.shape))
        while self._split < len(self.lens) and size * size < total:
            size *= self.lens[self._split]
            self._split += 1
        self._cache: dict[Affine, np.ndarray] = {}
        ok: np.ndarray | bool | None = None  # the points every constraint keeps
        for c in block.constraints:
            holds = self._grid(c.expr) >= 0
            ok = holds if ok is None else ok & holds
        self.mask: np.ndarray | None = None
        if ok is None:
            self.n = int(np.prod(self.shape))
        else:
            self.mask = np.ascontiguousarray(np.broadcast_to(ok, self.shape)).reshape(-1)
            self.n = int(np.count_nonzero(self.mask))

    def index_names(self) -> frozenset[str]:
        return frozenset(self.names) | self.parent.index_names()

    def eval(self, aff: Affine, extra: np.ndarray | None = None) -> np.ndarray:
        if extra is None and aff in self._cache:
            return self._cache[aff]
        grid = self._grid(aff, extra)
        if not isinstance(grid, np.ndarray) or grid.shape != self.shape:
            grid = np.broadcast_to(grid, self.shape)
        flat = grid.reshape(-1)  # copies only when broadcast
        if self.mask is not None:
            flat = flat[self.mask]
        flat = flat.astype(np.int64, copy=False)
        if extra is None:
            self._cache[aff] = flat
        return flat

    def _grid(self, aff: Affine, extra: np.ndarray | None = None) -> np.ndarray | int:
        """``aff`` on the (unfiltered) grid, possibly not yet broadcast to full shape."""
        own = [(self.axis[n], c) for n, c in aff.terms if n in self.axis]
        outer = Affine(tuple((n, c) for n, c in aff.terms if n not in self.axis), aff.const)
        # Parent-level part: one value per parent point of the group.
        g: np.ndarray | int = outer.const
        if outer.terms:
            g = self.parent.eval(outer)[self.g0 : self.g1]
        if extra is not None:
            g = g + extra[self.g0 : self.g1]
        for k, c in own:
            off = self.offsets[k]
            if isinstance(off, np.ndarray):
                g = g + c * off[self.g0 : self.g1]
            elif off:
                g = g + c * off
        rank = len(self.shape)
        lead: np.ndarray | int = g
        if isinstance(g, np.ndarray):
            lead = g.reshape((g.size,) + (1,) * (rank - 1))
        # Two partial sums over the leading and trailing axes (each small), so
        # that only the final addition is as large as the grid.
        split = self._split
        trail: np.ndarray | int = 0
        for k, c in sorted(own):
            start = self.starts[k]
            ar = np.arange(start * c, (start + self.lens[k]) * c, c, dtype=np.int64)
            shape = [1] * rank
            shape[k + 1] = self.lens[k]
            if k < split:
                lead = lead + ar.reshape(shape)
            else:
                trail = trail + ar.reshape(shape)
        return lead + trail


def iter_chunks(
    block: Block, parent: Points, limit: int
) -> Iterator[tuple[int, int, list[int], list[int]]]:
    """Split ``parent x box(block)`` into chunks of at most ``limit`` grid points.

    Yields ``(g0, g1, starts, lens)``: parent points ``g0:g1`` times the sub-box.
    The box is first narrowed to what the block's constraints over its own
    indices allow (:func:`_windows`): the points outside fail a constraint, so
    the mask would drop them anyway, and a block whose constraints leave no
    point yields nothing (a fuzzed range of 2**31 that its constraints cut to
    8 values, or to none, was enumerated in full).
    """
    windows = _windows(block)
    if windows is None:
        return
    first = [lo for lo, _ in windows]
    ranges = [hi - lo for lo, hi in windows]
    for g0, g1, starts, lens in _chunks(ranges, parent.n, limit):
        yield g0, g1, [a + b for a, b in zip(first, starts)], lens


def _windows(block: Block) -> list[tuple[int, int]] | None:
    """``[lo, hi)`` of each of ``block``'s own indices (local values) within
    what its constraints over its own indices allow, each index bounded by
    the others' windows (interval arithmetic, twice over: a superset of the
    points that pass, so nothing is lost); an index with an affine offset,
    and constraints naming one, are left alone.  ``None`` when a window is
    empty."""
    windows = [(0, i.range) for i in block.idxs]
    where = {i.name: k for k, i in enumerate(block.idxs) if i.affine is None}
    usable = [c.expr for c in block.constraints if all(n in where for n, _ in c.expr.terms)]
    for _ in range(2):
        for expr in usable:
            terms = [(where[n], c) for n, c in expr.terms if c]
            for k, coeff in terms:
                # coeff * x >= -const - (the largest the other terms can add)
                most = expr.const + sum(
                    max(c * windows[j][0], c * (windows[j][1] - 1)) for j, c in terms if j != k
                )
                lo, hi = windows[k]
                if coeff > 0:
                    lo = max(lo, -(most // coeff))
                else:
                    hi = min(hi, most // -coeff + 1)
                if lo >= hi:
                    return None
                windows[k] = (lo, hi)
    return windows


def _chunks(
    ranges: list[int], n_par: int, limit: int
) -> Iterator[tuple[int, int, list[int], list[int]]]:
    """:func:`iter_chunks` over a box of ``ranges`` from 0."""
    box = int(np.prod(ranges)) if ranges else 1
    if box <= limit:
        step = max(1, limit // box)
        for g0 in range(0, n_par, step):
            yield g0, min(n_par, g0 + step), [0] * len(ranges), list(ranges)
        return
    # Split the box: axes before `split` are fixed one value at a time, axis
    # `split` is cut into slabs, the axes after it are whole.
    inner = 1
    split = len(ranges) - 1
    while split > 0 and inner * ranges[split] <= limit:
        inner *= ranges[split]
        split -= 1
    slab = max(1, limit // inner)
    for g in range(n_par):
        for head in np.ndindex(*ranges[:split]):
            for s in range(0, ranges[split], slab):
                starts = [*head, s] + [0] * (len(ranges) - split - 1)
                lens = [1] * split + [min(slab, ranges[split] - s)] + ranges[split + 1 :]
                yield g, g + 1, starts, lens
