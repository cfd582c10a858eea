"""The ``nest`` pass's row blocks: how many rows a block takes, and whether the
inputs it re-reads cost more than its intermediates save.

See ``passes/nest.py`` (the rules, **Blocks**) and ``docs/passes.md`` section 18.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..ir.affine import Affine, box_interval
from ..ir.dtypes import itemsize
from ..ir.nodes import Block, Refinement
from ._common import reads, single_index, writes

if TYPE_CHECKING:
    from .nest import Nest


@dataclass(frozen=True)
class Plan:
    rows: tuple[int, ...]  # per row variable: its range
    tile: tuple[int, ...]  # per row variable: rows per block
    kidx: tuple[tuple[str, ...], ...]  # per kernel: its index of each row variable
    inter: dict[str, tuple[int, ...]]  # intermediate -> its dimension of each row variable


def tiling(
    ks: list[Block],
    bufs: dict[str, Refinement],
    inter: list[str],
    dims: tuple[int, ...],
    first: str,
    kidx: list[tuple[str, ...]],
    bdims: dict[str, tuple[int, ...]],
    opt: Nest,
    memo: dict | None = None,
    flows: tuple[Sequence[set[str]], Sequence[set[str]]] | None = None,
) -> Plan | None:
    """The row blocks of a chain whose rows are ``dims`` of ``first``, or None when
    its intermediates fit the cache as they are or its re-read inputs cost more.
    ``memo`` (kept by the caller across the chains it tries, whose kernels it
    keeps alive) remembers each kernel's external views per row block; ``flows``
    are the kernels' buffers read and written, where the caller has them."""
    rows = tuple(bufs[first].shape.sizes[d] for d in dims)

    def per_row(b: str) -> int:
        shape = bufs[b].shape
        rest = [s for d, s in enumerate(shape.sizes) if d not in bdims[b]]
        return itemsize(shape.dtype) * math.prod(rest)

    read, written = (
        flows if flows is not None else ([reads(k) for k in ks], [writes(k) for k in ks])
    )
    stored = [b for b in inter if not _into_epilogue(ks, b, read, written)]
    whole = sum(per_row(b) * math.prod(rows) for b in stored)
    if whole <= opt.max_bytes:
        return None  # the intermediates stay in cache as they are
    one_row = sum(per_row(b) for b in stored)
    strides = bufs[first].shape.strides
    order = sorted(range(len(rows)), key=lambda v: -strides[dims[v]])  # outermost first
    for tile in _blocks(rows, order, one_row, opt):
        plan = Plan(rows, tile, tuple(kidx), {b: bdims[b] for b in inter})
        views = [_views(k, names, plan, memo) for k, names in zip(ks, plan.kidx)]
        if not _in_bounds(views, bufs, plan):
            continue  # a view's hull leaves its buffer (accesses kept in by constraints)
        if _rereads(views, bufs, plan, opt.cache_bytes - opt.max_bytes) <= whole:
            return plan
        return None  # smaller blocks only re-read more
    return None


def product_of(k: Block) -> str | None:
    """The buffer ``k`` sums into, when ``k`` is a kernel ``unroll`` may register-tile
    and ``epilogue`` then extend: an unfused contraction with one output, a sum."""
    outs = [r for r in k.refs if r.dir != "in"]
    if "contraction" not in k.tags or "fused" in k.tags or len(outs) != 1:
        return None
    return outs[0].from_ if outs[0].agg == "add" else None


def _into_epilogue(
    ks: list[Block], b: str, read: Sequence[set[str]], written: Sequence[set[str]]
) -> bool:
    """Whether intermediate ``b`` is a product's result that only the next kernel,
    an elementwise one, reads: ``epilogue`` applies that kernel to the product's
    register tiles, so ``b`` is never stored and takes no room in a block
    (``read``, ``written``: each kernel's buffers)."""
    for n, k in enumerate(ks[:-1]):
        if b in written[n]:
            readers = [m for m, rd in enumerate(read) if b in rd]
            return product_of(k) == b and readers == [n + 1] and "eltwise" in ks[n + 1].tags
    return False


def _blocks(
    rows: tuple[int, ...], order: list[int], one_row: int, opt: Nest
) -> list[tuple[int, ...]]:
    """Row blocks to try, largest first: the rows inside one row variable (in the
    layout's order, ``order`` outermost first) are whole, that one is split into
    blocks of ``R`` rows (the largest divisor that fits), the rows outside it
    single.  A block is contiguous in the largest intermediate: whole pixel rows
    of an image, one head's queries.  Fewer than ``min_rows`` rows along the
    innermost row variable (a prime range: 197 = 197 x 1) are too thin for the
    products' register tiles."""
    found = []
    for pos, v in enumerate(order):
        inner = math.prod(rows[u] for u in order[pos + 1 :])
        outer = math.prod(rows[u] for u in order[:pos])
        for rb in sorted((d for d in range(1, rows[v] + 1) if rows[v] % d == 0), reverse=True):
            points = outer * (rows[v] // rb)
            if one_row * rb * inner > opt.max_bytes or points < opt.min_points:
                continue
            if points % opt.threads and points < 8 * opt.threads and rb > 1:
                continue  # 7 blocks on 2 threads: one waits for the other's fourth
            if (rb if pos == len(order) - 1 else rows[order[-1]]) >= opt.min_rows:
                tile = [1] * len(rows)
                for u in order[pos + 1 :]:
                    tile[u] = rows[u]
                tile[v] = rb
                found.append((rb * inner, tuple(tile)))
            break
    return [t for _, t in sorted(found, key=lambda x: -x[0])]


def external_views(
    k: Block, names: tuple[str, ...], plan: Plan
) -> list[tuple[Refinement, list[Affine], list[Affine], list[int]]]:
    """Per external view of kernel ``k``: (view, outer offset, inner access, sizes)."""
    return [v for v in _block_views(k, names, plan.tile) if v[0].from_ not in plan.inter]


def _block_views(k: Block, names: tuple[str, ...], tile: tuple[int, ...]) -> Views:
    """Per view of kernel ``k`` (intermediate or not), for row blocks of ``tile``
    rows over its row indices ``names``: (view, outer offset, inner access, sizes)."""
    ranges = {x.name: x.range for x in k.idxs}
    for v, n in enumerate(names):
        ranges[n] = tile[v]
    found = []
    for r in k.refs:
        outer, inner, sizes = [], [], []
        for a in r.access:
            lin = a - a.const
            lo, hi = box_interval(lin, ranges)
            # the block's offset: per row variable v, its coefficient times v's rows
            # per block, over the placeholder index "\0v" (names in v's order)
            steps = {f"\0{v}": a.coeff(n) * tile[v] for v, n in enumerate(names)}
            outer.append(Affine.build(steps, a.const + lo))
            inner.append(a - (a.const + lo))
            sizes.append(hi - lo + 1)
        found.append((r, outer, inner, sizes))
    return found


Views = list[tuple[Refinement, list[Affine], list[Affine], list[int]]]


def _views(k: Block, names: tuple[str, ...], plan: Plan, memo: dict | None) -> Views:
    """``external_views(k, names, plan)``, with every view of ``k`` per row block
    remembered in ``memo`` by the kernel's identity, its row indices and the
    block (the chains tried from one start share kernels and differ in which of
    their buffers are intermediates)."""
    if memo is None:
        return external_views(k, names, plan)
    key = (id(k), names, plan.tile)
    found = memo.get(key)
    if found is None:
        found = memo[key] = _block_views(k, names, plan.tile)
    return [v for v in found if v[0].from_ not in plan.inter]


def _in_bounds(views: list[Views], bufs: dict[str, Refinement], plan: Plan) -> bool:
    """Whether every external view of every row block lies inside its buffer."""
    last = {f"\0{v}": r // t - 1 for v, (r, t) in enumerate(zip(plan.rows, plan.tile))}
    for found in views:
        for r, off, _, sizes in found:
            for o, size, limit in zip(off, sizes, bufs[r.from_].shape.sizes):
                lo, hi = box_interval(o, {n: m + 1 for n, m in last.items()})
                if lo < 0 or hi + size > limit:
                    return False
    return True


def _rereads(views: list[Views], bufs: dict[str, Refinement], plan: Plan, cached: int) -> int:
    """Bytes the external inputs are read beyond once, over all row blocks, from
    beyond the cache: a block's window of at most ``cached`` bytes (one head's keys)
    is taken to stay in the cache's other part from one block to the next."""
    points = math.prod(r // t for r, t in zip(plan.rows, plan.tile))
    total = 0
    for found in views:
        for r, _, _, sizes in found:
            if r.dir != "in":
                continue
            whole = math.prod(bufs[r.from_].shape.sizes)
            if itemsize(r.shape.dtype) * math.prod(sizes) <= cached:
                continue
            total += itemsize(r.shape.dtype) * max(0, math.prod(sizes) * points - whole)
    return total


def reads_once(
    ks: list[Block], inter: list[str], bufs: dict[str, Refinement], cache_bytes: int
) -> bool:
    """Whether no kernel of the chain reads an input again for other rows: every
    view of a buffer from outside the chain moves with each index of range 2 or
    more that moves a view the kernel writes, or the buffer is small (at most
    ``cache_bytes / 64``: a layer norm's scale and bias, a row of a mask).  Then
    unnested each input is streamed once, and the intermediates may have the
    whole cache (``cache_bytes``, not its ``fraction``): a layer norm over
    sequence 128 of BERT-base (0.75 MiB of intermediates) stays unnested, as at
    64, and so compiles to the same leaf kernels (docs/cpu-backend.md, "New
    input shapes").  A product re-reads its other operand (attention's keys
    for each block of queries): not such a chain."""
    small = cache_bytes // 64
    for k in ks:
        ranges = {i.name: i.range for i in k.idxs}
        moved = {
            n
            for r in k.refs
            if r.dir != "in"
            for a in r.access
            for n, c in a.terms
            if c != 0 and ranges.get(n, 2) >= 2
        }
        for r in k.refs:
            b = r.from_
            if r.dir != "in" or b in inter or b not in bufs:
                continue
            shape = bufs[b].shape
            if itemsize(shape.dtype) * shape.elem_count <= small:
                continue
            used = {n for a in r.access for n, c in a.terms if c != 0}
            if not moved <= used:
                return False
    return True


def in_place(kernels: list[Block], local: dict[str, Refinement]) -> tuple[list[Block], set[str]]:
    """The block's kernels with an intermediate written over the one it is computed
    from where it can be: a kernel that reads intermediate ``A`` and writes ``B``
    (both of one shape) at the same element at each point, a different element
    at every point, ``A`` read by no later kernel and through no other view of
    this one, writes ``B`` into ``A``.
    Attention's scores, then the scores scaled and masked, then their ``exp``
    become one row block of scores instead of three, and each pass's stores land
    on the lines its own loads brought in.  Returns the kernels and the
    intermediates no longer used."""
    out = list(kernels)
    gone: set[str] = set()
    for n in range(len(out)):
        for w in out[n].refs:
            b = w.from_
            if w.dir != "out" or w.agg != "assign" or b not in local or b in gone:
                continue
            k = out[n]
            if n and "eltwise" in k.tags and product_of(out[n - 1]) in reads(k):
                continue  # ``epilogue`` runs it on the product's tiles: nothing is stored
            pure = {single_index(x) for x in w.access}
            if any(i.range > 1 and i.name not in pure for i in k.idxs):
                continue  # some element written at several points: one may read it after
            later = {r.from_ for kk in out[n + 1 :] for r in kk.refs}
            a = next(
                (
                    r.from_
                    for r in k.refs
                    if r.dir == "in"
                    and r.from_ in local
                    and r.from_ not in later
                    and r.access == w.access
                    and local[r.from_].shape == local[b].shape
                    and sum(x.from_ == r.from_ for x in k.refs) == 1
                    and sum(x.from_ == b for x in k.refs) == 1
                ),
                None,
            )
            if a is None:
                continue
            for m in range(n, len(out)):
                refs = tuple(replace(x, from_=a) if x.from_ == b else x for x in out[m].refs)
                out[m] = replace(out[m], refs=refs)
            gone.add(b)
    return out, gone


def separates(access: Sequence[Affine], n: str, ranges: dict[str, int]) -> bool:
    """Whether the element a write view reaches tells row index ``n``'s value: some
    dimension is ``n`` alone, or ``c*n`` (``c > 1``) plus terms that stay in ``0 ..
    c-1`` over the kernel's points (the merged heads of attention's output, ``64*h
    + d`` with ``d < 64``: head ``h`` writes columns ``64h .. 64h+63``).  Then
    different values of ``n`` write different elements, and row blocks over ``n``
    write apart.  A write at an offset (``y + 1``, into the next convolution's
    zero halo) still ends a chain: see :func:`.nest._splits_epilogue`."""
    for a in access:
        c = a.coeff(n)
        if c == 0:
            continue
        if single_index(a) == n:
            return True
        lo, hi = box_interval(a - Affine.index(n) * c, ranges)
        if c > 1 and 0 <= lo and hi < c:
            return True
    return False
