"""Register tiles: a leaf reduction's outputs held in vector registers.

When :func:`.llvm_plan.register_tile_plan` accepts a leaf block (one
aggregating store whose address indices are few and short enough), the output
elements of its address indices live in vector registers across the
reduction loops: ``vidx`` runs in vector lanes and the other address indices
are fully unrolled.  The tile is loaded before the reduction (or set to the
aggregation's identity when it starts a scope) and stored once after it.

The ``epilogue`` that follows such a tile (bias, activation: ``unroll``'s
nest, then the ``epilogue`` pass) reads the tile's buffer at the same points.
:func:`unrolled_epilogue_plan` accepts it when it is as small as a tile, and
:func:`emit_unrolled` emits it straight-line, one vector per point of its
other indices, at constant offsets: the tile's stores into its stack buffer
and the epilogue's loads from it then share constant addresses, and LLVM's
SROA keeps the values in registers (no loop, no stack round trip).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import llvmlite.ir as ir

from ..ir.nodes import Block, Store
from .llvm_plan import (
    MAX_UNROLL,
    TILE_REDUCTION_UNROLL,
    Bind,
    lane_chunks,
    vectorizable,
)
from .llvm_prefetch import emit_prefetches, next_panel, prefetch_start
from .llvm_types import I64, acc_dtype, identity, reg_type, splat, vec

if TYPE_CHECKING:
    from .llvm_kernel import KernelEmitter


def emit_register_tile(
    g: KernelEmitter,
    blk: Block,
    env: dict[str, ir.Value],
    binds: dict[str, Bind],
    out: str,
    vidx: str,
    unrolled: list[str],
    chunks: list[tuple[int, int]],
) -> None:
    """Emit leaf ``blk`` with its output ``out`` in a register tile (see the module),
    a register per ``(start, lanes)`` of ``chunks`` along ``vidx`` (whole vectors of
    the target's width, and a narrower one or narrower ones: :func:`.lane_chunks`)."""
    b = g.b
    bd = binds[out]
    adt = acc_dtype(bd.dtype)
    combos = list(itertools.product(*[range(blk.idx(u).range) for u in unrolled]))
    red = [i.name for i in blk.idxs if i.name != vidx and i.name not in unrolled]

    def at(combo: tuple[int, ...], start: int, env0: dict[str, ir.Value]) -> dict[str, ir.Value]:
        env2 = dict(env0)
        for name, value in (*zip(unrolled, combo), (vidx, start)):
            base = blk.idx(name).affine
            c = ir.Constant(I64, value)
            env2[name] = b.add(g.affine(base, env0), c) if base is not None else c
        return env2

    slots = {}
    for combo in combos:
        for start, w in chunks:
            slot = g.alloca_builder.alloca(vec(reg_type(adt), w), name=g.fresh("tile"))
            if bd.mode == "mem":
                b.store(g.to_acc(g.vload(bd, at(combo, start, env), w, vidx), bd.dtype), slot)
            else:
                b.store(splat(identity(bd.agg, adt), w), slot)
            slots[combo, start] = slot
    mode = bd.mode

    def body(env3: dict[str, ir.Value], lanes: int | None) -> None:
        bd.mode = "reg"
        bd.touched = None
        g.load_memo, g.load_memo_skip = {}, bd.root  # the step's loads, each once
        for combo in combos:
            for start, w in chunks:
                bd.vacc = slots[combo, start]
                g.stmts(blk, at(combo, start, env3), binds, None, w, vidx)
        g.load_memo, g.load_memo_skip = None, None
        bd.mode = mode

    step = reduction_unroll(blk, red)
    fetch = next_panel(g, blk, binds, vidx, unrolled, red, step)
    fetch_start = prefetch_start(g, fetch, env) if fetch is not None else []
    if step > 1:
        last = red[-1]
        span = blk.idx(last).range

        def unrolled_loop(env4: dict[str, ir.Value], lanes: int | None) -> None:
            def copies(v: ir.Value) -> None:
                g.held_accs = {}  # each accumulator loaded once a trip, stored once
                for u in range(step):
                    env5 = dict(env4)
                    env5[last] = g.shift(v, u)
                    if not u:
                        emit_prefetches(g, fetch, fetch_start, env5)
                    body(env5, lanes)
                for slot, value in g.held_accs.values():
                    b.store(value, slot)
                g.held_accs = None

            g.loop(last, ir.Constant(I64, 0), ir.Constant(I64, span), copies, step=step)

        g.loops(blk, red[:-1], env, unrolled_loop, False, guards_here=True)
    elif fetch is None:
        g.loops(blk, red, env, body, False, guards_here=True)
    else:

        def fetching(env4: dict[str, ir.Value], lanes: int | None) -> None:
            emit_prefetches(g, fetch, fetch_start, env4)
            body(env4, lanes)

        g.loops(blk, red, env, fetching, False, guards_here=True)
    bd.mode = "plain"
    for combo in combos:
        for start, w in chunks:
            tile = b.load(slots[combo, start], typ=vec(reg_type(adt), w))
            g.vstore(bd, at(combo, start, env), g.from_acc(tile, bd.dtype), w)
    bd.mode = mode


def reduction_unroll(blk: Block, red: list[str]) -> int:
    """How many iterations of a register tile's innermost reduction loop (the last
    of ``red``) each trip of its loop runs: :data:`.llvm_plan.TILE_REDUCTION_UNROLL`,
    else 2, when that divides its range and leaves at least two trips, and no
    constraint or affine moves that index (else 1: the plain loop)."""
    if not red:
        return 1
    idx = blk.idx(red[-1])
    if idx.affine is not None or any(c.expr.coeff(idx.name) for c in blk.constraints):
        return 1
    for step in (TILE_REDUCTION_UNROLL, 2):
        if step > 1 and idx.range % step == 0 and idx.range >= 2 * step:
            return step
    return 1


def unrolled_epilogue_plan(
    blk: Block, binds: dict[str, Bind], w: int, max_vectors: int, narrow_only: bool = False
) -> tuple[str, list[str], list[tuple[int, int]]] | None:
    """``(vidx, unrolled, chunks)`` when ``blk`` is an ``epilogue`` leaf small enough
    to emit straight-line (see the module): no constraints, allocations or
    offsets of indices, plain stores only, its last index in the vectors of
    :func:`.lane_chunks` (whole vectors of ``w``; the epilogue of ``unroll``'s
    narrower-lane rest in vectors of a power of two of at least 4 lanes; of a
    mixed tile, whole vectors and a narrower last one), and at most
    ``max_vectors`` vectors over its other indices (each of at most
    ``MAX_UNROLL`` points).
    ``narrow_only``: only such a narrower or mixed epilogue of more than one row (bodies
    compiled at O3: LLVM unrolls full-width epilogues well itself, and one row
    of narrow lanes too, but vectorised a narrow epilogue's rows with gathers
    and scatters)."""
    if w < 2 or "epilogue" not in blk.tags or blk.sub_blocks or blk.constraints or not blk.idxs:
        return None
    if any(r.dir == "none" for r in blk.refs) or any(i.affine is not None for i in blk.idxs):
        return None
    if any(binds[s.ref].mode != "plain" for s in blk.stmts if isinstance(s, Store)):
        return None
    vidx = blk.idxs[-1].name
    unrolled = [i.name for i in blk.idxs[:-1]]
    chunks = lane_chunks(blk.idx(vidx).range, w)
    if chunks is None:
        return None
    if narrow_only and (
        all(lanes == w for _, lanes in chunks) or all(blk.idx(u).range == 1 for u in unrolled)
    ):
        return None
    count = len(chunks)
    for u in unrolled:
        count *= blk.idx(u).range
    if (
        count > max_vectors
        or any(blk.idx(u).range > MAX_UNROLL for u in unrolled)
        or not vectorizable(blk, binds, vidx)
    ):
        return None
    return vidx, unrolled, chunks


def emit_unrolled(
    g: KernelEmitter,
    blk: Block,
    env: dict[str, ir.Value],
    binds: dict[str, Bind],
    vidx: str,
    unrolled: list[str],
    chunks: list[tuple[int, int]],
) -> None:
    """Emit leaf ``blk`` (:func:`unrolled_epilogue_plan`) as straight-line code: its
    statements once per point of ``unrolled`` and ``(start, lanes)`` of ``chunks``
    along ``vidx``."""
    combos = itertools.product(*[range(blk.idx(u).range) for u in unrolled])
    for combo in combos:
        for start, w in chunks:
            env2 = dict(env)
            for name, value in (*zip(unrolled, combo), (vidx, start)):
                env2[name] = ir.Constant(I64, value)
            g.stmts(blk, env2, binds, None, w, vidx)
