"""The ``nest`` pass's panel layouts: inputs every row block re-reads, laid out once.

See :func:`laid_out` and ``docs/passes.md`` section 18.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..ir.affine import Affine, box_interval
from ..ir.nodes import Block, Index, Load, Refinement, Store, TensorShape
from ._common import fresh, single_index
from ._const_panels import loop_order

if TYPE_CHECKING:
    from ._nest_blocks import Plan

# Per dimension of a buffer, (first element, count): the part a copy takes.
Window = tuple[tuple[int, int], ...]


def laid_out(
    root: Block, ks: list[Block], plan: Plan, taken: set[str], panel: int
) -> tuple[list[Block], list[Block], list[Refinement]]:
    """The chain reading its re-read panel inputs from copies laid out once, at the
    root, in dense panels of ``panel`` points of the product's vector index.

    An input of a product that every row block reads whole (it moves with no
    blocked row index) and that moves with the output's unit-stride index ``v``
    through one dimension ``d`` (the keys of ``Q @ K^T`` across it, the values of
    ``P @ V`` along it) would be packed again in every block, or read in place
    with a long row stride.  The copy ``L[d_b, ..., d_c]`` (``d = panel * d_b +
    d_c``, the other dimensions between) makes each panel one dense run, and the
    product's ``v`` is split the same way: ``unroll`` then reads the panels in
    place, as it does a constant weight laid out in panels."""
    bufs = {r.into: r for r in root.refs}
    blocked = {n for names in plan.kidx for n, t in zip(names, plan.tile) if t > 1}
    copies: list[Block] = []
    temps: dict[tuple[str, int, Window | None], Refinement] = {}
    orders: dict[tuple[str, int, Window | None], tuple[int, ...]] = {}
    names = {r.into for r in root.refs}
    out: list[Block] = []
    for k, rows in zip(ks, plan.kidx):
        outs = [r for r in k.refs if r.dir == "out"]
        v = _unit_output_index(outs[0]) if len(outs) == 1 and "contraction" in k.tags else None
        rng = {x.name: x.range for x in k.idxs}
        if v is None or v in rows or rng[v] % panel:
            out.append(k)
            continue
        single = rng[v] // panel < 2  # one panel: only a constant read across v is copied
        laid = []
        for r in k.refs:
            d = _moves_once(r, v, rng) if r.dir == "in" else None
            if (
                d is None
                or r.from_ in plan.inter
                or r.from_ not in bufs
                or blocked & access_names(r)
            ):
                continue
            src = bufs[r.from_]
            across = src.const and d != len(r.access) - 1
            if single and not across:
                continue
            # the part of the other dimensions the product reads (GPT-2's keys: a
            # third of the fused q/k/v projection's columns); all of a constant
            window = None if across else _window(r, d, rng, src.shape.sizes)
            key = (r.from_, d, window)
            if key not in temps:
                sizes = src.shape.sizes if window is None else _sizes(window)
                # a constant read across v (a convolution's weights as the file
                # stores them): the other dimensions in the order the loops read
                # them, as _const_panels lays them out
                others = (
                    list(loop_order(r, d, k))
                    if across
                    else [x for x in range(len(sizes)) if x != d]
                )
                dims = (sizes[d] // panel, *(sizes[x] for x in others), panel)
                into = fresh(f"{r.from_}_panels", names)
                names.add(into)
                temps[key] = Refinement("none", into, TensorShape.dense(src.shape.dtype, dims))
                orders[key] = tuple(others)
                name = fresh(f"{k.name}_{r.from_}_panels", taken)
                taken.add(name)
                copies.append(_panel_copy(src, temps[key], d, panel, name, orders[key], window))
            laid.append((r, d, temps[key], orders[key], window))
        if not laid:
            out.append(k)
            continue
        vb, vc = fresh(f"{v}_b", set(rng)), fresh(f"{v}_c", set(rng))
        split = {v: Affine.index(vb, panel) + Affine.index(vc)}
        refs = []
        for r in k.refs:
            hit = next((x for x in laid if x[0] is r), None)
            if hit is None:
                refs.append(replace(r, access=tuple(a.substitute(split) for a in r.access)))
                continue
            _, d, t, order, window = hit
            lows = (0,) * len(r.access) if window is None else tuple(lo for lo, _ in window)
            access = (Affine.index(vb), *(r.access[x] - lows[x] for x in order), Affine.index(vc))
            one = TensorShape(r.shape.dtype, (1,) * len(access), t.shape.strides)
            refs.append(replace(r, from_=t.into, access=access, shape=one))
        idxs: list[Index] = []
        for x in k.idxs:
            idxs.extend([Index(vb, x.range // panel), Index(vc, panel)] if x.name == v else [x])
        out.append(replace(k, idxs=tuple(idxs), refs=tuple(refs)))
    return out, copies, list(temps.values())


def access_names(r: Refinement) -> set[str]:
    """The index names in the view's access."""
    return {n for a in r.access for n in a.names}


def _unit_output_index(out: Refinement) -> str | None:
    """The index that moves ``out`` by one element (the product's vector index)."""
    for n in sorted(access_names(out)):
        if sum(a.coeff(n) * st for a, st in zip(out.access, out.shape.strides)) == 1:
            return n
    return None


def _moves_once(r: Refinement, v: str, ranges: dict[str, int]) -> int | None:
    """The one dimension through which ``r`` moves with ``v`` (exactly ``v`` there;
    an index over one point, a batch of 1 merged into the rows as ``512 * b0 +
    j``, reads as 0)."""
    dims = [d for d, a in enumerate(r.access) if a.coeff(v)]
    if len(dims) != 1:
        return None
    at = r.access[dims[0]]
    at = at.substitute({n: 0 for n in at.names if n != v and ranges.get(n) == 1})
    return dims[0] if single_index(at) == v else None


def _window(r: Refinement, d: int, ranges: dict[str, int], sizes: tuple[int, ...]) -> Window | None:
    """Per dimension, ``(first, count)`` of the elements ``r`` reads over the
    kernel's ranges (dimension ``d`` whole); ``None`` when that is every element."""
    window = []
    for x, (a, size) in enumerate(zip(r.access, sizes)):
        lo, hi = (0, size - 1) if x == d else box_interval(a, ranges)
        if lo < 0 or hi >= size:
            return None
        window.append((lo, hi - lo + 1))
    return None if all(w == (0, n) for w, n in zip(window, sizes)) else tuple(window)


def _sizes(window: Window) -> tuple[int, ...]:
    return tuple(count for _, count in window)


def _panel_copy(
    src: Refinement,
    dst: Refinement,
    d: int,
    panel: int,
    name: str,
    order: tuple[int, ...],
    window: Window | None = None,
) -> Block:
    """Root kernel: ``dst[i_d // panel, other i... (in ``order``), i_d % panel] =
    src[i]``, walking ``src`` in its own order (only ``window``'s part of it:
    ``src[first + i]``)."""
    rank = src.shape.rank
    sizes = src.shape.sizes if window is None else _sizes(window)
    idx = [Index(f"i{x}", n) for x, n in enumerate(sizes) if x != d]
    idx += [Index("p_b", sizes[d] // panel), Index("p_c", panel)]
    at = [Affine.index(f"i{x}") + (0 if window is None else window[x][0]) for x in range(rank)]
    at[d] = Affine.index("p_b", panel) + Affine.index("p_c")
    to = (
        Affine.index("p_b"),
        *(Affine.index(f"i{x}") for x in order),
        Affine.index("p_c"),
    )
    return Block(
        idxs=tuple(idx),
        refs=(
            Refinement(
                "in", src.into, TensorShape(src.shape.dtype, (1,) * rank, src.shape.strides),
                src.into, tuple(at),
            ),
            Refinement(
                "out", dst.into, TensorShape(dst.shape.dtype, (1,) * (rank + 1), dst.shape.strides),
                dst.into, to, "assign",
            ),
        ),
        stmts=(Load("$x", src.into), Store(dst.into, "$x")),
        tags=frozenset({"kernel", "eltwise", "copy"}),
        name=name,
        comment=f"{dst.into} = {src.into} in panels of {panel} along dimension {d} (nest)",
    )  # fmt: skip
