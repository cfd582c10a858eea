"""Roofline accounting: the FLOPs and DRAM bytes of each kernel, and the bound they imply.

What ``Executable.profile`` reports next to each kernel's seconds, computed
from the final (optimised) IR, one root statement at a time:

* **FLOPs** (:func:`flops`): for every statement of the kernel and of the
  blocks nested in it, its weight times the number of points of its block's
  domain within the nest (index ranges, index offsets and constraints: a
  padded window's skipped taps do not count).  Weights: every intrinsic is
  one FLOP (arithmetic, ``min``/``max``/``relu``, comparisons, ``select``,
  logic, bitwise operations and shifts, and each math function such as
  ``exp`` or ``tanh``, whatever it costs in instructions), except ``ident``,
  ``cast`` and ``bitcast``, which move data (0), and ``dot4``, four byte
  products and the three sums that join them (7: with the ``add`` of its
  store, a ``dot4`` contraction counts 2 per byte product, as a float GEMM
  counts 2 per multiply-accumulate);
  a ``store`` through an aggregating view (``add``, ``mul``, ``max``,
  ``min``) is one more (the combining operation), a plain store 0.  So a
  multiply-accumulate ``C += A * B`` is 2 (``mul`` and the ``add`` of the
  store), as is an explicit ``add(mul(...))``, whether or not the code
  generator fuses it into one FMA; a max-pool tap is 1.  Loads, constants,
  index values and copies are free.  The dtype does not matter.
* **bytes** (:func:`kernel_work`): the bytes of the program's root buffers
  (inputs, outputs and root temporaries; a nested block's own ``none``
  buffers, its register tiles and packed panels, are not DRAM traffic) that
  the kernel reads, plus those it writes, each buffer counted once per
  direction: per buffer the box hull of the elements each of the kernel's
  loads touches over its whole domain (exact bounds from isl), overlapping
  boxes hulled together and disjoint ones (a halo's slabs) counted apart,
  times the element size, and likewise for its stores.  This is the *compulsory* traffic of a
  kernel that keeps everything else in cache: a buffer read by several
  loads, or in several tiles, counts once; an ``inout`` view's elements
  count as read and as written; a ``special`` reads its inputs and writes
  its outputs whole.  A strided access counts the whole box it spans (a
  stride-2 1x1 convolution counts all of its input's rows).
* :func:`attainable_gflops` is the roofline bound ``min(peak_gflops,
  dram_gbps * flops / bytes)``; :func:`peak_fraction` the share of it a
  run achieved, which equals ``max(gflops / peak_gflops, gbps / dram_gbps)``
  (so a copy kernel, with no FLOPs, is judged by its bandwidth).

Requires: verified IR (names unique along each nest).  Guarantees: exact
integer counts.  Point counts use isl only for the indices that take part in
constraints (the rest multiply their ranges), so a kernel costs milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import islpy as isl

from ..ir.dtypes import itemsize
from ..ir.intrinsics import INTRINSICS
from ..ir.isl import affine_range, constrain, index_bounds, nest_domain, set_space
from ..ir.nodes import Block, Index, Intrinsic, Program, Refinement, Special, Statement, Store
from .access import accesses

__all__ = [
    "AGGREGATING",
    "FREE_INTRINSICS",
    "Work",
    "attainable_gflops",
    "bound_kind",
    "flops",
    "intrinsic_flops",
    "kernel_work",
    "peak_fraction",
    "points",
    "profile_rows",
    "program_work",
    "step_name",
]

#: Intrinsics that move data rather than compute: 0 FLOPs (every other one is 1).
FREE_INTRINSICS = frozenset({"ident", "cast", "bitcast"})
#: Intrinsics that do several operations: ``dot4`` is four products and three sums.
INTRINSIC_WEIGHTS = {"dot4": 7}
#: Aggregations whose stores combine values: one FLOP per store.
AGGREGATING = frozenset({"add", "mul", "max", "min"})


@dataclass(frozen=True, slots=True)
class Work:
    """What one root statement does: FLOPs, and DRAM bytes read and written."""

    flops: int
    bytes_read: int
    bytes_written: int

    @property
    def bytes(self) -> int:
        """Bytes read plus bytes written."""
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """FLOPs per byte (0 when nothing moves)."""
        return self.flops / self.bytes if self.bytes else 0.0

    def __add__(self, other: Work) -> Work:
        return Work(
            self.flops + other.flops,
            self.bytes_read + other.bytes_read,
            self.bytes_written + other.bytes_written,
        )


NO_WORK = Work(0, 0, 0)


def intrinsic_flops(op: str) -> int:
    """FLOPs of one intrinsic ``op`` (see the module docstring)."""
    if op not in INTRINSICS:
        raise KeyError(op)
    return 0 if op in FREE_INTRINSICS else INTRINSIC_WEIGHTS.get(op, 1)


# -- FLOPs -------------------------------------------------------------------------


def points(nest: Sequence[Block]) -> int:
    """The integer points of the innermost block of ``nest`` (outermost first) over
    the whole nest: the product of the ranges of indices no constraint involves,
    times isl's count of the rest."""
    idxs: dict[str, Index] = {i.name: i for b in nest for i in b.idxs}
    cons = [c.expr for b in nest for c in b.constraints]
    bound = {n for e in cons for n in e.names}
    # A bound index's values depend on the indices its offset names: bound too.
    # (Any other index takes ``range`` values whatever its offset.)
    changed = True
    while changed:
        changed = False
        for name, idx in idxs.items():
            offset = idx.affine.names if idx.affine is not None else ()
            if name in bound and any(n not in bound for n in offset):
                bound.update(offset)
                changed = True
    free = 1
    for name, idx in idxs.items():
        if name not in bound:
            free *= idx.range
    if not bound or free == 0:
        return free
    names = tuple(n for n in idxs if n in bound)
    missing = bound - set(idxs)  # names of no index: not verified IR
    if missing:
        raise ValueError(f"constraints name unknown indices {sorted(missing)}")
    exprs = [e for n in names for e in index_bounds(idxs[n])] + cons
    domain = constrain(isl.BasicSet.universe(set_space(names)), exprs)
    return free * int(domain.to_set().count_val().to_python())


def flops(block: Block, outer: Sequence[Block] = ()) -> int:
    """FLOPs of every point of ``block`` (within ``outer``, outermost first) and of
    the blocks nested in it (see the module docstring)."""
    return _flops([*outer, block], {})


def _flops(nest: list[Block], aggs: Mapping[str, str]) -> int:
    block = nest[-1]
    # A view's aggregation, or that of the view it refines.
    scope = dict(aggs)
    for r in block.refs:
        scope[r.into] = r.agg or (aggs.get(r.from_, "") if r.dir != "none" else "")
    own = 0
    total = 0
    for s in block.stmts:
        if isinstance(s, Intrinsic):
            own += intrinsic_flops(s.op)
        elif isinstance(s, Store):
            own += scope.get(s.ref, "") in AGGREGATING
        elif isinstance(s, Block):
            total += _flops([*nest, s], scope)
    if own:
        total += own * points(nest)
    return total


# -- bytes -------------------------------------------------------------------------


Box = list[tuple[int, int]]


def _overlap(a: Box, b: Box) -> bool:
    return all(lo <= d and c <= hi for (lo, hi), (c, d) in zip(a, b))


def _box_union(boxes: dict[str, list[Box]], name: str, box: Box) -> None:
    """Add ``box`` to ``name``'s boxes: hulled with every box it overlaps (until
    none does), kept apart from the boxes it misses (a halo's slabs, filled by
    one kernel, count their own elements, not the whole buffer's)."""
    kept = boxes.setdefault(name, [])
    merged = True
    while merged:
        merged = False
        for other in kept:
            if _overlap(other, box):
                kept.remove(other)
                box = [(min(a, c), max(b, d)) for (a, b), (c, d) in zip(other, box)]
                merged = True
                break
    kept.append(box)


def _box_bytes(boxes: Mapping[str, list[Box]], refs: Mapping[str, Refinement]) -> int:
    total = 0
    for name, parts in boxes.items():
        ref = refs[name]
        elements = 0
        for box in parts:
            count = 1
            for lo, hi in box:
                count *= max(0, hi - lo + 1)
            elements += count
        total += min(elements, ref.shape.elem_count) * itemsize(ref.shape.dtype)
    return total


def kernel_work(root: Block, stmt: Statement) -> Work:
    """FLOPs and DRAM bytes of one statement of the program's ``root`` block."""
    refs = {r.into: r for r in root.refs}
    if isinstance(stmt, Special):
        read = sum(_whole(refs[n]) for n in dict.fromkeys(stmt.inputs) if n in refs)
        written = sum(_whole(refs[n]) for n in dict.fromkeys(stmt.outputs) if n in refs)
        return Work(0, read, written)
    if not isinstance(stmt, Block):
        return NO_WORK
    reads: dict[str, list[Box]] = {}
    writes: dict[str, list[Box]] = {}
    domains: dict[int, isl.BasicSet] = {}
    for acc in accesses(stmt):
        if acc.buffer not in refs:
            continue
        key = id(acc.path[-1])
        domain = domains.get(key)
        if domain is None:
            domain = domains[key] = nest_domain(list(acc.path))
        box: list[tuple[int, int]] = []
        for expr, size in zip(acc.exprs, acc.sizes):
            rng = affine_range(domain, expr) if not expr.is_constant else (expr.const, expr.const)
            if rng is None:  # an empty domain touches nothing
                break
            box.append((rng[0], rng[1] + size - 1))
        else:
            _box_union(writes if acc.write else reads, acc.buffer, box)
    for r in stmt.refs:  # an inout view's stored elements are read first
        if r.dir == "inout" and r.from_ in writes:
            for box in writes[r.from_]:
                _box_union(reads, r.from_, box)
    return Work(flops(stmt), _box_bytes(reads, refs), _box_bytes(writes, refs))


def _whole(ref: Refinement) -> int:
    return ref.shape.elem_count * itemsize(ref.shape.dtype)


def step_name(position: int, stmt: Statement) -> str:
    """The name a root statement's row has in a profile: the block's name, else
    ``special<position>`` (the CPU runtime's names for its steps)."""
    if isinstance(stmt, Block) and stmt.name:
        return stmt.name
    return f"special{position}"


def program_work(program: Program) -> dict[str, Work]:
    """:func:`kernel_work` of every root statement, by :func:`step_name`
    (statements with the same name add up)."""
    out: dict[str, Work] = {}
    root = program.root
    for k, stmt in enumerate(root.stmts):
        name = step_name(k, stmt)
        out[name] = out.get(name, NO_WORK) + kernel_work(root, stmt)
    return out


# -- the bound ---------------------------------------------------------------------


def attainable_gflops(flops: int, nbytes: int, peak_gflops: float, dram_gbps: float) -> float:
    """The roofline bound in GFLOP/s: ``min(peak_gflops, dram_gbps * flops / nbytes)``
    (``peak_gflops`` when nothing moves)."""
    if nbytes <= 0:
        return peak_gflops
    return min(peak_gflops, dram_gbps * flops / nbytes)


def peak_fraction(
    flops: int, nbytes: int, seconds: float, peak_gflops: float, dram_gbps: float
) -> float:
    """The share of the roofline bound a run of ``seconds`` achieved:
    ``achieved GFLOP/s / attainable_gflops``, which is
    ``max(gflops / peak_gflops, gbps / dram_gbps)`` (0 for a kernel that moves
    and computes nothing, or took no time).  Above 1 when the kernel's buffers
    stayed in cache and so moved faster than DRAM allows."""
    if seconds <= 0:
        return 0.0
    compute = flops / seconds / 1e9 / peak_gflops if peak_gflops > 0 else 0.0
    memory = nbytes / seconds / 1e9 / dram_gbps if dram_gbps > 0 else 0.0
    return max(compute, memory)


def bound_kind(flops: int, nbytes: int, peak_gflops: float, dram_gbps: float) -> str:
    """``"compute"`` when the kernel's intensity reaches the ridge point
    ``peak_gflops / dram_gbps``, else ``"memory"``."""
    if nbytes <= 0:
        return "compute"
    return "compute" if dram_gbps * flops / nbytes >= peak_gflops else "memory"


class _Timed(NamedTuple):
    kernel: str
    statement: str
    seconds: float


class ProfileRow(_Timed):
    """One kernel of :meth:`stripeml.api.Executable.profile` (re-exported there).

    As a tuple it is still the ``(kernel, statement, seconds)`` triple that
    ``profile`` always returned (so ``for name, stmt, secs in rows``,
    ``row[2]`` and comparisons with triples keep working: a tuple of nine
    would not unpack into three names); the roofline figures are attributes
    after those three fields (and in :meth:`_asdict`):

    * ``flops`` and ``bytes`` come from the kernel's IR
      (:mod:`stripeml.analysis.roofline`): one FLOP per intrinsic per point
      of its block's domain and one per aggregating store, ``ident``,
      ``cast``, loads and copies free; the bytes of the program's root
      buffers it reads plus those it writes, each buffer's touched box
      counted once per direction (the compulsory DRAM traffic);
    * ``gflops`` and ``gbps``: those over ``seconds``;
    * ``peak_fraction``: the achieved share of the roofline bound
      ``min(peak_gflops, dram_gbps * flops / bytes)``, which equals
      ``max(gflops / peak_gflops, gbps / dram_gbps)`` (above 1 when the data
      stayed in cache), and ``bound``: ``"compute"`` or ``"memory"``, which
      ceiling that bound is.  Both ``None`` when the target's ceilings are
      unknown (:func:`stripeml.runtime.peaks.target_peaks`).
    """

    flops: int
    bytes: int
    gflops: float
    gbps: float
    peak_fraction: float | None
    bound: str | None

    #: Every field, the triple's first.
    FIELDS = ("kernel", "statement", "seconds", "flops", "bytes", "gflops", "gbps",
              "peak_fraction", "bound")  # fmt: skip

    def __new__(
        cls,
        kernel: str,
        statement: str,
        seconds: float,
        flops: int = 0,
        bytes: int = 0,
        gflops: float = 0.0,
        gbps: float = 0.0,
        peak_fraction: float | None = None,
        bound: str | None = None,
    ) -> ProfileRow:
        row = super().__new__(cls, kernel, statement, seconds)
        row.flops, row.bytes, row.gflops, row.gbps = flops, bytes, gflops, gbps
        row.peak_fraction, row.bound = peak_fraction, bound
        return row

    def _asdict(self) -> dict[str, Any]:
        """Every field by name (the triple's and the roofline's)."""
        return {name: getattr(self, name) for name in self.FIELDS}

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self._asdict().items())
        return f"ProfileRow({body})"


def profile_rows(
    timed: Iterable[tuple[str, str, float]],
    work: Mapping[str, Work],
    peak_gflops: float | None,
    dram_gbps: float | None,
) -> list[ProfileRow]:
    """A :class:`ProfileRow` per ``(kernel, statement, seconds)`` of ``timed``,
    slowest first: the kernel's ``work`` (none when absent) over its seconds
    (rates 0 when it took no time), with its share of the roofline bound and
    which ceiling that is when both ``peak_gflops`` and ``dram_gbps`` are known.
    What :meth:`stripeml.api.Executable.profile` and the explorer's
    interpreter timings both report."""
    rows = []
    for kernel, statement, seconds in timed:
        w = work.get(kernel, NO_WORK)
        rate = 1e-9 / seconds if seconds > 0 else 0.0
        fraction = bound = None
        if peak_gflops is not None and dram_gbps is not None:
            fraction = peak_fraction(w.flops, w.bytes, seconds, peak_gflops, dram_gbps)
            bound = bound_kind(w.flops, w.bytes, peak_gflops, dram_gbps)
        rows.append(
            ProfileRow(
                kernel,
                statement,
                seconds,
                w.flops,
                w.bytes,
                w.flops * rate,
                w.bytes * rate,
                fraction,
                bound,
            )
        )
    return sorted(rows, key=lambda r: -r.seconds)
