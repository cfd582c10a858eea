"""Resize and Upsample.

Where each output pixel samples the input, and with which weights, depends
only on shapes, attributes and the ``scales``/``sizes``/``roi`` inputs, which
must be known when compiling.  So every resized axis gets its taps planned
in NumPy here (:func:`plan_axis`, float64 arithmetic written as the ONNX
reference implementation ``onnx.reference.ops.op_resize`` writes it, so ties
round the same way): for each output position, the input positions it reads
(clamped into the axis, as the reference's edge padding does), their weights,
and whether ``tf_crop_and_resize`` puts it outside the input.  The Tile
program then applies the axes one after the other, as the reference does:

* ``linear``/``cubic`` on floats: the taps of an axis form a constant
  interpolation matrix ``A`` (out x in) and the axis is one contraction,
  ``Y[.., o, ..] = +(X[.., i, ..] * A[o, i])``, in float32 (float16 data is
  widened for it) or float64;
* ``nearest``: each output reads one input position, so ``A`` is a selection:
  an affine copy (``X[2 * o]``, or ``X[t]`` into ``Y[2 * t + r]``: one ``=``
  contraction for every such axis) or Tile's ``gather`` of constant indices,
  exact for every element type;
* ``linear``/``cubic`` on integers: the reference computes in float64 and
  rounds at the end (half to even, saturating), so the taps are gathered
  (``(out, n)`` indices), multiplied by their weights into a stored tensor
  (a target that fuses a multiply into the add after it, FMA, cannot change
  the rounding then) and summed elementwise in float64 in the reference's
  order (NumPy's pairwise order where its sum runs over contiguous taps): the
  result matches the reference bit for bit.

After each axis, positions ``tf_crop_and_resize`` puts outside the input take
``extrapolation_value`` (an elementwise select), as the reference does axis by
axis; so do (value 0) the ``nearest`` outputs whose only tap
``exclude_outside`` removed.

The reference's quirks are kept: ``align_corners`` and ``tf_crop_and_resize``
divide by the unrounded output length ``scale * in`` (onnxruntime by the
rounded one, so the two differ where ``scale * in`` is not an integer), and
the cubic weights are float32 arithmetic (``cubic_coeff_a`` is a float32).
``antialias`` is ignored in ``nearest`` mode, as the spec says (the
reference refuses it).  A NaN or infinity in the input spreads along the
whole row of a ``linear``/``cubic`` float axis (``0 * inf`` in the matrix
product), not only to the outputs whose taps read it.

Resize-10 and Upsample (opsets 7 and 9) say nothing of coordinates: they are
read as onnxruntime reads them, ``asymmetric``, and ``nearest`` takes the
floor of the source coordinate on an axis that is enlarged and its ceiling on
one that shrinks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import axis as norm_axis
from ._util import cast, checked_shape, indices, ints, scalar
from .conv import affine
from .shape import empty

MODES = ("nearest", "linear", "cubic")
TRANSFORMS = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
    "tf_half_pixel_for_nn",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
POLICIES = ("stretch", "not_larger", "not_smaller")

#: An axis's roi start and end, NumPy scalars of the roi's float type (the
#: reference subtracts them in that type).
RoiPair = tuple[np.floating[Any], np.floating[Any]]


@dataclass(frozen=True)
class Interp:
    """How values are interpolated along every resized axis."""

    mode: str  # nearest, linear, cubic
    transform: str  # coordinate_transformation_mode
    # one of NEAREST_MODES, or "simple" (Resize-10, Upsample): floor where the
    # axis is enlarged, ceiling where it shrinks
    nearest_mode: str = "round_prefer_floor"
    # float32, as the attribute is: the reference's cubic weights are float32 arithmetic
    cubic_a: np.float32 = np.float32(-0.75)
    exclude_outside: bool = False
    antialias: bool = False
    extrapolation: float = 0.0


@dataclass(frozen=True, eq=False)
class AxisPlan:
    """The taps of one resized axis."""

    axis: int
    size_in: int
    taps: np.ndarray  # (out, n) int64 input positions, clamped into [0, size_in)
    coeffs: np.ndarray  # (out, n) float64 weights
    outside: np.ndarray  # (out,) bool: tf_crop_and_resize positions outside the input
    # The reference sums the taps over a contiguous run (NumPy's pairwise sum)
    # where the axes it has not resized yet have one element in all.
    pairwise: bool = False

    @property
    def size_out(self) -> int:
        return int(self.taps.shape[0])

    def matrix(self) -> np.ndarray:
        """The (out, in) interpolation matrix (rows outside the input are zero)."""
        a = np.zeros((self.size_out, self.size_in), dtype=np.float64)
        rows = np.repeat(np.arange(self.size_out), self.taps.shape[1])
        np.add.at(a, (rows, self.taps.reshape(-1)), self.coeffs.reshape(-1))
        a[self.outside] = 0.0
        return a


# -- weights (as onnx.reference.ops.op_resize computes them) -------------------


def _nearest_coeffs(ratio: float, mode: str, scale: float) -> np.ndarray:
    if ratio.is_integer():  # on an input pixel: the right-hand tap
        return np.array([0.0, 1.0])
    if mode == "simple":
        mode = "ceil" if scale < 1 else "floor"
    if mode == "round_prefer_floor":
        left = ratio <= 0.5
    elif mode == "round_prefer_ceil":
        left = ratio < 0.5
    else:
        left = mode == "floor"
    return np.array([1.0, 0.0]) if left else np.array([0.0, 1.0])


def _linear_coeffs(ratio: float) -> np.ndarray:
    return np.array([1 - ratio, ratio])


def _linear_coeffs_antialias(ratio: float, scale: float) -> np.ndarray:
    scale = min(scale, 1.0)
    start = int(np.floor(-1 / scale) + 1)
    footprint = 2 - 2 * start
    args = (np.arange(start, start + footprint) - ratio) * scale
    coeffs = np.clip(1 - np.abs(args), 0, 1)
    return np.array(coeffs) / sum(coeffs)


def _cubic_coeffs(ratio: float, a: np.float32) -> np.ndarray:
    return np.array(
        [
            ((a * (ratio + 1) - 5 * a) * (ratio + 1) + 8 * a) * (ratio + 1) - 4 * a,
            ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
            ((a + 2) * (1 - ratio) - (a + 3)) * (1 - ratio) * (1 - ratio) + 1,
            ((a * ((1 - ratio) + 1) - 5 * a) * ((1 - ratio) + 1) + 8 * a) * ((1 - ratio) + 1)
            - 4 * a,
        ]
    )


def _cubic_coeffs_antialias(ratio: float, scale: float, a: np.float32) -> np.ndarray:
    scale = min(scale, 1.0)

    def weight(x: float) -> float:
        x = abs(x)
        x_2 = x * x
        x_3 = x * x_2
        if x <= 1:
            return (a + 2) * x_3 - (a + 3) * x_2 + 1
        if x < 2:
            return a * x_3 - 5 * a * x_2 + 8 * a * x - 4 * a
        return 0.0

    i_start = int(np.floor(-2 / scale) + 1)
    i_end = 2 - i_start
    coeffs = [weight(scale * (i - ratio)) for i in range(i_start, i_end)]
    return np.array(coeffs) / sum(coeffs)


def _coeff_fn(interp: Interp, scale: float) -> Callable[[float], np.ndarray]:
    if interp.mode == "nearest":
        return lambda r: _nearest_coeffs(r, interp.nearest_mode, scale)
    if interp.mode == "linear":
        if interp.antialias:
            return lambda r: _linear_coeffs_antialias(r, scale)
        return _linear_coeffs
    if interp.antialias:
        return lambda r: _cubic_coeffs_antialias(r, scale, interp.cubic_a)
    return lambda r: _cubic_coeffs(r, interp.cubic_a)


def _source(
    transform: str,
    y: np.ndarray,
    scale: float,
    size_in: int,
    size_out: int,
    roi: RoiPair | None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The input coordinate of each output position ``y``, and (for
    tf_crop_and_resize) which of them lie outside the input."""
    width = scale * size_in
    outside = None
    if transform == "align_corners":
        x = np.zeros(size_out) if width == 1 else y * (size_in - 1) / (width - 1)
    elif transform == "asymmetric":
        x = y / scale
    elif transform == "tf_crop_and_resize":
        assert roi is not None
        lo, hi = roi  # NumPy scalars of the roi's type: float32 math where the reference has it
        if width == 1:
            x = np.full(size_out, (hi - lo) * (size_in - 1) / 2, dtype=np.float64)
        else:
            x = y * (hi - lo) * (size_in - 1) / (width - 1)
        x = x + lo * (size_in - 1)
        outside = (x < 0) | (x > size_in - 1)
    elif transform == "pytorch_half_pixel":
        x = np.full(size_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif transform == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif transform == "half_pixel_symmetric":
        adjustment = size_out / width
        center = size_in / 2
        offset = center * (1 - adjustment)
        x = offset + (y + 0.5) / scale - 0.5
    else:  # tf_half_pixel_for_nn (Resize-11)
        x = (y + 0.5) / scale
    return x, outside


def plan_axis(
    ax: int,
    size_in: int,
    size_out: int,
    scale: float,
    interp: Interp,
    roi: RoiPair | None = None,
    pairwise: bool = False,
) -> AxisPlan:
    """The taps and weights of resizing axis ``ax`` from ``size_in`` to
    ``size_out`` positions at ``scale``."""
    y = np.arange(size_out, dtype=np.float64)
    x, outside = _source(interp.transform, y, scale, size_in, size_out, roi)
    x_int = np.floor(x).astype(np.int64)
    # ratio in (0, 1]: the reference prefers the pixel left of x
    ratios = np.where(x == x_int, 1.0, x - x_int)
    fn = _coeff_fn(interp, scale)
    rows = [np.asarray(fn(float(r)), dtype=np.float64) for r in ratios]
    coeffs = np.array(rows, dtype=np.float64).reshape(size_out, -1)
    n = coeffs.shape[1]
    # the n positions nearest x (ties to the smaller), as in the reference's
    # edge-padded coordinates
    pad = int(np.ceil(n / 2))
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        offset = np.where(frac <= 0.5, base, base + 1)
    taps = (p + offset)[:, None] + np.arange(n)[None, :] - pad
    if interp.exclude_outside:
        coeffs = np.where((taps < 0) | (taps >= size_in), 0.0, coeffs)
        total = coeffs.sum(axis=-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    if outside is None:
        outside = np.zeros(size_out, dtype=bool)
    return AxisPlan(ax, size_in, np.clip(taps, 0, size_in - 1), coeffs, outside, pairwise)


# -- sizes and scales ------------------------------------------------------------


def _floats(arr: np.ndarray | None) -> np.ndarray | None:
    if arr is None:
        return None
    a = np.asarray(arr).reshape(-1)
    return None if a.size == 0 else a


def plan(
    n: Node,
    shape: tuple[int, ...],
    interp: Interp,
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    roi: np.ndarray | None = None,
    axes: Sequence[int] | None = None,
    policy: str = "stretch",
) -> tuple[tuple[int, ...], list[AxisPlan]]:
    """The output shape, and the plans of the axes that change, in the
    order the reference resizes them."""
    r = len(shape)
    scales, sizes, roi = _floats(scales), _floats(sizes), _floats(roi)
    if axes is None:
        axes = list(range(r))
    else:
        axes = [norm_axis(n, a, r, "axes entry") for a in axes]
        if len(set(axes)) != len(axes):
            raise n.error(f"axes {list(axes)} has a repeated axis")
    k = len(axes)
    if sizes is not None and scales is not None:
        raise n.error("only one of scales and sizes may be given")
    if sizes is not None:
        if len(sizes) != k:
            raise n.error(f"sizes has {len(sizes)} entries for {k} axes")
        if sizes.dtype.kind not in "iu":
            raise n.error(f"sizes must be int64, got {sizes.dtype}")
        if (sizes < 0).any():
            raise n.error(f"sizes {sizes.tolist()} must not be negative")
        wanted = [int(s) for s in sizes]
        factors = [s / shape[a] if shape[a] else 1.0 for s, a in zip(wanted, axes)]
        if policy != "stretch":
            one = min(factors) if policy == "not_larger" else max(factors)
            factors = [one] * k
            wanted = [int(one * shape[a] + 0.5) for a in axes]
    elif scales is not None:
        if len(scales) != k:
            raise n.error(f"scales has {len(scales)} entries for {k} axes")
        if scales.dtype.kind != "f":
            raise n.error(f"scales must be floats, got {scales.dtype}")
        if not np.isfinite(scales).all() or (scales <= 0).any():
            raise n.error(f"scales {scales.tolist()} must be positive and finite")
        factors = [float(s) for s in scales]
        # as the reference: float64(scale) * size, truncated
        wanted = [int(np.float64(s) * shape[a]) for s, a in zip(scales, axes)]
    else:
        raise n.error("needs scales or sizes")
    roi_pairs: list[RoiPair | None] = [None] * k
    crop = interp.transform == "tf_crop_and_resize"
    if roi is not None and (crop or len(roi) == 2 * k):  # other modes ignore the roi
        if len(roi) != 2 * k:
            raise n.error(f"roi has {len(roi)} entries for {k} axes (2 per axis)")
        roi_pairs = [(roi[i], roi[k + i]) for i in range(k)]
    elif crop:
        raise n.error("coordinate_transformation_mode tf_crop_and_resize needs the roi input")
    out = list(shape)
    for a, w in zip(axes, wanted):
        out[a] = w
    out_shape = checked_shape(n, out, "output shape")
    if any(shape[a] == 0 for a in axes):
        if all(out_shape[a] == 0 or shape[a] == out_shape[a] for a in axes):
            return out_shape, []
        raise n.error(f"cannot resize an empty input of shape {shape} to shape {out_shape}")
    plans = []
    for i, a in enumerate(axes):
        pair = roi_pairs[i]
        if (
            math.isclose(factors[i], 1.0)
            and out_shape[a] == shape[a]
            and (
                pair is None
                or (math.isclose(float(pair[0]), 0.0) and math.isclose(float(pair[1]), 1.0))
            )
        ):
            continue  # the identity along this axis (as the reference decides it)
        if out_shape[a] == 0:
            continue
        trailing = math.prod(shape[b] for b in axes[i + 1 :])
        plans.append(
            plan_axis(a, shape[a], out_shape[a], factors[i], interp, pair, pairwise=trailing == 1)
        )
    return out_shape, plans


# -- Tile ------------------------------------------------------------------------


def _const(arr: np.ndarray) -> Value:
    arr = np.ascontiguousarray(arr)
    return Value("", arr.shape, arr.dtype, arr)


def _along(values: np.ndarray, ax: int, rank: int) -> np.ndarray:
    """A per-position vector of axis ``ax`` shaped to broadcast over a tensor of ``rank``."""
    return values.reshape((len(values),) + (1,) * (rank - 1 - ax))


def saturate(value: float, dtype: np.dtype) -> np.generic:
    """``value`` in ``dtype`` as the reference casts its float64 result
    (``onnx.numpy_helper.saturate_cast``: integers round half to even)."""
    if dtype.kind == "b":
        return np.bool_(value != 0)
    v = np.float64(value)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.round(v), info.min, info.max).astype(dtype)
    finfo = np.finfo(dtype)
    return np.clip(v, finfo.min, finfo.max).astype(dtype)


def _pattern(sel: np.ndarray, size_in: int) -> tuple[int, ...] | None:
    """How the positions ``sel`` read the input as an affine access:
    ``(first, step)`` for ``first + step * o``, ``(first, s, c)`` for
    ``first + (o + c) / s`` (each position repeated ``s`` times), ``()`` for
    the identity, ``None`` for anything else (a gather)."""
    m = len(sel)
    if m == size_in and (sel == np.arange(m)).all():
        return ()
    first = int(sel[0])
    if m == 1:
        return (first, 0)
    d = np.diff(sel)
    if (d == d[0]).all():
        return (first, int(d[0]))
    if not np.isin(d, (0, 1)).all():
        return None
    starts = np.flatnonzero(np.r_[True, d != 0])
    runs = np.diff(np.r_[starts, m])
    s = int(runs.max())
    c = s - int(runs[0])
    if s < 2 or (sel != first + (np.arange(m) + c) // s).any():
        return None
    return (first, s, c)


def _copy(b: Builder, x: Value, maps: dict[int, tuple[int, ...]], shape: Sequence[int]) -> Value:
    """One ``=`` contraction reading ``x`` through the affine patterns ``maps``."""
    maps = {a: p for a, p in maps.items() if p}
    if not maps:
        return x
    idx = indices(x.rank)
    outs, ins, cons = [], [], []
    for a in range(x.rank):
        p = maps.get(a)
        if p is None:
            outs.append(idx[a])
            ins.append(idx[a])
        elif len(p) == 2:
            first, step = p
            outs.append(idx[a])
            ins.append(affine((step, idx[a]), const=first))
        else:
            first, s, c = p
            t, rr = f"t{a}", f"r{a}"
            outs.append(affine((s, t), (1, rr), const=-c))
            ins.append(affine((1, t), const=first))
            cons.append(f"{rr} < {s}")
    sizes = ", ".join(str(int(d)) for d in shape)
    text = f"{{out}}[{', '.join(outs)} : {sizes}] = =({b.ref(x)}[{', '.join(ins)}])"
    if cons:
        text += ", " + ", ".join(cons)
    return b.contraction(text, shape, x.dtype)


def _gather(b: Builder, x: Value, ax: int, sel: np.ndarray) -> Value:
    """``x`` read at the constant positions ``sel`` along ``ax``."""
    shape = list(x.shape)
    shape[ax] = len(sel)
    idx = b.ref(_const(np.asarray(sel, dtype=np.int64)))
    return b.statement(f"{{out}} = gather({b.ref(x)}, {idx}, {ax})", shape, x.dtype)


def _fill(b: Builder, x: Value, ax: int, mask: np.ndarray, fill: np.ndarray) -> Value:
    """``x`` with the positions ``mask`` along ``ax`` set to ``fill`` (per position)."""
    if not mask.any():
        return x
    m = b.ref(_const(_along(mask, ax, x.rank)))
    vals = fill[mask]
    if (vals == vals[0]).all() and not (x.dtype.kind == "f" and np.isnan(vals).any()):
        f = scalar(b, vals[0].item(), x.dtype)
    else:
        f = b.ref(_const(_along(fill.astype(x.dtype), ax, x.rank)))
    return b.eltwise(f"{m} ? {f} : {b.ref(x)}", x.shape, x.dtype)


def _nearest(b: Builder, x: Value, interp: Interp, plans: list[AxisPlan]) -> Value:
    """Each output copies one input element: affine copies (one contraction
    for every axis that has one) and gathers, then the fills."""
    cur = x
    maps: dict[int, tuple[int, ...]] = {}
    fills = []
    ev = saturate(interp.extrapolation, x.dtype)
    for p in plans:
        rows = np.arange(p.size_out)
        pick = np.argmax(p.coeffs, axis=1)
        sel = p.taps[rows, pick]
        zero = p.coeffs[rows, pick] == 0  # exclude_outside left no tap
        pattern = _pattern(sel, p.size_in)
        if pattern is None:
            cur = _gather(b, cur, p.axis, sel)
        else:
            maps[p.axis] = pattern
        fill = np.where(p.outside, ev, np.zeros((), x.dtype)).astype(x.dtype)
        fills.append((p.axis, zero | p.outside, fill))
    shape = list(cur.shape)
    for p in plans:
        shape[p.axis] = p.size_out
    cur = _copy(b, cur, maps, shape)
    # the reference fills axis by axis: a later axis's fill wins
    for ax, mask, fill in fills:
        cur = _fill(b, cur, ax, mask, fill)
    return cur


def _by_matrix(b: Builder, x: Value, interp: Interp, plans: list[AxisPlan]) -> Value:
    """Floats: one contraction with the interpolation matrix per axis."""
    work = np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
    cur = x if x.dtype == work else b.eltwise(cast(b.ref(x), work), x.shape, work)
    idx = indices(x.rank)
    for p in plans:
        a = b.ref(_const(p.matrix().astype(work)))
        shape = list(cur.shape)
        shape[p.axis] = p.size_out
        outs = list(idx)
        ins = list(idx)
        outs[p.axis], ins[p.axis] = "o", "k"
        sizes = ", ".join(str(d) for d in shape)
        cur = b.contraction(
            f"{{out}}[{', '.join(outs)} : {sizes}] = +({b.ref(cur)}[{', '.join(ins)}] * {a}[o, k])",
            shape,
            work,
        )
        ev = np.full(p.size_out, interp.extrapolation, dtype=work)
        cur = _fill(b, cur, p.axis, p.outside, ev)
    if cur.dtype != x.dtype:
        cur = b.eltwise(cast(b.ref(cur), x.dtype), cur.shape, x.dtype)
    return cur


def _ordered_sum(terms: list[str], pairwise: bool) -> str:
    """``terms`` added in NumPy's order: left to right, or (``pairwise``) as
    its pairwise sum over a contiguous run adds them."""
    if not pairwise or len(terms) < 8:
        out = terms[0]
        for t in terms[1:]:
            out = f"({out} + {t})"
        return out
    if len(terms) <= 128:
        acc = list(terms[:8])
        i = 8
        while i < len(terms) - len(terms) % 8:
            for j in range(8):
                acc[j] = f"({acc[j]} + {terms[i + j]})"
            i += 8
        out = (
            f"((({acc[0]} + {acc[1]}) + ({acc[2]} + {acc[3]})) + "
            f"(({acc[4]} + {acc[5]}) + ({acc[6]} + {acc[7]})))"
        )
        for t in terms[i:]:
            out = f"({out} + {t})"
        return out
    half = len(terms) // 2
    half -= half % 8
    return f"({_ordered_sum(terms[:half], True)} + {_ordered_sum(terms[half:], True)})"


def _exact(b: Builder, x: Value, interp: Interp, plans: list[AxisPlan]) -> Value:
    """Integers: the taps gathered and summed in float64 in the reference's
    order, then rounded half to even and saturated.

    Per axis, one gather of every tap (``(out, n)`` indices, as the reference's
    ``np.take``) and one product with the weights, stored: the sum then reads
    the rounded products, so a target that fuses a multiply into the add that
    follows it (FMA, one rounding) cannot change the sum."""
    f64 = np.dtype(np.float64)
    cur = b.eltwise(cast(b.ref(x), f64), x.shape, f64)
    r = x.rank
    for p in plans:
        n = p.taps.shape[1]
        wide = cur.shape[: p.axis] + (p.size_out, n) + cur.shape[p.axis + 1 :]
        taps = b.ref(_const(p.taps.astype(np.int64)))
        g = b.statement(f"{{out}} = gather({b.ref(cur)}, {taps}, {p.axis})", wide, f64)
        w = _const(p.coeffs.reshape(p.coeffs.shape + (1,) * (r - 1 - p.axis)))
        prod = b.eltwise(f"{b.ref(g)} * {b.ref(w)}", wide, f64)
        shape = list(cur.shape)
        shape[p.axis] = p.size_out
        idx = indices(r)
        sizes = ", ".join(str(d) for d in shape)
        terms = []
        for k in range(n):
            at = [*idx[: p.axis], "o", str(k), *idx[p.axis + 1 :]]
            outs = [*idx[: p.axis], "o", *idx[p.axis + 1 :]]
            tap = b.contraction(
                f"{{out}}[{', '.join(outs)} : {sizes}] = =({prod.name}[{', '.join(at)}])",
                shape,
                f64,
            )
            terms.append(b.ref(tap))
        cur = b.eltwise(_ordered_sum(terms, p.pairwise), shape, f64)
        ev = np.full(p.size_out, interp.extrapolation, dtype=f64)
        cur = _fill(b, cur, p.axis, p.outside, ev)
    info = np.iinfo(x.dtype)
    lo, hi = float(info.min), float(info.max)
    expr = f"max(min(round({b.ref(cur)}), {hi!r}), {lo!r})"
    return b.eltwise(cast(expr, x.dtype), cur.shape, x.dtype)


def resize_value(
    b: Builder,
    n: Node,
    x: Value,
    interp: Interp,
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    roi: np.ndarray | None = None,
    axes: Sequence[int] | None = None,
    policy: str = "stretch",
) -> Value:
    """``x`` resized (the shared body of Resize and Upsample)."""
    if x.rank == 0:
        raise n.error("cannot resize a scalar")
    if interp.mode not in MODES:
        raise n.error(f"mode {interp.mode!r} is not supported (nearest, linear or cubic)")
    if interp.transform not in TRANSFORMS:
        raise n.error(
            f"coordinate_transformation_mode {interp.transform!r} is not supported "
            f"({', '.join(TRANSFORMS)})"
        )
    if interp.nearest_mode not in (*NEAREST_MODES, "simple"):
        raise n.error(
            f"nearest_mode {interp.nearest_mode!r} is not supported ({', '.join(NEAREST_MODES)})"
        )
    if policy not in POLICIES:
        raise n.error(
            f"keep_aspect_ratio_policy {policy!r} is not supported ({', '.join(POLICIES)})"
        )
    if interp.mode != "nearest" and x.dtype.kind not in "iuf":
        raise n.error(f"{interp.mode} interpolation of {x.dtype} is not supported")
    if x.dtype.kind not in "iufb":
        raise n.error(f"element type {x.dtype} is not supported")
    shape, plans = plan(n, x.shape, interp, scales, sizes, roi, axes, policy)
    e = empty(shape, x.dtype)
    if e is not None:
        return e
    if not plans:
        return x
    if interp.mode == "nearest":
        return _nearest(b, x, interp, plans)
    if x.dtype.kind == "f":
        return _by_matrix(b, x, interp, plans)
    return _exact(b, x, interp, plans)


def _mode(n: Node) -> str:
    mode = str(n.attr("mode", "nearest"))
    return "linear" if mode == "bilinear" else mode


@op("Resize", static=(1, 2, 3))
def resize(b: Builder, n: Node) -> list[Value | None]:
    """Resize: nearest (every nearest_mode), linear, cubic; every coordinate_transformation_mode, antialias, axes, keep_aspect_ratio_policy.

    ``scales``, ``sizes`` and ``roi`` must be known when compiling; each
    resized axis is a constant interpolation matrix (a contraction) or, for
    nearest, a copy or gather."""
    x = n.input(0)
    if n.opset < 11:
        interp = Interp(_mode(n), "asymmetric", "simple")
        scales = n.const_input(1, "scales")
        if scales is None:
            raise n.error("input 1 (scales) is required")
        return [resize_value(b, n, x, interp, scales, None)]
    antialias = int(n.attr("antialias", 0))
    if antialias not in (0, 1):
        raise n.error(f"antialias must be 0 or 1, got {antialias}")
    interp = Interp(
        mode=_mode(n),
        transform=str(n.attr("coordinate_transformation_mode", "half_pixel")),
        nearest_mode=str(n.attr("nearest_mode", "round_prefer_floor")),
        cubic_a=np.float32(n.attr("cubic_coeff_a", -0.75)),
        exclude_outside=bool(n.attr("exclude_outside", 0)),
        # antialias filters linear and cubic only (nearest ignores it, as the spec says)
        antialias=bool(antialias),
        extrapolation=float(n.attr("extrapolation_value", 0.0)),
    )
    axes = ints(n, "axes", None) or None
    policy = str(n.attr("keep_aspect_ratio_policy", "stretch"))
    roi = n.const_input(1, "roi")
    scales = n.const_input(2, "scales")
    sizes = n.const_input(3, "sizes")
    return [resize_value(b, n, x, interp, scales, sizes, roi, axes, policy)]


@op("Upsample", static=(1,))
def upsample(b: Builder, n: Node) -> list[Value | None]:
    """Upsample: opsets 7 and 9, as Resize-10 (nearest, linear; asymmetric coordinates).

    The scales come from the attribute before opset 9, else from an input
    known when compiling."""
    x = n.input(0)
    scales: np.ndarray | None
    if n.opset < 9:
        given = n.attr("scales")
        if given is None:
            raise n.error("the scales attribute is required")
        scales = np.array([float(s) for s in given], dtype=np.float32)
    else:
        scales = n.const_input(1, "scales")
        if scales is None:
            raise n.error("input 1 (scales) is required")
    return [resize_value(b, n, x, Interp(_mode(n), "asymmetric", "simple"), scales, None)]
