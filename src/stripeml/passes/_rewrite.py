"""Rewriting helpers shared by passes (not a pass itself; the questions are ``analysis/``).

* **retargeting** a buffer's uses: renaming it, shifting the views that
  refine it and giving them (and every view below them) new strides, since
  views keep their parent's strides (``localize``, ``cache``, ``pad``);
* :func:`map_blocks`: rewrite every block of a tree, children first, keeping
  the identity of what did not change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ..ir.affine import Affine
from ..ir.nodes import Block, Load, Refinement, Special, Statement, Store, TensorShape


def dense_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """The row-major strides of a buffer of ``sizes``."""
    return TensorShape.dense("f32", tuple(sizes)).strides


def with_strides(ref: Refinement, strides: tuple[int, ...]) -> Refinement:
    """``ref`` with ``strides`` (itself when it has them already)."""
    if ref.shape.strides == strides:
        return ref
    return replace(ref, shape=TensorShape(ref.shape.dtype, ref.shape.sizes, strides))


def retarget(
    stmts: Sequence[Statement],
    old: str,
    new: str,
    strides: tuple[int, ...],
    shift: Sequence[Affine] | None = None,
) -> tuple[Statement, ...]:
    """``stmts`` with the buffer ``old`` renamed ``new`` and re-laid out.

    Loads, stores and specials of ``old`` name ``new``; views of nested blocks
    that refine ``old`` refine ``new``, start ``shift`` earlier (per
    dimension) and have ``strides``, and so do all views below them.
    """
    out: list[Statement] = []
    for s in stmts:
        if isinstance(s, Load) and s.ref == old:
            s = Load(s.into, new)
        elif isinstance(s, Store) and s.ref == old:
            s = Store(new, s.value)
        elif isinstance(s, Special) and old in s.inputs + s.outputs:
            s = replace(
                s,
                inputs=tuple(new if i == old else i for i in s.inputs),
                outputs=tuple(new if o == old else o for o in s.outputs),
            )
        elif isinstance(s, Block) and any(r.from_ == old for r in s.refs):
            refs = []
            body = s.stmts
            for r in s.refs:
                if r.from_ == old:
                    access = r.access
                    if shift is not None:
                        access = tuple(a - d for a, d in zip(r.access, shift))
                    r = with_strides(replace(r, from_=new, access=access), strides)
                    body = retarget(body, r.into, r.into, strides)
                refs.append(r)
            s = replace(s, refs=tuple(refs), stmts=body)
        out.append(s)
    return tuple(out)


def map_blocks(
    block: Block, fn: Callable[[Block, tuple[Block, ...]], Block], outer: tuple[Block, ...] = ()
) -> Block:
    """Apply ``fn(block, enclosing blocks)`` to every block, children first.

    ``fn`` sees the block with its children already rewritten and the
    enclosing blocks as they were; it returns the block itself when it has
    nothing to change, so unchanged trees keep their identity.
    """
    inner = (*outer, block)
    stmts = tuple(map_blocks(s, fn, inner) if isinstance(s, Block) else s for s in block.stmts)
    if any(a is not b for a, b in zip(stmts, block.stmts)):
        block = replace(block, stmts=stmts)
    return fn(block, outer)
