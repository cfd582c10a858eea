"""``epilogue``: run a following elementwise kernel on each finished register tile.

After ``unroll``, a contraction ``T = A x B`` is a ``#tiled`` root kernel whose
innermost level is a ``#register_tile`` leaf over one tile and the whole
reduction; a following ``Y = f(T, ...)`` (bias, activation) would then read
``T`` back from memory.  This pass moves ``f`` into the tiled kernel::

    block k0_T [...] #tiled (out T[...])              block k0_T [...] #tiled #fused
      block k0_T_tile #register_tile (out T)      ->    (none T_tile @L1, in Bias, out Y)
    block k1_Y #eltwise (in T[i, j], out Y[i, j])       block k0_T_tile (out T = T_tile)
                                                        block k1_Y_epilogue #epilogue
                                                          (in T = T_tile, out Y[...])

The register tile reduces into a tile-local ``none`` buffer (its own
aggregation scope, so its values are final when the tile block ends), and the
epilogue block, over the tile's output points (the vector index last: it runs
in SIMD lanes), reads it and stores ``f``'s results where ``Y``'s kernel
would; ``T`` leaves the program.

Applies to a run of consecutive root kernels tagged ``select`` (``unroll``'s
``#tiled``) whose only output view refines the same root temporary ``T``
(one kernel, or the two parts of a ragged split), followed by a kernel ``e``:

* ``e`` is a leaf ``#eltwise`` kernel (not a ``#fill``) of loads, stores,
  intrinsics, constants and ``index`` statements, without constraints or
  index offsets, over exactly ``T``'s shape;
* ``e`` reads ``T`` through one ``in`` view, at its own point (identity
  access), allocates nothing, and writes only through ``assign`` views;
* no other statement mentions ``T``, before or after: its values exist only
  per tile now, and an earlier writer (a ``#fill`` of the elements the kernel
  does not reach) would have nothing left to write;
* ``e``'s other views are not buffers the kernel already views (a residual
  ``relu(X @ W + X)``): the kernel would declare them twice;
* each kernel of the run has a ``#register_tile`` as the last statement of
  the kernel or of its last block, and every index of the blocks around that
  tile moves the output: the tile holds the whole reduction of its elements
  (a reduction blocked outside it, ``unroll``'s ``k_block``, would hand the
  epilogue partial sums).

Every kernel of the run takes the epilogue, each on the elements it
finishes, or none does.

**Blocked reads** (an LSTM step's gate math: four gates of one block of hidden
units, side by side in one block of the product; ``ops/recurrent.py``).  When
``e`` reads ``T`` through one or more ``in`` views at other points than its
own, it still runs on each tile if the run is one kernel without constraints
and, per dimension of ``T``, with the tile covering ``outer + [0, W)`` (one
tile index of coefficient 1, or none and ``W = 1``; the tile buffer is that
box): each index around the tile of range > 1 is matched with the index of
``e`` that every view of ``T`` reads with the same coefficient there and that
has the same range; every view's access, those indices replaced, less
``outer`` must lie in ``[0, W)`` for all values of ``e``'s other indices,
which become the epilogue's (each read by some view: ``e`` does not
broadcast ``T``).  Each point of ``e`` then runs once, in the tile
that holds every element of ``T`` it reads.  And no element ``e`` writes may
be one the kernel reads (box hulls per root buffer): later tiles would read
it changed.  ``e``'s other views are rewritten as above (the matched indices
become the kernel's).

Requires: verified IR.  Guarantees: the same program results, verified IR,
and the same object when nothing applies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar

from ..analysis.access import Access, accesses
from ..analysis.select import parse_selector
from ..ir.affine import Affine, box_interval
from ..ir.nodes import (
    Block,
    Constant,
    Index,
    Intrinsic,
    Load,
    LoadIndex,
    Program,
    Refinement,
    Special,
    Statement,
    Store,
    TensorShape,
)
from ._common import TOUCH_DIRS, fresh, inside_nests, touches
from .registry import check_selector, register


@register
@dataclass(frozen=True)
class Epilogue:
    """Fuse an elementwise successor into register-tiled kernels (options: the selector)."""

    select: str = "tiled"
    # Off: nothing is merged.  A per-kernel choice of ``stripeml tune``
    # (docs/tuning.md): the product's result then goes to memory and its
    # elementwise successor runs as a kernel of its own.
    enabled: bool = True
    name: ClassVar[str] = "epilogue"
    layer_local: ClassVar[bool] = True
    tunable: ClassVar[dict[str, tuple[object, ...]]] = {"enabled": (True, False)}

    def __post_init__(self) -> None:
        check_selector(self)

    def run(self, program: Program) -> Program:
        if not self.enabled:
            return program
        # The kernels of each ``nest`` too, the nest standing in for the root.
        return inside_nests(self._run_root(program), self._run_root)

    def _run_root(self, program: Program) -> Program:
        root = program.root
        stmts: list[Statement] = []
        dropped: set[str] = set()
        touching = _touching(root.stmts)
        i, n = 0, len(root.stmts)
        while i < n:
            t = self._result(root.stmts[i])
            if t is None:
                stmts.append(root.stmts[i])
                i += 1
                continue
            # The run of tiled kernels writing ``t``: a ragged split's parts.
            j = i + 1
            while j < n and self._result(root.stmts[j]) == t:
                j += 1
            parts = [p for p in root.stmts[i:j] if isinstance(p, Block)]  # all are: _result(t)
            fused: list[Block] | None = None
            if j < n:
                mine = root.stmts[i : j + 1]  # the run and the kernel after it

                def elsewhere(name: str, mine: tuple[Statement, ...] = mine) -> bool:
                    """Whether a root statement besides ``mine`` touches ``name``."""
                    return touching.get(name, 0) > sum(touches(s, name) for s in mine)

                single = len(parts) == 1
                attached = [_attach(p, root.stmts[j], root, elsewhere, single) for p in parts]
                # Every part or none: the result buffer disappears only if all are fused.
                if all(f is not None for f in attached):
                    fused = [f for f in attached if f is not None]
            if fused is not None:
                stmts.extend(fused)
                dropped.add(t)
                i = j + 1
            else:
                stmts.extend(parts)
                i = j
        if not dropped:
            return program
        refs = tuple(r for r in root.refs if r.into not in dropped)
        return Program(replace(root, refs=refs, stmts=tuple(stmts)))

    def _result(self, s: Statement) -> str | None:
        """The root buffer a selected kernel's only output view refines, else None."""
        if not isinstance(s, Block) or not parse_selector(self.select)(s.tags):
            return None
        outs = [r for r in s.refs if r.dir == "out"]
        return outs[0].from_ if len(outs) == 1 else None


def _touching(stmts: tuple[Statement, ...]) -> dict[str, int]:
    """Root buffer -> how many of ``stmts`` touch it (:func:`._common.touches`),
    counted once, so that whether statements besides a few touch a buffer is a
    subtraction, not a scan of the root per candidate kernel."""
    count: dict[str, int] = {}
    for s in stmts:
        if isinstance(s, Block):
            names = {r.from_ for r in s.refs if r.from_ and r.dir in TOUCH_DIRS}
        elif isinstance(s, Special):
            names = {*s.inputs, *s.outputs}
        else:
            continue
        for name in names:
            count[name] = count.get(name, 0) + 1
    return count


def _attach(
    tiled: Block,
    e: Statement,
    root: Block,
    elsewhere: Callable[[str], bool],
    single: bool = True,
) -> Block | None:
    """``tiled`` with the elementwise kernel ``e`` run on each finished register
    tile (see the module docstring); ``elsewhere(name)``: whether a root
    statement besides ``tiled``'s run and ``e`` touches root buffer ``name``;
    ``single``: whether ``tiled`` is the only kernel of its run (a blocked
    epilogue needs that)."""
    found = _epilogue_view(tiled, e, root, elsewhere)
    if found is None:
        return None
    t, tv_found = found
    assert isinstance(e, Block)
    (out,) = [r for r in tiled.refs if r.dir == "out"]
    troot = next(r for r in root.refs if r.into == t)
    last = tiled.stmts[-1]
    host = tiled if isinstance(last, Block) and "register_tile" in last.tags else last
    if not isinstance(host, Block) or not host.stmts:
        return None
    tile = host.stmts[-1]
    if not isinstance(tile, Block) or "register_tile" not in tile.tags:
        return None
    tviews = tv_found if isinstance(tv_found, tuple) else (tv_found,)
    if {r.into for r in e.refs if r not in tviews} & {
        r.into for b in (tiled, host) for r in b.refs
    }:
        return None  # one name, two views: the kernel's (a panel) and e's (the whole buffer)
    host_c = next(r for r in host.refs if r.into == out.into and r.dir == "out")
    tile_c = next(r for r in tile.refs if r.into == out.into)
    if host is tiled:
        outer_acc = out.access
    else:
        outer_acc = tuple(a + b for a, b in zip(out.access, host_c.access))
    global_acc = tuple(a + c for a, c in zip(outer_acc, tile_c.access))
    moved = {n for a in global_acc for n in a.names}
    if any(i.name not in moved for b in (tiled, host) for i in b.idxs):
        return None  # a reduction blocked around the tile: only partial sums per tile
    taken = {r.into for b in (tiled, host, tile, e) for r in b.refs}
    addr = {n for a in tile_c.access for n in a.names}
    if isinstance(tv_found, tuple):
        if not single or not _disjoint(tiled, e):
            return None
        plan = _blocked(tiled, host, tile, tile_c, outer_acc, host_c.shape.sizes, e, tviews)
        if plan is None:
            return None
        sub, epi_idxs, local = plan
    else:
        sub = {i.name: g for i, g in zip(e.idxs, global_acc)}
        # The vector index (the tile's first) goes last: it runs in SIMD lanes.
        epi_idxs = tuple(i for i in tile.idxs[1:] if i.name in addr) + (tile.idxs[0],)
        local = {tv_found.into: tile_c.access}
    buf = fresh(f"{t}_tile", taken)
    dense = TensorShape.dense(troot.shape.dtype, host_c.shape.sizes)
    ones = (1,) * len(dense.sizes)
    new_tile = replace(
        tile,
        refs=tuple(
            replace(r, from_=buf, shape=TensorShape(r.shape.dtype, ones, dense.strides))
            if r is tile_c
            else r
            for r in tile.refs
        ),
    )
    epi_refs = []
    outer_refs = []
    for r in e.refs:
        if r in tviews:
            epi_refs.append(
                Refinement(
                    "in",
                    r.into,
                    TensorShape(r.shape.dtype, ones, dense.strides),
                    buf,
                    local[r.into],
                )
            )
            continue
        parent = next(x for x in root.refs if x.into == r.from_)
        whole = TensorShape(r.shape.dtype, parent.shape.sizes, r.shape.strides)
        origin = tuple(Affine() for _ in parent.shape.sizes)
        outer_refs.append(replace(r, access=origin, shape=whole))
        epi_refs.append(replace(r, from_=r.into, access=tuple(a.substitute(sub) for a in r.access)))
    epilogue = Block(
        idxs=epi_idxs,
        refs=tuple(epi_refs),
        # ``index`` statements follow e's indices to the tile's (global) position.
        stmts=tuple(
            LoadIndex(st.into, st.expr.substitute(sub)) if isinstance(st, LoadIndex) else st
            for st in e.stmts
        ),
        tags=frozenset({"eltwise", "epilogue"}),
        name=f"{e.name}_epilogue",
        comment=e.comment,
    )
    host_refs = [r for r in host.refs if r is not host_c] + [
        Refinement("none", buf, dense, location="L1")
    ]
    comment = f"{tiled.comment}; {e.comment}"
    if host is tiled:
        host_refs += outer_refs
        return replace(
            tiled,
            refs=tuple(host_refs),
            stmts=(*tiled.stmts[:-1], new_tile, epilogue),
            tags=tiled.tags | {"fused"},
            comment=comment,
        )
    host_refs += [replace(r, from_=r.into) for r in outer_refs]
    new_host = replace(host, refs=tuple(host_refs), stmts=(*host.stmts[:-1], new_tile, epilogue))
    top_refs = [r for r in tiled.refs if r is not out] + outer_refs
    return replace(
        tiled,
        refs=tuple(top_refs),
        stmts=(*tiled.stmts[:-1], new_host),
        tags=tiled.tags | {"fused"},
        comment=comment,
    )


def _blocked(
    tiled: Block,
    host: Block,
    tile: Block,
    tile_c: Refinement,
    outer_acc: tuple[Affine, ...],
    sizes: tuple[int, ...],
    e: Block,
    tviews: tuple[Refinement, ...],
) -> tuple[dict[str, Affine], tuple[Index, ...], dict[str, tuple[Affine, ...]]] | None:
    """How ``e`` runs on each finished tile when it reads ``T`` through
    ``tviews`` at accesses other than its own point (see the module docstring,
    "blocked"): ``(e's indices -> their expressions in the kernel, the
    epilogue's indices, each view's access within the tile buffer)``, or None.

    Per dimension of ``T``, the tile covers ``outer + [0, W)``: ``outer``
    (``outer_acc``) in the indices around the tile, ``W`` the range of the
    tile's one index there (1 without one).  Each index ``o`` around the tile
    of range > 1 takes the index of ``e`` that every view of ``T`` reads with
    ``o``'s coefficient there and that has ``o``'s range; ``e``'s other indices
    become the epilogue's.  Then every view's access, less ``outer``, must be
    in ``[0, W)`` for all of them: each point of ``e`` runs once, in the tile
    holding every element of ``T`` it reads."""
    if tiled.constraints or host.constraints or tile.constraints:
        return None
    ranges = {i.name: i.range for b in (tiled, host) for i in b.idxs}
    tile_ranges = {i.name: i.range for i in tile.idxs}
    widths: list[int] = []
    for acc in tile_c.access:
        if acc.is_constant and acc.const == 0:
            widths.append(1)
        elif acc.const == 0 and len(acc.terms) == 1 and acc.terms[0][1] == 1:
            widths.append(tile_ranges[acc.terms[0][0]])
        else:
            return None
    if tuple(widths) != tuple(sizes):
        return None  # the tile buffer is dense over the host's view: the tile fills it
    # Indices of range 1 around the tile are 0.
    zero = {n: 0 for n, r in ranges.items() if r == 1}
    outer = tuple(a.substitute(zero) for a in outer_acc)
    e_ranges = {i.name: i.range for i in e.idxs}
    mapped: dict[str, str] = {}  # e index -> index around the tile
    for d, o_acc in enumerate(outer):
        for o, c in o_acc.terms:
            for v in tviews:
                hits = [n for n, k in v.access[d].terms if k == c and e_ranges.get(n) == ranges[o]]
                if len(hits) != 1:
                    return None
                if mapped.get(hits[0], o) != o or any(
                    p != hits[0] and q == o for p, q in mapped.items()
                ):
                    return None
                mapped[hits[0]] = o
    inner = [i for i in e.idxs if i.name not in mapped]
    read = {n for v in tviews for a in v.access for n in a.names}
    if any(i.name not in read for i in inner):
        return None  # e broadcasts T along an index: not a tile's work
    taken = {i.name for b in (tiled, host, tile) for i in b.idxs} | set(mapped.values())
    names: dict[str, str] = {}
    for i in inner:
        names[i.name] = fresh(i.name, taken | set(names.values()))
    sub = {n: Affine.index(o) for n, o in mapped.items()}
    sub.update({n: Affine.index(m) for n, m in names.items()})
    inner_ranges = {names[i.name]: i.range for i in inner}
    local: dict[str, tuple[Affine, ...]] = {}
    for v in tviews:
        rems = []
        for d, a in enumerate(v.access):
            rem = a.substitute(sub) - outer[d]
            if any(n not in inner_ranges for n in rem.names):
                return None
            lo, hi = box_interval(rem, inner_ranges)
            if lo < 0 or hi >= widths[d]:
                return None
            rems.append(rem)
        local[v.into] = tuple(rems)
    idxs = tuple(Index(names[i.name], i.range) for i in inner)
    return sub, idxs, local


def _disjoint(k: Block, e: Block) -> bool:
    """Whether no element ``e`` writes is one the kernel ``k`` reads (box hulls of
    their accesses, per root buffer): run on each tile, ``e`` writes while
    later tiles still read."""
    reads: dict[str, list[list[tuple[int, int]]]] = {}
    for acc in accesses(k):
        if not acc.write:
            reads.setdefault(acc.buffer, []).append(_box(acc))
    for acc in accesses(e):
        if acc.write and acc.buffer in reads:
            w = _box(acc)
            for r in reads[acc.buffer]:
                if all(a[0] <= b[1] and b[0] <= a[1] for a, b in zip(w, r)):
                    return False
    return True


def _box(acc: Access) -> list[tuple[int, int]]:
    """Per dimension, the interval of elements ``acc`` touches over its domain."""
    ranges: dict[str, int] = {}
    for b in acc.path:
        for i in b.idxs:
            ranges[i.name] = max(ranges.get(i.name, 1), i.range)
    out = []
    for expr, size in zip(acc.exprs, acc.sizes):
        lo, hi = box_interval(expr, {n: ranges.get(n, 1) for n in expr.names})
        out.append((lo, hi + size - 1))
    return out


def _epilogue_view(
    k: Block, e: Statement, root: Block, elsewhere: Callable[[str], bool]
) -> tuple[str, Refinement | tuple[Refinement, ...]] | None:
    """(the kernel's result ``T``, ``e``'s view of it) when the elementwise kernel
    ``e`` can run as an epilogue of ``k`` (see the module docstring); ``e``'s
    views of ``T`` as a tuple when they are not the one identity view (then
    :func:`_blocked` decides)."""
    if not isinstance(e, Block) or "eltwise" not in e.tags or "fill" in e.tags:
        return None
    if e.sub_blocks or e.constraints or any(i.affine is not None for i in e.idxs):
        return None
    if any(not isinstance(st, (Load, Store, Intrinsic, Constant, LoadIndex)) for st in e.stmts):
        return None
    outs = [r for r in k.refs if r.dir == "out"]
    if len(outs) != 1:
        return None
    t = outs[0].from_
    troot = next((r for r in root.refs if r.into == t), None)
    if troot is None or troot.dir != "none" or elsewhere(t):
        return None
    tviews = [r for r in e.refs if r.from_ == t]
    if not tviews or any(r.dir != "in" for r in tviews):
        return None
    if any(r.dir == "none" or (r.dir in ("out", "inout") and r.agg != "assign") for r in e.refs):
        return None
    ident = tuple(Affine.index(i.name) for i in e.idxs)
    if (
        len(tviews) == 1
        and tviews[0].access == ident
        and tuple(i.range for i in e.idxs) == troot.shape.sizes
    ):
        return t, tviews[0]
    return t, tuple(tviews)  # several views, or another access: see _blocked
