"""A block's domain within its nest, as isl sets and as plain affine inequalities.

A *nest* is a path of blocks, outermost first (``(kernel, tile_block)``); its
domain has one set dimension per index of the whole path
(:func:`stripeml.ir.isl.nest_domain`).  This module adds what the
other analyses need on top of :mod:`stripeml.ir.isl`:

* :func:`nest_inequalities`: the domain as affines ``>= 0`` (index ranges, index
  offsets, constraints), so callers can rename indices and build products of
  copies of a nest (the dependence test needs two points at once);
* :func:`domain_in`: a nest's domain in an arbitrary set space (prefixed
  names, extra dimensions);
* :func:`bounding_box`, :func:`project_onto` and :func:`inequalities_of`
  (back from isl to affines, when no existential variables are left).

Requires nothing beyond verified-enough blocks (index names unique along the
nest).  Guarantees exact integer answers (isl), never approximations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import islpy as isl

from ..ir.affine import Affine
from ..ir.isl import affine_range, constrain, dim_names, index_bounds, nest_domain, set_space
from ..ir.nodes import Block

_SET = isl.dim_type.set

__all__ = [
    "bounding_box",
    "domain_in",
    "inequalities_of",
    "nest_domain",
    "nest_inequalities",
    "nest_names",
    "project_onto",
]


def nest_names(blocks: Sequence[Block]) -> tuple[str, ...]:
    """The index names of a nest, outermost block first."""
    return tuple(i.name for b in blocks for i in b.idxs)


def nest_inequalities(blocks: Sequence[Block]) -> list[Affine]:
    """The nest's domain as affines that are ``>= 0`` exactly at its points."""
    exprs: list[Affine] = []
    for block in blocks:
        for idx in block.idxs:
            exprs.extend(index_bounds(idx))
        exprs.extend(c.expr for c in block.constraints)
    return exprs


def domain_in(
    names: Sequence[str],
    blocks: Sequence[Block],
    rename: Mapping[str, str] | None = None,
) -> isl.BasicSet:
    """The nest's domain in the set space ``names`` (indices renamed by ``rename``).

    Dimensions of ``names`` that the (renamed) nest does not use are free.
    """
    exprs = nest_inequalities(blocks)
    if rename:
        exprs = [e.rename(rename) for e in exprs]
    return constrain(isl.BasicSet.universe(set_space(tuple(names))), exprs)


def bounding_box(domain: isl.BasicSet) -> dict[str, tuple[int, int]] | None:
    """Per dimension the integer ``(min, max)`` over ``domain``; ``None`` if empty."""
    box: dict[str, tuple[int, int]] = {}
    for name in dim_names(domain):
        r = affine_range(domain, Affine.index(name))
        if r is None:
            return None
        box[name] = r
    return box


def project_onto(domain: isl.BasicSet, keep: Sequence[str]) -> isl.BasicSet:
    """``domain`` projected onto the dimensions ``keep`` (in ``domain``'s order).

    The other dimensions become existential: a point of the result is one for
    which *some* values of the dropped dimensions give a point of ``domain``.
    """
    names = dim_names(domain)
    wanted = set(keep)
    out = domain
    for pos in reversed(range(len(names))):
        if names[pos] not in wanted:
            out = out.project_out(_SET, pos, 1)
    return out


def inequalities_of(domain: isl.BasicSet) -> list[Affine] | None:
    """``domain`` as affines ``>= 0`` (an equality gives two), redundant ones removed.

    ``None`` when the set needs existential (div) variables, which affines
    cannot express (e.g. a projection onto a strided lattice).
    """
    domain = domain.remove_redundancies()
    if domain.dim(isl.dim_type.div):
        return None
    names = dim_names(domain)
    out: list[Affine] = []
    for c in domain.get_constraints():
        coeffs = {n: int(c.get_coefficient_val(_SET, k).to_python()) for k, n in enumerate(names)}
        expr = Affine.build(coeffs, int(c.get_constant_val().to_python()))
        out.append(expr)
        if c.is_equality():
            out.append(-expr)
    return out
