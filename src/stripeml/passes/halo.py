"""``halo``: pad an input with zeros so a padded convolution (or pool) loses its constraints.

Lowering a padded convolution
``O[x : X] = +(I[x + kx - 1] * K[kx])`` gives a kernel whose constraints
(``x + kx - 1 >= 0``, ``X - x - kx >= 0``) keep the ``I`` access in bounds.
Constrained output indices cannot be register-tiled (``unroll``).  For a
selected root kernel this pass inserts, before the kernel:

* a root temporary ``I_halo`` (``none``) of the padded shape: per dimension
  ``size + low + high``, dense strides, where ``low``/``high`` are how far the
  access leaves the buffer below / above on the kernel's index box;
* fill kernels (``#kernel #eltwise #fill``) storing zero (for a pool, the
  aggregation's identity) to its halo, one slab per padded side;
* a copy kernel (``#kernel #eltwise #copy``) storing ``I`` into its interior
  (``I_halo[i + low] = I[i]``);

and rewrites the kernel to read ``I_halo`` at the shifted access
(``x + kx - 1 + 1`` = ``x + kx``) with its constraints removed.

Legality (all checked exactly, on the kernel's index box ``B``: a view's
extremes on a box at its corners, the rest with isl; otherwise the kernel is
left alone):

* the kernel is a root leaf block tagged ``select``, without index offsets,
  with constraints, and with exactly one output: an ``out`` view with
  aggregation ``add`` (the scope sums what it stores), or ``max``/``min``
  (a pool: see below);
* removing the constraints makes exactly one view leave its parent's bounds,
  an ``in`` view ``P`` of a root buffer the kernel does not write (every other
  view stays in bounds on all of ``B``);
* the constraints select exactly the points where ``P`` is in bounds:
  ``B ∩ {P in bounds} ⊆ D`` (the verifier guarantees ``D ⊆ {P in bounds}``),
  so the new points are exactly those that read the padding;
* every output element stored on ``B`` was stored on ``D`` (elements that
  were never stored keep their contents; they must not now receive a sum of
  zeros);
* the kernel loads ``P`` once, into ``$p``, uses ``$p`` only as a factor of
  one ``mul`` and stores that product (only) to the output: at a new point the
  stored value is ``0 * q``;
* ``0 * q == 0`` for the other factor ``q``: always for integers; for floats
  only when ``q`` is finite (``0 * inf`` and ``0 * nan`` are ``nan``).  With
  ``assume_finite`` (the default) finite values are assumed, the trade-off
  every padded-convolution library (im2col, oneDNN, cuDNN, PyTorch) makes:
  a non-finite weight then poisons the outputs whose window touches the
  padding, where the constrained kernel skipped it.  Without it, the other
  factor must be a finite constant.  Adding ``+0.0`` or ``-0.0`` to a sum
  leaves it unchanged, so the results are otherwise bit-identical;
* the padded buffer has at most ``max_bytes`` bytes.

A padded max (min) pool, ``O[y] = >(I[2*y + ky - 1]), ky < 3``, qualifies on
the same terms when the kernel stores the load of ``P`` itself and nothing
else: its halo holds the aggregation's identity (``-inf``/``+inf``; an
integer type's least/greatest value; ``False``/``True``), which the
aggregation starts from anyway, so the new points change no result (NaN
included: ``max`` propagates it).

Options: ``select`` (a tag selector of the kernels to consider, default
``contraction``), ``max_bytes`` (largest padded buffer), ``assume_finite``.

Requires: verified IR.  Guarantees: the same results (under
``assume_finite``: for finite inputs), verified IR, the same object when
nothing applies; a second run changes nothing (the rewritten kernel has no
constraints).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import islpy as isl

from ..analysis.select import parse_selector
from ..ir.affine import Affine, box_interval
from ..ir.dtypes import is_float, is_int, itemsize
from ..ir.isl import (
    block_domain,
    constrain,
    dim_names,
    eq_constraint,
    set_space,
)
from ..ir.nodes import (
    Block,
    Constant,
    Index,
    Intrinsic,
    Load,
    LoadIndex,
    Program,
    Refinement,
    Statement,
    Store,
    TensorShape,
)
from ._common import agg_identity, fresh
from .registry import check_non_negative, check_selector, register


@register
@dataclass(frozen=True)
class Halo:
    """Zero-pad the input that a kernel's padding constraints protect, and drop them.

    ``select``: tag selector of the root kernels to consider; ``max_bytes``: largest
    padded buffer to allocate; ``assume_finite``: treat the other factor of the
    product as finite (``0 * x == 0``), as padded-convolution libraries do.
    """

    select: str = "contraction"
    max_bytes: int = 1 << 26
    assume_finite: bool = True
    # One fill kernel for the whole halo (padded as much above as below), not one
    # per slab: fewer kernels to pass, compile and dispatch.
    merge_fills: bool = True
    name: ClassVar[str] = "halo"
    layer_local: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_selector(self)
        check_non_negative(self, "max_bytes")

    def run(self, program: Program) -> Program:
        root = program.root
        stmts: list[Statement] = []
        refs = list(root.refs)
        changed = False
        decided: dict[tuple, bool] = {}  # isl's answers, by what they read
        for s in root.stmts:
            new = None
            if isinstance(s, Block) and parse_selector(self.select)(s.tags):
                new = self._halo(refs, s, decided)
            if new is None:
                stmts.append(s)
                continue
            halo_ref, fills, copy, kernel = new
            refs.append(halo_ref)
            stmts += [*fills, copy, kernel]
            changed = True
        if not changed:
            return program
        return Program(replace(root, refs=tuple(refs), stmts=tuple(stmts)))

    def _halo(
        self, root_refs: list[Refinement], k: Block, decided: dict[tuple, bool]
    ) -> tuple[Refinement, tuple[Block, ...], Block, Block] | None:
        """The halo buffer, fill, copy and rewritten kernel, or ``None`` when illegal
        (``decided``: :func:`_constraints_exact`'s answers so far)."""
        if not k.constraints or any(i.affine is not None for i in k.idxs):
            return None
        if not all(_scalar(s) for s in k.stmts):
            return None
        outs = [r for r in k.refs if r.dir in ("out", "inout")]
        if len(outs) != 1 or outs[0].dir != "out" or outs[0].agg not in ("add", "max", "min"):
            return None
        out = outs[0]
        parents = {r.into: r for r in root_refs}
        # The box: the kernel's index ranges without its constraints (no offsets,
        # checked above), where an affine's least and greatest values are at
        # corners, exactly what isl would answer.
        ranges = {i.name: i.range for i in k.idxs}
        if any(r < 1 for r in ranges.values()):
            return None
        # Which views leave their parent's bounds on the box?
        violators = set()
        for r in k.refs:
            if r.dir == "none":
                continue
            parent = parents.get(r.from_)
            if parent is None:
                return None
            for cond in _in_bounds(r, parent.shape.sizes):
                if box_interval(cond, ranges)[0] < 0:
                    violators.add(r.into)
        if len(violators) != 1:
            return None
        p = next(r for r in k.refs if r.into in violators)
        if p.dir != "in" or p.from_ == out.from_:
            return None
        parent = parents[p.from_]
        # The questions to isl read only these (a model's repeated layers ask them
        # again with other names): asked once per run.
        key = (k.idxs, k.constraints, p.access, p.shape.sizes, parent.shape.sizes, out.access)
        exact = decided.get(key)
        if exact is None:
            exact = decided[key] = _constraints_exact(k, p, parent, out)
        if not exact:
            return None
        if out.agg == "add" and not self._product_of_load(k, p, out):
            return None
        if out.agg != "add" and not _stores_load(k, p, out):
            return None
        # Padding per dimension: how far the access leaves the parent on the box.
        lows, highs = [], []
        for a, size, psize in zip(p.access, p.shape.sizes, parent.shape.sizes):
            span = box_interval(a, ranges)
            lows.append(max(0, -span[0]))
            highs.append(max(0, span[1] + size - psize))
        sizes = tuple(s + lo + hi for s, lo, hi in zip(parent.shape.sizes, lows, highs))
        dtype = parent.shape.dtype
        if itemsize(dtype) * math.prod(sizes) > self.max_bytes:
            return None
        dense = TensorShape.dense(dtype, sizes)
        name = fresh(f"{p.from_}_halo", {r.into for r in root_refs})
        halo_ref = Refinement("none", name, dense)
        fill = agg_identity(out.agg, dtype)  # 0 for the sum of products
        fills, copy = _fill_and_copy(k.name, parent, name, dense, lows, fill, self.merge_fills)
        new_p = replace(
            p,
            from_=name,
            access=tuple(a + lo for a, lo in zip(p.access, lows)),
            shape=TensorShape(dtype, p.shape.sizes, dense.strides),
        )
        kernel = replace(k, constraints=(), refs=tuple(new_p if r is p else r for r in k.refs))
        return halo_ref, fills, copy, kernel

    def _product_of_load(self, k: Block, p: Refinement, out: Refinement) -> bool:
        """The kernel stores only ``load(P) * q`` (``$p`` used nowhere else), with ``0*q == 0``."""
        loads = [s for s in k.stmts if isinstance(s, Load) and s.ref == p.into]
        stores = [s for s in k.stmts if isinstance(s, Store)]
        if len(loads) != 1 or len(stores) != 1 or stores[0].ref != out.into:
            return False
        pv, value = loads[0].into, stores[0].value
        defs = {s.into: s for s in k.stmts if isinstance(s, (Load, Constant, Intrinsic))}
        mul = defs.get(value)
        if not isinstance(mul, Intrinsic) or mul.op != "mul" or len(mul.inputs) != 2:
            return False
        if pv not in mul.inputs or mul.inputs[0] == mul.inputs[1]:
            return False
        users = [s for s in k.stmts if isinstance(s, Intrinsic) and pv in s.inputs]
        if users != [mul] or any(isinstance(s, Intrinsic) and value in s.inputs for s in k.stmts):
            return False
        if is_int(mul.dtype):
            return True
        if not is_float(mul.dtype):
            return False
        if self.assume_finite:
            return True
        other = defs.get(next(x for x in mul.inputs if x != pv))
        return isinstance(other, Constant) and math.isfinite(float(other.value))


def _constraints_exact(k: Block, p: Refinement, parent: Refinement, out: Refinement) -> bool:
    """Whether ``k``'s constraints cut exactly the points where view ``p`` (of
    ``parent``) leaves its buffer, and every output element stored on the box was
    stored with them (isl)."""
    box = block_domain(replace(k, constraints=()))
    domain = block_domain(k)
    inside = constrain(box, _in_bounds(p, parent.shape.sizes))
    # The constraints are implied by P's in-bounds conditions: nothing more is cut.
    if not inside.is_subset(domain):
        return False
    # Every output element stored on the box was stored before.
    return bool(_image(box, out.access).is_subset(_image(domain, out.access)))


def _stores_load(k: Block, p: Refinement, out: Refinement) -> bool:
    """The kernel stores ``load(P)`` itself, and only that, to its ``max``/``min``
    output (a max pool): a padding point then stores the aggregation's identity."""
    loads = [s for s in k.stmts if isinstance(s, Load) and s.ref == p.into]
    stores = [s for s in k.stmts if isinstance(s, Store)]
    return (
        len(loads) == 1
        and len(stores) == 1
        and stores[0].ref == out.into
        and stores[0].value == loads[0].into
    )


def _scalar(s: Statement) -> bool:
    return isinstance(s, (Load, Store, Constant, Intrinsic, LoadIndex))


def _in_bounds(r: Refinement, parent_sizes: tuple[int, ...]) -> list[Affine]:
    """The affines ``>= 0`` that keep view ``r`` inside its parent."""
    conds = []
    for a, size, psize in zip(r.access, r.shape.sizes, parent_sizes):
        conds += [a, psize - size - a]
    return conds


def _image(domain: isl.BasicSet, access: tuple[Affine, ...]) -> isl.Set:
    """The elements ``access`` reaches from the points of ``domain``."""
    names = dim_names(domain)
    outs = tuple(fresh(f"_o{d}", names) for d in range(len(access)))
    space = set_space(names + outs)
    ext = domain.add_dims(isl.dim_type.set, len(outs))
    for d, o in enumerate(outs):
        ext = ext.set_dim_name(isl.dim_type.set, len(names) + d, o)
    for o, a in zip(outs, access):
        ext = ext.add_constraint(eq_constraint(Affine.index(o) - a, space))
    return ext.project_out(isl.dim_type.set, 0, len(names)).to_set()


def _fill_and_copy(
    kname: str,
    src: Refinement,
    dst: str,
    dense: TensorShape,
    lows: list[int],
    fill: int | float | bool,
    merge: bool = True,
) -> tuple[tuple[Block, ...], Block]:
    """Kernels storing ``fill`` to the halo of ``dst`` and ``src`` to its interior at
    ``lows``: one fill kernel (:func:`_one_fill`) when ``merge`` and each padded
    dimension is padded as much above as below, else one per slab."""
    dtype = dense.dtype
    one = (1,) * len(dense.sizes)
    zero = fill
    value = "$zero" if fill == 0 else "$pad"  # a pool's identity: -inf, +inf, ...
    highs = [t - lo - n for lo, t, n in zip(lows, dense.sizes, src.shape.sizes)]
    padded = [d for d, (lo, hi) in enumerate(zip(lows, highs)) if lo or hi]
    if merge and padded:
        fills = [_one_fill(kname, dst, dense, src.shape.sizes, lows, padded, value, fill)]
        return tuple(fills), _copy(kname, src, dst, dense, lows)
    # Zero only the halo: per padded dimension a low and a high slab (full extent
    # in the other dimensions; corners are written twice, by different kernels).
    fills = []
    for d, (lo, total, size) in enumerate(zip(lows, dense.sizes, src.shape.sizes)):
        for side, start, extent in (("lo", 0, lo), ("hi", lo + size, total - lo - size)):
            if extent <= 0:
                continue
            sizes = list(dense.sizes)
            sizes[d] = extent
            idx = tuple(Index(f"i{e}", n) for e, n in enumerate(sizes))
            acc = tuple(Affine.index(i.name) + (start if e == d else 0) for e, i in enumerate(idx))
            fills.append(
                Block(
                    idxs=idx,
                    refs=(
                        Refinement(
                            "out", dst, TensorShape(dtype, one, dense.strides), dst, acc, "assign"
                        ),
                    ),
                    stmts=(Constant(value, zero, dtype), Store(dst, value)),
                    tags=frozenset({"kernel", "eltwise", "fill"}),
                    name=f"{kname}_{dst}_fill{d}{side}",
                )
            )
    return tuple(fills), _copy(kname, src, dst, dense, lows)


def _one_fill(
    kname: str,
    dst: str,
    dense: TensorShape,
    sizes: tuple[int, ...],
    lows: list[int],
    padded: list[int],
    value: str,
    fill: int | float | bool,
) -> Block:
    """One kernel storing ``fill`` to the whole halo of ``dst``: a view and a
    block per slab (the low and the high side of each of the ``padded``
    dimensions), the slab of dimension ``d`` spanning the interior of the padded
    dimensions before ``d`` and the whole of those after it, so each halo
    element is stored once.  One kernel and one body instead of a kernel per
    slab and a body per dimension (each costs the compile an LLVM module, a few
    milliseconds, the passes a kernel and every call a dispatch).  Each view is
    a box beside the interior, as the slab kernels' were, so ``alias_copy`` sees
    that the fill misses the copied region."""
    dtype = dense.dtype
    one = (1,) * len(dense.sizes)
    views: list[Refinement] = []
    blocks: list[Statement] = []
    for d in padded:
        high = lows[d] + sizes[d]
        for side, start, extent in (("lo", 0, lows[d]), ("hi", high, dense.sizes[d] - high)):
            if extent <= 0:
                continue
            origin, span = [], []
            for e, total in enumerate(dense.sizes):
                if e == d:
                    origin.append(start)
                    span.append(extent)
                elif e in padded and e < d:  # the interior: an earlier slab has the rest
                    origin.append(lows[e])
                    span.append(sizes[e])
                else:
                    origin.append(0)
                    span.append(total)
            slab = f"{dst}_{d}{side}"
            views.append(
                Refinement(
                    "out", slab, TensorShape(dtype, tuple(span), dense.strides), dst,
                    tuple(Affine.constant(c) for c in origin), "assign",
                )
            )  # fmt: skip
            idx = tuple(Index(f"i{e}", n) for e, n in enumerate(span))
            acc = tuple(Affine.index(i.name) for i in idx)
            blocks.append(
                Block(
                    idxs=idx,
                    refs=(
                        Refinement(
                            "out", slab, TensorShape(dtype, one, dense.strides), slab, acc, "assign"
                        ),
                    ),  # fmt: skip
                    stmts=(Constant(value, fill, dtype), Store(slab, value)),
                    name=f"{kname}_{slab}",
                )
            )
    return Block(
        refs=tuple(views),
        stmts=tuple(blocks),
        tags=frozenset({"kernel", "eltwise", "fill"}),
        name=f"{kname}_{dst}_fill",
    )


def _copy(kname: str, src: Refinement, dst: str, dense: TensorShape, lows: list[int]) -> Block:
    """The kernel storing ``src`` to the interior of ``dst`` at ``lows``."""
    dtype = dense.dtype
    one = (1,) * len(dense.sizes)
    copy_idx = tuple(Index(f"i{d}", s) for d, s in enumerate(src.shape.sizes))
    acc = tuple(Affine.index(i.name) for i in copy_idx)
    shifted = tuple(a + lo for a, lo in zip(acc, lows))
    copy = Block(
        idxs=copy_idx,
        refs=(
            Refinement("in", src.into, TensorShape(dtype, one, src.shape.strides), src.into, acc),
            Refinement("out", dst, TensorShape(dtype, one, dense.strides), dst, shifted, "assign"),
        ),
        stmts=(Load("$x", src.into), Store(dst, "$x")),
        tags=frozenset({"kernel", "eltwise", "copy"}),
        name=f"{kname}_{dst}_copy",
    )
    return copy
