"""``alias_default``: a ``default`` copy into a fresh buffer becomes the same buffer.

A Tile statement with ``default D`` lowers to a ``#fill`` kernel that copies
all of ``D`` into the fresh result ``T``, then the contraction that overwrites
part of ``T``.  A concatenation of k inputs is such a chain, so it copies the
whole result k - 1 times.  When ``D`` is a root temporary that nothing reads
after the copy, and ``T`` a root temporary of the same layout that nothing
touched before it, the copy is removed and every later statement uses ``D``'s
storage for ``T``: their views keep the name ``T`` and refine ``D``
(``out T = D[...]``), and ``T`` leaves the root.  Every element of ``T``
then holds what the copy would have put there, because the copy covered all
of ``T`` and ``D`` is never read again.

Applies to a root ``#fill`` kernel whose only statements are ``$d = load(D)``
and ``T = store($d)``, with identity accesses over the whole of both buffers
and no constraints.

Requires: verified IR.  Guarantees: the same program results, verified IR,
and the same object when nothing applies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..ir.affine import Affine
from ..ir.nodes import Block, Program, Refinement, Special, Statement
from ._common import copy_views, reads, rewrite_until_fixed, writes
from .registry import register


@register
@dataclass(frozen=True)
class AliasDefault:
    """Remove a ``default`` copy whose source is dead afterwards (no options)."""

    name: ClassVar[str] = "alias_default"
    layer_local: ClassVar[bool] = True

    def run(self, program: Program) -> Program:
        def at(root: Block, i: int) -> Block | None:
            pair = _copy_of_dead_default(root, i)
            return None if pair is None else _alias(root, i, *pair)

        root = rewrite_until_fixed(program.root, at)
        return program if root is program.root else Program(root)


def _copy_of_dead_default(root: Block, i: int) -> tuple[str, str] | None:
    """``(D, T)`` when root statement ``i`` is a whole-buffer copy of ``D`` into ``T``
    that can become an alias (see the module docstring)."""
    s = root.stmts[i]
    views = copy_views(s)
    if views is None or not isinstance(s, Block) or "fill" not in s.tags:
        return None
    src, dst = views
    d, t = src.from_, dst.from_
    if not d or not t or d == t:
        return None
    buffers = {r.into: r for r in root.refs}
    rd, rt = buffers.get(d), buffers.get(t)
    if rd is None or rt is None or rd.dir != "none" or rt.dir != "none":
        return None
    if rd.shape != rt.shape or rd.location != rt.location or rd.offset or rt.offset:
        return None
    identity = tuple(Affine.index(x.name) for x in s.idxs)
    sizes = tuple(x.range for x in s.idxs)
    for r in (src, dst):
        if r.access != identity or r.shape.sizes != (1,) * len(sizes):
            return None
        if r.shape.strides != rd.shape.strides:
            return None
    if sizes != rd.shape.sizes:
        return None
    later, earlier = root.stmts[i + 1 :], root.stmts[:i]
    if any(d in reads(x) or d in writes(x) for x in later):
        return None
    if any(t in reads(x) or t in writes(x) for x in earlier):
        return None
    return d, t


def _alias(root: Block, i: int, d: str, t: str) -> Block:
    """``root`` without statement ``i``, later statements using ``d`` for ``t``."""
    later = tuple(_rename(x, t, d) for x in root.stmts[i + 1 :])
    refs = tuple(r for r in root.refs if r.into != t)
    return replace(root, refs=refs, stmts=root.stmts[:i] + later)


def _rename(stmt: Statement, old: str, new: str) -> Statement:
    """A root statement with the root buffer ``old`` read and written as ``new``."""
    if isinstance(stmt, Special):
        return replace(
            stmt,
            inputs=tuple(new if x == old else x for x in stmt.inputs),
            outputs=tuple(new if x == old else x for x in stmt.outputs),
        )
    if isinstance(stmt, Block) and any(r.from_ == old for r in stmt.refs):
        refs: list[Refinement] = [replace(r, from_=new) if r.from_ == old else r for r in stmt.refs]
        return replace(stmt, refs=tuple(refs))
    return stmt
