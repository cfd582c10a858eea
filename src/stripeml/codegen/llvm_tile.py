"""Register tiles: a leaf reduction's outputs held in vector registers.

When :func:`.llvm_plan.register_tile_plan` accepts a leaf block (one
aggregating store whose address indices are few and short enough), the output
elements of its address indices live in vector registers across the
reduction loops: ``vidx`` runs in vector lanes and the other address indices
are fully unrolled.  The tile is loaded before the reduction (or set to the
aggregation's identity when it starts a scope) and stored once after it.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import llvmlite.ir as ir

from ..ir.nodes import Block
from .llvm_plan import Bind
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
