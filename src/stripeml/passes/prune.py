"""``prune``: remove what a block declares but does not need.

Top-down over every block below the root:

1. **indices of range 1**: ``i:1`` takes only the value ``0`` (``i:1 = aff``
   only ``aff``), so it is removed and that value substituted wherever it
   appears: the block's constraints, accesses and ``index`` statements, and
   the index offsets, constraints, accesses and ``index`` statements of every
   nested block.  A constraint left constant and true is dropped;
2. **implied constraints**: a constraint that holds at every point allowed by
   the index box, the other remaining constraints and the enclosing blocks'
   domain (isl decides this exactly) is dropped, one at a time, so the
   remaining ones imply every dropped one;
3. **unused refinements** (after the nested blocks are pruned): a view or
   allocation that no load, store, special or nested view mentions.

Legality: (1) and (2) leave every block's set of points, and the value of
every access at each point, unchanged; (3) removes only names nothing refers
to (an ``out`` view that is never stored to changes no element).

Requires: verified IR.  Guarantees: the same results, verified IR, the same
object when nothing was pruned; a second run changes nothing.  Root
refinements (parameters, results, temporaries) are never removed: unused
temporaries are ``dce``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import ClassVar

from ..ir.affine import Affine
from ..ir.isl import block_domain, exists_point, nest_domain
from ..ir.nodes import (
    Block,
    Constraint,
    Index,
    Load,
    LoadIndex,
    Program,
    Special,
    Statement,
    Store,
)
from .registry import register


@register
@dataclass(frozen=True)
class Prune:
    """Remove range-1 indices, implied constraints and unused refinements (no options)."""

    name: ClassVar[str] = "prune"
    layer_local: ClassVar[bool] = True

    def run(self, program: Program) -> Program:
        root = program.root
        stmts = tuple(_prune(s, (root,)) if isinstance(s, Block) else s for s in root.stmts)
        if all(a is b for a, b in zip(stmts, root.stmts)):
            return program
        return Program(replace(root, stmts=stmts))


def _prune(block: Block, outer: tuple[Block, ...]) -> Block:
    original = block
    block = _drop_unit_indices(block)
    block = _drop_implied_constraints(block, outer)
    stmts = tuple(_prune(s, (*outer, block)) if isinstance(s, Block) else s for s in block.stmts)
    if any(a is not b for a, b in zip(stmts, block.stmts)):
        block = replace(block, stmts=stmts)
    mentioned = _mentioned(block.stmts)
    refs = tuple(r for r in block.refs if r.into in mentioned)
    if len(refs) != len(block.refs):
        block = replace(block, refs=refs)
    return original if block == original else block


# -- 1. indices of range 1 ----------------------------------------------------------------


def _drop_unit_indices(block: Block) -> Block:
    unit = {i.name: i.affine or Affine() for i in block.idxs if i.range == 1}
    if not unit:
        return block
    idxs = tuple(i for i in block.idxs if i.range != 1)
    constraints = []
    for c in block.constraints:
        expr = c.expr.substitute(unit)
        if expr.is_constant and expr.const >= 0:
            continue
        constraints.append(Constraint(expr))
    refs = tuple(replace(r, access=tuple(a.substitute(unit) for a in r.access)) for r in block.refs)
    stmts = tuple(_substitute(s, unit) for s in block.stmts)
    return replace(block, idxs=idxs, constraints=tuple(constraints), refs=refs, stmts=stmts)


def _substitute(s: Statement, values: Mapping[str, Affine]) -> Statement:
    """``s`` with the indices in ``values`` replaced (nested blocks included)."""
    if isinstance(s, LoadIndex):
        return LoadIndex(s.into, s.expr.substitute(values))
    if not isinstance(s, Block):
        return s
    idxs = tuple(Index(i.name, i.range, _offset(i, values)) for i in s.idxs)
    return replace(
        s,
        idxs=idxs,
        constraints=tuple(Constraint(c.expr.substitute(values)) for c in s.constraints),
        refs=tuple(
            replace(r, access=tuple(a.substitute(values) for a in r.access)) for r in s.refs
        ),
        stmts=tuple(_substitute(t, values) for t in s.stmts),
    )


def _offset(idx: Index, values: Mapping[str, Affine]) -> Affine | None:
    """``idx``'s offset with ``values`` substituted; ``None`` for no offset or offset 0."""
    if idx.affine is None:
        return None
    aff = idx.affine.substitute(values)
    return None if aff == Affine() else aff


# -- 2. implied constraints -----------------------------------------------------------------


def _drop_implied_constraints(block: Block, outer: tuple[Block, ...]) -> Block:
    if not block.constraints:
        return block
    around = nest_domain(list(outer))
    kept = list(range(len(block.constraints)))
    for k, c in enumerate(block.constraints):
        others = tuple(block.constraints[j] for j in kept if j != k)
        domain = block_domain(replace(block, constraints=others), around)
        if not exists_point(domain, -c.expr - 1):  # no point has expr < 0
            kept.remove(k)
    if len(kept) == len(block.constraints):
        return block
    return replace(block, constraints=tuple(block.constraints[j] for j in kept))


# -- 3. unused refinements ------------------------------------------------------------------


def _mentioned(stmts: tuple[Statement, ...]) -> set[str]:
    out: set[str] = set()
    for s in stmts:
        if isinstance(s, (Load, Store)):
            out.add(s.ref)
        elif isinstance(s, Special):
            out.update(s.inputs)
            out.update(s.outputs)
        elif isinstance(s, Block):
            out.update(r.from_ for r in s.refs if r.from_)
    return out
