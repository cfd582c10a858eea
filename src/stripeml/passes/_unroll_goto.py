"""Cache-blocked GEMM for ``unroll`` (``gemm_kc``): GotoBLAS-style packing.

A plain GEMM kernel (indices: rows ``u``, vector ``v``, one reduction ``k``;
``add`` aggregation; every input read along exactly one of ``u``/``v``)
becomes, per block of ``mc`` rows (the kernel's only index, so threads take
whole row blocks)::

    block [u_b: M/mc] (... none acc (mc, N))        # partial sums of the row block
      block "k-block j" (none A_pack (mc/rows, kc_j, rows))   # j = 0 .. KB-1, in order
        copy A rows of the block, k in [j*kc, j*kc + kc_j) -> A_pack
        block [v_o: N/vt] (none B_pack (kc_j, vt))
          copy the vt-column panel of B, same k range -> B_pack
          block [u_o: mc/rows] #tile
            block [v_r: vt, u_r: rows, k: kc_j] #register_tile  (reads A_pack, B_pack)

The k-blocks are consecutive statements, so their order is the program's: the
first one's tiles reduce into a tile-local buffer copied into ``acc``
(``assign``), the middle ones accumulate into ``acc`` (``inout``: the prior
value takes part), and the last one's tiles reduce into a tile-local buffer
that a ``finish`` block adds to ``acc`` and stores to the result, or runs a
following elementwise kernel on (the epilogue, only after the last k-block).
The last k-block is shorter when ``kc`` does not divide K; no constraints.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir.affine import Affine
from ..ir.nodes import (
    Block,
    Index,
    Intrinsic,
    Load,
    Refinement,
    Statement,
    Store,
    TensorShape,
)
from ._common import fresh


def applicable(k: Block, u: str, v: str, red: list[str], kc: int, mc: int, vt: int) -> bool:
    """Whether ``k`` is a plain GEMM the blocked form handles (rows ``u`` >= ``mc``)."""
    ranges = {i.name: i.range for i in k.idxs}
    if kc <= 0 or mc <= 0 or len(ranges) != 3 or len(red) != 1 or ranges[red[0]] <= kc:
        return False
    if k.constraints or ranges[v] % vt or ranges[u] < mc:
        return False
    outs = [r for r in k.refs if r.dir == "out"]
    if len(outs) != 1 or outs[0].agg != "add":
        return False
    if any(red[0] in a.names for a in outs[0].access):
        return False
    for r in k.refs:
        if r.dir != "in":
            continue
        names = {n for a in r.access for n in a.names}
        if (u in names) == (v in names):
            return False
    return True


def _ones(shape: TensorShape) -> TensorShape:
    """One element of ``shape`` (same strides): a leaf's view."""
    return TensorShape(shape.dtype, (1,) * len(shape.sizes), shape.strides)


def _whole(r: Refinement, sizes: tuple[int, ...], from_: str) -> Refinement:
    """``r`` as a view of its whole parent (origin 0), indexed in full below."""
    shape = TensorShape(r.shape.dtype, tuple(sizes), r.shape.strides)
    return replace(r, from_=from_, access=tuple(Affine() for _ in sizes), shape=shape)


def build(
    root: Block,
    k: Block,
    u: str,
    v: str,
    kx: str,
    *,
    rows: int,
    vt: int,
    kc: int,
    mc: int,
    epilogue: tuple[Block, Refinement] | None = None,
    prepack: bool = True,
) -> tuple[list[Block], Block, list[Refinement]]:
    """The blocked form of ``k`` (rows: a multiple of ``mc``); ``epilogue``: the
    elementwise kernel and its view of the contraction's result, run per tile
    after the last k-block instead of storing the result.  ``prepack``: copy each
    input read along ``v`` once, in a kernel of its own before, into a root
    temporary of (N/vt, K, vt) panels (else per k-block, row block and panel).
    Returns (the packing kernels, the blocked kernel, their new root temporaries)."""
    ranges = {i.name: i.range for i in k.idxs}
    big_m, big_n, big_k = ranges[u], ranges[v], ranges[kx]
    root_sizes = {x.into: x.shape.sizes for x in root.refs}
    out = next(r for r in k.refs if r.dir == "out")
    dtype = out.shape.dtype
    ins_a = [r for r in k.refs if r.dir == "in" and any(u in a.names for a in r.access)]
    ins_b = [r for r in k.refs if r.dir == "in" and r not in ins_a]
    taken = {r.into for r in k.refs} | {r.into for r in root.refs}
    if epilogue is not None:
        taken |= {r.into for r in epilogue[0].refs}
    names = {i.name for i in k.idxs}
    if epilogue is not None:
        names |= {i.name for i in epilogue[0].idxs}

    def new_idx(base: str) -> str:
        n = fresh(base, names)
        names.add(n)
        return n

    def new_ref(base: str) -> str:
        n = fresh(base, taken)
        taken.add(n)
        return n

    ub, vo, uo, ur, vr = (new_idx(f"{u}_b"), new_idx(f"{v}_o"), new_idx(f"{u}_o"),
                          new_idx(f"{u}_r"), new_idx(f"{v}_r"))  # fmt: skip
    pt, pr, pk, pc = new_idx("p_t"), new_idx("p_r"), new_idx("p_k"), new_idx("p_c")
    acc = new_ref(f"{out.into}_acc")
    tile_buf = new_ref(f"{out.into}_tile")
    packs_a = {r.into: new_ref(f"{r.into}_pack") for r in ins_a}
    packs_b = {r.into: new_ref(f"{r.into}_pack") for r in ins_b}
    root_names = {x.into for x in root.refs}
    panels = {}
    for r in ins_b if prepack else []:
        panels[r.into] = fresh(f"{k.name}_{r.into}_panels", root_names)
        root_names.add(panels[r.into])
        taken.add(panels[r.into])
    panels_shape = TensorShape.dense(dtype, (big_n // vt, big_k, vt))
    acc_shape = TensorShape.dense(dtype, (mc, big_n))
    tile_shape = TensorShape.dense(dtype, (rows, vt))
    row_g = Affine.index(ub, mc) + Affine.index(uo, rows) + Affine.index(ur)
    col_g = Affine.index(vo, vt) + Affine.index(vr)
    row_l = Affine.index(uo, rows) + Affine.index(ur)
    tile_at = (Affine.index(ur), Affine.index(vr))
    acc_at = (row_l, col_g)

    # Result refs carried down to the finish blocks: the contraction's output, or
    # the epilogue's views other than the result's (which becomes tile + acc).
    if epilogue is None:
        carried = [replace(out, agg="assign")]
    else:
        carried = [r for r in epilogue[0].refs if r is not epilogue[1]]
    top_carried = [_whole(r, root_sizes[r.from_], r.from_) for r in carried]
    down_carried = [_whole(r, root_sizes[r.from_], r.into) for r in carried]

    def finish(kc_j: int) -> Block:
        """Per tile after the last k-block: tile + acc, stored or run through the epilogue."""
        glob = {u: row_g, v: col_g}
        t_ref = Refinement("in", tile_buf, _ones(tile_shape), tile_buf,
                           tile_at)  # fmt: skip
        a_ref = Refinement("in", acc, _ones(acc_shape), acc, acc_at)
        if epilogue is None:
            res = replace(out, from_=out.into, agg="assign",
                          access=tuple(a.substitute(glob) for a in out.access))  # fmt: skip
            stmts: tuple[Statement, ...] = (
                Load("$tile", tile_buf),
                Load("$acc", acc),
                Intrinsic("add", ("$tile", "$acc"), "$sum", dtype),
                Store(out.into, "$sum"),
            )
            refs = (t_ref, a_ref, res)
            tags = frozenset({"eltwise"})
            name, comment = f"{k.name}_finish", ""
        else:
            e, tv = epilogue
            sub = {i.name: a.substitute(glob) for i, a in zip(e.idxs, out.access)}
            scal = {st.into for st in e.stmts if hasattr(st, "into")}
            s_t, s_a = fresh("$tile", scal), fresh("$acc", scal)
            body: list[Statement] = []
            for st in e.stmts:
                if isinstance(st, Load) and st.ref == tv.into:
                    body += [Load(s_t, tile_buf), Load(s_a, acc),
                             Intrinsic("add", (s_t, s_a), st.into, dtype)]  # fmt: skip
                elif hasattr(st, "expr"):
                    body.append(replace(st, expr=st.expr.substitute(sub)))  # type: ignore[arg-type]
                else:
                    body.append(st)
            stmts = tuple(body)
            refs = (t_ref, a_ref) + tuple(
                replace(r, from_=r.into, access=tuple(a.substitute(sub) for a in r.access))
                for r in carried
            )
            tags = frozenset({"eltwise", "epilogue"})
            name, comment = f"{e.name}_epilogue", e.comment
        return Block(idxs=(Index(ur, rows), Index(vr, vt)), refs=refs, stmts=stmts,
                     tags=tags, name=name, comment=comment)  # fmt: skip

    if prepack:
        b_views = [Refinement("in", panels[r.into], panels_shape, panels[r.into],
                              (Affine(), Affine(), Affine())) for r in ins_b]  # fmt: skip
    else:
        b_views = [_whole(r, root_sizes[r.from_], r.into) for r in ins_b]
    kb = -(-big_k // kc)
    steps: list[Block] = []
    for j in range(kb):
        kc_j = min(kc, big_k - j * kc)
        first, last = j == 0, j == kb - 1
        # acc as this k-block sees it.
        if first:
            acc_dir, acc_agg = "out", "assign"
        elif last:
            acc_dir, acc_agg = "in", ""
        else:
            acc_dir, acc_agg = "inout", "add"
        acc_whole = Refinement(acc_dir, acc, acc_shape, acc, (Affine(), Affine()), acc_agg)
        kglob = Affine.index(pk) + j * kc
        # Copies into the packed buffers.
        copies_a = []
        pa_shape = TensorShape.dense(dtype, (mc // rows, rows, kc_j))
        for r in ins_a:
            sub = {u: Affine.index(ub, mc) + Affine.index(pt, rows) + Affine.index(pr), kx: kglob}
            copies_a.append(Block(
                idxs=(Index(pt, mc // rows), Index(pr, rows), Index(pk, kc_j)),
                refs=(
                    replace(r, from_=r.into, shape=_ones(r.shape),
                            access=tuple(a.substitute(sub) for a in r.access)),
                    Refinement("out", packs_a[r.into], _ones(pa_shape),
                               packs_a[r.into], (Affine.index(pt), Affine.index(pr),
                                                 Affine.index(pk)), "assign"),
                ),
                stmts=(Load("$x", r.into), Store(packs_a[r.into], "$x")),
                tags=frozenset({"copy", "cache_in"}),
                name=f"{k.name}_pack_{r.into}",
            ))  # fmt: skip
        copies_b = []
        pb_shape = TensorShape.dense(dtype, (kc_j, vt))
        for r in ins_b if not prepack else []:
            sub = {kx: kglob, v: Affine.index(vo, vt) + Affine.index(pc)}
            copies_b.append(Block(
                idxs=(Index(pk, kc_j), Index(pc, vt)),
                refs=(
                    replace(r, from_=r.into, shape=_ones(r.shape),
                            access=tuple(a.substitute(sub) for a in r.access)),
                    Refinement("out", packs_b[r.into], _ones(pb_shape),
                               packs_b[r.into], (Affine.index(pk), Affine.index(pc)), "assign"),
                ),
                stmts=(Load("$x", r.into), Store(packs_b[r.into], "$x")),
                tags=frozenset({"copy", "cache_in"}),
                name=f"{k.name}_pack_{r.into}",
            ))  # fmt: skip
        # The register tile.
        leaf_refs = []
        for r in ins_a:
            leaf_refs.append(
                replace(
                    r,
                    from_=r.into,
                    shape=_ones(pa_shape),
                    access=(Affine(), Affine.index(ur), Affine.index(kx)),
                )
            )
        for r in ins_b:
            if prepack:
                leaf_refs.append(
                    replace(
                        r,
                        from_=r.into,
                        shape=_ones(panels_shape),
                        access=(Affine(), Affine.index(kx), Affine.index(vr)),
                    )
                )
            else:
                leaf_refs.append(
                    replace(
                        r,
                        from_=r.into,
                        shape=_ones(pb_shape),
                        access=(Affine.index(kx), Affine.index(vr)),
                    )
                )
        if first or last:
            leaf_refs.append(Refinement("out", out.into, _ones(tile_shape),
                                        tile_buf, tile_at, "add"))  # fmt: skip
        else:
            leaf_refs.append(Refinement("inout", out.into, _ones(acc_shape),
                                        acc, acc_at, "add"))  # fmt: skip
        leaf = Block(
            idxs=(Index(vr, vt), Index(ur, rows), Index(kx, kc_j)),
            refs=tuple(leaf_refs),
            stmts=k.stmts,
            tags=frozenset((k.tags - {"kernel"}) | {"register_tile"}),
            name=f"{k.name}_tile",
        )
        tile_stmts: list[Statement] = [leaf]
        tile_refs = [
            replace(r, from_=packs_a[r.into], shape=replace(pa_shape, sizes=(1, rows, kc_j)),
                    access=(Affine.index(uo), Affine(), Affine()))
            for r in ins_a
        ] + [
            replace(r, from_=panels[r.into],
                    shape=replace(panels_shape, sizes=(1, kc_j, vt)),
                    access=(Affine.index(vo), Affine.constant(j * kc), Affine()))
            if prepack else
            replace(r, from_=packs_b[r.into], shape=pb_shape, access=(Affine(), Affine()))
            for r in ins_b
        ]  # fmt: skip
        tile_refs.append(replace(acc_whole, from_=acc))
        if first:
            tile_refs.append(Refinement("none", tile_buf, tile_shape, location="L1"))
            tile_stmts.append(Block(
                idxs=(Index(ur, rows), Index(vr, vt)),
                refs=(
                    Refinement("in", tile_buf, _ones(tile_shape), tile_buf,
                               tile_at),
                    Refinement("out", acc, _ones(acc_shape), acc, acc_at,
                               "assign"),
                ),
                stmts=(Load("$x", tile_buf), Store(acc, "$x")),
                tags=frozenset({"copy"}),
                name=f"{k.name}_keep",
            ))  # fmt: skip
        if last:
            tile_refs.append(Refinement("none", tile_buf, tile_shape, location="L1"))
            tile_refs += down_carried
            tile_stmts.append(finish(kc_j))
        tile = Block(idxs=(Index(uo, mc // rows),), refs=tuple(tile_refs),
                     stmts=tuple(tile_stmts), tags=frozenset({"tile"}),
                     name=f"{k.name}_rows")  # fmt: skip
        panel_refs = (
            [Refinement("in", packs_a[r.into], pa_shape, packs_a[r.into],
                        (Affine(), Affine(), Affine())) for r in ins_a]
            + b_views
            + ([] if prepack else
               [Refinement("none", packs_b[r.into], pb_shape, location="L1") for r in ins_b])
            + [acc_whole]
            + (down_carried if last else [])
        )  # fmt: skip
        panel = Block(idxs=(Index(vo, big_n // vt),), refs=tuple(panel_refs),
                      stmts=(*copies_b, tile), tags=frozenset({"panels"}),
                      name=f"{k.name}_panels")  # fmt: skip
        step_refs = (
            [_whole(r, root_sizes[r.from_], r.into) for r in ins_a]
            + b_views
            + [Refinement("none", packs_a[r.into], pa_shape, location="L2") for r in ins_a]
            + [acc_whole]
            + (down_carried if last else [])
        )
        steps.append(Block(refs=tuple(step_refs), stmts=(*copies_a, panel),
                           tags=frozenset({"k_block"}), name=f"{k.name}_k{j}"))  # fmt: skip
    top_refs = (
        [_whole(r, root_sizes[r.from_], r.from_) for r in ins_a]
        + [
            Refinement(
                "in", panels[r.into], panels_shape, panels[r.into], (Affine(), Affine(), Affine())
            )
            for r in ins_b
            if prepack
        ]
        + [_whole(r, root_sizes[r.from_], r.from_) for r in ins_b if not prepack]
        + [Refinement("none", acc, acc_shape, location="L2")]
        + top_carried
    )
    tags = k.tags | {"tiled", "blocked"} | ({"fused"} if epilogue is not None else set())
    comment = k.comment if epilogue is None else f"{k.comment}; {epilogue[0].comment}"
    blocked = Block(idxs=(Index(ub, big_m // mc),), refs=tuple(top_refs), stmts=tuple(steps),
                    tags=frozenset(tags), name=k.name, comment=comment)  # fmt: skip
    packers, temps = [], []
    for r in ins_b if prepack else []:
        sub = {kx: Affine.index(pk), v: Affine.index(vo, vt) + Affine.index(pc)}
        name = panels[r.into]
        temps.append(Refinement("none", name, panels_shape))
        packers.append(Block(
            idxs=(Index(vo, big_n // vt), Index(pk, big_k), Index(pc, vt)),
            refs=(
                replace(r, access=tuple(a.substitute(sub) for a in r.access)),
                Refinement("out", name, _ones(panels_shape), name,
                           (Affine.index(vo), Affine.index(pk), Affine.index(pc)), "assign"),
            ),
            stmts=(Load("$x", r.into), Store(name, "$x")),
            tags=frozenset({"kernel", "copy", "cache_in", "panel_pack"}),
            name=f"{k.name}_pack_{r.into}",
            comment=f"{r.into} in panels of {vt} columns",
        ))  # fmt: skip
    return packers, blocked, temps
