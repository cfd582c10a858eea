"""``vectorize``: choose the index a leaf block runs in SIMD lanes.

For each selected leaf block, the index that can run in vector lanes (unit
stride in every view it writes, stride 0 or 1 in every view it reads, no index
offset, range at least ``width``) is moved last in the block's index list and
the block is tagged ``#vector``.  Index order has no meaning in Stripe (points
are unordered), so this only informs code generators: the CPU backend runs
the last index of a ``#vector`` block ``width`` lanes at a time (LLVM vector
types) with a scalar tail.  Blocks with no such index are left alone.

Requires: verified IR.  Guarantees: the same program up to index order and
tags (so the same results), and the same object when nothing applies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..analysis.access import index_stride
from ..analysis.select import parse_selector
from ..ir.nodes import Block, Program, Statement
from .registry import check_positive, check_selector, register


@register
@dataclass(frozen=True)
class Vectorize:
    """Tag leaf blocks ``#vector`` with their SIMD index last (option: ``width``)."""

    width: int = 8
    select: str = "kernel"
    name: ClassVar[str] = "vectorize"
    layer_local: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_selector(self)
        check_positive(self, "width")

    def run(self, program: Program) -> Program:
        root = program.root
        stmts = tuple(self._visit(s, False) for s in root.stmts)
        return program if stmts == root.stmts else Program(root.with_stmts(stmts))

    def _visit(self, s: Statement, inside: bool) -> Statement:
        if not isinstance(s, Block):
            return s
        selected = inside or parse_selector(self.select)(s.tags)
        if s.sub_blocks:
            return s.with_stmts(tuple(self._visit(c, selected) for c in s.stmts))
        if not selected or "vector" in s.tags:
            return s
        name = _vector_index(s, self.width)
        if name is None:
            return s
        idxs = tuple(i for i in s.idxs if i.name != name) + (s.idx(name),)
        return replace(s, idxs=idxs, tags=s.tags | {"vector"})


def _vector_index(b: Block, width: int) -> str | None:
    writes = [r for r in b.refs if r.dir in ("out", "inout")]
    if not writes or any(r.dir == "none" for r in b.refs):
        return None
    for idx in reversed(b.idxs):
        if idx.affine is not None or idx.range < width:
            continue
        if all(index_stride(r, idx.name) == 1 for r in writes) and all(
            index_stride(r, idx.name) in (0, 1) for r in b.refs if r.dir == "in"
        ):
            return idx.name
    return None
