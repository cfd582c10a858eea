"""Coverage: does a block write every element of the buffer one of its views refines?

The elements written through a view ``R`` of a block are the images of the
stores (and special outputs) that go through ``R``, over their nests' domains
(:mod:`.access`).  Their union is compared with the whole parent buffer
``[0, sizes)``; for a block nested in others (``outer``), for every point of
the enclosing blocks.  An element nobody writes keeps its previous contents,
which is why fusion into a register and the dropping of a fill need this.

Requires: verified IR.  Guarantees: exact (isl set difference).
"""

from __future__ import annotations

from collections.abc import Sequence

import islpy as isl

from ..ir.affine import Affine
from ..ir.isl import constrain, set_space
from ..ir.nodes import Block
from .access import accesses
from .domain import domain_in, nest_inequalities, nest_names, project_onto

__all__ = ["unwritten", "writes_all", "written"]


def _elem(d: int) -> str:
    return f"e'{d}"


def written(block: Block, ref: str, outer: Sequence[Block] = ()) -> isl.Set:
    """``{(outer indices, e) : e is written through view ref}`` (``e`` one dim per buffer dim)."""
    rank = len(block.ref(ref).access)
    keep = nest_names(outer) + tuple(_elem(d) for d in range(rank))
    result = isl.Set.empty(set_space(keep))
    for acc in accesses(block):
        if acc.ref != ref or not acc.write:
            continue
        xs = {d: f"x'{d}" for d in range(rank) if acc.sizes[d] != 1}
        names = nest_names(outer) + nest_names(acc.path) + tuple(xs.values()) + keep[-rank:]
        domain = domain_in(names, outer)
        exprs = list(nest_inequalities(acc.path))
        for d in range(rank):
            e = acc.exprs[d] - Affine.index(_elem(d))
            if d in xs:
                x = Affine.index(xs[d])
                e = e + x
                exprs += [x, Affine.constant(acc.sizes[d] - 1) - x]
            exprs += [e, -e]
        image = project_onto(constrain(domain, exprs), keep)
        result = result.union(image.to_set())
    return result


def unwritten(block: Block, ref: str, sizes: Sequence[int], outer: Sequence[Block] = ()) -> isl.Set:
    """Elements of the parent buffer (of ``sizes``) that ``block`` never writes through ``ref``."""
    rank = len(sizes)
    keep = nest_names(outer) + tuple(_elem(d) for d in range(rank))
    box = domain_in(keep, outer)
    box = constrain(
        box,
        [
            b
            for d, s in enumerate(sizes)
            for b in (Affine.index(_elem(d)), s - 1 - Affine.index(_elem(d)))
        ],
    )
    return box.to_set().subtract(written(block, ref, outer))


def writes_all(block: Block, ref: str, sizes: Sequence[int], outer: Sequence[Block] = ()) -> bool:
    """Whether ``block`` writes every element of the parent buffer through view ``ref``."""
    return unwritten(block, ref, sizes, outer).is_empty()
