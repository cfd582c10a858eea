"""The element accesses of statements, traced through nested views: one model for every pass.

Each ``load``/``store`` (and each ``special``'s input/output) touches elements
of a buffer through a chain of views: the statement's block refines a buffer
of its parent, which may refine one of its own parent, and so on.  Views keep
their parent's coordinates shifted by their access, so composing the accesses
along the chain gives the touched elements as affines of the nest's indices.
Seen from a list of statements (a block's body) and a buffer visible there::

    none T f32(48, 29)
    block k [m_o:3] (out T[16*m_o, 0] (16, 29)) {
      block [m_i:16, n:29] (out T[m_i, n] (1, 1)) { T = store($x) }
    }

the kernel (statement 0) stores to ``T[16*m_o + m_i, n]`` over the domain of
the path ``(k, inner)``.  Two ways in, one walk:

* :func:`uses` - every access to one buffer by a block's statements (the
  memory passes: liveness, sinking, shrinking, caching, scalarising);
* :func:`accesses` - every access of a block to its parent's buffers, through
  its views (race checks, coverage of outputs, threading costs).

Accesses through a ``none`` allocation of a nested block are private to one
of its points and are not listed.  An ``inout`` view's scope aggregates into
the buffer's prior contents: :func:`uses` lists that as a ``prior`` read of
the whole view (the memory passes must not take those contents for dead);
:func:`accesses` leaves it out, since only the elements the scope stores
combine with their prior values, and those stores are listed.

The sets of elements accesses touch, per point of the enclosing blocks, are
isl sets (:func:`touched`, :func:`touched_union`, :func:`box_set`); whether
they cover a buffer is :mod:`.coverage`.

Requires: refs named by statements are declared (verified IR).  Guarantees:
every statement access is listed exactly once, in statement order; sets are
exact (isl).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import islpy as isl

from ..ir.affine import Affine
from ..ir.isl import ge_constraint, nest_domain, set_space
from ..ir.nodes import Block, Load, Refinement, Special, Statement, Store

__all__ = [
    "READ_KINDS",
    "WRITE_KINDS",
    "Access",
    "accesses",
    "box_set",
    "elem_names",
    "touched",
    "touched_union",
    "uses",
]

_SET = isl.dim_type.set

READ_KINDS = ("load", "read", "prior")
WRITE_KINDS = ("store", "write")


@dataclass(frozen=True, slots=True)
class Access:
    """Elements ``exprs + [0, sizes)`` of ``buffer``, touched at each point of ``path``.

    ``kind``: ``load``/``store`` (one element), ``read``/``write`` (a
    special's whole view), ``prior`` (an ``inout`` view's prior contents),
    or ``view`` (a nested block's whole view, built by callers that ask for a
    footprint rather than for statements).  ``buffer`` is the buffer's name
    where the accesses are seen from, ``ref`` the view of ``path[0]`` the
    access goes through (``buffer`` when ``path`` is empty), ``stmt`` the
    index of the statement holding it among the statements seen from,
    ``path`` the blocks from that statement down to the one holding the
    access, ``exprs`` one affine per dimension of the buffer in the indices
    of the enclosing blocks and of ``path``, and ``agg`` the aggregation of
    the innermost view that has one.
    """

    buffer: str
    ref: str
    kind: str
    stmt: int
    path: tuple[Block, ...]
    exprs: tuple[Affine, ...]
    sizes: tuple[int, ...]
    agg: str = ""

    @property
    def write(self) -> bool:
        return self.kind in WRITE_KINDS

    @property
    def read(self) -> bool:
        return self.kind in READ_KINDS


@dataclass(frozen=True, slots=True)
class _View:
    """What a local name stands for: ``buffer`` at ``exprs``, first seen as ``ref``."""

    buffer: str
    ref: str
    exprs: tuple[Affine, ...]
    sizes: tuple[int, ...]
    agg: str


def index_stride(ref: Refinement, name: str) -> int:
    """Elements ``ref``'s element moves when index ``name`` grows by one."""
    return sum(a.coeff(name) * st for a, st in zip(ref.access, ref.shape.strides))


def uses(
    stmts: Sequence[Statement],
    name: str,
    sizes: tuple[int, ...],
    at: Iterable[int] | None = None,
) -> list[Access]:
    """Every access to the buffer ``name`` (of ``sizes``) by ``stmts`` and the blocks in them.

    ``name`` is visible where ``stmts`` are (an allocation or view of their
    block); ``exprs`` are in its own coordinates.  ``at``: only the
    statements at these indices (the others are known not to name it).
    """
    zero = tuple(Affine() for _ in sizes)
    scope = {name: _View(name, "", zero, tuple(sizes), "")}
    out: list[Access] = []
    for k in range(len(stmts)) if at is None else at:
        _visit(stmts[k], k, scope, (), True, out)
    return out


def accesses(block: Block) -> list[Access]:
    """Every statement access of ``block`` and its nested blocks to its parent's buffers.

    Seen from the parent with ``block`` as its only statement: ``path``
    starts with ``block``, ``ref`` is ``block``'s view, ``exprs`` are in the
    parent buffer's coordinates.  No ``prior`` reads.
    """
    scope = {
        r.into: _View(r.from_, r.into, r.access, r.shape.sizes, r.agg)
        for r in block.refs
        if r.dir != "none"
    }
    out: list[Access] = []
    for s in block.stmts:
        _visit(s, 0, scope, (block,), False, out)
    return out


def _visit(
    s: Statement,
    top: int,
    scope: Mapping[str, _View],
    path: tuple[Block, ...],
    priors: bool,
    out: list[Access],
) -> None:
    if isinstance(s, (Load, Store)):
        view = scope.get(s.ref)
        if view is not None:
            _add(out, view, "load" if isinstance(s, Load) else "store", top, path, whole=False)
    elif isinstance(s, Special):
        for kind, names in (("read", s.inputs), ("write", s.outputs)):
            for name in names:
                view = scope.get(name)
                if view is not None:
                    _add(out, view, kind, top, path, whole=True)
    elif isinstance(s, Block):
        inner: dict[str, _View] = {}
        for r in s.refs:
            parent = scope.get(r.from_) if r.dir != "none" else None
            if parent is not None:  # else private to the block, or not seen from here
                exprs = tuple(a + b for a, b in zip(parent.exprs, r.access))
                ref = parent.ref or r.into
                inner[r.into] = _View(parent.buffer, ref, exprs, r.shape.sizes, r.agg or parent.agg)
        if not inner:
            return
        below = (*path, s)
        if priors:  # an inout view's prior values take part in its aggregation
            for r in s.refs:
                if r.dir == "inout" and r.into in inner:
                    _add(out, inner[r.into], "prior", top, below, whole=True)
        for t in s.stmts:
            _visit(t, top, inner, below, priors, out)


def _add(
    out: list[Access], view: _View, kind: str, top: int, path: tuple[Block, ...], *, whole: bool
) -> None:
    sizes = view.sizes if whole else (1,) * len(view.exprs)
    ref = view.ref or view.buffer
    out.append(Access(view.buffer, ref, kind, top, path, view.exprs, sizes, view.agg))


# -- isl sets of touched elements -------------------------------------------------------


def elem_names(rank: int) -> tuple[str, ...]:
    """Dimension names for buffer coordinates (never index names: not identifiers)."""
    return tuple(f"@e{d}" for d in range(rank))


def _with_elements(domain: isl.BasicSet, rank: int) -> isl.BasicSet:
    """``domain`` with ``rank`` element dimensions added at the end."""
    n = domain.dim(_SET)
    domain = domain.add_dims(_SET, rank)
    for k, name in enumerate(elem_names(rank)):
        domain = domain.set_dim_name(_SET, n + k, name)
    return domain


def _in_box(domain: isl.BasicSet, exprs: Sequence[Affine], sizes: Sequence[int]) -> isl.BasicSet:
    """``domain`` (element dimensions last) with ``exprs <= element < exprs + sizes``."""
    space = domain.get_space()
    for name, start, size in zip(elem_names(len(sizes)), exprs, sizes):
        e = Affine.index(name)
        domain = domain.add_constraint(ge_constraint(e - start, space))
        domain = domain.add_constraint(ge_constraint(start + (size - 1) - e, space))
    return domain


def touched(acc: Access, outer: Sequence[Block]) -> isl.Set:
    """``{(outer indices, element) : acc touches element at that point of outer}``.

    ``outer`` is the nest down to the block the access is seen from; the
    indices of ``acc.path`` are projected out.
    """
    n_outer = sum(len(b.idxs) for b in outer)
    domain = nest_domain([*outer, *acc.path])
    n_all = domain.dim(_SET)
    domain = _in_box(_with_elements(domain, len(acc.exprs)), acc.exprs, acc.sizes)
    return domain.project_out(_SET, n_outer, n_all - n_outer).to_set()


def touched_union(accs: Iterable[Access], outer: Sequence[Block], rank: int) -> isl.Set:
    """The union of :func:`touched` over ``accs`` (empty when there are none)."""
    names = tuple(i.name for b in outer for i in b.idxs) + elem_names(rank)
    result = isl.Set.empty(set_space(names))
    for acc in accs:
        result = result.union(touched(acc, outer))
    return result.coalesce()


def box_set(outer: Sequence[Block], sizes: Sequence[int]) -> isl.Set:
    """``{(outer indices, element) : outer point in its domain, 0 <= element < sizes}``."""
    zero = tuple(Affine() for _ in sizes)
    return _in_box(_with_elements(nest_domain(list(outer)), len(sizes)), zero, sizes).to_set()
