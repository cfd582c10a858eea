"""The Memory section's data: where each allocation lives and when.

The ``place`` pass gives each ``none`` allocation an ``offset`` in its
location's arena (:mod:`stripeml.passes.place`); its liveness is
:func:`stripeml.analysis.liveness.live_ranges`, the very answer ``place``
used.  The picture's horizontal axis is the **program step**: root statement
``k`` spans ``[k, k + 1)``.  A nested block's allocations live inside one step
of its parent, so that step is divided evenly among the block's statements
(its allocations are live over the statements that use them, for each point of
the block: the arena is per point, like a stack frame).

Allocations without an offset (a location ``place`` did not plan, nested
blocks on a target that places the root only, or no ``place`` in the
pipeline) are drawn stacked one above the other, above the placed ones, as
:func:`stripeml.analysis.memory.peak_bytes` counts them (each its own space).
Constant temporaries (:mod:`stripeml.analysis.constness`: computed once from
constant parameters, kept across runs, so ``place`` gives them no offset) are
live over the whole program.  ``REGISTER`` allocations are registers, not
memory, and are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ..analysis.constness import constness
from ..analysis.liveness import live_ranges
from ..analysis.memory import allocation_bytes, own_allocations, peak_bytes
from ..analysis.roofline import step_name
from ..ir.nodes import Block, Program, Refinement, Special, Statement, Store
from ..targets import Target


@dataclass(frozen=True)
class Buffer:
    """One allocation as drawn: ``[start, end)`` steps by ``[offset, offset + size)`` bytes."""

    name: str
    location: str
    offset: int  # as placed; for an unplaced one, where the picture stacks it
    size: int
    start: float
    end: float
    placed: bool
    constant: bool  # a constant temporary: computed once, kept for the program's life
    shape: str  # ``f32(64, 128)``
    kernel: str  # the kernel it belongs to ("" for a root temporary)
    statement: str  # the source statement that writes it (or of its kernel)
    live: str  # the live range in words
    from_start: bool  # its initial (zero) contents are read


@dataclass
class Location:
    """One memory location's buffers, its peak and the target's capacity."""

    name: str
    capacity: int | None
    peak: int
    buffers: list[Buffer] = field(default_factory=list)


def memory_map(program: Program, target: Target) -> list[Location]:
    """Every location with allocations, in the target's order (slowest first)."""
    root = program.root
    order = [m.name for m in target.memories]
    peaks = peak_bytes(program)
    locations: dict[str, Location] = {}

    def location(name: str) -> Location:
        if name not in locations:
            capacity = target.memory(name).size_bytes if name in order else None
            locations[name] = Location(name, capacity, peaks.get(name, 0))
        return locations[name]

    n = max(len(root.stmts), 1)
    kept = constness(program).temporaries
    allocs = [r for r in own_allocations(root) if r.location != "REGISTER"]
    for r, (a, b) in zip(allocs, live_ranges(root, allocs, ()).values()):
        writer = _first_writer(root.stmts, r.into, max(a, 0))
        statement = ""
        if writer is not None:
            stmt = root.stmts[writer]
            statement = stmt.comment if isinstance(stmt, Block) else ""
        if r.into in kept:
            a, b = 0, n - 1
            live = "the whole program: a constant temporary, computed once from constants"
        else:
            live = f"steps {max(a, 0)}-{b}" if b > max(a, 0) else f"step {b}"
        if writer is not None:
            live += f" (written first by {step_name(writer, root.stmts[writer])})"
        location(r.location).buffers.append(
            _buffer(
                r,
                float(max(a, 0)),
                float(min(b + 1, n)),
                "",
                statement,
                live,
                a < 0,
                r.into in kept,
            )
        )
    for k, stmt in enumerate(root.stmts):
        if isinstance(stmt, Block):
            _nested(stmt, (root,), float(k), 1.0, step_name(k, stmt), stmt.comment, location)
    for loc in locations.values():
        _stack(loc)
    ordered = [locations[name] for name in order if name in locations]
    return ordered + [loc for name, loc in locations.items() if name not in order]


def _stack(loc: Location) -> None:
    """Give the unplaced buffers of ``loc`` offsets one above the other, above the placed ones."""
    free = max([b.offset + b.size for b in loc.buffers if b.placed] + [0])
    for constant in (False, True):  # the constants last: on top of everything
        for k, b in enumerate(loc.buffers):
            if not b.placed and b.constant == constant:
                loc.buffers[k] = replace(b, offset=free)
                free += b.size


def _nested(
    block: Block,
    outer: tuple[Block, ...],
    x0: float,
    width: float,
    kernel: str,
    statement: str,
    location: Callable[[str], Location],
) -> None:
    allocs = [r for r in own_allocations(block) if r.location != "REGISTER"]
    n = max(len(block.stmts), 1)
    step = width / n
    where = " / ".join(blk.name or "(block)" for blk in (*outer[1:], block))
    for r, (a, b) in zip(allocs, live_ranges(block, allocs, outer).values()):
        live = f"inside {where}, its statements {max(a, 0)}-{b} of {n} (each point its own copy)"
        location(r.location).buffers.append(
            _buffer(r, x0 + step * max(a, 0), x0 + step * (b + 1), kernel, statement, live, a < 0)
        )
    for j, stmt in enumerate(block.stmts):
        if isinstance(stmt, Block):
            _nested(stmt, (*outer, block), x0 + step * j, step, kernel, statement, location)


def _buffer(
    r: Refinement,
    start: float,
    end: float,
    kernel: str,
    statement: str,
    live: str,
    from_start: bool,
    constant: bool = False,
) -> Buffer:
    shape = f"{r.shape.dtype}({', '.join(map(str, r.shape.sizes))})"
    return Buffer(
        r.into,
        r.location,
        r.offset if r.offset is not None else 0,
        allocation_bytes(r),
        start,
        end,
        r.offset is not None,
        constant,
        shape,
        kernel,
        statement,
        live,
        from_start,
    )


def _first_writer(stmts: Sequence[Statement], name: str, start: int) -> int | None:
    """The first root statement from ``start`` on that writes ``name``."""
    for k in range(start, len(stmts)):
        s = stmts[k]
        if isinstance(s, Block) and any(
            r.from_ == name and r.dir in ("out", "inout") for r in s.refs
        ):
            return k
        if (isinstance(s, Special) and name in s.outputs) or (
            isinstance(s, Store) and s.ref == name
        ):
            return k
    return None
