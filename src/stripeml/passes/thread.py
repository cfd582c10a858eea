"""``thread``: mark the index of each kernel that the CPU may split across threads.

For each root kernel the selector picks (and not already ``#thread``), the
candidate indices are those along which a split is proven race-free
(:func:`stripeml.analysis.dependence.race_free_indices`: no two points with
different values of the index write one element, or one writes what another
reads; decided with isl on the statements' accesses, through nested blocks,
so a ``#tiled`` kernel's tile indices qualify).  Among those with at least
``threads`` values that split evenly, the pass takes the one whose chunk reads
the fewest input bytes (box hulls of the accesses; ties: the one that moves
the written elements furthest, then the first in the kernel's index order,
see :func:`choose_thread_index`); failing any with
``threads`` values, the one with the most values (at least 2).  It then moves that index to
the front of the kernel's indices and adds the tag ``#thread``: the CPU
backend runs the values of the first index of a ``#thread`` block on
different threads.  Points are unordered, so reordering indices changes
nothing else.  A kernel with no race-free index of 2 or more values, or a
``threads`` below 2, is left as it is.  With ``serial_below`` (a tuned
choice, docs/tuning.md), selected kernels of less work than that are tagged
``#serial`` instead (any ``#thread`` removed): they run on one thread.

Requires: verified IR.  Guarantees: the same results and verified IR (only
the index order and a tag change), the same object when nothing is marked, a
fixed point (marked kernels, ``#thread`` or ``#serial``, are skipped), and
for every ``#thread`` kernel a race-free first index.  Kernels equal up to
the names of their refinements, blocks and comments (a model's repeated
layers) are decided once (:func:`choice_key`): the choice depends on the
kernel alone, and reads refinement names only to tell buffers apart.  A pass that builds kernels
race-free by construction may mark them itself through :func:`choose_among`
(``winograd``'s transforms); marked kernels are skipped.  A kernel such a
pass leaves to it marked ``#writes_once`` is race-free on every index by
construction: its choice is made without the analysis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from ..analysis.access import Access, accesses, index_stride
from ..analysis.dependence import race_free_indices
from ..analysis.select import Selector, parse_selector
from ..ir.affine import Affine, box_interval
from ..ir.dtypes import itemsize
from ..ir.nodes import (
    Block,
    Constant,
    Intrinsic,
    Load,
    LoadIndex,
    Program,
    Special,
    Statement,
    Store,
    work_estimate,
)
from .registry import check_non_negative, check_positive, check_selector, register


@register
@dataclass(frozen=True)
class Thread:
    """Mark a race-free index of each selected kernel for threads.

    Options: ``threads`` (how many threads the target runs; an index with at
    least that many values is preferred, and below 2 the pass does nothing),
    ``line`` (the cache line in bytes: an index whose chunks write no line
    in common but at the cuts between them is preferred; 0: no preference),
    ``select`` (tag selector of the kernels, see
    :mod:`stripeml.analysis.select`).
    """

    threads: int = 4
    line: int = 64
    select: str = "kernel"
    # Which race-free index: 0 the analytic choice, n the n-th next in
    # :func:`thread_candidates` (past the last: the last).  ``stripeml tune``
    # varies it per kernel; a target file has no reason to.
    rank: int = 0
    # Selected kernels of less work than this (:func:`~stripeml.ir.nodes.work_estimate`) run on one thread:
    # tagged ``#serial``, any ``#thread`` an earlier pass set removed (0: none).
    # A kernel of a few microseconds can take longer handed to the pool than on
    # the calling thread (docs/tuning.md); ``stripeml tune`` varies it per
    # kernel, where a kernel's parts (a Winograd convolution's transforms and
    # products) differ in work by 100x.
    serial_below: int = 0
    name: ClassVar[str] = "thread"
    layer_local: ClassVar[bool] = True
    tunable: ClassVar[dict[str, tuple[object, ...]]] = {
        "rank": (0, 1, 2, 3),
        "serial_below": (0, 1 << 18, 1 << 20, 1 << 22, 1 << 24),
    }

    def __post_init__(self) -> None:
        check_selector(self)
        check_positive(self, "threads")
        check_non_negative(self, "rank", "serial_below", "line")

    def run(self, program: Program) -> Program:
        if self.threads < 2:
            return program
        wanted = parse_selector(self.select)
        if self.serial_below:
            program = _serial(program, wanted, self.serial_below)
        stmts: list[Statement] = []
        chosen: dict[tuple, str | None] = {}  # choice_key -> index: a model's layers repeat
        for s in program.root.stmts:
            if isinstance(s, Block) and wanted(s.tags) and not s.tags & {"thread", "serial"}:
                key = choice_key(s)
                if key not in chosen:
                    chosen[key] = self._choose(s)
                index = chosen[key]
                if index is not None:
                    s = mark_threaded(s, index)
            stmts.append(s)
        root = program.root.with_stmts(tuple(stmts))
        return program if root is program.root else Program(root)

    def _choose(self, block: Block) -> str | None:
        if not self.rank:
            return choose_thread_index(block, self.threads, self.line)
        ranked = thread_candidates(block, self.threads, self.line)
        return ranked[min(self.rank, len(ranked) - 1)] if ranked else None


def _serial(program: Program, wanted: Selector, below: int) -> Program:
    """``program`` with each selected root kernel of less work than ``below``
    tagged ``#serial`` and without ``#thread``: code generation then splits none
    of its indices."""
    stmts: list[Statement] = []
    for s in program.root.stmts:
        if isinstance(s, Block) and wanted(s.tags) and "serial" not in s.tags:
            if work_estimate(s) < below:
                s = replace(s, tags=(s.tags - {"thread"}) | {"serial"})
        stmts.append(s)
    root = program.root.with_stmts(tuple(stmts))
    return program if root is program.root else Program(root)


def choice_key(kernel: Block) -> tuple:
    """``kernel`` as a hashable value, its refinement names (a view's, its
    parent's, what a load, store or special names) and its scalar names each
    replaced by the order of their first appearance, block names and comments
    left out; everything else (indices and their names, constraints, shapes,
    accesses, tags, constants, operations) kept as it is.  Two kernels with one
    key differ only in what their buffers and scalars are called, so
    :func:`choose_thread_index` and :func:`thread_candidates` answer alike for
    both: they read those names only to tell buffers apart.  About a tenth of
    the cost of printing the canonical form (no root needed: the choice reads
    nothing of it)."""
    refs: dict[str, int] = {}
    scalars: dict[str, int] = {}

    def ref(n: str) -> int:
        return refs.setdefault(n, len(refs))

    def scalar(n: str) -> int:
        return scalars.setdefault(n, len(scalars))

    def block(b: Block) -> tuple:
        views = tuple(
            (r.dir, ref(r.into), ref(r.from_) if r.from_ else -1, r.shape, r.access,
             r.agg, r.location, r.offset, r.const)
            for r in b.refs
        )  # fmt: skip
        return (b.idxs, b.constraints, b.tags, views, tuple(stmt(t) for t in b.stmts))

    def stmt(t: Statement) -> object:
        if isinstance(t, Load):
            return ("load", scalar(t.into), ref(t.ref))
        if isinstance(t, Store):
            return ("store", ref(t.ref), scalar(t.value))
        if isinstance(t, Intrinsic):
            return ("op", t.op, tuple(map(scalar, t.inputs)), scalar(t.into), t.dtype)
        if isinstance(t, Constant):
            return ("const", scalar(t.into), repr(t.value), t.dtype)
        if isinstance(t, LoadIndex):
            return ("index", scalar(t.into), t.expr)
        if isinstance(t, Special):
            ins = tuple(map(ref, t.inputs))
            return ("special", t.op, ins, tuple(map(ref, t.outputs)), t.params)
        if isinstance(t, Block):
            return block(t)
        raise TypeError(f"not a statement: {t!r}")

    return block(kernel)


def thread_candidates(block: Block, threads: int, line: int = 0) -> list[str]:
    """The race-free indices of ``block`` with 2 or more values, the analytic
    choice (:func:`choose_thread_index`) first, then the rest by range, largest
    first (the first in index order among equals)."""
    first = choose_thread_index(block, threads, line)
    if first is None:
        return []
    ranges = {i.name: i.range for i in block.idxs}
    rest = [n for n in _race_free(block) if ranges[n] >= 2 and n != first]
    return [first, *sorted(rest, key=lambda n: -ranges[n])]


def choose_thread_index(block: Block, threads: int, line: int = 0) -> str | None:
    """The race-free index of ``block`` to split across ``threads`` threads, or ``None``.

    Among the race-free indices with at least ``threads`` values, those that
    split evenly (the largest chunk at most 10% above the mean) are preferred,
    then those that are not the unit-stride index of a written view (split,
    it would leave each thread strided rows and no vector loop), then, with
    ``line``, those whose chunks write no cache line of ``line`` bytes in
    common but at the cuts between them (:func:`_whole_lines`), and among
    them the one whose chunk reads the fewest input bytes
    (:func:`chunk_read_bytes`; within 10% of the fewest: the one that moves the
    written elements furthest, :func:`_write_stride`, then the first in index
    order).  A 3x3
    convolution over 56x56x64 then splits its output rows (each thread reads
    half the image and all 147 KB of weights) rather than its 4 weight panels
    (each thread would stream the whole 860 KB image twice), while a 7x7x512
    one splits its 64 panels (9.4 MB of weights against an image of 166 KB).
    """
    if not any(i.range >= 2 for i in block.idxs):
        return None
    return choose_among(block, threads, _race_free(block), line)


def _race_free(block: Block) -> list[str]:
    """The race-free indices of ``block`` in its order: every index of a block
    marked ``#writes_once`` (each point writes elements no other point touches,
    by construction: ``winograd``'s transforms), else
    :func:`~stripeml.analysis.dependence.race_free_indices`."""
    if "writes_once" in block.tags:
        return [i.name for i in block.idxs]
    return list(race_free_indices(block))


def choose_among(block: Block, threads: int, race_free: Sequence[str], line: int = 0) -> str | None:
    """:func:`choose_thread_index`'s choice when the indices along which a split
    is race-free are known to be ``race_free`` (in the block's order): a pass
    that builds a kernel race-free by construction (``winograd``'s transforms)
    marks it so, and ``thread`` need not analyse it."""
    ranges = {i.name: i.range for i in block.idxs}
    safe = [n for n in race_free if ranges[n] >= 2]
    if not safe:
        return None
    full = [n for n in safe if ranges[n] >= threads]
    if not full:
        return max(safe, key=lambda n: ranges[n])  # first of the largest

    def chunk(n: str) -> int:
        return -(-ranges[n] // threads)

    even = [n for n in full if chunk(n) * threads <= 1.1 * ranges[n]] or full
    # Not the unit-stride index of a written view (the one vectorised and
    # contiguous in memory), unless nothing else qualifies.
    unit = {
        n for r in block.refs if r.dir in ("out", "inout")
        for n in ranges if index_stride(r, n) == 1
    }  # fmt: skip
    even = [n for n in even if n not in unit] or even
    accs: list[Access] | None = None
    writes: list[_Write] | None = None
    if line and len(even) > 1:
        accs = accesses(block)
        writes = _writes(block, accs)
        even = [n for n in even if _apart(block, writes, n, line)] or even
    if len(even) == 1:
        return even[0]
    if accs is None:
        accs = accesses(block)  # once for every candidate
    cost = {n: _read_bytes(block, accs, n, chunk(n)) for n in even}
    # Within 10% of the cheapest counts as a tie: the one that moves the writes
    # furthest wins, then the first in index order.
    best = min(cost.values())
    near = [n for n in even if cost[n] <= 1.1 * best]
    if len(near) == 1:
        return near[0]
    if writes is None:
        writes = _writes(block, accs)
    return max(near, key=lambda n: _write_stride(writes, n))


@dataclass(frozen=True)
class _Write:
    """A written access of a kernel, flattened: its buffer's offset in elements
    as one affine (``flat``), the element's bytes, the access's box
    (``sizes``, ``strides``) and the ranges of the indices it moves with."""

    flat: Affine
    size: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    inner: dict[str, int]


def _writes(block: Block, accs: list[Access]) -> list[_Write]:
    """``block``'s written accesses among ``accs``, flattened once for every
    candidate index."""
    out = []
    for acc in accs:
        if not acc.write:
            continue
        ref = block.ref(acc.ref)
        strides = tuple(ref.shape.strides)
        flat = sum((e * st for e, st in zip(acc.exprs, strides)), Affine.constant(0))
        inner = {i.name: i.range for b in (*acc.path, block) for i in b.idxs}
        out.append(_Write(flat, itemsize(ref.shape.dtype), tuple(acc.sizes), strides, inner))
    return out


def _write_stride(writes: list[_Write], index: str) -> int:
    """How many elements one step of ``index`` moves what a kernel writes (the
    most over its flattened ``writes``).  Split on the index that moves them
    furthest (rows of pixels rather than columns), a kernel's chunks write its
    output in the order of memory, and the pool's caller, which claims chunks
    from the front, writes the first part of it (runtime/native_pool.py): the
    next kernel, split alike, finds that part in the caller's cache.
    MobileNetV2 on two threads: 3.73-3.78 ms with ties to the first index in
    the kernel's order, 3.22-3.48 this way."""
    return max((abs(w.flat.coeff(index)) for w in writes), default=0)


def _whole_lines(block: Block, accs: list[Access], index: str, line: int) -> bool:
    """Whether threads that split ``index`` write no cache line of ``line``
    bytes in common but at the cuts between their chunks: for every element
    ``block`` writes (its accesses ``accs``, through its views to the buffers
    around it), either the lines one value of ``index`` writes and the lines
    any other value writes are apart (:func:`_lines_apart`, with buffers
    aligned to lines), or ``index`` moves the element by more than the other
    indices move it in all (each chunk writes one stretch of memory, the
    stretches in the order of the chunks: at most a line shared at each cut).
    ShuffleNet's grouped 1 x 1 convolutions split on their 4 groups wrote 28 or
    34 channels of each pixel a thread, 112 or 136 bytes: the line between two
    groups of every pixel held both threads' channels and went back and forth
    between the cores (56 x 56 x 112: 169 us on one thread, 261 us on two).
    Split on 32-channel panels within groups of 136, each panel moves by two
    whole lines but starts half way into one (136 x 4 bytes is 8.5 lines): the
    lines at the panels' ends are shared just the same (7 x 7 x 544: 41 us on
    one thread, 39-42 on two)."""
    return _apart(block, _writes(block, accs), index, line)


def _apart(block: Block, writes: list[_Write], index: str, line: int) -> bool:
    """:func:`_whole_lines` of ``block``'s flattened writes."""
    values = block.idx(index).range
    for w in writes:
        moved = w.flat.coeff(index)  # elements
        rest = Affine.build({n: c for n, c in w.flat.terms if n != index})
        if moved * w.size % line == 0:
            moves = [(c * w.size, w.inner.get(n, 1)) for n, c in rest.terms]
            moves += [(st * w.size, n) for n, st in zip(w.sizes, w.strides)]
            if _lines_apart(w.flat.const * w.size, moves, moved * w.size // line, values, line):
                continue
        lo, hi = box_interval(rest, {n: w.inner.get(n, 1) for n, _ in rest.terms})
        span = hi - lo + sum((n - 1) * st for n, st in zip(w.sizes, w.strides))
        if abs(moved) <= span:
            return False
    return True


#: The most element offsets and lines :func:`_lines_apart` lists: a value of
#: the index that writes more (a megabyte of lines) has so much work that the
#: few lines its ends could share with the next value's do not count.
_MOST_OFFSETS = 1 << 16
_MOST_LINES = 1 << 14


def _lines_apart(
    base: int, moves: list[tuple[int, int]], step: int, values: int, line: int
) -> bool:
    """Whether the cache lines written at each of ``values`` values of an index
    are apart from those of every other value: one value writes the byte offsets
    ``base + sum(t * move)`` (``0 <= t < count`` for each ``(move, count)`` of
    ``moves``), and each next value the same lines ``step`` lines further on.
    Moves of whole lines shift lines as they are, so only the others' offsets
    are listed, then their lines shifted (a split of pixels of 34 lines each
    writes channels 0-127 of each group of 136, half way into a line, and still
    no line of another pixel).  Two values ``d`` apart share a line when two
    lines of one value are ``d * step`` apart: lines in one class modulo
    ``step`` at most ``values - 1`` steps apart.  True (apart enough) where more
    than :data:`_MOST_OFFSETS` offsets or :data:`_MOST_LINES` lines would
    have to be listed.  Most splits need no list: lines that all fall within
    fewer lines than one step are apart, and :func:`_apart_by_residues`
    decides most of the rest from the moves alone."""
    if step == 0:
        return False
    # Lines of one value within fewer lines than a step: apart, nothing to list
    # (a row of pixels split from the next; most splits end here).
    lo = base + sum(min(0, move * (count - 1)) for move, count in moves)
    hi = base + sum(max(0, move * (count - 1)) for move, count in moves)
    if hi // line - lo // line < abs(step):
        return True
    offsets = [base]
    shifts = []
    for move, count in moves:
        if count <= 1 or move == 0:
            continue
        if move % line == 0:
            shifts.append((move // line, count))
            continue
        if len(offsets) * count > _MOST_OFFSETS:
            return True
        offsets = list({o + t * move for o in offsets for t in range(count)})
    lines = sorted({o // line for o in offsets})
    if shifts and _apart_by_residues(lines, shifts, step, values):
        return True
    for shift, count in shifts:
        if len(lines) * count > 4 * _MOST_LINES:
            return True
        lines = sorted({at + t * shift for at in lines for t in range(count)})
        if len(lines) > _MOST_LINES:
            return True
    step = abs(step)
    last: dict[int, int] = {}
    for at in lines:  # sorted: each class's steps in order
        cls, steps = at % step, at // step
        if cls in last and steps - last[cls] <= values - 1:
            return False
        last[cls] = steps
    return True


def _apart_by_residues(
    lines: list[int], shifts: list[tuple[int, int]], step: int, values: int
) -> bool:
    """True where the values of an index are proven apart without listing
    their lines: one value writes ``lines`` shifted by ``t * shift`` for each
    ``(shift, count)`` of ``shifts`` (whole-line moves), each next value
    ``step`` lines further.  A run of consecutive lines moved by its own length
    grows into a longer run (32 channels of a pixel, then its pixels two lines
    apart: one run).  The moves left are multiples of their gcd ``g``, so two
    lines of one value differ by a multiple of ``g`` plus a difference of the
    run's (or the listed) lines; where no ``d * step`` meets those differences
    modulo ``g``, no two values share a line (a channel block of every pixel,
    the pixels 4 lines apart, split every 2 lines: lines 0 and 1 modulo 4,
    never 2 apart).  False: not proven (the lines are listed then)."""
    rest = sorted(shifts, key=lambda sc: abs(sc[0]))
    run = len(lines) == lines[-1] - lines[0] + 1
    width = len(lines)
    while run and rest:
        grown = next((k for k, (shift, _) in enumerate(rest) if shift == width), None)
        if grown is None:
            break
        width *= rest.pop(grown)[1]
    if not rest:
        return run and width <= abs(step)
    g = 0
    for shift, _ in rest:
        g = math.gcd(g, shift)
    span = min(values - 1, g)  # the steps d to try: d * step % g repeats past g
    if run:
        h = math.gcd(step, g)  # d * step % g takes the multiples of h, 0 at d = g / h
        if h >= width:
            return span < g // h

        def near(r: int) -> bool:
            return r < width or r > g - width
    else:
        if len(lines) > 64:
            return False
        diffs = {(a - b) % g for a in lines for b in lines}

        def near(r: int) -> bool:
            return r in diffs

    return not any(near(d * step % g) for d in range(1, span + 1))


def chunk_read_bytes(block: Block, index: str, values: int) -> int:
    """Bytes of inputs that ``block`` reads when its ``index`` takes ``values``
    consecutive values and every other index its whole range: per view, the box
    hull of its accesses (the largest, for a view read several ways)."""
    return _read_bytes(block, accesses(block), index, values)


def _read_bytes(block: Block, accs: list[Access], index: str, values: int) -> int:
    """:func:`chunk_read_bytes` from ``block``'s accesses ``accs``."""
    boxes: dict[str, int] = {}
    for acc in accs:
        if acc.write:
            continue
        ranges: dict[str, int] = {}
        for b in acc.path:
            for i in b.idxs:
                ranges[i.name] = max(ranges.get(i.name, 1), i.range)
        ranges[index] = values
        elems = 1
        for expr, size in zip(acc.exprs, acc.sizes):
            lo, hi = box_interval(expr - expr.const, {n: ranges.get(n, 1) for n, _ in expr.terms})
            elems *= hi - lo + size
        nbytes = elems * itemsize(block.ref(acc.ref).shape.dtype)
        boxes[acc.ref] = max(boxes.get(acc.ref, 0), nbytes)
    return sum(boxes.values())


def mark_threaded(block: Block, index: str) -> Block:
    """``block`` with ``index`` moved first and the tag ``#thread``."""
    first = block.idx(index)
    idxs = (first,) + tuple(i for i in block.idxs if i.name != index)
    return replace(block, idxs=idxs, tags=block.tags | {"thread"})
