"""Transposing copies in registers: square tiles moved by vector loads, shuffles
and vector stores.

A copy whose source runs in unit stride along one index and whose destination
along another (``nest``'s key panels, ``K_panels[p_b, i0, i2, p_c] =
K[i0, 32*p_b + p_c, i2]``: keys along ``p_c`` in the panel, hidden units along
``i2`` in the source; an ONNX ``Transpose`` of the last two dimensions) has no
index both sides read in lanes, so it ran one element at a time (about 2.7
cycles each on BERT-base's key panels).  :func:`transpose_plan` accepts such a
leaf (a load stored as it is), and :func:`emit_transpose` runs it in tiles of
``L x L`` elements: ``L`` vector loads along the source's unit-stride index,
an in-register transpose of ``L log2 L`` two-source shuffles
(:func:`transpose_rows`), and ``L`` vector stores along the destination's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from ..ir.dtypes import itemsize
from ..ir.nodes import Block, Load, Store
from .llvm_builder import _smax, _smin
from .llvm_plan import Bind
from .llvm_types import I64

if TYPE_CHECKING:
    from .llvm_kernel import KernelEmitter

#: The smallest tile side worth shuffling (a side of 2 is a scalar copy's cost).
MIN_SIDE = 4


def transpose_plan(
    blk: Block, binds: dict[str, Bind], w: int
) -> tuple[Load, Store, str, str, int] | None:
    """``(load, store, a, b, L)`` when leaf ``blk`` copies one view into another
    transposed: ``a`` is the destination's unit-stride index (the source moves
    with it, but not by one element), ``b`` the source's (the destination moves
    with it, but not by one element), and ``L`` a power of two of at least
    :data:`MIN_SIDE` lanes, at most ``w`` (fewer for elements wider than four
    bytes: a tile stays within ``w`` registers of 4-byte lanes), dividing both
    ranges.  None for anything else: constraints, an index with an offset."""
    if w < MIN_SIDE or blk.sub_blocks or blk.constraints or len(blk.stmts) != 2:
        return None
    ld, st = blk.stmts
    if not isinstance(ld, Load) or not isinstance(st, Store) or st.value != ld.into:
        return None
    if any(r.dir == "none" for r in blk.refs) or any(i.affine is not None for i in blk.idxs):
        return None
    src, dst = binds[ld.ref], binds[st.ref]
    if dst.mode != "plain" or blk.ref(st.ref).agg not in ("", "assign"):
        return None
    if src.dtype != dst.dtype or src.dtype == "bool":
        return None
    names = [i.name for i in blk.idxs]
    a_ = [n for n in names if dst.offset.coeff(n) == 1 and src.offset.coeff(n) not in (0, 1)]
    b_ = [n for n in names if src.offset.coeff(n) == 1 and dst.offset.coeff(n) not in (0, 1)]
    if len(a_) != 1 or len(b_) != 1:
        return None
    a, b = a_[0], b_[0]
    side = min(w, max(1, w * 4 // itemsize(src.dtype)))
    ranges = blk.idx(a).range, blk.idx(b).range
    while side >= MIN_SIDE and any(r % side for r in ranges):
        side //= 2
    if side < MIN_SIDE:
        return None
    return ld, st, a, b, side


def transpose_rows(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The ``L`` vectors of ``L`` lanes ``rows`` transposed (``out[j][i] ==
    rows[i][j]``), ``L`` a power of two: ``log2 L`` stages of two-source shuffles.
    The stage of half-size ``h`` swaps the off-diagonal ``h x h`` blocks of every
    ``2h x 2h`` block (rows ``i`` and ``i + h`` exchange their halves), so after
    the stages of ``L/2, ..., 1`` every block is transposed in place."""
    side = len(rows)
    i32 = ir.IntType(32)
    mask_t = ir.VectorType(i32, side)
    out = list(rows)
    h = side // 2
    while h >= 1:
        low = ir.Constant(mask_t, [p if not p & h else side + p - h for p in range(side)])
        high = ir.Constant(mask_t, [p + h if not p & h else side + p for p in range(side)])
        nxt = list(out)
        for i in range(side):
            if i & h:
                continue
            x, y = out[i], out[i + h]
            nxt[i] = b.shuffle_vector(x, y, low)
            nxt[i + h] = b.shuffle_vector(x, y, high)
        out = nxt
        h //= 2
    return out


def emit_transpose(
    g: KernelEmitter,
    blk: Block,
    env: dict[str, ir.Value],
    binds: dict[str, Bind],
    plan: tuple[Load, Store, str, str, int],
    top: bool,
) -> None:
    """Emit the transposing copy ``blk`` (see :func:`transpose_plan`): loops over its
    other indices, then over tiles of ``a`` and ``b`` in steps of ``L`` (the thread
    split's chunks, when it splits ``a`` or ``b``, in whole tiles), each tile
    loaded, transposed and stored."""
    ld, st, a, bidx, side = plan
    src, dst = binds[ld.ref], binds[st.ref]
    b = g.b
    par = g.par if top else None
    names = [i.name for i in blk.idxs]
    outer = [n for n in names if n not in (a, bidx)]
    tiles = [n for n in names if n in (a, bidx)]
    if par is not None and par in tiles:
        tiles.remove(par)
        tiles.insert(0, par)
        g.par_grain = side  # thread chunks of whole tiles
    elif par is not None and par in outer:
        outer.remove(par)
        outer.insert(0, par)

    def tile(env2: dict[str, ir.Value]) -> None:
        rows = []
        for i in range(side):
            at = dict(env2)
            at[a] = b.add(env2[a], ir.Constant(I64, i))
            rows.append(g.vload(src, at, side, bidx))
        for j, col in enumerate(transpose_rows(b, rows)):
            at = dict(env2)
            at[bidx] = b.add(env2[bidx], ir.Constant(I64, j))
            g.vstore(dst, at, col, side)

    bounds = {n: g.bound_args[n] for n in tiles if top and n in g.bound_args}

    def over_tiles(env2: dict[str, ir.Value], lanes: int | None) -> None:
        def rec(k: int, env3: dict[str, ir.Value]) -> None:
            if k == len(tiles):
                tile(env3)
                return
            name = tiles[k]
            lo: ir.Value = ir.Constant(I64, 0)
            hi: ir.Value = bounds.get(name, ir.Constant(I64, blk.idx(name).range))
            if name == par:
                lo = _smax(b, lo, g.start)
                hi = _smin(b, hi, g.end)

            def inner(v: ir.Value) -> None:
                rec(k + 1, {**env3, name: v})

            g.loop(name, lo, hi, inner, step=side)

        rec(0, env2)

    if not bounds:
        g.loops(blk, outer, env, over_tiles, top)
        return
    # A range passed at run time (a body linked for another length) may not be a
    # multiple of the side: then the copy runs element by element.
    whole = None
    for v in bounds.values():
        ok = b.icmp_signed("==", b.srem(v, ir.Constant(I64, side)), ir.Constant(I64, 0))
        whole = ok if whole is None else b.and_(whole, ok)
    order = [n for n in names if n != par]
    if par is not None:
        order.insert(0, par)

    def element(env2: dict[str, ir.Value], lanes: int | None) -> None:
        g.store(dst, env2, g.load(src, env2))

    with b.if_else(whole) as (tiled, scalar):
        with tiled:
            g.loops(blk, outer, env, over_tiles, top)
        with scalar:
            g.loops(blk, order, env, element, top)
