"""``partial_sums``: a reduction the threads cannot share gets one partial result per thread.

A kernel that reduces over pixels while it writes every pixel (EfficientNet's
squeeze-excite: ``C = silu(A + B)`` and ``R[c] = +(C[y, x, c])`` fused into one
kernel) has only one race-free index, the channel, which is also its vector
index.  Split across threads by channel, each thread walks every pixel for a
few vectors of channels: a short, runtime-bounded lane loop per pixel, and
threads writing neighbouring parts of each pixel's cache lines (on a 2-core
znver3 the 112x112x32 kernel took 0.41 ms on two threads, 0.34 ms on one).

This pass gives such a kernel ``K`` a reduction index ``u`` split in
``threads`` parts instead: ``u = (range / threads) * u_t + u_r``, ``K``
aggregates into a new root temporary ``P[u_t, ...]`` (``R``'s shape behind
one more dimension of ``threads``) in place of ``R``, and a new kernel after it
aggregates ``P`` over ``u_t`` into ``R`` with ``K``'s aggregation.  ``thread``
then splits ``u_t``: each thread takes whole rows of pixels and every channel,
with its own partial result.

Applies to a root kernel tagged ``select`` (a leaf, no constraints, no index
offsets) when ``threads`` is at least 2 and:

* it has exactly one aggregating output view (``add``, ``max`` or ``min``), of
  a root buffer ``R``, whose indices are distinct indices or constants per
  dimension; its other outputs are ``assign`` views;
* the index ``thread`` would split (:func:`~.thread.choose_thread_index`) is
  none, or the unit-stride index of every written view that has one of range 2
  or more (the vector index; a layer norm's sum over rows of 768, which writes
  the rows' values as well, is split by rows: its ``[rows, 1]`` sums are
  unit-stride along the rows, its values along the 768);
* an index the reduction view does not use (a reduction index) has a range
  that ``threads`` divides, at least ``2 * threads`` (the largest such);
* the kernel has at least ``min_points`` points (a small kernel is not
  split across threads anyway).

The partial sums change the order of the additions (as splitting any sum
does); ``max`` and ``min`` are exact.

Requires: verified IR.  Guarantees: the same results up to the order of the
aggregation, verified IR, and the same object when nothing applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

from ..analysis.access import index_stride
from ..analysis.select import parse_selector
from ..ir.affine import Affine
from ..ir.nodes import Block, Index, Load, Program, Refinement, Statement, Store, TensorShape
from ._common import fresh, is_leaf, single_index
from .registry import check_non_negative, check_positive, check_selector, register
from .thread import choose_thread_index

_AGGS = ("add", "max", "min")


@register
@dataclass(frozen=True)
class PartialSums:
    """Per-thread partial results for reductions split only by their vector index
    (options: ``threads``, ``min_points``, ``select``)."""

    threads: int = 2
    # Kernels with fewer points are left alone (the runtime runs them on one thread).
    min_points: int = 1 << 16
    select: str = "kernel"
    name: ClassVar[str] = "partial_sums"
    layer_local: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_selector(self)
        check_positive(self, "threads")
        check_non_negative(self, "min_points")

    def run(self, program: Program) -> Program:
        if self.threads < 2:
            return program
        wanted = parse_selector(self.select)
        root = program.root
        stmts: list[Statement] = []
        refs = list(root.refs)
        changed = False
        for s in root.stmts:
            if isinstance(s, Block) and wanted(s.tags):
                split = self._split(s, refs)
                if split is not None:
                    stmts.extend(split)
                    changed = True
                    continue
            stmts.append(s)
        if not changed:
            return program
        return Program(replace(root, refs=tuple(refs), stmts=tuple(stmts)))

    def _split(self, k: Block, refs: list[Refinement]) -> list[Block] | None:
        """``[K', F]`` for kernel ``k`` (see the module docstring), appending the
        partial buffer to ``refs``; ``None`` when the pass does not apply."""
        if not is_leaf(k) or k.constraints or any(i.affine is not None for i in k.idxs):
            return None
        if math.prod(i.range for i in k.idxs) < self.min_points:
            return None
        writes = [r for r in k.refs if r.dir in ("out", "inout")]
        reducing = [r for r in writes if r.agg in _AGGS]
        if len(reducing) != 1 or any(r.dir != "out" for r in writes):
            return None
        red = reducing[0]
        if any(r.agg != "assign" for r in writes if r is not red):
            return None
        used: list[str] = []
        for a in red.access:
            name = single_index(a)
            if name is not None:
                used.append(name)
            elif not a.is_constant:
                return None
        if len(set(used)) != len(used):
            return None
        chosen = choose_thread_index(k, self.threads)
        if chosen is not None and not all(_lane(r, chosen, k) for r in writes):
            return None  # the threads already have a good split
        t = self.threads
        cands = [i for i in k.idxs if i.name not in used and i.range % t == 0 and i.range >= 2 * t]
        if not cands:
            return None
        u = max(cands, key=lambda i: i.range)
        parent = next((r for r in refs if r.into == red.from_ and not r.from_), None)
        if parent is None:
            return None
        names = {i.name for i in k.idxs}
        ut = fresh(f"{u.name}_t", names)
        ur = fresh(f"{u.name}_r", names | {ut})
        step = u.range // t
        sub = {u.name: Affine.index(ut) * step + Affine.index(ur)}
        pname = fresh(f"{parent.into}_part", {r.into for r in refs})
        pshape = TensorShape.dense(parent.shape.dtype, (t, *parent.shape.sizes))
        refs.append(Refinement("none", pname, pshape, location=parent.location))
        new_refs = []
        for r in k.refs:
            access = tuple(a.substitute(sub) for a in r.access)
            if r is red:
                view = TensorShape(r.shape.dtype, (1, *r.shape.sizes), pshape.strides)
                new_refs.append(
                    replace(r, from_=pname, access=(Affine.index(ut), *access), shape=view)
                )
            else:
                new_refs.append(replace(r, access=access))
        idxs: list[Index] = [Index(ut, t)]
        for i in k.idxs:
            idxs.extend([Index(ur, step)] if i.name == u.name else [i])
        part = replace(k, idxs=tuple(idxs), refs=tuple(new_refs))
        # The partial results, aggregated over the threads' parts into R.
        dims = [f"d{n}" for n in range(len(parent.shape.sizes))]
        tn = fresh("t", set(dims))
        ones = (1,) * len(dims)
        combine = Block(
            idxs=(*(Index(d, s) for d, s in zip(dims, parent.shape.sizes)), Index(tn, t)),
            refs=(
                Refinement(
                    "in",
                    pname,
                    TensorShape(parent.shape.dtype, (1, *ones), pshape.strides),
                    pname,
                    (Affine.index(tn), *(Affine.index(d) for d in dims)),
                ),
                Refinement(
                    "out",
                    red.into,
                    TensorShape(parent.shape.dtype, ones, parent.shape.strides),
                    parent.into,
                    tuple(Affine.index(d) for d in dims),
                    agg=red.agg,
                ),
            ),
            stmts=(Load("$x", pname), Store(red.into, "$x")),
            tags=frozenset({"kernel", "contraction", f"agg_{red.agg}"}),
            name=f"{k.name}_parts",
            comment=f"{parent.into} = {red.agg} of the {t} partial results {pname}",
        )
        return [part, combine]


def _lane(r: Refinement, name: str, k: Block) -> bool:
    """Whether index ``name`` of kernel ``k`` is the unit-stride index of written
    view ``r``, or ``r`` has none of range 2 or more (a layer norm's sum over a
    row of 768 writes the row's ``[rows, 768]`` values along its lanes and its
    ``[rows, 1]`` sums, unit-stride along the rows: split by rows, each thread
    still has whole vector rows)."""
    if index_stride(r, name) == 1:
        return True
    return not any(i.range >= 2 and index_stride(r, i.name) == 1 for i in k.idxs)
