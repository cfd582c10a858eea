"""Stripe affines and blocks as isl (islpy) objects: spaces, constraints, domains.

A pure translation of the IR, with no optimisation questions in it (those are
``analysis/``): it sits in ``ir/`` so that the verifier's bounds checks use
it from their own layer.

Every set built here lives in one shared isl context (:func:`context`) and
has only *set* dimensions, one per index, named after the index.  A block's
**domain** is the set of integer points of its index box that satisfy its
constraints; the domain of a nested block is taken together with all its
enclosing blocks, so its dimensions are the indices of the whole nest,
outermost first::

    outer = block_domain(kernel)                  # dims: the kernel's indices
    inner = block_domain(tile_block, outer)       # dims: kernel's, then the inner block's
    exists_point(inner, Affine.index("x") - 9)    # is there a point with x >= 9?

Functions take and return plain isl objects, so callers can go on with the
whole islpy API.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

import islpy as isl

from .affine import Affine
from .nodes import Block, Index

_SET = isl.dim_type.set


def context() -> isl.Context:
    """The isl context shared by all of stripeml (islpy's default one)."""
    return isl.DEFAULT_CONTEXT


@lru_cache(maxsize=1024)
def set_space(names: tuple[str, ...]) -> isl.Space:
    """The set space with one dimension per name, in order (cached)."""
    return isl.Space.create_from_names(context(), set=list(names))


@lru_cache(maxsize=1024)
def _local_space(space: isl.Space) -> isl.LocalSpace:
    return isl.LocalSpace.from_space(space)


def dim_names(obj: isl.BasicSet | isl.Set | isl.Space) -> tuple[str, ...]:
    """The set dimension names of a set or space, in order."""
    space = obj if isinstance(obj, isl.Space) else obj.get_space()
    names = []
    for i in range(space.dim(_SET)):
        name = space.get_dim_name(_SET, i)
        if name is None:  # every space stripeml builds names its dimensions
            raise ValueError(f"set dimension {i} of {space} has no name")
        names.append(name)
    return tuple(names)


def _positions(space: isl.Space) -> dict[str, int]:
    names = ((space.get_dim_name(_SET, i), i) for i in range(space.dim(_SET)))
    return {name: i for name, i in names if name is not None}


def _val(value: int) -> int | isl.Val:
    """An integer islpy accepts: machine-sized ints as they are, larger ones as isl values."""
    if -(2**62) < value < 2**62:
        return value
    return isl.Val.read_from_str(context(), str(value))


def _fill(obj, expr: Affine, space: isl.Space, dim_type=_SET, pos: dict[str, int] | None = None):
    """Set the coefficients and constant of an isl Aff/Constraint from ``expr``
    (``pos``: ``space``'s dimension positions, when the caller has them)."""
    if pos is None:
        pos = _positions(space)
    for name, coeff in expr.terms:
        if name not in pos:
            raise KeyError(f"index {name!r} is not a dimension of {space}")
        obj = obj.set_coefficient_val(dim_type, pos[name], _val(coeff))
    return obj.set_constant_val(_val(expr.const))


def affine_to_aff(expr: Affine, space: isl.Space) -> isl.Aff:
    """``expr`` as an isl affine function on ``space`` (``KeyError`` on unknown names)."""
    return _fill(isl.Aff.zero_on_domain(_local_space(space)), expr, space, isl.dim_type.in_)


def ge_constraint(expr: Affine, space: isl.Space) -> isl.Constraint:
    """The isl constraint ``expr >= 0`` on ``space``."""
    return _fill(isl.Constraint.alloc_inequality(_local_space(space)), expr, space)


def eq_constraint(expr: Affine, space: isl.Space) -> isl.Constraint:
    """The isl constraint ``expr == 0`` on ``space``."""
    return _fill(isl.Constraint.alloc_equality(_local_space(space)), expr, space)


def index_bounds(idx: Index) -> tuple[Affine, Affine]:
    """``(lo, hi)`` with ``lo >= 0`` and ``hi >= 0`` meaning ``idx`` is in its range."""
    var = Affine.index(idx.name)
    base = idx.affine if idx.affine is not None else Affine()
    return var - base, base + (idx.range - 1) - var


def constrain(domain: isl.BasicSet, exprs: Iterable[Affine]) -> isl.BasicSet:
    """``domain`` intersected with ``expr >= 0`` for every expression."""
    space = domain.get_space()
    local = _local_space(space)
    pos: dict[str, int] | None = None  # the dimensions' positions, read once per call
    for expr in exprs:
        if pos is None:
            pos = _positions(space)
        con = _fill(isl.Constraint.alloc_inequality(local), expr, space, _SET, pos)
        domain = domain.add_constraint(con)
    return domain


def block_domain(block: Block, outer: isl.BasicSet | None = None) -> isl.BasicSet:
    """The points of ``block`` (ranges, index affines, constraints) within ``outer``.

    ``outer`` is the domain of the enclosing block (``None`` for a block at the
    top of the nest); the result has ``outer``'s dimensions followed by one per
    index of ``block``.
    """
    names = tuple(i.name for i in block.idxs)
    if outer is None:
        domain = isl.BasicSet.universe(set_space(names))
    else:
        n = outer.dim(_SET)
        domain = outer.add_dims(_SET, len(names))
        for k, name in enumerate(names):
            domain = domain.set_dim_name(_SET, n + k, name)
    exprs = [b for i in block.idxs for b in index_bounds(i)]
    exprs += [c.expr for c in block.constraints]
    return constrain(domain, exprs)


def nest_domain(blocks: Sequence[Block]) -> isl.BasicSet:
    """The domain of the innermost of ``blocks`` (outermost first) over the whole nest."""
    domain: isl.BasicSet | None = None
    for block in blocks:
        domain = block_domain(block, domain)
    return domain if domain is not None else isl.BasicSet.universe(set_space(()))


def exists_point(domain: isl.BasicSet, *exprs: Affine) -> bool:
    """Is there an integer point of ``domain`` where every ``expr >= 0``?"""
    return not constrain(domain, exprs).is_empty()


def affine_range(domain: isl.BasicSet, expr: Affine) -> tuple[int, int] | None:
    """Integer ``(min, max)`` of ``expr`` over ``domain``; ``None`` if empty or unbounded."""
    if domain.is_empty():
        return None
    aff = affine_to_aff(expr, domain.get_space())
    as_set = domain.to_set()
    lo, hi = as_set.min_val(aff), as_set.max_val(aff)
    if not (lo.is_int() and hi.is_int()):
        return None
    return lo.to_python(), hi.to_python()


__all__ = [
    "affine_range",
    "affine_to_aff",
    "block_domain",
    "constrain",
    "context",
    "dim_names",
    "eq_constraint",
    "exists_point",
    "ge_constraint",
    "index_bounds",
    "nest_domain",
    "set_space",
]
