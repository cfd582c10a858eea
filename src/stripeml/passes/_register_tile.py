"""The register-tiled nest ``unroll`` builds once it has chosen a tile shape.

:func:`register_tiles` rewrites one root kernel into three levels: the kernel
over panels of the vector index (with a dense copy of each strided panel that
fits ``pack_max_bytes`` and is read by at least ``pack_min_tiles`` register
tiles), a ``#tile`` block over the row tiles and the other
output indices, and a ``#register_tile`` leaf over one tile and the whole
reduction (or one block of it, with ``k_block``).  Which indices and how many
rows and vectors is the pass's choice (``unroll.py``); this module only builds
the nest, so the points, their aggregation scope and every access stay exactly
those of the kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..analysis.access import index_stride
from ..ir.affine import Affine, box_interval
from ..ir.dtypes import itemsize
from ..ir.nodes import Block, Index, Load, Refinement, Store, TensorShape
from ._common import fresh


def register_tiles(
    root: Block,
    k: Block,
    v: str,
    vt: int,
    u: str | None,
    red: list[str],
    u2: tuple[str, int] | None = None,
    *,
    tile_rows: int,
    pack_max_bytes: int,
    pack_min_tiles: int = 0,
    pack_min_stride: int = 0,
    row_blocks: int = 1,
    k_block: int = 0,
    flat: bool = False,
    batch: tuple[str, ...] = (),
) -> Block:
    """``k`` tiled: panels of ``vt`` along ``v``; tile rows along ``u`` (``tile_rows``
    of them, or ``tile_rows // r2`` when ``u2 = (name, r2)`` adds a second row
    index, for a 2-D tile of pixels); ``red``: the reduction indices.  Options as
    :class:`~stripeml.passes.unroll.Unroll`'s (``pack_max_bytes``,
    ``pack_min_tiles``, ``pack_min_stride``, ``row_blocks``, ``k_block``); ``flat``: two levels even with several panels (the panel index
    beside the tile indices, no packing); ``batch``: output indices that go on the
    panel level with the vector index's panels (chosen here: see the end)."""
    ranges = {i.name: i.range for i in k.idxs}
    taken = set(ranges)
    vo, vr = fresh(f"{v}_o", taken), fresh(f"{v}_r", taken)
    taken |= {vo, vr}
    rows = tile_rows // (u2[1] if u2 is not None else 1)
    us = None  # the tile rows: u = us.outer * rows + us.inner
    if u is not None:
        us = _Split(u, fresh(f"{u}_o", taken), fresh(f"{u}_r", taken))
        taken |= {us.outer, us.inner}
    w2 = ws = None  # the second row index: w2 = ws.outer * r2 + ws.inner
    r2 = 1
    if u2 is not None:
        w2, r2 = u2
        ws = _Split(w2, fresh(f"{w2}_o", taken), fresh(f"{w2}_r", taken))
        taken |= {ws.outer, ws.inner}
    nb = row_blocks
    ub = None  # blocks of mb rows each, outside the panels
    mb = 0
    if (
        u is not None
        and u2 is None
        and not flat
        and nb > 1
        and ranges[v] // vt > 1
        and ranges[u] % (nb * rows) == 0
        and _row_bytes(k, v, {**ranges, u: ranges[u] // nb})
        <= pack_max_bytes
        < _row_bytes(k, v, ranges)
    ):
        ub = fresh(f"{u}_b", taken)
        mb = ranges[u] // nb
    others = [n for n in ranges if n not in red and n not in (u, v, w2) and n not in batch]
    # Three levels: panels of the vector index; tiles of the row index and the
    # other output indices; one register tile with the whole reduction.
    lv0 = {v: Affine.index(vo, vt)} | {n: Affine.index(n) for n in batch}
    lv1 = {n: Affine.index(n) for n in others}
    lv2 = {v: Affine.index(vr)} | {n: Affine.index(n) for n in red}
    box1 = {n: ranges[n] for n in others}
    box2 = {vr: vt} | {n: ranges[n] for n in red}
    if us is not None:
        lv1[us.name] = Affine.index(us.outer, rows)
        lv2[us.name] = Affine.index(us.inner)
        box1[us.outer] = (mb or ranges[us.name]) // rows
        box2[us.inner] = rows
        if ub is not None:
            lv0[us.name] = Affine.index(ub, mb)
    if ws is not None:
        lv1[ws.name] = Affine.index(ws.outer, r2)
        lv2[ws.name] = Affine.index(ws.inner)
        box1[ws.outer] = ranges[ws.name] // r2
        box2[ws.inner] = r2
    # Block the innermost reduction index so a packed panel stays in L1.
    kb = red[-1] if red else None
    ks = None  # the reduction blocks: kb = ks.outer * k_block + kb
    if (
        kb is not None
        and k_block
        and ranges[kb] > k_block
        and ranges[kb] % k_block == 0
        and kb not in {n for c in k.constraints for n in c.expr.names}
    ):
        ks = _Split(kb, fresh(f"{kb}_o", taken | {ub or ""}), kb)
        lv0[kb] = Affine.index(ks.outer, k_block)
        box2[kb] = k_block
    zero0 = {n: Affine() for n in ranges if n not in lv0}
    zero1 = {n: Affine() for n in ranges if n not in lv1}
    zero2 = {n: Affine() for n in ranges if n not in lv2}
    root_sizes = {x.into: x.shape.sizes for x in root.refs}
    tiled = {v: Affine.index(vo, vt) + Affine.index(vr)}
    box0 = {vo: ranges[v] // vt} | {n: ranges[n] for n in batch}
    if us is not None:
        tiled[us.name] = Affine.index(us.outer, rows) + Affine.index(us.inner)
        if ub is not None:
            tiled[us.name] = tiled[us.name] + Affine.index(ub, mb)
            box0[ub] = nb
    if ws is not None:
        tiled[ws.name] = Affine.index(ws.outer, r2) + Affine.index(ws.inner)
    if ks is not None:
        tiled[ks.name] = Affine.index(ks.outer, k_block) + Affine.index(ks.inner)
        box0[ks.outer] = ranges[ks.name] // k_block
    refs0, refs1, refs2, copies = [], [], [], []
    packed_deps: set[str] = set()  # the indices a packed input depends on
    # Register tiles that read each panel: a packed copy costs a pass over the
    # panel, paid back only when enough tiles read it dense.
    reuse = math.prod(box1.values())
    # One panel only: the tile rows become the kernel's own (parallel) indices.
    merged = flat or (ranges[v] // vt == 1 and (u is not None or bool(others)))
    for r in k.refs:
        a0, a1, a2, s0, s1 = [], [], [], [], []
        for a in r.access:
            lin = a - a.const
            p1 = lin.substitute(zero1 | lv1)
            p2 = lin.substitute(zero2 | lv2)
            lo1, hi1 = box_interval(p1, box1)
            lo2, hi2 = box_interval(p2, box2)
            a0.append(a.const + lin.substitute(zero0 | lv0) + lo1 + lo2)
            a1.append(p1 - lo1)
            a2.append(p2 - lo2)
            s0.append(hi1 - lo1 + hi2 - lo2 + 1)
            s1.append(hi2 - lo2 + 1)
        parent = root_sizes[r.from_]
        if not all(_within(x, size, limit, box0) for x, size, limit in zip(a0, s0, parent)):
            # The box hull leaves the buffer (accesses kept in bounds by constraints,
            # as in padded convolutions): view the whole buffer, index it in full below.
            whole = TensorShape(r.shape.dtype, tuple(parent), r.shape.strides)
            origin = tuple(Affine() for _ in parent)
            refs0.append(replace(r, access=origin, shape=whole))
            refs1.append(replace(r, from_=r.into, access=origin, shape=whole))
            full = tuple(x.substitute(tiled) for x in r.access)
            refs2.append(replace(r, from_=r.into, access=full))
            continue
        refs0.append(replace(r, access=tuple(a0), shape=replace(r.shape, sizes=tuple(s0))))
        src, strides = r.into, r.shape.strides
        nbytes = itemsize(r.shape.dtype) * math.prod(s0)
        dense_view = TensorShape.dense(r.shape.dtype, tuple(s0)).strides == r.shape.strides
        across = index_stride(r, v) not in (0, 1)  # read across v: must be packed
        if (
            r.dir == "in"
            and not merged
            and (not dense_view or across)
            and any(a.coeff(v) for a in r.access)
            and (
                across
                or (
                    nbytes <= pack_max_bytes
                    and reuse >= pack_min_tiles
                    and _row_stride(r, s0) >= pack_min_stride
                )
            )
        ):
            buf = fresh(f"{r.into}_pack", {x.into for x in k.refs})
            dense = TensorShape.dense(r.shape.dtype, tuple(s0))
            if across:  # dense with v's dimension innermost
                dv = next(d for d, a in enumerate(r.access) if a.coeff(v))
                order = [d for d in range(len(s0)) if d != dv] + [dv]
                packed = [0] * len(s0)
                step = 1
                for d in reversed(order):
                    packed[d] = step
                    step *= s0[d]
                dense = TensorShape(r.shape.dtype, tuple(s0), tuple(packed))
            refs0.append(Refinement("none", buf, dense, location="L2"))
            copies.append(
                _copy_block(r.into, buf, r.shape, dense, tuple(s0), f"{k.name}_pack_{r.into}")
            )
            packed_deps |= {n for n in others if any(a.coeff(n) for a in r.access)}
            src, strides = buf, dense.strides
        shape1 = TensorShape(r.shape.dtype, tuple(s1), strides)
        refs1.append(replace(r, from_=src, access=tuple(a1), shape=shape1))
        one = TensorShape(r.shape.dtype, (1,) * len(s1), strides)
        refs2.append(replace(r, from_=r.into, access=tuple(a2), shape=one))
    # Constraints mention only reduction and untiled output indices: same names below.
    cons2 = k.constraints
    idx2 = (
        [Index(vr, vt)]
        + ([Index(ws.inner, r2)] if ws is not None else [])
        + ([Index(us.inner, rows)] if us is not None else [])
        + [Index(n, box2[n]) for n in red]
    )
    tile = Block(
        idxs=tuple(idx2),
        refs=tuple(refs2),
        stmts=k.stmts,
        constraints=cons2,
        tags=frozenset((k.tags - {"kernel"}) | {"register_tile"}),
        name=f"{k.name}_tile",
    )
    # Indices that select a panel of the inputs read along ``v`` (a blocked
    # weight layout's block index) go outermost, so a panel is read for all
    # the tiles that use it, one after another (and threads split panels).
    panel_ins = [r for r in k.refs if r.dir == "in" and index_stride(r, v) == 1]
    outer = [n for n in others if any(a.coeff(n) for r in panel_ins for a in r.access)]
    inner = [n for n in others if n not in outer]
    idx1 = (
        [k.idx(n) for n in outer]
        + [k.idx(n) for n in inner]
        + ([Index(ws.outer, box1[ws.outer])] if ws is not None else [])
        + ([Index(us.outer, box1[us.outer])] if us is not None else [])
    )
    top_k = (Index(ks.outer, ranges[ks.name] // k_block),) if ks is not None else ()
    if merged:
        # Views of the single panel and of one tile row at once: access a0 + a1.
        top_refs = []
        for r0, r1 in zip(refs0, refs1):
            acc = tuple(x + y for x, y in zip(r0.access, r1.access))
            top_refs.append(replace(r0, access=acc, shape=r1.shape))
        return Block(
            idxs=(Index(vo, ranges[v] // vt), *top_k, *idx1),
            refs=tuple(top_refs),
            stmts=(tile,),
            tags=frozenset(k.tags | {"tiled"}),
            name=k.name,
            comment=k.comment,
        )
    middle = Block(
        idxs=tuple(idx1),
        refs=tuple(refs1),
        stmts=(tile,),
        tags=frozenset({"tile"}),
        name=f"{k.name}_rows",
    )
    if packed_deps and not batch:
        # A packed input that depends on an index of the tile level (the head of
        # a batched product: the keys of attention's Q @ K^T) would be packed for
        # all of that index's points at once, a panel far larger than the one a
        # tile reads (12 heads' keys).  That index goes on the panel level
        # instead, so each copy is one head's panel, reused by every row tile.
        moved = tuple(n for n in others if n in packed_deps)
        return register_tiles(
            root, k, v, vt, u, red, u2, tile_rows=tile_rows, pack_max_bytes=pack_max_bytes,
            pack_min_tiles=pack_min_tiles, pack_min_stride=pack_min_stride,
            row_blocks=row_blocks, k_block=k_block, flat=flat, batch=moved,
        )  # fmt: skip
    top_b = (Index(ub, nb),) if ub is not None else ()
    return Block(
        idxs=(*top_b, *(k.idx(n) for n in batch), Index(vo, ranges[v] // vt), *top_k),
        refs=tuple(refs0),
        stmts=(*copies, middle),
        tags=frozenset(k.tags | {"tiled"}),
        name=k.name,
        comment=k.comment,
    )


@dataclass(frozen=True, slots=True)
class _Split:
    """Index ``name`` split into ``outer`` (the tiles) and ``inner`` (within a tile)."""

    name: str
    outer: str
    inner: str


def _row_stride(r: Refinement, sizes: list[int]) -> int:
    """Bytes between consecutive rows of the panel view ``r`` (its least stride
    above one over a dimension of more than one point; 0 without one)."""
    found = [
        st for st, n in zip(r.shape.strides, sizes) if n > 1 and st > 1
    ]  # fmt: skip
    return min(found) * itemsize(r.shape.dtype) if found else 0


def _row_bytes(k: Block, v: str, ranges: dict[str, int]) -> int:
    """Bytes of the box hulls of ``k``'s inputs not read along ``v`` (over ``ranges``)."""
    total = 0
    for r in k.refs:
        if r.dir != "in" or any(a.coeff(v) for a in r.access):
            continue
        n = itemsize(r.shape.dtype)
        for a in r.access:
            lo, hi = box_interval(a - a.const, ranges)
            n *= hi - lo + 1
        total += n
    return total


def _within(origin: Affine, size: int, limit: int, box: dict[str, int]) -> bool:
    lo, hi = box_interval(origin, box)
    return lo >= 0 and hi + size <= limit


def _copy_block(
    src: str, dst: str, shape: TensorShape, dense: TensorShape, sizes: tuple[int, ...], name: str
) -> Block:
    """Copy the whole view ``src`` into the dense buffer ``dst`` (a packed panel)."""
    idx = tuple(Index(f"p{d}", s) for d, s in enumerate(sizes))
    acc = tuple(Affine.index(i.name) for i in idx)
    one = (1,) * len(sizes)
    return Block(
        idxs=idx,
        refs=(
            Refinement("in", src, TensorShape(shape.dtype, one, shape.strides), src, acc),
            Refinement(
                "out", dst, TensorShape(dense.dtype, one, dense.strides), dst, acc, "assign"
            ),
        ),
        stmts=(Load("$x", src), Store(dst, "$x")),
        tags=frozenset({"copy", "cache_in"}),
        name=name,
    )
