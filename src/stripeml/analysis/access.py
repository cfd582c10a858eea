"""The element accesses a block makes, traced through its views down to the statements.

Each ``load``/``store`` (and each ``special``'s input/output) in a block or in
the blocks nested in it touches elements of a buffer of the block's *parent*:
the one its view refines.  Composing the view accesses along the nest gives
the touched elements as affines of the nest's indices::

    block k [m_o:3] (out C[16*m_o, 0] (16, 29)) {
      block [m_i:16, n:29] (out C[m_i, n] (1, 1)) { C = store($x) }
    }

stores to ``C[16*m_o + m_i, n]`` over the domain of the path ``(k, inner)``.
Accesses through a ``none`` allocation of the block or of a nested block are
private to one point and are not listed.

Requires: refs named by statements are declared (verified IR).  Guarantees:
every statement access to a parent buffer is listed exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..ir.affine import Affine
from ..ir.nodes import Block, Load, Refinement, Special, Store

__all__ = ["Access", "accesses"]


@dataclass(frozen=True, slots=True)
class Access:
    """Elements ``exprs + [0, sizes)`` of ``buffer``, read or written at each point of ``path``.

    ``buffer`` is the name in the top block's parent (the top ref's ``from_``),
    ``ref`` the top block's refinement the access goes through, ``path`` the
    blocks from the top block down to the one holding the statement, and
    ``exprs`` one affine per dimension of the buffer in the path's indices.
    """

    buffer: str
    ref: str
    write: bool
    path: tuple[Block, ...]
    exprs: tuple[Affine, ...]
    sizes: tuple[int, ...]
    agg: str = ""


@dataclass(frozen=True, slots=True)
class _Bound:
    top: Refinement
    exprs: tuple[Affine, ...]
    agg: str


def accesses(block: Block) -> list[Access]:
    """Every statement access of ``block`` and its nested blocks to its parent's buffers."""
    scope: dict[str, _Bound | None] = {}
    for r in block.refs:
        scope[r.into] = None if r.dir == "none" else _Bound(r, r.access, r.agg)
    out: list[Access] = []
    _walk(block, (block,), scope, out)
    return out


def _walk(
    block: Block,
    path: tuple[Block, ...],
    scope: Mapping[str, _Bound | None],
    out: list[Access],
) -> None:
    for s in block.stmts:
        if isinstance(s, Load):
            _add(out, scope, path, s.ref, write=False, whole=False, block=block)
        elif isinstance(s, Store):
            _add(out, scope, path, s.ref, write=True, whole=False, block=block)
        elif isinstance(s, Special):
            for name in s.inputs:
                _add(out, scope, path, name, write=False, whole=True, block=block)
            for name in s.outputs:
                _add(out, scope, path, name, write=True, whole=True, block=block)
        elif isinstance(s, Block):
            inner: dict[str, _Bound | None] = {}
            for r in s.refs:
                parent = scope.get(r.from_) if r.dir != "none" else None
                if parent is None:
                    inner[r.into] = None
                    continue
                exprs = tuple(a + b for a, b in zip(parent.exprs, r.access))
                inner[r.into] = _Bound(parent.top, exprs, r.agg or parent.agg)
            _walk(s, path + (s,), inner, out)


def _add(
    out: list[Access],
    scope: Mapping[str, _Bound | None],
    path: tuple[Block, ...],
    name: str,
    *,
    write: bool,
    whole: bool,
    block: Block,
) -> None:
    bound = scope.get(name)
    if bound is None:
        return
    ref = block.ref(name)
    sizes = ref.shape.sizes if whole else (1,) * len(bound.exprs)
    out.append(
        Access(bound.top.from_, bound.top.into, write, path, bound.exprs, tuple(sizes), bound.agg)
    )
