"""Planning for the CPU code generator: how each block's loops run.

Pure questions about Stripe blocks, kept apart from the LLVM emission in
:mod:`.llvm_kernel`: which index a kernel may split across threads, whether
an output can live in a register tile, which index runs in vector lanes, and
in what order the loops go.  What the GPU generators decide alike (scalar
register accumulators, the identity-writing copy of a scope, constraints as
loop bounds) is in :mod:`.plan`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import llvmlite.ir as ir

from ..ir.affine import Affine
from ..ir.nodes import Block, Intrinsic, Load, Special, Store, walk_blocks
from .plan import index_names, injective, split_by_address


@dataclass
class Bind:
    """A refinement as seen by generated code."""

    base: ir.Value  # pointer to element 0 of the underlying memory
    offset: Affine  # element offset of the view's origin
    dtype: str
    agg: str
    mode: str  # one of plan.MODES
    root: str | None  # root buffer name (None for allocations)
    acc: ir.Value | None = None  # register accumulator slot (mode "reg")
    vacc: ir.Value | None = None  # vector accumulator slot (vectorised reductions)
    touched: ir.Value | None = None


# Registers a register tile leaves free for its operands (a broadcast row value, the
# panel's vectors when not read from memory): at most ``registers - 4`` accumulators,
# 12 of AVX2's 16 ymm registers, 28 of AVX-512's 32 zmm.
TILE_SPARE_REGISTERS = 4


def max_tile_vectors(vector_registers: int) -> int:
    """Vector accumulators a register tile may keep (see :data:`TILE_SPARE_REGISTERS`)."""
    return max(1, vector_registers - TILE_SPARE_REGISTERS)


# Fully unrolled register-tile indices: at most this many iterations each.
MAX_UNROLL = 8

# A register tile's innermost reduction loop runs this many of its iterations per
# trip (``llvm_tile.reduction_unroll``): the loads of all four share one address
# register at constant offsets, and the loop's own increment, compare and branch
# come once per four steps of the tile.  Most tiles are compiled at O1, where LLVM
# unrolls nothing (docs/cpu-backend.md, "From blocks to loops": a 49 x 4608 x 512
# product of ResNet-50's last stage 1.15x faster on two threads).
TILE_REDUCTION_UNROLL = 4


def register_tile_plan(
    blk: Block, binds: dict[str, Bind], w: int, max_vectors: int = max_tile_vectors(16)
) -> tuple[str, str, list[str], list[tuple[int, int]]] | None:
    """(output ref, vector index, unrolled indices, chunks) when ``blk`` is a leaf
    whose single aggregating store can keep its outputs in vector registers (at
    most ``max_vectors`` of them) across the reduction.  ``chunks``: the vector
    index's ``(start, lanes)`` per register (:func:`lane_chunks`)."""
    if w < 2 or blk.sub_blocks or any(r.dir == "none" for r in blk.refs):
        return None
    stores = [s for s in blk.stmts if isinstance(s, Store)]
    if len(stores) != 1 or any(isinstance(s, Special) for s in blk.stmts):
        return None
    out = stores[0].ref
    bd = binds[out]
    if bd.mode not in ("scope", "mem") or bd.agg not in ("add", "mul", "max", "min"):
        return None
    own = index_names(blk)
    addr = [i.name for i in blk.idxs if bd.offset.coeff(i.name)]
    red = [n for n in own if n not in addr]
    if not red or not injective(bd.offset, blk):
        return None
    if any(set(c.expr.names) & set(addr) for c in blk.constraints):
        return None
    if bd.mode == "scope" and blk.constraints:
        return None  # a reduction with no points must leave its outputs alone

    units = {n: lane_chunks(blk.idx(n).range, w) for n in addr if bd.offset.coeff(n) == 1}
    for vidx, chunks in reversed(units.items()):
        if chunks is None:
            continue
        unrolled = [n for n in addr if n != vidx]
        count = len(chunks)
        for u in unrolled:
            count *= blk.idx(u).range
        if count > max_vectors or any(blk.idx(u).range > MAX_UNROLL for u in unrolled):
            continue
        saved = bd.mode
        bd.mode = "reg"
        ok = vectorizable(blk, binds, vidx, reduction_ok=True)
        bd.mode = saved
        if ok:
            return out, vidx, unrolled, chunks
    return None


def lane_chunks(n: int, w: int) -> list[tuple[int, int]] | None:
    """The registers a vector index of ``n`` points takes, as ``(start, lanes)``:
    whole vectors of ``w``; for more points than whole vectors divide, those
    vectors and one of the ``n % w`` points left (``unroll``'s mixed tiles: 28
    channels a group as 16 + 12 lanes, the narrower vector an LLVM vector of
    that many lanes); for fewer points than ``w``, vectors of
    :func:`narrow_lanes` (at least 4 lanes; None when no such width divides)."""
    if n % w and n > w:
        return [(j * w, w) for j in range(n // w)] + [(n - n % w, n % w)]
    lanes = narrow_lanes(n, w)
    if n % lanes:
        return None
    return [(j * lanes, lanes) for j in range(n // lanes)]


def narrow_lanes(n: int, w: int) -> int:
    """The lanes a vector index of ``n`` points runs in: ``w``, or, when whole vectors
    of ``w`` do not divide ``n``, the largest power of two (at least 4, below ``w``)
    that does (``unroll``'s narrower-lane rests: 8 lanes of 24 channels, 4 of 12)."""
    low = n & -n
    return low if n % w and 4 <= low < w else w


_VECTOR_OPS = frozenset(
    "add sub mul div neg abs ident max min relu exp log sqrt tanh sigmoid sin cos tan erf floor ceil "
    "round pow cmp_lt cmp_le cmp_gt cmp_ge cmp_eq cmp_ne and or not select cast bitcast "
    "bit_and bit_or bit_xor bit_not shl shr dot4".split()
)


def vectorizable(blk: Block, binds: dict[str, Bind], vidx: str, reduction_ok: bool = False) -> bool:
    """Whether the innermost loop over ``vidx`` can run in vector lanes: a leaf block whose
    loads are unit-stride or invariant in ``vidx``, whose stores are unit-stride (or a
    register reduction over ``vidx``), with no per-point allocations."""
    if blk.sub_blocks or blk.idx(vidx).affine is not None:
        return False
    if any(r.dir == "none" for r in blk.refs):
        return False
    for s in blk.stmts:
        if isinstance(s, Load):
            if binds[s.ref].offset.coeff(vidx) not in (0, 1):
                return False
        elif isinstance(s, Store):
            bd = binds[s.ref]
            c = bd.offset.coeff(vidx)
            if bd.mode == "reg" and not reduction_ok:
                if c != 0:
                    return False
            elif c != 1:
                return False
        elif isinstance(s, Intrinsic):
            if s.op not in _VECTOR_OPS:
                return False
        elif isinstance(s, Special):
            return False
    return True


def loop_order(
    blk: Block, binds: dict[str, Bind], reg: str | None, par: str | None, last: str | None = None
) -> list[str]:
    """The loop order of ``blk``'s indices: a register accumulator's address
    indices outside its reduction, then ``last`` innermost (a vector index) and,
    in a kernel the ``thread`` pass split, ``par`` outermost (its split index).

    A kernel it did not mark keeps the order its indices have, which the tiling
    passes chose (a matmul's column panels outside its row blocks, so that each
    panel stays in L2 while the rows pass over it); its loop over ``par`` runs
    between the caller's bounds wherever it stands.  Moving that index
    outermost had every row block stream all the panels: BERT-base's
    feed-forward matmul ran 3.7-3.9x as long on one thread as on two."""
    names = [i.name for i in blk.idxs]
    if reg is not None:
        outer, inner = split_by_address(names, binds[reg].offset)
        names = outer + inner
    if last is not None:
        names.remove(last)
        names.append(last)
    if par is not None and par in names and par != last and "thread" in blk.tags:
        names.remove(par)
        names.insert(0, par)
    return names


# A view traced to its root buffer: (root name, access in root coordinates).
_RootAccess = tuple[str, tuple[Affine, ...]]


def _root_writes(
    blk: Block,
    chain: Mapping[str, _RootAccess | None],
    out: list[_RootAccess],
    reads: set[str],
) -> None:
    """Collect (root name, access in root coordinates) of every write to a root buffer;
    ``chain``: the parent's views traced to the root (``None``: an allocation's)."""
    local: dict[str, _RootAccess | None] = {}
    for r in blk.refs:
        link = chain.get(r.from_) if r.dir != "none" else None
        if link is None:
            local[r.into] = None
            continue
        root, acc = link
        composed = tuple(a + b for a, b in zip(acc, r.access)) if acc else r.access
        local[r.into] = (root, composed)
        if r.dir in ("out", "inout"):
            out.append((root, composed))
        if r.dir in ("in", "inout"):
            reads.add(root)
    for s in blk.stmts:
        if isinstance(s, Block):
            _root_writes(s, local, out, reads)


def parallel_index(kernel: Block) -> str | None:
    """An index of the kernel whose distinct values write distinct elements of every
    root buffer the kernel writes (and the kernel reads none of them): safe to split.
    None for a ``#serial`` kernel (it runs on one thread)."""
    if "serial" in kernel.tags:
        return None
    if (
        "thread" in kernel.tags
        and kernel.idxs
        and kernel.idxs[0].range > 1
        and kernel.idxs[0].affine is None
    ):
        # The `thread` pass proved (with isl) that splitting the first index is race-free.
        return kernel.idxs[0].name
    writes: list[_RootAccess] = []
    reads: set[str] = set()
    chain_root = {
        r.from_: (r.from_, tuple(Affine() for _ in r.access)) for r in kernel.refs if r.from_
    }
    _root_writes(kernel, chain_root, writes, reads)
    if not writes or any(root in reads for root, _ in writes):
        return None
    own = {i.name for i in kernel.idxs}
    ranges = {i.name: i.range for b in walk_blocks(kernel) for i in b.idxs}
    # Prefer the index of the outermost output dimension (whole rows per thread,
    # leaving the unit-stride inner dimension to vector lanes); skip tiny ranges.
    best = None
    best_key = None
    for idx in kernel.idxs:
        if idx.affine is not None or idx.range < 2:
            continue
        found = [
            min(
                (d for d, a in enumerate(acc) if _separates(a, idx.name, own, ranges)), default=None
            )
            for _, acc in writes
        ]
        dims = [d for d in found if d is not None]
        if len(dims) < len(found):
            continue
        innermost = all(d == len(acc) - 1 for d, (_, acc) in zip(dims, writes))
        key = (innermost, idx.range < 8, max(dims), -idx.range)
        if best_key is None or key < best_key:
            best, best_key = idx.name, key
    return best


def _separates(a: Affine, p: str, own: set[str], ranges: dict[str, int]) -> bool:
    """Whether distinct values of ``p`` give distinct values of ``a`` whatever the
    nested indices are: ``a = c*p + rest`` with ``rest`` over nested indices only,
    spanning less than ``|c|``."""
    c = a.coeff(p)
    if c == 0:
        return False
    span = 0
    for n, k in a.terms:
        if n == p:
            continue
        if n in own or n not in ranges:
            return False
        span += abs(k) * (ranges[n] - 1)
    return span < abs(c)
