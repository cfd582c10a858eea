"""``prefetch``: fetch a tiled product's next panel while the current one is in use.

A register-tiled product (``unroll``) reads its vector operand panel after
panel, each panel once per value of the kernel's other indices (a matmul's row
blocks, a convolution's output columns).  When the panels together exceed the
cache a core keeps them in (``cache_bytes``, the target's L2), each panel's
first pass reads it from beyond that cache: the weights of a model's later
layers, which the layers before evicted, come from L3 or DRAM at that memory's
speed during one pass out of seven (ResNet-50's last 3 x 3 convolutions) or
sixteen (BERT's feed-forward products), while the other passes wait on
nothing.  This pass tags such a tile ``#prefetch``; the CPU code generator
then has each step of the tile's reduction ask for a part of the *next* panel
(``llvm.prefetch`` into L2), so its fetch spreads evenly over all the passes
over the current panel (docs/cpu-backend.md, "Prefetching the next panel").

A tile (:func:`~stripeml.analysis.panels.streamed_panel`) is tagged when:

* its panels are at least ``min_panel_bytes`` apart (smaller ones stream well
  enough by the hardware's own prefetchers);
* the buffer of panels exceeds ``cache_bytes``: otherwise they all stay there
  from one pass to the next, and a run after the first finds them there;
* two panels and the kernel's other inputs (whole root buffers) fit
  ``cache_bytes``: the next panel must not push out the current one or the
  rows that pass over it (a 49 x 4608 product's 903 KB of rows and two 590 KB
  panels in a 2 MiB L2 ran 11% slower with the prefetches).

``cache_bytes`` 0 (the default, and any target that does not set it) tags
nothing.  ``stripeml tune`` turns it off per kernel (``enabled``).

Requires: verified IR.  Guarantees: the same program up to tags (so the same
results), and the same object when nothing applies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..analysis.memory import allocation_bytes
from ..analysis.panels import StreamedPanel, streamed_panel
from ..analysis.select import parse_selector
from ..ir.nodes import Block, Program, Statement
from .registry import check_non_negative, check_selector, register


@register
@dataclass(frozen=True)
class Prefetch:
    """Tag register tiles whose next panel should be fetched during the current one
    ``#prefetch`` (options: ``cache_bytes``, ``min_panel_bytes``, ``enabled``)."""

    cache_bytes: int = 0
    min_panel_bytes: int = 16384
    enabled: bool = True
    select: str = "kernel"
    name: ClassVar[str] = "prefetch"
    layer_local: ClassVar[bool] = True
    tunable: ClassVar[dict[str, tuple[object, ...]]] = {"enabled": (True, False)}

    def __post_init__(self) -> None:
        check_selector(self)
        check_non_negative(self, "cache_bytes", "min_panel_bytes")

    def run(self, program: Program) -> Program:
        if not self.enabled or not self.cache_bytes:
            return program
        wanted = parse_selector(self.select)
        root = program.root
        sizes = {r.into: allocation_bytes(r) for r in root.refs}
        stmts: list[Statement] = []
        changed = False
        for s in root.stmts:
            if isinstance(s, Block) and wanted(s.tags) and s.sub_blocks:
                new = self._kernel(s, sizes)
                changed |= new is not s
                s = new
            stmts.append(s)
        return Program(root.with_stmts(tuple(stmts))) if changed else program

    def _kernel(self, kernel: Block, sizes: dict[str, int]) -> Block:
        stmts = []
        for t in kernel.stmts:
            if isinstance(t, Block) and "prefetch" not in t.tags:
                panel = streamed_panel(kernel, t)
                if panel is not None and self._worth(kernel, panel, sizes):
                    t = replace(t, tags=t.tags | {"prefetch"})
            stmts.append(t)
        if all(a is b for a, b in zip(stmts, kernel.stmts)):
            return kernel
        return kernel.with_stmts(tuple(stmts))

    def _worth(self, kernel: Block, panel: StreamedPanel, sizes: dict[str, int]) -> bool:
        if panel.panel_bytes < self.min_panel_bytes:
            return False
        src = kernel.ref(panel.source)
        source = src.from_ or src.into
        if sizes.get(source, 0) <= self.cache_bytes:
            return False
        others = sum(
            sizes.get(r.from_ or r.into, 0)
            for r in kernel.refs
            if r.dir in ("in", "inout") and (r.from_ or r.into) != source
        )
        return 2 * panel.panel_bytes + others <= self.cache_bytes
