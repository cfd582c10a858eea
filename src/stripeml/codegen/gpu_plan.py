"""Planning for the GPU code generators: how a kernel's points map onto work-items.

Pure questions about Stripe blocks, kept apart from the printing in
:mod:`.cstyle`:

* ``naive``: the kernel's *parallel indices* are those along which a split is
  race-free (:func:`stripeml.analysis.dependence.race_free_indices`, exact,
  with isl): points that differ in any of them never write one element, nor
  write what another reads, so each point of their box gets its own
  work-item and every other index runs as a loop inside it.  Aggregations
  then never cross work-items: no atomics.
* ``tiled``: a ``#tiled`` kernel (after ``autotile``) or a ``#nest`` (a
  chain of kernels over row blocks, after ``nest``) whose statements are
  leaf blocks (``cache``'s copies, the ``#tile`` compute): its race-free
  indices pick the work-group, its other indices run as loops that the whole
  group takes together, each leaf block's race-free indices are spread over
  the group's work-items, a barrier follows each leaf block, the kernel's own
  allocations live in local memory, and every aggregating output is
  accumulated in registers owned by one work-item (checked here: the one
  block that stores it addresses it through group and work-item indices
  only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..analysis.dependence import race_free_indices
from ..ir.affine import Affine
from ..ir.nodes import Block, Load, Special, Store
from .plan import injective, view_offset

#: Work-items per group for the naive mapping (a multiple of every warp size).
NAIVE_GROUP = 128


@dataclass(frozen=True)
class LeafPlan:
    """How one leaf block of a tiled kernel runs on the group's work-items."""

    threads: tuple[str, ...]  # race-free indices, spread over the work-items
    points: int  # product of their ranges
    per_thread: int  # ceil(points / group_size): strided iterations per work-item
    accumulates: str | None = None  # the kernel ref this block accumulates into (registers)
    strip: str | None = None  # a race-free index each work-item loops over (a register strip)
    strip_range: int = 1


@dataclass(frozen=True)
class KernelPlan:
    mapping: str  # "naive" | "tiled"
    parallel: tuple[str, ...]  # kernel indices bound to work-items (naive) / groups (tiled)
    points: int  # points of the parallel box
    groups: int
    group_size: int
    serial: tuple[str, ...] = ()  # tiled: kernel indices looped by the whole group
    leaves: tuple[LeafPlan, ...] = field(default_factory=tuple)
    registers: tuple[str, ...] = ()  # tiled: kernel refs accumulated in registers


def _points(blk: Block, names) -> int:
    n = 1
    for name in names:
        n *= blk.idx(name).range
    return n


def plan_kernel(
    kernel: Block, max_group_size: int, naive_group: int = NAIVE_GROUP, strip: int = 0
) -> KernelPlan:
    """The mapping of root kernel ``kernel`` (tiled when :func:`plan_tiled` allows it).

    ``strip``: in a tiled kernel, each work-item may loop over up to this many
    points of the accumulating block's unit-stride output index, keeping a
    strip of accumulators (for devices that vectorise a work-item's loops).
    """
    parallel = tuple(race_free_indices(kernel))
    tiled = plan_tiled(kernel, parallel, max_group_size, strip)
    if tiled is not None:
        return tiled
    points = _points(kernel, parallel)
    size = max(1, min(points, naive_group, max_group_size))
    return KernelPlan("naive", parallel, points, -(-points // size), size)


def plan_tiled(
    kernel: Block, parallel: tuple[str, ...], max_group_size: int, strip: int = 0
) -> KernelPlan | None:
    """The tiled mapping of a ``#tiled`` kernel, or ``None`` when it does not apply."""
    if not {"tiled", "nest"} & kernel.tags or not kernel.stmts:
        return None
    leaves = []
    for s in kernel.stmts:
        if not isinstance(s, Block) or s.sub_blocks or any(isinstance(t, Special) for t in s.stmts):
            return None
        leaves.append(s)
    serial = tuple(i.name for i in kernel.idxs if i.name not in parallel)
    # Aggregating outputs: each must be stored by one leaf, at an address made of
    # group and work-item indices only, so that one work-item owns each element
    # across the serial loops and can keep it in a register.
    registers: dict[str, Block] = {}
    for r in kernel.refs:
        if r.dir in ("out", "inout") and r.agg not in ("", "assign"):
            if r.dir == "inout":
                return None
            users = [b for b in leaves if any(v.from_ == r.into for v in b.refs)]
            if len(users) != 1:
                return None
            registers[r.into] = users[0]
    plans_threads = []
    strips: dict[int, str] = {}
    for leaf in leaves:
        threads = tuple(race_free_indices(leaf, (kernel,)))
        if strip > 1 and leaf in registers.values():
            view = next(v for v in leaf.refs if v.from_ in registers and registers[v.from_] is leaf)
            unit = [
                n
                for n in threads
                if sum(a.coeff(n) * st for a, st in zip(view.access, view.shape.strides)) == 1
                and leaf.idx(n).range <= strip
                and leaf.idx(n).affine is None
                and not any(n in c.expr.names for c in leaf.constraints)
            ]
            if unit and len(threads) > 1:
                strips[id(leaf)] = unit[-1]
                threads = tuple(n for n in threads if n != unit[-1])
        plans_threads.append(threads)
    group_size = max(
        1, min(max_group_size, max(_points(b, t) for b, t in zip(leaves, plans_threads)))
    )
    plans = []
    for leaf, threads in zip(leaves, plans_threads):
        points = _points(leaf, threads)
        owner = next((k for k, b in registers.items() if b is leaf), None)
        if owner is not None:
            views = [v for v in leaf.refs if v.from_ == owner]
            stores = [s for s in leaf.stmts if isinstance(s, Store)]
            if len(views) != 1 or len(stores) != 1 or stores[0].ref != views[0].into:
                return None
            if any(isinstance(s, Load) and s.ref == views[0].into for s in leaf.stmts):
                return None
            view = views[0]
            kref = kernel.ref(owner)
            addr = view_offset(Affine(), view)
            mine = set(threads) | ({strips[id(leaf)]} if id(leaf) in strips else set())
            if any(n not in mine for n in addr.names if n in {i.name for i in leaf.idxs}):
                return None
            if any(n in serial for a in kref.access for n in a.names):
                return None
            if not injective(
                addr, leaf, threads + ((strips[id(leaf)],) if id(leaf) in strips else ())
            ):
                return None
            if any(set(c.expr.names) & set(threads) for c in leaf.constraints):
                return None  # a work-item's element might have no point at all
        sname = strips.get(id(leaf))
        srange = leaf.idx(sname).range if sname else 1
        plans.append(LeafPlan(threads, points, -(-points // group_size), owner, sname, srange))
    points = _points(kernel, parallel)
    return KernelPlan(
        "tiled", parallel, points, points, group_size, serial, tuple(plans), tuple(registers)
    )
