"""Prefetching a register tile's next panel (the ``prefetch`` pass's ``#prefetch``).

A tiled product reads its panels one after another, each once per value of its
kernel's other indices (:func:`stripeml.analysis.panels.streamed_panel`).
When the panels stream from beyond L2, the tile's reduction also asks for a
part of the *next* panel at every trip of its innermost loop, so that panel
arrives over the current panel's passes rather than during its own first
pass (docs/cpu-backend.md, "Prefetching the next panel").
:func:`.llvm_tile.emit_register_tile` calls :func:`next_panel` and
:func:`prefetch_start` before the tile's reduction loops and
:func:`emit_prefetches` at each trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import llvmlite.ir as ir

from ..analysis.panels import streamed_panel
from ..ir.affine import Affine
from ..ir.nodes import Block
from .llvm_plan import Bind
from .llvm_types import I64, PTR, call_intrinsic, mem_type

if TYPE_CHECKING:
    from .llvm_kernel import KernelEmitter

I32 = ir.IntType(32)


@dataclass(frozen=True)
class NextPanel:
    """What a ``#prefetch`` tile fetches of the next panel (:func:`next_panel`)."""

    bind: Bind
    fixed: Affine  # the panel view's offset without the tile's own indices, plus a panel
    stride: int  # elements from one panel to the next
    index: str  # the kernel's index that moves from panel to panel
    passes: tuple[str, ...]  # the kernel's indices that re-read a panel
    red: tuple[tuple[str, int], ...]  # each reduction index, its stride in the panel
    step: int  # reduction steps per trip of the innermost loop


def next_panel(
    g: KernelEmitter,
    blk: Block,
    binds: dict[str, Bind],
    vidx: str,
    unrolled: list[str],
    red: list[str],
    step: int,
) -> NextPanel | None:
    """For a ``#prefetch`` tile (the ``prefetch`` pass), what :func:`emit_prefetches`
    fetches of the next panel (see there); ``None`` for any other tile."""
    if "prefetch" not in blk.tags or not red:
        return None
    panel = streamed_panel(g.kernel, blk)
    if panel is None or panel.ref not in binds:
        return None
    bd = binds[panel.ref]
    own = {vidx, *unrolled, *red}
    fixed = {n: c for n, c in bd.offset.coeffs.items() if n not in own}
    return NextPanel(
        bd,
        Affine.build(fixed, bd.offset.const + panel.stride),
        panel.stride,
        panel.index,
        panel.passes,
        tuple((n, bd.offset.coeff(n)) for n in red),
        step,
    )


def streams_split(kernel: Block, par: str | None) -> bool:
    """Whether a ``#prefetch`` tile of ``kernel`` streams its panels along the
    kernel's thread-split index ``par``: then each chunk of ``par`` runs in the
    order its thread claims chunks (``KernelBuilder.split_loop``), so that the
    next panel it prefetches is the one that thread runs next.  A worker claims
    from the back: run upwards, its chunks of one panel each prefetched the
    panel it had just run, and every panel it ran came from memory during its
    own first pass (ResNet-50's 7 x 7 convolutions, BERT-base's products)."""
    if par is None:
        return False
    for tile in kernel.stmts:
        if isinstance(tile, Block) and "prefetch" in tile.tags:
            panel = streamed_panel(kernel, tile)
            if panel is not None and panel.index == par:
                return True
    return False


def prefetch_start(g: KernelEmitter, plan: NextPanel, env: dict[str, ir.Value]) -> list[ir.Value]:
    """Emitted before a tile's reduction loops: the element offset where this pass
    starts in the next panel, then each reduction index's stride through its
    share, then half a trip's advance.

    Pass ``j`` of ``count`` (the pass indices' mixed-radix value and the product of
    their ranges, runtime bounds where the kernel takes them: one body for every
    sequence length) takes the ``j``-th share of the next panel, ``ceil(stride /
    count)`` elements, and each reduction index moves through it at ``1 / count``
    of its stride in the current panel (rounded up: shares overlap rather than
    leave gaps), so the next panel arrives evenly over the current panel's passes
    instead of at the speed of memory during its own first pass."""
    b = g.b

    def const(v: int) -> ir.Value:
        return ir.Constant(I64, v)

    def ceil_div(x: ir.Value, d: ir.Value) -> ir.Value:
        return b.udiv(b.add(x, b.sub(d, const(1))), d)

    count: ir.Value = const(1)
    j: ir.Value = const(0)
    for name in plan.passes:  # the mixed-radix value, the first pass index most significant
        rng = g.bound_args.get(name, const(g.kernel.idx(name).range))
        j = b.add(b.mul(j, rng), g.affine(Affine.index(name), env))
        count = b.mul(count, rng)
    start = b.add(g.affine(plan.fixed, env), b.mul(j, ceil_div(const(plan.stride), count)))
    if g.split_back is not None and plan.index == g.par:
        # a chunk run downwards (``split_loop``): its next panel is the one below
        start = b.select(g.split_back, b.sub(start, const(2 * plan.stride)), start)
    rates = [ceil_div(const(abs(c)), count) for _, c in plan.red]
    half = b.udiv(b.mul(rates[-1], const(plan.step)), const(2))
    return [start, *rates, half]


def emit_prefetches(
    g: KernelEmitter, plan: NextPanel | None, start: list[ir.Value], env: dict[str, ir.Value]
) -> None:
    """At a trip of the tile's innermost reduction loop: prefetch (a read, into L2,
    ``llvm.prefetch`` with locality 2) the next panel's element at this trip's
    place in this pass's share, and half a trip's advance further: two lines a trip
    whatever the share's size (one is enough where a trip advances a line or less,
    the usual case: 48 bytes a trip in BERT's products), so the code is the same
    for every count of passes."""
    if plan is None:
        return
    b = g.b
    offset, *rates, half = start
    for (name, _), rate in zip(plan.red, rates):
        offset = b.add(offset, b.mul(g.affine(Affine.index(name), env), rate))
    for at in (offset, b.add(offset, half)):
        addr = b.gep(plan.bind.base, [at], source_etype=mem_type(plan.bind.dtype))
        call_intrinsic(
            b,
            "llvm.prefetch",
            [addr, ir.Constant(I32, 0), ir.Constant(I32, 2), ir.Constant(I32, 1)],
            ret=ir.VoidType(),
            overloads=[PTR],
        )
