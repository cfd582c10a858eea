"""``scalarize``: a buffer that only passes a value from a store to later loads becomes a scalar.

For every ``none`` allocation ``X`` of a (non-root) block ``B`` whose uses are
all ``B``'s own ``load``/``store`` statements (no nested block views it, no
special names it), walking ``B``'s statements in order:

* a ``store`` to ``X`` makes the stored scalar ``X``'s current value, and
  disappears;
* a ``load`` of ``X`` disappears; its scalar is replaced, in the statements
  after it, by ``X``'s current value.

Then the refinement of ``X`` disappears.  Typical input: a one-element or
rank-0 buffer (``REGISTER`` allocations) written and read by one block.

Legality: direct loads and stores of a block only touch the element at the
buffer's origin, so ``X`` holds one value per point; stores to an allocation
are plain writes (no aggregation) and statements of one point run in order,
so a load sees the last store before it in the same point.  Not applied when

* a load comes before any store in the point (it would read the allocation's
  initial contents, undefined outside the interpreter);
* a nested block has a view of ``X`` or a special uses it (scalars are not
  visible in nested blocks, and a special reads or writes the whole buffer).

Requires: verified IR.  Guarantees: the same results, verified IR, SSA
scalars, the same object when nothing was scalarized; a second run changes
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..analysis.access import uses
from ..ir.nodes import Block, Load, Program, Refinement, Special, Statement, Store
from ._common import rename_stmt
from ._rewrite import map_blocks
from .registry import register


@register
@dataclass(frozen=True)
class Scalarize:
    """Replace allocations used only by their block's own store-then-loads with scalars (no options)."""

    name: ClassVar[str] = "scalarize"
    layer_local: ClassVar[bool] = True

    def run(self, program: Program) -> Program:
        root = map_blocks(program.root, lambda b, outer: _scalarize_block(b) if outer else b)
        return program if root is program.root else Program(root)


def _scalarize_block(block: Block) -> Block:
    for ref in block.refs:
        if ref.dir != "none":
            continue
        stmts = _scalarized(block.stmts, ref)
        if stmts is not None:
            refs = tuple(r for r in block.refs if r is not ref)
            block = replace(block, refs=refs, stmts=stmts)
    return block


def _scalarized(stmts: tuple[Statement, ...], ref: Refinement) -> tuple[Statement, ...] | None:
    """``stmts`` without the buffer ``ref``, or ``None`` when that is not legal."""
    found = uses(stmts, ref.into, ref.shape.sizes)
    if not found or any(u.path or u.kind not in ("load", "store") for u in found):
        return None
    current: str | None = None
    renames: dict[str, str] = {}
    out: list[Statement] = []
    for s in stmts:
        if isinstance(s, Store) and s.ref == ref.into:
            current = renames.get(s.value, s.value)
            continue
        if isinstance(s, Load) and s.ref == ref.into:
            if current is None:
                return None  # reads the allocation's initial contents
            renames[s.into] = current
            continue
        if renames and not isinstance(s, (Block, Special)):
            s = rename_stmt(s, renames, {})
        out.append(s)
    return tuple(out)
