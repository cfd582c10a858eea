"""``nest``: a chain of kernels that hands rows to the next runs as one kernel over row blocks.

Attention, as the importer writes it, is a chain of root kernels whose
intermediates are as large as the scores (heads x queries x keys)::

    S = Q @ K^T (scaled, masked)   M = max_j S   E = exp(S - M), L = sum_j E
    P = E / L                      O = P @ V     (then O's transpose)

Each kernel reads an intermediate only at the rows (head, query) it writes, so
the chain can run row block by row block: one outer kernel over blocks of rows
whose statements are the chain's kernels restricted to one block, with the
intermediates as allocations of the block (one row block of the scores, in L2)
instead of root buffers that go to DRAM and back between kernels::

    block nest [h_o:12, m_o:8] #kernel #nest (in Q[64*m_o, h_o, 0] (64, 1, 64), ...
                                               none S f32(1, 64, 512) @L2, ...) {
      block k0_S [h:1, m:64, n:512, d:64] ...   // every kernel as before, its rows
      block k1_M [...] ...                      //   the block's: m over 64 points
    }

The same holds for the second half of a MobileNet block: a depthwise
convolution (its bias and activation) hands pixel rows to the pointwise
projection, which reads them only at the pixels it writes; and for
squeeze-excite's scaling before the projection.  The depthwise output is then
a few whole image rows in L2.

Later passes treat the nest's statements as root kernels (``unroll``
register-tiles the products inside it, ``epilogue`` and ``vectorize`` as
everywhere; :func:`._common.inside_nests`); ``thread`` splits the outer block.

**Chains.** Consecutive root ``#kernel`` leaf blocks (statements only, no
specials, no index offsets) where each kernel after the first reads a buffer
an earlier one writes.  *Intermediates* are root temporaries written in the
chain (first touched by a write) that no statement after it reads and that
are not results; the rest are external.  An external buffer the chain writes
is not read in it.  The longest chain from each start that passes the rules
below is taken, then the scan goes on after it.  A chain does not end with a
product whose result the next kernel, an elementwise one, reads: that kernel
(a bias and activation written into the next convolution's zero halo, at an
offset no chain can take) would be left outside the nest, where ``epilogue``
could not run it on the product's register tiles.

**Rows.** Row variables are dimensions of the largest intermediate, not its
unit-stride one (the kernels' vector lanes run along it); each kernel
has one index per row variable, and every access of an intermediate reads or
writes the row dimensions exactly through those indices (coefficient 1, no
offset, nowhere else in the access; an index over one point, a 1x1
convolution's ``ky`` in ``y + ky``, counts as 0 unless ``unit_taps`` is off).  A kernel's row indices cover their whole
range, are in no constraint and move every view it writes (alone in one of its
dimensions, or times ``c`` beside terms that stay below ``c``: attention's
output written with its heads merged, ``Y[m, 64*h + e]``), so the points of
one row block write only that block's rows: the blocks are independent.  The
largest set of dimensions for which this holds is used.

**Blocks.** A block is contiguous in the largest intermediate: in the
layout's order, the row variables inside one are whole, that one is split
into blocks of ``R`` rows, and those outside it into single rows (one head's
queries; a few whole pixel rows of an image, so the register tiles along a
row keep their length).  ``R`` is the largest divisor of its range for which
one block's intermediates fit ``fraction`` of ``cache_bytes`` (the target's
L2) and the nest still has ``min_points`` blocks, a multiple of ``threads``
unless there are 8 per thread or more (7 blocks on 2 threads leave one
thread waiting for the other's fourth); of the variables to split, the one
that gives the largest block is taken.  An intermediate that a product
writes and only the elementwise kernel after it reads is not counted:
``epilogue`` applies that kernel to the product's tiles, and it is never
stored.  Fewer than ``min_rows`` rows along the innermost row variable (a
prime range: 197 = 197 x 1) are too thin for the products' register tiles.  The chain is
left alone when the intermediates fit that whole anyway (they stay in cache; the
whole of ``cache_bytes``, not its ``fraction``, when every kernel reads each row of
its inputs once, :func:`._nest_blocks.reads_once`: a layer norm), or when the inputs re-read
once per block from beyond the cache (a block's window of an input larger
than the rest of ``cache_bytes``: a weight matrix re-read by every block of
rows) cost more than the intermediates' bytes, each written and read once
unnested.

**Where.** The block's intermediates are allocations in ``location`` (``L2``;
``SHARED`` on the GPU targets, where the code generators run a nest as one
work-group per row block, each kernel of the chain a leaf of the tiled
mapping).  ``panels`` (on) lays re-read inputs out for ``unroll``
(:func:`._nest_panels.laid_out`); targets with no ``unroll`` turn it off.
``unit_taps`` (on) lets 1x1 convolutions join chains; the GPU targets turn it
off: as one work-group per row block, a nested depthwise+pointwise pair ran
slower than the two tiled kernels (PoCL: MobileNetV2 127 against 112 ms,
EfficientNet-B0 246 against 223).

**In place.**  With ``in_place`` (off; the cpu target turns it on) a kernel
that reads intermediate ``A`` and writes intermediate ``B`` of the same shape
at the same element, a different one at each point, writes ``B`` over ``A``
when nothing after it reads ``A`` (:func:`._nest_blocks.in_place`): attention's scores,
scaled and masked, then exponentiated, are one row block instead of three.
Not an elementwise kernel after a product (``epilogue`` runs it on the
product's tiles, where nothing is stored).

**Tuned chains.**  ``enabled`` and ``fraction`` are tunable, and a choice is
the chain's (``chain_choices``): :meth:`Nest.run_choices` takes each chain's
options from the kernel it starts at, where one-kernel segments
(:mod:`._kernel_choices`) could never hold a chain.

**Repeated layers.**  Each start's window of kernels is analysed once per
structure (equal up to buffer names, with the buffers' shapes and uses):
the repeated layers of a model share the answer (:mod:`._nest_memo`).

Requires: verified IR.  Guarantees: the same results (each kernel runs the
same points, a row block at a time, and no value crosses row blocks), verified
IR, the same object when nothing applies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations
from typing import ClassVar

from ..errors import OptionError
from ..ir.affine import Affine
from ..ir.dtypes import itemsize
from ..ir.nodes import (
    Block,
    Index,
    Program,
    Refinement,
    Statement,
    TensorShape,
)
from ._common import fresh, reads, single_index
from ._nest_blocks import Plan, external_views, in_place, product_of, reads_once, separates, tiling
from ._nest_memo import ChainMemo, Seen
from ._nest_panels import access_names, laid_out
from .registry import (
    check_fraction,
    check_location_names,
    check_non_negative,
    check_positive,
    check_selector,
    register,
    with_choice,
)

MAX_CHAIN = 12  # kernels in one nest at most (the chains of attention have 6)


@register
@dataclass(frozen=True)
class Nest:
    """Run chains of kernels that pass rows along as one kernel over row blocks."""

    cache_bytes: int = 1 << 20  # the cache the intermediates of one block should stay in
    fraction: float = 0.5  # of it, the rest for the inputs (a head's keys and values)
    min_points: int = 4  # row blocks at least this many (the threads' work)
    min_rows: int = 4  # rows per block at least this many (unroll's tile rows)
    threads: int = 1  # the blocks shared evenly among this many threads where they can be
    vector_width: int = 8  # the products' panels: unroll's vector_width x vectors
    vectors: int = 2
    select: str = "kernel"
    panels: bool = True  # lay re-read inputs out in the products' vector panels once
    location: str = "L2"  # where a block's intermediates live (a GPU's group memory: SHARED)
    unit_taps: bool = True  # an index over one point (a 1x1 kernel's ky) reads as 0 in rows
    in_place: bool = False  # an intermediate written over the one it is computed from (in_place)
    enabled: bool = True  # off: nothing nests (a per-chain choice of ``stripeml tune``)
    name: ClassVar[str] = "nest"
    layer_local: ClassVar[bool] = True
    tunable: ClassVar[dict[str, tuple[object, ...]]] = {
        "enabled": (True, False),
        "fraction": (0.125, 0.25, 0.5),
    }
    #: A choice is the chain's: the options of a chain's first kernel decide how
    #: the chain from it nests (:meth:`run_choices`), not a segment of one kernel.
    chain_choices: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_selector(self)
        check_positive(self, "min_points", "min_rows", "threads", "vector_width", "vectors")
        check_non_negative(self, "cache_bytes")
        check_fraction(self, "fraction")
        if len(check_location_names(self, "location")) != 1 or "," in self.location:
            raise OptionError(
                "location",
                f"pass 'nest': option 'location' must be one location name, got {self.location!r}",
            )

    @property
    def max_bytes(self) -> int:
        """One row block's intermediates at most this many bytes."""
        return int(self.cache_bytes * self.fraction)

    def run(self, program: Program) -> Program:
        if self.max_bytes == 0 or not self.enabled:
            return program
        return self.run_choices(program, None)

    def run_choices(
        self, program: Program, options_for: Callable[[Block], Mapping[str, object] | None] | None
    ) -> Program:
        """Nest ``program``'s chains, each with the options ``options_for`` gives its
        first kernel (a tuned choice, ``stripeml tune``; None or ``{}``: these)."""
        root = program.root
        stmts = list(root.stmts)
        out: list[Statement] = []
        gone: set[str] = set()
        added: list[Refinement] = []
        seen = Seen(root, stmts, self.unit_taps, self.select)
        memo = ChainMemo(stmts, seen)  # the layers' chains analysed once per structure
        i = 0
        while i < len(stmts):
            best = None
            last = i  # the chain may reach the first statement that is no leaf kernel
            while last + 1 < min(len(stmts), i + MAX_CHAIN) and seen.leaf[last + 1]:
                last += 1
            opt = self._for(stmts[i], options_for)  # a tuned chain's options, else these
            if seen.leaf[i] and last > i and opt.enabled and opt.max_bytes > 0:
                if opt is not self:  # the memo holds answers for these options only
                    best = _best(stmts, i, last, opt, seen)
                else:
                    key, names = memo.key(i, last)
                    known, best = memo.get(key, names, i)
                    if not known:
                        best = _best(stmts, i, last, self, seen)
                        memo.put(key, names, i, best)
            if best is None:
                out.append(stmts[i])
                i += 1
                continue
            j, plan = best
            taken = {s.name for s in stmts if isinstance(s, Block)}
            chain = [s for s in stmts[i : j + 1] if isinstance(s, Block)]
            copies: list[Block] = []
            temps: list[Refinement] = []
            if opt.panels:
                chain, copies, temps = laid_out(
                    root, chain, plan, taken, opt.vector_width * opt.vectors
                )
            out.extend(copies)
            added.extend(temps)
            grown = replace(root, refs=(*root.refs, *temps))
            out.append(_build(grown, chain, plan, taken | {c.name for c in copies}, opt))
            gone |= set(plan.inter)
            i = j + 1
        if not gone:
            return program
        refs = tuple(r for r in (*root.refs, *added) if r.into not in gone)
        return Program(replace(root, refs=refs, stmts=tuple(out)))

    def _for(
        self, s: Statement, options_for: Callable[[Block], Mapping[str, object] | None] | None
    ) -> Nest:
        """These options, or the ones a tuned choice gives the chain from ``s``."""
        chosen = options_for(s) if options_for is not None and isinstance(s, Block) else None
        if not chosen:
            return self
        tuned = with_choice(self, chosen)  # type: ignore[arg-type]  # (``name``: a ClassVar)
        assert isinstance(tuned, Nest)
        return tuned


def _best(
    stmts: Sequence[Statement], i: int, last: int, opt: Nest, seen: Seen
) -> tuple[int, Plan] | None:
    """The longest chain from ``i`` (to ``last`` at most) that nests, and its plan."""
    for j in range(last, i, -1):
        if _splits_epilogue(stmts, j):
            continue
        plan = _plan(stmts, i, j, opt, seen)
        if plan is not None:
            return j, plan
    return None


def _splits_epilogue(stmts: Sequence[Statement], j: int) -> bool:
    """Whether a chain ending at ``j`` would leave the elementwise kernel after it (a
    product's bias and activation) outside: ``epilogue`` fuses those into the
    product's register tiles only when both are at the same level."""
    if j + 1 >= len(stmts):
        return False
    last, nxt = stmts[j], stmts[j + 1]
    if not isinstance(last, Block) or not isinstance(nxt, Block) or "eltwise" not in nxt.tags:
        return False
    product = product_of(last)
    return product is not None and product in reads(nxt)


def _plan(stmts: Sequence[Statement], i: int, j: int, opt: Nest, seen: Seen) -> Plan | None:
    """How to nest root statements ``i..j`` (all leaf kernels), or None."""
    if not all(isinstance(s, Block) for s in stmts[i : j + 1]):
        return None
    if not seen.leaf[i]:
        return None
    ks = [k for n in range(i, j + 1) if isinstance(k := seen.kernel(n), Block)]
    bufs = seen.bufs
    written = seen.wr[i : j + 1]  # all blocks (checked above): one per kernel of ks
    read = seen.rd[i : j + 1]
    first_read: dict[str, int] = {}  # per buffer: the first and last kernel reading it
    last_read: dict[str, int] = {}
    for n, rd in enumerate(read):
        for b in rd:
            first_read.setdefault(b, n)
            last_read[b] = n
    inter: list[str] = []
    for n, k in enumerate(ks):
        for r in k.refs:
            b = r.from_
            if r.dir == "in" or b in inter or b not in bufs or bufs[b].dir != "none":
                continue
            if seen.outside(b, i, j) or first_read.get(b, n) < n:
                continue  # needed outside the chain, or read before it is written
            if last_read.get(b, n) > n:
                inter.append(b)
    if not inter or _fits(inter, bufs, opt.max_bytes):
        return None
    # ``fraction`` keeps the rest of the cache for inputs each row block reads
    # again; a chain that reads each input row once (a layer norm) has none
    if _fits(inter, bufs, opt.cache_bytes) and reads_once(ks, inter, bufs, opt.cache_bytes):
        return None
    made = set(written[0])
    for n in range(1, len(ks)):  # connected: each kernel reads what an earlier one made
        if made.isdisjoint(read[n]):
            return None
        made |= written[n]
    writers: dict[str, int] = {}
    for w in written:
        for b in w:
            writers[b] = writers.get(b, 0) + 1
    kept = set(inter)
    for w in written:
        for b in w - kept:
            if b in first_read or writers[b] > 1:
                return None  # an external result read, or written twice, in the chain
    # Rows are dimensions of the largest intermediate (the scores, not their maximum),
    # so its unit-stride dimension, where the kernels' vector lanes run, stays whole.
    first = max(inter, key=lambda b: bufs[b].shape.elem_count)
    writer = next(k for k, w in zip(ks, written) if first in w)
    view = next(r for r in writer.refs if r.from_ == first)
    if not _reduces_an_intermediate(ks, inter):
        return None  # nothing row-wise: a product's epilogue (unroll, epilogue) does better
    shape = bufs[first].shape
    # Not the unit-stride dimension: the kernels keep their vector lanes along it.
    dims = [
        d
        for d, a in enumerate(view.access)
        if shape.sizes[d] > 1 and shape.strides[d] != 1 and single_index(a)
    ]
    for size in range(len(dims), 0, -1):
        for chosen in combinations(dims, size):
            found = _unify(ks, bufs, inter, first, chosen)
            if found is not None:
                return tiling(
                    ks, bufs, inter, chosen, first, *found, opt, seen.views, (read, written)
                )
    return None


_pure = single_index  # exactly one index, coefficient 1, no offset


def _fits(inter: list[str], bufs: dict[str, Refinement], max_bytes: int) -> bool:
    """Whether the intermediates, whole, fit ``max_bytes``: then the chain does
    not nest (:func:`._nest_blocks.tiling` counts at most each one's whole
    size, and leaves a chain whose count fits alone), and its rows are not
    analysed (BERT-base at sequence 64: 173 of the 917 chains that were)."""
    total = 0
    for b in inter:
        shape = bufs[b].shape
        total += itemsize(shape.dtype) * shape.elem_count
    return total <= max_bytes


def _reduces_an_intermediate(ks: list[Block], inter: list[str]) -> bool:
    """Whether some kernel of the chain reads an intermediate row-wise: sums it (or
    takes its maximum) over an index its outputs do not have, or broadcasts it
    along one they have (softmax's maximum and sum, a layer norm's mean, a product
    with it).  A chain of pointwise steps after a product gains nothing from row
    blocks: ``epilogue`` runs those on each register tile instead."""
    for k in ks:
        ranges = {x.name: x.range for x in k.idxs}
        out_idx = {n for r in k.refs if r.dir != "in" for n in access_names(r) if ranges[n] > 1}
        for r in k.refs:
            if r.dir == "in" and r.from_ in inter:
                if {n for n in access_names(r) if ranges[n] > 1} != out_idx:
                    return True
    return False


def _unify(
    ks: list[Block],
    bufs: dict[str, Refinement],
    inter: list[str],
    first: str,
    dims: tuple[int, ...],
) -> tuple[list[tuple[str, ...]], dict[str, tuple[int, ...]]] | None:
    """Each kernel's row indices and each intermediate's row dimensions, or None.
    Known row dimensions spread from ``first`` through the kernels that view it to
    the other intermediates they view, in as many sweeps as that takes."""
    rows = [bufs[first].shape.sizes[d] for d in dims]
    bdims: dict[str, tuple[int, ...]] = {first: dims}
    kidx: list[tuple[str, ...] | None] = [None] * len(ks)
    for _ in range(len(ks)):
        for j, k in enumerate(ks):
            if kidx[j] is None and any(r.from_ in bdims for r in k.refs):
                names = _kernel_rows(k, inter, bdims, rows)
                if names is None:
                    return None
                kidx[j] = names
        if all(x is not None for x in kidx):
            return [x for x in kidx if x is not None], bdims
    return None


def _kernel_rows(
    k: Block, inter: list[str], bdims: dict[str, tuple[int, ...]], rows: list[int]
) -> tuple[str, ...] | None:
    """Kernel ``k``'s index of each row variable, from its views of intermediates
    whose row dimensions are known (recording those of its other intermediates)."""
    mine: list[str | None] = [None] * len(rows)
    views = [r for r in k.refs if r.from_ in inter]
    for r in views:
        if r.from_ not in bdims:
            continue
        for v, d in enumerate(bdims[r.from_]):
            n = _pure(r.access[d])
            if n is None or mine[v] not in (None, n):
                return None
            mine[v] = n
    if any(n is None for n in mine):
        return None
    names = tuple(n for n in mine if n is not None)
    if len(set(names)) != len(names):
        return None
    ranges = {x.name: x.range for x in k.idxs}
    cons = {n for c in k.constraints for n in c.expr.names}
    if any(ranges[n] != rows[v] or n in cons for v, n in enumerate(names)):
        return None
    for r in k.refs:
        if r.dir != "in" and any(not separates(r.access, n, ranges) for n in names):
            return None  # a write that is not one row per row value: row blocks would meet
    for r in views:
        found = []
        for n in names:
            at = [d for d, a in enumerate(r.access) if a.coeff(n)]
            if len(at) != 1 or _pure(r.access[at[0]]) != n:
                return None
            found.append(at[0])
        if bdims.setdefault(r.from_, tuple(found)) != tuple(found):
            return None
    return names


def _build(root: Block, ks: Sequence[Statement], plan: Plan, taken: set[str], opt: Nest) -> Block:
    bufs = {r.into: r for r in root.refs}
    kernels = [k for k in ks if isinstance(k, Block)]
    outer_names = []
    used = set(taken) | {x.name for k in kernels for x in k.idxs}
    for n in plan.kidx[0]:
        name = fresh(f"rows_{n}", used)  # unroll names its own levels {n}_o, {n}_b
        used.add(name)
        outer_names.append(name)
    single = {v for v, (r, t) in enumerate(zip(plan.rows, plan.tile)) if r == t}
    to_outer = {
        f"\0{v}": Affine.constant(0) if v in single else Affine.index(n)
        for v, n in enumerate(outer_names)
    }
    refs: list[Refinement] = []
    seen: dict[tuple, str] = {}
    names_used = {b for b in bufs}
    local: dict[str, Refinement] = {}
    for b, bd in plan.inter.items():
        shape = bufs[b].shape
        sizes = list(shape.sizes)
        for v, d in enumerate(bd):
            sizes[d] = plan.tile[v]
        local[b] = Refinement(
            "none", b, TensorShape.dense(shape.dtype, tuple(sizes)), location=opt.location
        )
        refs.append(local[b])
    new_kernels = []
    for k, names in zip(kernels, plan.kidx):
        krefs = {}
        for r in k.refs:
            if r.from_ in plan.inter:
                strides = local[r.from_].shape.strides
                krefs[r.into] = replace(r, shape=replace(r.shape, strides=strides))
        for r, off, inner, sizes in external_views(k, names, plan):
            parent = bufs[r.from_]
            offset = tuple(a.substitute(to_outer) for a in off)
            key = (r.from_, r.dir, r.agg, offset, tuple(sizes))
            if key not in seen:
                name = (
                    r.from_ if r.from_ not in {x.into for x in refs} else fresh(r.from_, names_used)
                )
                names_used.add(name)
                seen[key] = name
                shape = TensorShape(parent.shape.dtype, tuple(sizes), parent.shape.strides)
                refs.append(Refinement(r.dir, name, shape, r.from_, offset, r.agg))
            krefs[r.into] = replace(r, from_=seen[key], access=tuple(inner))
        tile = dict(zip(names, plan.tile))
        idxs = tuple(replace(x, range=tile.get(x.name, x.range)) for x in k.idxs)
        new_kernels.append(replace(k, idxs=idxs, refs=tuple(krefs[r.into] for r in k.refs)))
    if opt.in_place:
        new_kernels, gone = in_place(new_kernels, local)
        refs = [r for r in refs if r.into not in gone]
    idxs = tuple(
        Index(n, r // t)
        for v, (n, r, t) in enumerate(zip(outer_names, plan.rows, plan.tile))
        if v not in single
    )
    comment = "; ".join(k.comment for k in kernels if k.comment)
    return Block(
        idxs=idxs,
        refs=tuple(refs),
        stmts=tuple(new_kernels),
        tags=frozenset({"kernel", "nest"}),
        name=fresh(f"{kernels[0].name}_nest", taken),
        comment=comment,
    )
