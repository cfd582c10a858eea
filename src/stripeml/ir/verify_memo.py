"""The keys of the verifier's incremental mode (:func:`stripeml.ir.verifier.verify`
with ``seen``): when a root kernel's rules need not run again.

A root kernel's validity depends only on itself and on what its rules read of
the root refinements it names (their direction, shape and aggregation:
:func:`parent_facts`).  Three keys, cheapest first:

* ``(id(kernel), facts)``: the very kernel, verified under the same facts;
* :func:`twin_key`: the same refinements, statements and constraints (by
  identity) and indices as a set: only the order of its indices or its tags
  differ (``thread`` and ``vectorize`` mark most kernels so).  The rules below
  a kernel's own block-level and tag rules read neither;
* :func:`shape_key`: a kernel equal to a verified one up to the names of its
  refinements, of its scalars (each keeps whether it starts with ``$``) and of
  its blocks, its comments and the order of its blocks' indices, under facts
  equal up to the same renaming: a model's repeated layers (``T18`` in one,
  ``T24`` in the next), a tiled kernel whose inner blocks ``vectorize``
  reordered.  The
  refinement and statement rules read names only to tell them apart (a
  lookup, an equality, a scalar's ``$``), so they answer alike for both, and
  so do the block rules on indices, constraints and refinement names
  (``verifier._KEYED_BLOCK_RULES``); the other block-level rules and the tag
  rules (which read block names, comments and tags) run on every block of
  the nest.

The facts hold each root refinement's shape as a number (one table per memo,
:func:`parent_facts` with ``seen``), so the keys hash in C.

Requires: nothing (keys of any value).  Guarantees: kernels with equal keys
pass or fail the rules that the key lets the verifier skip alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .nodes import Block, Constant, Index, Intrinsic, Load, LoadIndex, Special, Store

if TYPE_CHECKING:
    from .verifier import Scope

__all__ = ["NameNumbers", "UnknownStatement", "parent_facts", "shape_key", "twin_key"]


def parent_facts(block: Block, parent: Scope, seen: dict | None = None) -> tuple:
    """What the rules of ``block`` (a child of ``parent``) read of the refinements it names.

    With ``seen`` (the verifier's memo) a refinement's shape is given as a number,
    equal for equal shapes within that memo (:func:`_root_facts`): a tuple of
    numbers hashes in C, where a :class:`TensorShape` hashes in Python (once per
    distinct shape and root refinement here, instead of at every key lookup)."""
    if seen is not None:
        table = parent._facts  # one table per scope: every kernel of a root asks
        if table is None:
            table = parent._facts = _root_facts(parent, seen)
        return tuple(
            (r.from_, None) if (got := table.get(r.from_) if r.from_ else None) is None
            else (r.from_, *got)
            for r in block.refs
        )  # fmt: skip
    facts = []
    for r in block.refs:
        p = parent.ref(r.from_) if r.from_ else None
        facts.append((r.from_, None) if p is None else (r.from_, p.dir, p.shape, p.agg))
    return tuple(facts)


def _root_facts(parent: Scope, seen: dict) -> dict[str, tuple]:
    """``parent``'s refinements by name (the first of each name, as
    :meth:`Scope.ref` answers), each as ``(dir, shape number, agg)``; built once
    per tuple of refinements (a pass that adds no buffer keeps the root's) and
    kept in ``seen`` with the tuple (its id stays its own).  Shape numbers come
    from one table per memo, so equal facts stay equal and unequal unequal."""
    refs = parent.block.refs
    got = seen.get(("root facts", id(refs)))
    if got is not None:
        return got[1]
    numbers: dict = seen.setdefault(("shape numbers",), {})
    table: dict[str, tuple] = {}
    for r in refs:
        if r.into not in table:
            number = numbers.get(r.shape)
            if number is None:
                number = numbers[r.shape] = len(numbers)
            table[r.into] = (r.dir, number, r.agg)
    seen[("root facts", id(refs))] = (refs, table)
    return table


def twin_key(block: Block, facts: tuple) -> tuple:
    """What a kernel's refinement, statement and nested rules read of it: its
    refinements, statements and constraints (by identity: nodes are immutable),
    its indices as a set (by identity, so a reordered tuple of the same objects
    matches) and the parent facts; not the order of its indices nor its tags."""
    return (
        "twin",
        id(block.refs),
        id(block.stmts),
        id(block.constraints),
        tuple(sorted(map(id, block.idxs))),
        block.name,
        block.comment,
        facts,
    )


def _name(idx: Index) -> str:
    return idx.name


class UnknownStatement(Exception):
    """A statement of no known kind: no key (the rules report it)."""


class NameNumbers:
    """A statement with its names replaced by the order of their first
    appearance: refinement names (a view's, its parent's, what a load, store or
    special names) in one numbering, the empty name -1; scalar names in
    another, each kept with whether it starts with ``$``.  ``block`` makes a
    nested block's value (the caller decides what of a block counts); every
    other field is kept as it is (constants and special params by ``repr``,
    so ``1``, ``1.0`` and ``True`` differ).  The keys of :func:`shape_key`
    and of the pass manager's repeated layers (``passes/_repeats.py``)."""

    __slots__ = ("block", "refs", "scalars")

    def __init__(self, block: Callable[[NameNumbers, Block], tuple]) -> None:
        self.refs: dict[str, int] = {}
        self.scalars: dict[str, tuple[bool, int]] = {}
        self.block = block

    def ref(self, n: str) -> int:
        return self.refs.setdefault(n, len(self.refs)) if n else -1

    def scalar(self, n: str) -> tuple[bool, int]:
        got = self.scalars.get(n)
        if got is None:
            got = self.scalars[n] = (n.startswith("$"), len(self.scalars))
        return got

    def views(self, b: Block) -> tuple:
        """``b``'s refinements, each with its own and its parent's names numbered."""
        ref = self.ref
        return tuple(
            (r.dir, ref(r.into), ref(r.from_), r.shape, r.access, r.agg, r.location, r.offset,
             r.const)
            for r in b.refs
        )  # fmt: skip

    def stmt(self, t: object) -> tuple:
        """``t``'s value; :class:`UnknownStatement` for a statement of no known kind."""
        kind, ref, scalar = type(t), self.ref, self.scalar
        if kind is Load:
            return ("load", scalar(t.into), ref(t.ref))  # type: ignore[attr-defined]
        if kind is Store:
            return ("store", ref(t.ref), scalar(t.value))  # type: ignore[attr-defined]
        if kind is Intrinsic:
            assert isinstance(t, Intrinsic)
            return ("op", t.op, tuple(map(scalar, t.inputs)), scalar(t.into), t.dtype)
        if kind is Constant:
            assert isinstance(t, Constant)
            return ("const", scalar(t.into), repr(t.value), t.dtype)
        if kind is LoadIndex:
            assert isinstance(t, LoadIndex)
            return ("index", scalar(t.into), t.expr)
        if kind is Special:
            assert isinstance(t, Special)
            ins, outs = tuple(map(ref, t.inputs)), tuple(map(ref, t.outputs))
            return ("special", t.op, ins, outs, repr(t.params))
        if kind is Block:
            assert isinstance(t, Block)
            return self.block(self, t)
        raise UnknownStatement


def _shape_block(n: NameNumbers, b: Block) -> tuple:
    idxs = tuple(sorted(b.idxs, key=_name))  # a set: the order is not read
    return (idxs, b.constraints, n.views(b), tuple(map(n.stmt, b.stmts)))


def shape_key(kernel: Block, facts: tuple) -> tuple | None:
    """``kernel`` and its ``facts`` (:func:`parent_facts`) as a value equal for
    two kernels exactly when they differ only in names (see the module
    docstring): every name numbered (:class:`NameNumbers`); block names,
    comments and tags left out (their rules run anyway), each block's indices
    in name order (the rules read them as a set); everything else kept as it
    is.  ``None`` for a kernel holding a statement of no known kind."""
    numbers = NameNumbers(_shape_block)
    try:
        body = _shape_block(numbers, kernel)
    except UnknownStatement:
        return None
    named = tuple((numbers.ref(f[0]), *f[1:]) for f in facts)
    return ("shape", body, named)
