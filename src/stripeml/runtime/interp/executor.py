"""The general execution path: blocks over whole chunks of points at once.

A block runs for a chunk of points (parent points x a sub-box of its indices,
filtered by its constraints).  Each statement runs once for the whole chunk:
a ``load`` gathers one value per point from the flat storage, an intrinsic
works on arrays, a ``store`` scatters through the aggregation, and a nested
block runs on the cross product of the chunk's points with its own box.
Chunking is legal because points are unordered; aggregation scopes combine
across chunks in their :class:`~.memory.Accumulator`.
"""

from __future__ import annotations

import numpy as np

from ...errors import ExecutionError
from ...ir.dtypes import to_numpy
from ...ir.nodes import (
    Block,
    Constant,
    Intrinsic,
    Load,
    LoadIndex,
    Refinement,
    Special,
    Statement,
    Store,
)
from ..host import check_memory
from .arena import block_storages
from .fastpath import try_fast
from .frame import Frame, Options, View, alloc_origin, constant, flat_offset, write
from .intrinsics import apply_intrinsic
from .memory import Accumulator, RefState
from .points import BoxPoints, iter_chunks
from .specials import run_special
from .traffic import Traffic


def exec_stmts(stmts: tuple[Statement, ...], frame: Frame, opts: Options) -> None:
    """Run ``stmts`` in order, each for all points of ``frame`` at once."""
    refs, scalars, traffic = frame.refs, frame.scalars, opts.traffic
    for s in stmts:
        if isinstance(s, Load):
            st = refs[s.ref]
            scalars[s.into] = np.take(st.storage, st.base)
            if traffic is not None:
                traffic.read(st.ref, st.storage, st.base.size)
        elif isinstance(s, Store):
            st = refs[s.ref]
            values = np.broadcast_to(scalars[s.value], st.base.shape)
            write(st, st.base, values)
            if traffic is not None:
                traffic.write(st.ref, st.storage, st.base.size)
        elif isinstance(s, Intrinsic):
            scalars[s.into] = apply_intrinsic(s.op, [scalars[i] for i in s.inputs], s.dtype)
        elif isinstance(s, Constant):
            scalars[s.into] = constant(s.value, s.dtype)
        elif isinstance(s, LoadIndex):
            scalars[s.into] = frame.points.eval(s.expr)
        elif isinstance(s, Block):
            run_block(s, frame, opts)
        elif isinstance(s, Special):
            run_special(s, refs, write)
            if traffic is not None:
                _count_special(s, refs, traffic)
        else:  # pragma: no cover - the statement union is closed
            raise ExecutionError(f"unknown statement {s!r}")


def run_block(block: Block, parent: Frame, opts: Options) -> None:
    """Run ``block`` nested in every point of ``parent``."""
    if parent.points.n == 0:
        return
    scopes: list[Accumulator] = []
    views: list[View] = []
    allocs: list[Refinement] = []
    for ref in block.refs:
        if ref.dir == "none":
            allocs.append(ref)
            continue
        pstate = parent.refs[ref.from_]
        sink = None
        if ref.dir in ("out", "inout"):
            sink = pstate.sink
            if sink is None:  # the parent has no aggregation: this block is the scope
                sink = Accumulator(pstate.storage, ref.agg, ref.dir == "inout", ref.into)
                scopes.append(sink)
        views.append(View(ref, pstate, flat_offset(ref), sink))

    if allocs or opts.mode == "general" or not try_fast(block, parent, views, opts):
        _run_chunks(block, parent, views, allocs, opts)
    for sink in scopes:
        sink.commit()


def _run_chunks(
    block: Block, parent: Frame, views: list[View], allocs: list[Refinement], opts: Options
) -> None:
    offsets = [parent.points.eval(i.affine) if i.affine is not None else 0 for i in block.idxs]
    names = [i.name for i in block.idxs]
    per_point = sum(r.shape.extent for r in allocs)
    limit = opts.chunk_points
    if per_point:
        limit = max(1, min(limit, 4 * opts.chunk_points // per_point))
    for g0, g1, starts, lens in iter_chunks(block, parent.points, limit):
        points = BoxPoints(parent.points, g0, g1, names, offsets, starts, lens, block)
        if points.n == 0:
            continue
        refs: dict[str, RefState] = {}
        for v in views:
            base = points.eval(v.flat, extra=v.parent.base)
            refs[v.ref.into] = RefState(v.ref, v.parent.storage, base, v.sink)
        if allocs:  # per point of the chunk: a mutated size may ask for terabytes
            check_memory(
                f"running block {block.name or '(unnamed)'}",
                [
                    (f"allocation {r.into!r} x {points.n} points", points.n * _alloc_bytes(r))
                    for r in allocs
                ],
            )
        shared = block_storages(allocs, points.n) if opts.arena else {}
        for r in allocs:
            shape = r.shape
            if r.into in shared:
                storage, base = shared[r.into]
            else:
                storage = np.zeros(points.n * shape.extent, dtype=to_numpy(shape.dtype))
                origin = alloc_origin(shape.sizes, shape.strides)
                base = np.arange(points.n, dtype=np.int64) * shape.extent + origin
            refs[r.into] = RefState(r, storage, base, None)
            if opts.traffic is not None:
                opts.traffic.place(storage, r.location)
        exec_stmts(block.stmts, Frame(points, refs), opts)


def _alloc_bytes(r: Refinement) -> int:
    return r.shape.extent * to_numpy(r.shape.dtype).itemsize


def _count_special(s: Special, refs: dict[str, RefState], traffic: Traffic) -> None:
    """A special reads its input views and writes its output view, whole, per point."""
    for names, count in ((s.inputs, traffic.read), (s.outputs, traffic.write)):
        for name in names:
            st = refs[name]
            count(st.ref, st.storage, st.base.size * st.ref.shape.elem_count)
