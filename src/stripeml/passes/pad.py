"""``pad``: round the row pitch of allocations up to a multiple of ``multiple`` elements.

For every ``none`` allocation (root temporaries and allocations of blocks) in
one of ``locations`` with a dense row-major layout, rank >= 2 and an innermost
size ``n > 1`` that is not a multiple of ``multiple``: the innermost size is
rounded up to ``m = ceil(n / multiple) * multiple`` for the purpose of the
layout, i.e. the strides become the dense strides of
``sizes[:-1] + (m,)`` (``f32(3, 5):(5, 1)`` becomes ``f32(3, 5):(8, 1)`` for
``multiple=8``).  Every view that refines the allocation, at any depth, takes
the new strides (views keep their parent's strides).  Rows then start on
``multiple``-element boundaries (a vector width or a cache line), at the cost
of ``m - n`` unused elements per row.

Legality: the logical shape, and every access (in elements of each
dimension), is unchanged; only the mapping of elements to memory changes, and
no two elements share memory (``m >= n``).  A padded allocation's ``offset``
is cleared: its size changed, so ``place`` must run (again) after ``pad``.

Options: ``multiple`` (elements, never negative; 0 or 1 disables the pass), ``locations``
(memories whose allocations are padded; empty: every location but
``REGISTER``).

Requires: verified IR.  Guarantees: the same results, verified IR, the same
object when nothing was padded; a second run changes nothing (padded layouts
are no longer dense, and are left alone).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..ir.nodes import Block, Program, TensorShape
from ._rewrite import dense_strides, map_blocks, retarget
from .registry import check_location_names, check_non_negative, register


@register
@dataclass(frozen=True)
class Pad:
    """Pad the rows of dense allocations to a multiple of ``multiple`` elements.

    ``locations``: the memories to pad in (a list or a comma-separated string;
    empty: all but ``REGISTER``).
    """

    multiple: int = 8
    locations: tuple[str, ...] = ()
    name: ClassVar[str] = "pad"
    layer_local: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_non_negative(self, "multiple")
        object.__setattr__(self, "locations", check_location_names(self, "locations"))

    def run(self, program: Program) -> Program:
        if self.multiple <= 1:
            return program
        root = map_blocks(program.root, lambda b, _outer: self._pad_block(b))
        return program if root is program.root else Program(root)

    def _wanted(self, location: str) -> bool:
        if self.locations:
            return location in self.locations
        return location != "REGISTER"

    def _pad_block(self, block: Block) -> Block:
        refs = list(block.refs)
        stmts = block.stmts
        for k, ref in enumerate(refs):
            sizes = ref.shape.sizes
            if ref.dir != "none" or not self._wanted(ref.location) or len(sizes) < 2:
                continue
            if min(sizes) < 1 or sizes[-1] <= 1 or sizes[-1] % self.multiple == 0:
                continue
            if ref.shape.strides != dense_strides(sizes):
                continue
            pitch = -(-sizes[-1] // self.multiple) * self.multiple
            strides = dense_strides((*sizes[:-1], pitch))
            shape = TensorShape(ref.shape.dtype, sizes, strides)
            refs[k] = replace(ref, shape=shape, offset=None)
            stmts = retarget(stmts, ref.into, ref.into, strides)
        if tuple(refs) == block.refs:
            return block
        return replace(block, refs=tuple(refs), stmts=stmts)
