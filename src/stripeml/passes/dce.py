"""``dce``: remove computation whose results nobody observes.

Walking the root statements backwards with the set of *live* root buffers
(every parameter and result, plus whatever a kept statement reads):

* a store to a view of a dead root ``none`` temporary, or of a block's
  ``none`` allocation that nothing reads, is removed;
* a block left writing nothing (no ``out``/``inout`` view, no special) is
  removed, a kernel writing only dead temporaries included; so is a root
  special whose outputs are all dead temporaries;
* scalar statements whose value is not used are removed (loads, indices,
  constants and intrinsics have no effects);
* views and allocations of non-root blocks that nothing mentions any more are
  removed, and so are root ``none`` temporaries that no statement mentions.

It repeats until nothing changes.

Requires: verified IR.  Guarantees: the same program results (stores that
could only be observed through a dead buffer are gone), verified IR, and the
same object when nothing was dead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..ir.nodes import (
    Block,
    Constant,
    Intrinsic,
    Load,
    LoadIndex,
    Program,
    Special,
    Statement,
    Store,
)
from ._common import WRITE_DIRS, reads, writes
from .registry import register


@register
@dataclass(frozen=True)
class Dce:
    """Remove dead kernels, dead stores, dead scalars and unused buffers (no options)."""

    name: ClassVar[str] = "dce"
    layer_local: ClassVar[bool] = True

    def run(self, program: Program) -> Program:
        root = program.root
        while True:
            new = _clean_root(root)
            if new == root:
                break
            root = new
        return program if root is program.root else Program(root)


def _clean_root(root: Block) -> Block:
    temps = {r.into for r in root.refs if r.dir == "none"}
    live = {r.into for r in root.refs} - temps
    kept: list[Statement] = []
    for stmt in reversed(root.stmts):
        if isinstance(stmt, Special):
            if not stmt.outputs or not all(o in temps and o not in live for o in stmt.outputs):
                kept.append(stmt)
                live |= reads(stmt)
            continue
        if isinstance(stmt, Block):
            # Membership tests, not ``temps - live``: that set is as large as the program.
            dead = {
                r.into
                for r in stmt.refs
                if r.dir == "out" and r.from_ in temps and r.from_ not in live
            }
            cleaned = _clean_block(stmt, frozenset(dead))
            if cleaned is not None:
                kept.append(cleaned)
                live |= reads(cleaned)
            continue
        kept.append(stmt)  # pragma: no cover - the root holds blocks and specials
    kept.reverse()
    mentioned = set().union(*(reads(s) | writes(s) for s in kept)) if kept else set()
    refs = tuple(r for r in root.refs if r.dir != "none" or r.into in mentioned)
    new = replace(root, refs=refs) if refs != root.refs else root
    return new.with_stmts(tuple(kept)) if tuple(kept) != root.stmts else new


def _clean_block(block: Block, dead_views: frozenset[str]) -> Block | None:
    """``block`` without dead work; ``None`` when it no longer writes anything.

    ``dead_views`` are ``out`` views of this block whose stores nobody can see.
    """
    read_here = _read_refs(block)
    dead = set(dead_views) | {
        r.into for r in block.refs if r.dir == "none" and r.into not in read_here
    }
    used: set[str] = set()
    kept: list[Statement] = []
    for s in reversed(block.stmts):
        if isinstance(s, Store):
            if s.ref in dead:
                continue
            used.add(s.value)
        elif isinstance(s, (Load, LoadIndex, Constant, Intrinsic)):
            if s.into not in used:
                continue
            if isinstance(s, Intrinsic):
                used.update(s.inputs)
        elif isinstance(s, Block):
            sub_dead = {r.into for r in s.refs if r.dir == "out" and r.from_ in dead}
            cleaned = _clean_block(s, frozenset(sub_dead))
            if cleaned is None:
                continue
            s = cleaned
        kept.append(s)
    kept.reverse()
    mentioned = _mentioned_refs(kept)
    refs = tuple(r for r in block.refs if r.into in mentioned)
    if not any(r.dir in WRITE_DIRS for r in refs) and not any(isinstance(s, Special) for s in kept):
        return None
    new = replace(block, refs=refs) if refs != block.refs else block
    return new.with_stmts(tuple(kept))


def _read_refs(block: Block) -> set[str]:
    """Refs of ``block`` whose contents something in it reads."""
    out: set[str] = set()
    for s in block.stmts:
        if isinstance(s, Load):
            out.add(s.ref)
        elif isinstance(s, Special):
            out.update(s.inputs)
        elif isinstance(s, Block):
            out.update(r.from_ for r in s.refs if r.dir in ("in", "inout"))
    return out


def _mentioned_refs(stmts: list[Statement]) -> set[str]:
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
