"""``autotile``: split kernels into an outer block over tiles and an inner block over a tile.

For each root kernel the selector picks (and not already ``#tiled``):

1. **choose** tile sizes (:func:`choose_tiles`): per index the candidates are
   the powers of two below its range (unless ``ragged`` is off), the divisors
   of its range and the whole range (only output indices with
   ``only_outputs``).  The cost model
   (:mod:`stripeml.analysis.cost`) prices each candidate; the pass keeps the
   one moving the fewest bytes in total (most compute per byte) among those
   whose footprint fits ``fraction * memory_bytes`` and that give at least
   ``min_tiles`` tiles over output indices (or as many as the kernel allows).
   The search is exhaustive up to ``max_candidates`` combinations, greedy
   (grow the index that saves most, from all-ones) beyond.  A kernel is left
   alone when no candidate fits or the best one is the whole kernel.
2. **rewrite** (:func:`tile_kernel`): index ``m: M`` with tile size ``t``
   becomes ``m_o: ceil(M/t)`` on the outer block and ``m_i: t`` on the inner
   one (``m = t*m_o + m_i``; no ``m_i`` when ``t == 1``); whole indices stay
   on the inner block under their names.  Every constraint, index offset,
   access and ``index`` statement of the kernel and of the blocks nested in it
   is rewritten in the new indices; the constraints go to the inner block.
   A ragged index (``t`` does not divide ``M``) gets the inner constraint
   ``t*m_o + m_i <= M - 1``, so each original point runs exactly once.  A
   rewritten constraint that uses tile indices only moves to the outer block;
   tiles that hold no point of a constrained kernel are cut by further outer
   constraints (isl's exact projection of the inner domain, when affine).
   Kernels with no point at all are left alone.

Views.  Each view ``R`` with access ``A`` becomes an outer view over the
parent buffer and an inner view of it.  Per dimension, ``A`` rewritten is an
outer part ``O(m_o, ..)`` plus an inner part ``L(m_i, ..)``.  When the *tile
window* ``O + lo .. O + hi`` (``lo``/``hi``: least and greatest ``L`` over
the inner domain, plus the view's size) is in bounds at every outer point,
the outer access is ``O + lo`` with size ``hi - lo + 1`` and the inner access
``L - lo``: ``A[16*m_o, 16*k_o] (16, 16)`` then ``A[m_i, k_i]``.  Otherwise
(a ragged last tile, a padded convolution's border) the outer view spans the
range the whole kernel reaches in that dimension and the inner access stays
absolute.  Output views keep their aggregation on both levels, so the outer
block is the aggregation scope.  ``none`` allocations stay on the inner block
(one per original point).  Tags: the outer block keeps the kernel's tags plus
``#tiled``; the inner one has them without ``#kernel``, plus ``#tile``.

Requires: verified IR.  Guarantees: the same results (the same points run,
each once, storing the same values through the same aggregations), verified
IR (views in bounds), the same object when no kernel is tiled, and a fixed
point (tiled kernels are skipped).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import ClassVar

import islpy as isl

from ..analysis.cost import CostModel, TileCost
from ..analysis.domain import inequalities_of, project_onto
from ..analysis.select import parse_selector
from ..ir.affine import Affine
from ..ir.isl import affine_range, exists_point, nest_domain
from ..ir.nodes import (
    Block,
    Constraint,
    Index,
    LoadIndex,
    Program,
    Refinement,
    Statement,
    TensorShape,
    walk_blocks,
)
from ._common import fresh
from .registry import check_fraction, check_positive, check_selector, register


@register
@dataclass(frozen=True)
class Autotile:
    """Tile selected kernels for a memory level.

    Options: ``memory_bytes`` (the level's size, e.g. the target's
    ``$L2.size``), ``fraction`` of it a tile's footprint may use (the
    article's "1/4 to 1/2 of L1" rule), ``line_bytes`` (the level's line),
    ``only_outputs`` (tile output indices only: every tile writes its own
    elements, so tiles are parallel), ``min_tiles`` (at least that many tiles
    over output indices, for parallel work), ``select`` (tag selector of the
    kernels, see :mod:`stripeml.analysis.select`), ``max_candidates`` (bound of
    the exhaustive search), ``ragged`` (allow tile sizes that do not divide the
    range; with ``False`` only divisors are tried, so no tile is ragged and
    tile views stay tile-sized).
    """

    memory_bytes: int = 1 << 18
    fraction: float = 0.5
    line_bytes: int = 64
    only_outputs: bool = False
    min_tiles: int = 1
    select: str = "contraction"
    max_candidates: int = 4096
    ragged: bool = True
    name: ClassVar[str] = "autotile"
    layer_local: ClassVar[bool] = True
    # The search space of ``stripeml tune`` (docs/tuning.md): each kernel is tiled
    # on its own, so its share of the level may differ from the file's.
    tunable: ClassVar[dict[str, tuple[object, ...]]] = {
        "fraction": (0.125, 0.25, 0.5, 0.75, 1.0),
        "only_outputs": (False, True),
        "ragged": (False, True),
    }

    def __post_init__(self) -> None:
        check_selector(self)
        check_positive(self, "memory_bytes", "line_bytes", "min_tiles", "max_candidates")
        check_fraction(self, "fraction")

    def run(self, program: Program) -> Program:
        wanted = parse_selector(self.select)
        stmts: list[Statement] = []
        for s in program.root.stmts:
            if (
                isinstance(s, Block)
                and wanted(s.tags)
                and "tiled" not in s.tags
                and not nest_domain([s]).is_empty()
            ):
                tiles = choose_tiles(
                    s,
                    budget=self.fraction * self.memory_bytes,
                    line_bytes=self.line_bytes,
                    only_outputs=self.only_outputs,
                    min_tiles=self.min_tiles,
                    max_candidates=self.max_candidates,
                    ragged=self.ragged,
                )
                if tiles is not None:
                    s = tile_kernel(s, tiles, program.root)
            stmts.append(s)
        root = program.root.with_stmts(tuple(stmts))
        return program if root is program.root else Program(root)


# -- choosing tile sizes --------------------------------------------------------------


def candidate_sizes(extent: int, ragged: bool = True) -> list[int]:
    """Divisors of ``extent`` (``extent`` itself included) and, when ``ragged``,
    the powers of two below it."""
    out = {d for d in range(1, extent + 1) if extent % d == 0}
    p = 1
    while ragged and p < extent:
        out.add(p)
        p *= 2
    return sorted(out)


def choose_tiles(
    block: Block,
    *,
    budget: float,
    line_bytes: int = 64,
    only_outputs: bool = False,
    min_tiles: int = 1,
    max_candidates: int = 4096,
    ragged: bool = True,
) -> dict[str, int] | None:
    """The best tile size per index of ``block``; ``None`` to leave it whole."""
    model = CostModel(block, line_bytes)
    ranges = model.ranges
    free = [n for n, r in ranges.items() if r > 1]
    if only_outputs:
        free = [n for n in free if n in model.output_indices]
    if not free:
        return None
    cands = {n: candidate_sizes(ranges[n], ragged) for n in free}
    smallest = model.evaluate({n: 1 for n in free})
    need = min(min_tiles, smallest.parallel_tiles)

    def ok(c: TileCost) -> bool:
        return c.fits(budget) and c.parallel_tiles >= need

    def key(c: TileCost) -> tuple:
        return (c.total_bytes, c.tile_count, c.tiles)

    if not ok(smallest):
        return None
    total = 1
    for n in free:
        total *= len(cands[n])
    if total <= max_candidates:
        best = smallest
        for combo in itertools.product(*(cands[n] for n in free)):
            c = model.evaluate(dict(zip(free, combo)))
            if ok(c) and key(c) < key(best):
                best = c
    else:
        best = _greedy(model, free, cands, ok, key, smallest, max_candidates)
    chosen = dict(best.tiles)
    if all(chosen[n] == r for n, r in ranges.items()):
        return None
    return chosen


def _greedy(
    model: CostModel,
    free: list[str],
    cands: dict[str, list[int]],
    ok: Callable[[TileCost], bool],
    key: Callable[[TileCost], tuple],
    start: TileCost,
    budget: int,
) -> TileCost:
    """Grow one index at a time to its next candidate, the move saving most bytes first."""
    current = start
    evaluations = 0
    while evaluations < budget:
        sizes = dict(current.tiles)
        best_move = None
        for n in free:
            bigger = [s for s in cands[n] if s > sizes[n]]
            if not bigger:
                continue
            c = model.evaluate({**sizes, n: bigger[0]})
            evaluations += 1
            if ok(c) and (best_move is None or key(c) < key(best_move)):
                best_move = c
        if best_move is None or best_move.total_bytes >= current.total_bytes:
            break
        current = best_move
    return current


# -- rewriting a kernel ------------------------------------------------------------------


def tile_kernel(block: Block, tiles: Mapping[str, int], root: Block) -> Block:
    """``block`` (a kernel of ``root``) as an outer block over tiles of ``tiles``."""
    taken = {i.name for b in walk_blocks(block) for i in b.idxs}
    outer_idxs: list[Index] = []
    inner_idxs: list[Index] = []
    theta: dict[str, Affine] = {}
    ragged: list[Affine] = []
    for idx in block.idxs:
        t = min(tiles.get(idx.name, idx.range), idx.range)
        if t >= idx.range:
            inner_idxs.append(idx)
            continue
        o = fresh(f"{idx.name}_o", taken)
        taken.add(o)
        outer_idxs.append(Index(o, -(-idx.range // t)))
        value = Affine.index(o, t) + (idx.affine if idx.affine is not None else Affine())
        if t > 1:
            i = fresh(f"{idx.name}_i", taken)
            taken.add(i)
            inner_idxs.append(Index(i, t))
            value = value + Affine.index(i)
            if idx.range % t:
                ragged.append(Affine.constant(idx.range - 1) - Affine.index(o, t) - Affine.index(i))
        theta[idx.name] = value

    # A constraint left on tile indices only holds for whole tiles: it goes outside.
    tile_names = {i.name for i in outer_idxs}
    moved = [c.expr.substitute(theta) for c in block.constraints]
    outer_cons = tuple(Constraint(e) for e in moved if set(e.names) <= tile_names)
    inner_cons = tuple(Constraint(e) for e in moved if not set(e.names) <= tile_names)
    pointwise = bool(inner_cons)
    inner_cons += tuple(Constraint(e) for e in ragged)
    outer = Block(idxs=tuple(outer_idxs), constraints=outer_cons)
    inner = Block(idxs=tuple(inner_idxs), constraints=inner_cons)
    if pointwise:  # the kernel's constraints may leave whole tiles empty
        outer = replace(outer, constraints=outer_cons + _tile_constraints(outer, inner))
    inner_domain = nest_domain([outer, inner])
    outer_domain = nest_domain([outer])
    inner_names = {i.name for i in inner_idxs}

    outer_refs: list[Refinement] = []
    inner_refs: list[Refinement] = []
    for r in block.refs:
        if r.dir == "none":
            inner_refs.append(r)
            continue
        parent = root.ref(r.from_).shape.sizes
        o_acc, o_size, i_acc = [], [], []
        for expr, size, psize in zip(r.access, r.shape.sizes, parent):
            a, s, b = _split_dim(
                expr.substitute(theta), size, psize, inner_names, inner_domain, outer_domain
            )
            o_acc.append(a)
            o_size.append(s)
            i_acc.append(b)
        shape = TensorShape(r.shape.dtype, tuple(o_size), r.shape.strides)
        outer_refs.append(replace(r, shape=shape, access=tuple(o_acc)))
        inner_refs.append(replace(r, from_=r.into, access=tuple(i_acc)))

    inner = replace(
        inner,
        refs=tuple(inner_refs),
        stmts=tuple(_subst_stmt(s, theta) for s in block.stmts),
        tags=(block.tags - {"kernel", "thread"}) | {"tile"},
        name=block.name,
    )
    return replace(
        outer,
        refs=tuple(outer_refs),
        stmts=(inner,),
        tags=block.tags | {"tiled"},
        name=block.name,
        comment=block.comment,
    )


def _split_dim(
    expr: Affine,
    size: int,
    parent_size: int,
    inner_names: set[str],
    inner_domain: isl.BasicSet,
    outer_domain: isl.BasicSet,
) -> tuple[Affine, int, Affine]:
    """(outer access, outer size, inner access) of one dimension of a view."""
    local = Affine.build({n: c for n, c in expr.terms if n in inner_names})
    origin = expr - local
    span = affine_range(inner_domain, expr)
    lo_hi = affine_range(inner_domain, local)
    assert span is not None and lo_hi is not None  # the kernel has points (checked by run)
    whole = span[1] - span[0] + size
    lo, hi = lo_hi[0], lo_hi[1] + size - 1
    window = origin + lo
    if hi - lo + 1 < whole and _in_bounds(outer_domain, window, hi - lo + 1, parent_size):
        return window, hi - lo + 1, local - lo
    return Affine.constant(span[0]), whole, expr - span[0]


def _in_bounds(domain: isl.BasicSet, start: Affine, size: int, parent_size: int) -> bool:
    return not exists_point(domain, -start - 1) and not exists_point(
        domain, start + size - parent_size - 1
    )


def _tile_constraints(outer: Block, inner: Block) -> tuple[Constraint, ...]:
    """Outer constraints that cut tiles holding no point (isl's exact projection)."""
    full = nest_domain([outer, inner])
    names = tuple(i.name for i in outer.idxs)
    exprs = inequalities_of(project_onto(full, names))
    if exprs is None:
        return ()
    out: list[Constraint] = []
    for e in exprs:
        # Keep only what cuts tiles the outer block does not already exclude.
        if exists_point(
            nest_domain([replace(outer, constraints=outer.constraints + tuple(out))]), -e - 1
        ):
            out.append(Constraint(e))
    return tuple(out)


def _subst_block(block: Block, theta: Mapping[str, Affine]) -> Block:
    idxs = tuple(
        replace(i, affine=i.affine.substitute(theta)) if i.affine is not None else i
        for i in block.idxs
    )
    refs = tuple(
        replace(r, access=tuple(a.substitute(theta) for a in r.access)) for r in block.refs
    )
    return replace(
        block,
        idxs=idxs,
        refs=refs,
        constraints=tuple(Constraint(c.expr.substitute(theta)) for c in block.constraints),
        stmts=tuple(_subst_stmt(s, theta) for s in block.stmts),
    )


def _subst_stmt(stmt: Statement, theta: Mapping[str, Affine]) -> Statement:
    if isinstance(stmt, LoadIndex):
        return LoadIndex(stmt.into, stmt.expr.substitute(theta))
    if isinstance(stmt, Block):
        return _subst_block(stmt, theta)
    return stmt
