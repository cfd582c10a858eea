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
from .llvm_plan import MAX_UNROLL, Bind, narrow_lanes, vectorizable
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
    lanes: int,
) -> None:
    """Emit leaf ``blk`` with its output ``out`` in a register tile (see the module),
    ``lanes`` points of ``vidx`` per vector (the target's width, or fewer for a
    narrower tile)."""
    b = g.b
    bd = binds[out]
    w = lanes
    adt = acc_dtype(bd.dtype)
    rt = vec(reg_type(adt), w)
    combos = list(itertools.product(*[range(blk.idx(u).range) for u in unrolled]))
    chunks = range(blk.idx(vidx).range // w)
    red = [i.name for i in blk.idxs if i.name != vidx and i.name not in unrolled]

    def at(combo: tuple[int, ...], j: int, env0: dict[str, ir.Value]) -> dict[str, ir.Value]:
        env2 = dict(env0)
        for name, value in (*zip(unrolled, combo), (vidx, j * w)):
            base = blk.idx(name).affine
            c = ir.Constant(I64, value)
            env2[name] = b.add(g.affine(base, env0), c) if base is not None else c
        return env2

    slots = {}
    for combo in combos:
        for j in chunks:
            slot = g.alloca_builder.alloca(rt, name=g.fresh("tile"))
            if bd.mode == "mem":
                b.store(g.to_acc(g.vload(bd, at(combo, j, env), w, vidx), bd.dtype), slot)
            else:
                b.store(splat(identity(bd.agg, adt), w), slot)
            slots[combo, j] = slot
    mode = bd.mode

    def body(env3: dict[str, ir.Value], lanes: int | None) -> None:
        bd.mode = "reg"
        bd.touched = None
        for combo in combos:
            for j in chunks:
                bd.vacc = slots[combo, j]
                g.stmts(blk, at(combo, j, env3), binds, None, w, vidx)
        bd.mode = mode

    g.loops(blk, red, env, body, False, guards_here=True)
    bd.mode = "plain"
    for combo in combos:
        for j in chunks:
            tile = g.from_acc(b.load(slots[combo, j], typ=rt), bd.dtype)
            g.vstore(bd, at(combo, j, env), tile, w)
    bd.mode = mode


def unrolled_epilogue_plan(
    blk: Block, binds: dict[str, Bind], w: int, max_vectors: int, narrow_only: bool = False
) -> tuple[str, list[str], int] | None:
    """``(vidx, unrolled, lanes)`` when ``blk`` is an ``epilogue`` leaf small enough
    to emit straight-line (see the module): no constraints, allocations or
    offsets of indices, plain stores only, its last index in whole vectors of
    ``lanes`` (``w``, or for a last index that whole vectors of ``w`` do not
    divide, the largest power of two of at least 4 dividing its range: the
    epilogue of ``unroll``'s narrower-lane rest), and at most ``max_vectors``
    vectors over its other indices (each of at most ``MAX_UNROLL`` points).
    ``narrow_only``: only such a narrower epilogue of more than one row (bodies
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
    lanes = narrow_lanes(blk.idx(vidx).range, w)
    if narrow_only and (lanes == w or all(blk.idx(u).range == 1 for u in unrolled)):
        return None
    count = blk.idx(vidx).range // lanes
    for u in unrolled:
        count *= blk.idx(u).range
    if (
        blk.idx(vidx).range % lanes
        or count > max_vectors
        or any(blk.idx(u).range > MAX_UNROLL for u in unrolled)
        or not vectorizable(blk, binds, vidx)
    ):
        return None
    return vidx, unrolled, lanes


def emit_unrolled(
    g: KernelEmitter,
    blk: Block,
    env: dict[str, ir.Value],
    binds: dict[str, Bind],
    vidx: str,
    unrolled: list[str],
    lanes: int,
) -> None:
    """Emit leaf ``blk`` (:func:`unrolled_epilogue_plan`) as straight-line code: its
    statements once per point of ``unrolled`` and vector of ``lanes`` points of ``vidx``."""
    w = lanes
    combos = itertools.product(*[range(blk.idx(u).range) for u in unrolled])
    for combo in combos:
        for j in range(blk.idx(vidx).range // w):
            env2 = dict(env)
            for name, value in (*zip(unrolled, combo), (vidx, j * w)):
                env2[name] = ir.Constant(I64, value)
            g.stmts(blk, env2, binds, None, w, vidx)
