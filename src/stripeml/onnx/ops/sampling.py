"""Sampling at coordinates computed at run time: GridSample, RoiAlign and
DeformConv.

Where these operators read the input depends on the values of another input
(the grid, the regions of interest, the offsets), so no affine access can say
it.  Each is written in Tile in three steps, following the ONNX reference
implementations (``onnx.reference.ops.op_grid_sample``, ``op_roi_align``,
``op_deform_conv``) operation for operation:

1. **Taps and weights, elementwise.**  Each sample's coordinate along each
   spatial axis is computed from the run-time input (float32, as the
   references keep them), then its integer taps (``floor(x) + k``) and their
   interpolation weights, and what the padding mode does with taps outside
   the axis: clamped (``border``), reflected (``reflection``, the references'
   float64 arithmetic) or marked invalid (``zeros``).  A tap axis of size 1, 2
   or 4 per spatial axis (nearest, linear, cubic) broadcasts against the
   others, so the flat position of every tap of every sample is one
   elementwise statement: ``batch * S + sum(tap_i * stride_i)`` over the
   flattened spatial axes, or the position of an extra row of zeros for an
   invalid tap (the reference reads a 0 there).
2. **One ``gather``.**  The input is laid out once as rows of channels,
   ``(batch, spatial) x channels`` plus that zero row (one ``=``
   contraction), and Tile's ``gather`` reads the row of every tap: each read
   copies all the channels of one pixel.
3. **A contraction over the taps**: the weighted sum (``+``), or for
   RoiAlign's ``max`` mode the maximum of the weighted taps (``>``).

The gathered taps are materialised: ``samples x taps x channels`` elements
(GridSample: the output times 1, 2**r or 4**r; RoiAlign: rois x bins x
samples per bin x 4 x channels; DeformConv: the im2col matrix times 2**r).
float16 data computes in float32 and is rounded back at the end; the
references compute in float16, so the two differ in the last float16 bits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import checked_shape, ints, literal
from .conv import affine, channel_vector, window
from .data import checked_indices
from .reduce import as_dtype, compute_dtype
from .shape import empty, reshape

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)

#: Taps per spatial axis, and the first tap's offset from ``floor(x)``.
TAPS = {"nearest": (1, 0), "linear": (2, 0), "cubic": (4, -1)}
PADDINGS = ("zeros", "border", "reflection")
#: Keys' cubic convolution coefficient, as the reference's GridSample.
CUBIC_A = -0.75


def _const(arr: np.ndarray) -> Value:
    arr = np.asarray(arr)
    return Value("", arr.shape, arr.dtype, arr)


def _f(v: float) -> str:
    """A weak float literal (it takes the dtype of the tensor it meets)."""
    return literal(float(v), F64)


def _shape(*values: Value | Sequence[int]) -> tuple[int, ...]:
    shapes = [v.shape if isinstance(v, Value) else tuple(v) for v in values]
    return tuple(int(s) for s in np.broadcast_shapes(*shapes))


def _float_data(n: Node, x: Value, what: str = "X") -> None:
    if x.dtype.kind != "f":
        raise n.error(f"{what} has element type {x.dtype}; floating point is required")


@dataclass(frozen=True)
class AxisTaps:
    """The taps of every sample along one spatial axis (shape: the samples'
    shape with this axis's tap axis)."""

    idx: Value  # int64 positions along the axis; in range wherever ``valid`` holds
    weight: Value | None  # float32 interpolation weights (None: nearest, weight 1)
    valid: Value | None  # bool: the tap lies inside the axis (zeros padding only)


def _reflect(b: Builder, f: Value, lo: float, hi: float) -> Value:
    """The reference's ``_gs_reflect`` of the float64 tensor ``f``: a value
    outside ``[lo, hi]`` reflected back by the nearer border until inside."""
    span = hi - lo
    fr = b.ref(f)
    below = b.eltwise(f"floor(({_f(lo)} - {fr}) / {_f(span)})", f.shape, F64)
    above = b.eltwise(f"floor(({fr} - {_f(hi)}) / {_f(span)})", f.shape, F64)
    qb, qa = below.name, above.name

    def even(q: str) -> str:
        return f"({q} - 2.0 * floor({q} / 2.0) == 0.0)"

    rb = f"({_f(lo)} - {fr} - {qb} * {_f(span)})"
    ra = f"({fr} - {_f(hi)} - {qa} * {_f(span)})"
    expr = (
        f"{fr} < {_f(lo)} ? ({even(qb)} ? {_f(lo)} + {rb} : {_f(hi)} - {rb}) : "
        f"({fr} > {_f(hi)} ? ({even(qa)} ? {_f(hi)} - {ra} : {_f(lo)} + {ra}) : {fr})"
    )
    return b.eltwise(expr, f.shape, F64)


def _cubic_weights(t: str) -> list[str]:
    """The reference's cubic coefficients of the four taps at distance ``t``
    (float32 ``x - floor(x)``) from the second, term for term."""
    a = CUBIC_A
    return [
        f"(({_f(a)} * ({t} + 1.0) - {_f(5 * a)}) * ({t} + 1.0) + {_f(8 * a)}) * ({t} + 1.0)"
        f" - {_f(4 * a)}",
        f"(({_f(a + 2)} * {t} - {_f(a + 3)}) * {t} * {t} + 1.0)",
        f"(({_f(a + 2)} * (1.0 - {t}) - {_f(a + 3)}) * (1.0 - {t}) * (1.0 - {t}) + 1.0)",
        f"(({_f(a)} * (2.0 - {t}) - {_f(5 * a)}) * (2.0 - {t}) + {_f(8 * a)}) * (2.0 - {t})"
        f" - {_f(4 * a)}",
    ]


def axis_taps(
    b: Builder,
    x: Value,
    size: int,
    mode: str,
    padding: str,
    align_corners: bool,
    tap_shape: Sequence[int],
) -> AxisTaps:
    """The taps along an axis of ``size`` of the samples at the float32
    coordinates ``x`` (pixel units), as the reference's GridSample finds
    them: ``nearest`` rounds half to even, ``border``/``reflection`` first
    move a coordinate outside the borders inside, then each tap outside the
    axis is clamped, reflected, or (``zeros``) invalid.  ``tap_shape`` is the
    shape of this axis's tap offsets (``(K, 1, ..., 1)``, broadcasting against
    ``x``'s trailing axes of size 1)."""
    lo, hi = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
    if mode == "nearest":
        x = b.eltwise(f"round({b.ref(x)})", x.shape, F32)
    xr = b.ref(x)
    if padding == "border":
        x = b.eltwise(
            f"({xr} < {_f(lo)} || {xr} > {_f(hi)}) ? min(max({xr}, 0.0), {_f(size - 1)}) : {xr}",
            x.shape,
            F32,
        )
    elif padding == "reflection" and hi > lo:
        wide = b.eltwise(f"as_float({xr}, 64)", x.shape, F64)
        x = b.eltwise(f"as_float({_reflect(b, wide, lo, hi).name}, 32)", x.shape, F32)
    xr = b.ref(x)
    weight: Value | None = None
    if mode == "nearest":
        idx = b.eltwise(f"as_int({xr}, 64)", x.shape, I64)
    else:
        count, first = TAPS[mode]
        offsets = _const(np.arange(first, first + count, dtype=np.int64).reshape(tap_shape))
        off = b.ref(offsets)
        shape = _shape(x, offsets)
        low = b.eltwise(f"floor({xr})", x.shape, F32)
        t = b.eltwise(f"{xr} - {low.name}", x.shape, F32).name
        idx = b.eltwise(f"as_int({low.name}, 64) + {off}", shape, I64)
        if mode == "linear":
            expr = f"{off} == 0 ? 1.0 - {t} : {t}"
        else:
            c = _cubic_weights(t)
            expr = f"{off} == -1 ? {c[0]} : ({off} == 0 ? {c[1]} : ({off} == 1 ? {c[2]} : {c[3]}))"
        weight = b.eltwise(expr, shape, F32)
    ir = idx.name
    valid: Value | None = None
    if padding == "zeros":
        valid = b.eltwise(f"{ir} >= 0 && {ir} < {size}", idx.shape, BOOL)
    elif padding == "reflection" and size > 1:
        wide = b.eltwise(f"as_float({ir}, 64)", idx.shape, F64)
        back = _reflect(b, wide, lo, hi).name
        # int() truncates, as the reference; the clamp changes nothing but NaN's taps
        idx = b.eltwise(f"min(max(as_int({back}, 64), 0), {size - 1})", idx.shape, I64)
    else:  # border, or reflection of an axis of one element
        idx = b.eltwise(f"min(max({ir}, 0), {size - 1})", idx.shape, I64)
    return AxisTaps(idx, weight, valid)


def tap_positions(
    b: Builder,
    axes: Sequence[AxisTaps],
    strides: Sequence[int],
    base: str,
    base_shape: Sequence[int],
    fill: int,
) -> Value:
    """The flat position of every tap: ``base + sum(idx_i * stride_i)``, or
    ``fill`` (the zero row) where a tap is invalid along some axis."""
    shape = _shape(base_shape, *(a.idx for a in axes))
    terms = [base] if base else []
    terms += [a.idx.name if s == 1 else f"{a.idx.name} * {s}" for a, s in zip(axes, strides)]
    expr = " + ".join(terms) or "0"
    valid = [a.valid.name for a in axes if a.valid is not None]
    if valid:
        expr = f"({' && '.join(valid)}) ? ({expr}) : {fill}"
    return b.eltwise(expr, shape, I64)


def tap_weights(
    b: Builder, axes: Sequence[AxisTaps], dtype: np.dtype, scale: Value | None = None
) -> Value | None:
    """The product of every axis's weights (float32, each cast to ``dtype``), times
    ``scale`` (``dtype``) when given; ``None`` when every weight is 1."""
    ws = [a.weight for a in axes if a.weight is not None]
    if not ws:
        return scale
    shape = _shape(*ws)
    # each weight in ``dtype`` before the product, as the reference's
    # coefficient arrays (float64 data: float64 products of float32 weights)
    bits = dtype.itemsize * 8
    expr = " * ".join(w.name if dtype == F32 else f"as_float({w.name}, {bits})" for w in ws)
    if scale is not None:
        shape = _shape(shape, scale)
        expr = f"({expr}) * {b.ref(scale)}"
    return b.eltwise(expr, shape, dtype)


def pixel_rows(b: Builder, x: Value, groups: int = 1, zero_row: bool = True) -> Value:
    """``x`` (N, C, D1, ...) as rows of ``C / groups`` channels: row
    ``(n * S + s) * groups + g`` holds the channels of group ``g`` at flat
    spatial position ``s`` (``S`` positions), then (``zero_row``) a row of zeros."""
    nb, c, *spatial = x.shape
    cg = c // groups
    s_total = math.prod(spatial)
    ds = [f"d{i}" for i in range(len(spatial))]
    sstr = [math.prod(spatial[i + 1 :]) for i in range(len(spatial))]
    row_terms = [(s_total * groups, "n")] + [(st * groups, d) for st, d in zip(sstr, ds)]
    if groups > 1:
        row_terms.append((1, "g"))
        chan = affine((cg, "g"), (1, "cg"))
    else:
        chan = "cg"
    rows = nb * s_total * groups + (1 if zero_row else 0)
    return b.contraction(
        f"{{out}}[{affine(*row_terms)}, cg : {rows}, {cg}] = "
        f"=({b.ref(x)}[n, {chan}, {', '.join(ds)}])",
        (rows, cg),
        x.dtype,
    )


def _gather_rows(b: Builder, rows: Value, pos: Value) -> Value:
    return b.statement(
        f"{{out}} = gather({rows.name}, {pos.name}, 0)", pos.shape + rows.shape[1:], rows.dtype
    )


def _idx(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(count)]


# -- GridSample -------------------------------------------------------------------

_MODE_NAMES = {
    "bilinear": "linear",
    "linear": "linear",
    "nearest": "nearest",
    "bicubic": "cubic",
    "cubic": "cubic",
}


@op("GridSample")
def grid_sample(b: Builder, n: Node) -> list[Value | None]:
    """GridSample: linear (bilinear), nearest, cubic (bicubic); zeros/border/reflection padding; align_corners; N-D from opset 20.

    Written as the reference (``op_grid_sample``) computes it: grid
    coordinates denormalised in float32, ``nearest`` rounding half to even,
    coordinates outside the borders clamped or reflected, then each tap
    outside the input zero, clamped or reflected.  The taps' flat positions
    and weights are elementwise Tile, one ``gather`` reads every tap's
    channels, one contraction sums them (``nearest``: a copy, exact for any
    element type).  Linear and cubic need float data."""
    x, grid = n.input(0), n.input(1)
    r = x.rank - 2
    if r < 1:
        raise n.error(f"X must be (N, C, D1, ...), got shape {x.shape}")
    if n.opset < 20 and r != 2:
        raise n.error(f"GridSample-{n.opset} takes 4-D inputs, got shape {x.shape} (N-D: opset 20)")
    raw_mode = str(n.attr("mode", "linear" if n.opset >= 20 else "bilinear"))
    mode = _MODE_NAMES.get(raw_mode)
    if mode is None:
        raise n.error(f"mode {raw_mode!r} is not one of {', '.join(_MODE_NAMES)}")
    padding = str(n.attr("padding_mode", "zeros"))
    if padding not in PADDINGS:
        raise n.error(f"padding_mode {padding!r} is not one of {', '.join(PADDINGS)}")
    align = bool(int(n.attr("align_corners", 0)))
    if grid.rank != r + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != r:
        raise n.error(
            f"grid of shape {grid.shape} does not fit X of shape {x.shape}: "
            f"(N, D1_out, ..., D{r}_out, {r}) expected"
        )
    _float_data(n, grid, "grid")
    if mode != "nearest":
        _float_data(n, x)
    nb, c, *spatial = x.shape
    out_spatial = tuple(grid.shape[1:-1])
    out_shape = (nb, c, *out_spatial)
    e = empty(out_shape, x.dtype)
    if e is not None:
        return [e]
    if 0 in spatial:
        raise n.error(f"X of shape {x.shape} has no element to sample")
    dtype = x.dtype if mode == "nearest" else compute_dtype(x.dtype)
    data = as_dtype(b, x, dtype)
    count = TAPS[mode][0]
    lead = (nb, *out_spatial)
    taps = (1,) * r if count > 1 else ()
    cshape = lead + taps
    m = len(out_spatial)
    os_ = _idx("o", m)
    gref = b.ref(grid)
    axes = []
    for i, size in enumerate(spatial):
        comp = b.contraction(
            f"{{out}}[{', '.join(['n', *os_, *('0' for _ in taps)])} : "
            f"{', '.join(map(str, cshape))}] = =({gref}[{', '.join(['n', *os_, str(r - 1 - i)])}])",
            cshape,
            grid.dtype,
        )
        g = comp.name
        if align:
            coord = f"({g} + 1) / 2.0 * {size - 1}"
        else:
            coord = f"(({g} + 1) * {size} - 1) / 2.0"
        if grid.dtype != F32:
            coord = f"as_float({coord}, 32)"
        xi = b.eltwise(coord, cshape, F32)
        tap_shape = (count,) + (1,) * (r - 1 - i)
        axes.append(axis_taps(b, xi, size, mode, padding, align, tap_shape))
    s_total = math.prod(spatial)
    strides = [math.prod(spatial[i + 1 :]) for i in range(r)]
    zeros = padding == "zeros"
    rows = pixel_rows(b, data, zero_row=zeros)
    first = axes[0].idx
    base = f"index({first.name}, 0) * {s_total}" if nb > 1 else ""
    pos = tap_positions(b, axes, strides, base, first.shape, nb * s_total)
    got = _gather_rows(b, rows, pos)
    ks = _idx("k", r) if count > 1 else []
    sizes = ", ".join(map(str, out_shape))
    src = f"{got.name}[{', '.join(['n', *os_, *ks, 'c'])}]"
    weights = tap_weights(b, axes, dtype)
    if weights is None:
        y = b.contraction(f"{{out}}[n, c, {', '.join(os_)} : {sizes}] = =({src})", out_shape, dtype)
    else:
        wsrc = f"{weights.name}[{', '.join(['n', *os_, *ks])}]"
        y = b.contraction(
            f"{{out}}[n, c, {', '.join(os_)} : {sizes}] = +({src} * {wsrc})", out_shape, dtype
        )
    return [as_dtype(b, y, x.dtype)]


# -- RoiAlign ---------------------------------------------------------------------


def _roi_grid(
    n: Node, rois: np.ndarray, scale: float, half_pixel: bool, out_h: int, out_w: int
) -> tuple[np.ndarray, np.ndarray]:
    """The adaptive sampling grid of every roi (``sampling_ratio`` 0):
    ``ceil(roi_size / output_size)`` per axis, in the rois' type as the
    reference computes it."""
    rois = np.asarray(rois)
    if not np.all(np.isfinite(rois)):
        raise n.error("rois hold a non-finite value")
    off = 0.5 if half_pixel else 0.0
    with np.errstate(all="ignore"):
        start = rois[:, :2] * scale - off
        end = rois[:, 2:4] * scale - off
        size = end - start
        if not half_pixel:
            size = np.maximum(size, 1.0)
        gw = np.ceil(size[:, 0] / out_w)
        gh = np.ceil(size[:, 1] / out_h)
    return gh.astype(np.int64), gw.astype(np.int64)


def _roi_axis(
    b: Builder, coord: Value, size: int, tap_shape: Sequence[int]
) -> tuple[Value, Value, Value]:
    """(outside, taps, weights) of the samples at ``coord`` along an axis of
    ``size``, as the reference's ``pre_calc_for_bilinear_interpolate``: a
    sample beyond ``[-1, size]`` is outside, else it is clamped at 0, and one
    at or past the last pixel reads the last pixel with weight 1."""
    cr = b.ref(coord)
    dt = coord.dtype
    outside = b.eltwise(f"{cr} < -1.0 || {cr} > {size}", coord.shape, BOOL)
    y = b.eltwise(f"max({cr}, 0.0)", coord.shape, dt).name
    low = b.eltwise(f"as_int({y}, 64)", coord.shape, I64).name
    edge = b.eltwise(f"{low} >= {size - 1}", coord.shape, BOOL).name
    frac = b.eltwise(
        f"{edge} ? 0.0 : {y} - as_float({low}, {dt.itemsize * 8})", coord.shape, dt
    ).name
    q = b.ref(_const(np.arange(2, dtype=np.int64).reshape(tap_shape)))
    shape = _shape(coord.shape, tap_shape)
    # the clamp changes nothing but a NaN coordinate's taps
    idx = b.eltwise(
        f"min(max({edge} ? {size - 1} : ({q} == 0 ? {low} : {low} + 1), 0), {size - 1})",
        shape,
        I64,
    )
    weight = b.eltwise(f"{q} == 0 ? 1.0 - {frac} : {frac}", shape, dt)
    return outside, idx, weight


@op("RoiAlign")
def roi_align(b: Builder, n: Node) -> list[Value | None]:
    """RoiAlign: avg and max modes, half_pixel/output_half_pixel, spatial_scale, sampling_ratio (0: adaptive, rois known when compiling).

    As the reference (``op_roi_align``): each bin of each roi averages (or,
    ``max``, takes the largest of the weighted taps of) a grid of bilinear
    samples; the sample positions, taps and weights are elementwise Tile on
    the run-time rois, one ``gather`` reads the taps' channels from the image
    of each roi's batch index (negative ones count from the end; outside
    ``-N .. N-1`` an ``ExecutionError`` when the model runs), one contraction
    reduces them.  ``sampling_ratio`` 0 samples ``ceil(roi size / output
    size)`` points per bin, a count that depends on the rois' values: the rois
    must then be known when compiling (an initializer or a constant; a graph
    input or computed rois are an error naming the node, give a positive
    ``sampling_ratio`` instead)."""
    x, rois, bidx = n.input(0), n.input(1), n.input(2)
    _float_data(n, x)
    if x.rank != 4:
        raise n.error(f"X must be (N, C, H, W), got shape {x.shape}")
    if rois.rank != 2 or rois.shape[1] != 4:
        raise n.error(f"rois must be (num_rois, 4), got shape {rois.shape}")
    if rois.dtype != x.dtype:
        raise n.error(f"rois ({rois.dtype}) and X ({x.dtype}) differ in type")
    if bidx.shape != (rois.shape[0],) or bidx.dtype.kind not in "iu":
        raise n.error(
            f"batch_indices must be {rois.shape[0]} integers, got {bidx.dtype} of shape {bidx.shape}"
        )
    mode = str(n.attr("mode", "avg")).lower()
    if mode not in ("avg", "max"):
        raise n.error(f"mode {mode!r} is neither 'avg' nor 'max'")
    out_h, out_w = int(n.attr("output_height", 1)), int(n.attr("output_width", 1))
    ratio = int(n.attr("sampling_ratio", 0))
    scale = float(n.attr("spatial_scale", 1.0))
    if out_h < 1 or out_w < 1 or ratio < 0:
        raise n.error(
            f"output_height {out_h} and output_width {out_w} must be positive, "
            f"sampling_ratio {ratio} non-negative"
        )
    ctm = "output_half_pixel" if n.opset < 16 else "half_pixel"
    ctm = str(n.attr("coordinate_transformation_mode", ctm))
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise n.error(f"coordinate_transformation_mode {ctm!r} is not supported")
    half = ctm == "half_pixel"
    nb, c, height, width = x.shape
    nr = rois.shape[0]
    out_shape = (nr, c, out_h, out_w)
    e = empty(out_shape, x.dtype)
    if e is not None:
        return [e]
    if x.size == 0:
        raise n.error(f"X of shape {x.shape} has no pixel to sample")
    dt = compute_dtype(x.dtype)
    data = as_dtype(b, x, dt)
    rv = as_dtype(b, rois, dt)
    # per-roi values have shape (R, 1, 1, 1, 1, 1, 1); samples (R, PH, PW, GH, GW, QY, QX)
    one = (1,) * 6
    if ratio > 0:
        gh_max = gw_max = ratio
        grid_h: str = str(ratio)
        grid_w: str = str(ratio)
        gh = gw = None
    else:
        if not rois.is_const:
            raise n.error(
                "sampling_ratio 0 (adaptive: ceil(roi size / output size) samples per bin) "
                "needs the rois known when compiling (an initializer or constant); "
                "these are computed at run time: give a positive sampling_ratio"
            )
        gh, gw = _roi_grid(n, np.asarray(rois.const), scale, half, out_h, out_w)
        gh_max, gw_max = max(int(gh.max()), 1), max(int(gw.max()), 1)
        checked_shape(n, (nr, out_h, out_w, gh_max, gw_max, 4, c), "the gathered samples")
        grid_h = b.ref(_const(gh.astype(dt).reshape(nr, *one)))
        grid_w = b.ref(_const(gw.astype(dt).reshape(nr, *one)))
    cols = []
    for j in range(4):
        if rv.is_const and not b.tile_name(rv):
            col = _const(np.asarray(rv.const)[:, j].reshape(nr, *one))
        else:
            col = b.contraction(
                f"{{out}}[r, 0, 0, 0, 0, 0, 0 : {nr}, 1, 1, 1, 1, 1, 1] = =({b.ref(rv)}[r, {j}])",
                (nr, *one),
                dt,
            )
        cols.append(b.ref(col))
    off = 0.5 if half else 0.0
    per_roi = (nr, *one)
    start = [b.eltwise(f"{cols[j]} * {_f(scale)} - {_f(off)}", per_roi, dt).name for j in (0, 1)]
    end = [b.eltwise(f"{cols[j]} * {_f(scale)} - {_f(off)}", per_roi, dt).name for j in (2, 3)]
    bins = []
    for k, pooled in ((0, out_w), (1, out_h)):
        length = f"{end[k]} - {start[k]}" if half else f"max({end[k]} - {start[k]}, 1.0)"
        bins.append(b.eltwise(f"({length}) / {pooled}", per_roi, dt).name)

    def coords(pooled: int, samples: int, counts: np.ndarray | None, axis: int, k: int) -> Value:
        # start + p * bin + (i + 0.5) * bin / grid, the reference's order
        lay = [1] * 7
        lay[axis] = pooled
        pv = _const(np.arange(pooled, dtype=dt).reshape(lay[1:]))
        lay = [1] * 7
        lay[axis + 2] = samples
        iv = np.arange(samples, dtype=np.int64).reshape(lay)
        if counts is not None and mode == "max":
            # a roi's extra samples repeat its last one: the maximum stays
            iv = np.minimum(iv, np.maximum(counts.reshape(nr, *one) - 1, 0))
        ivals = _const((iv + 0.5).astype(dt))
        shape = _shape(per_roi, pv, ivals)
        start_k, bin_k = start[k], bins[k]
        grid_k = grid_w if k == 0 else grid_h
        return b.eltwise(
            f"{start_k} + {b.ref(pv)} * {bin_k} + {b.ref(ivals)} * {bin_k} / {grid_k}", shape, dt
        )

    ycoord = coords(out_h, gh_max, gh, 1, 1)
    xcoord = coords(out_w, gw_max, gw, 2, 0)
    out_y, idx_y, w_y = _roi_axis(b, ycoord, height, (2, 1))
    out_x, idx_x, w_x = _roi_axis(b, xcoord, width, (2,))
    batch = reshape(b, checked_indices(b, n, bidx, nb, 0), per_roi)
    hw = height * width
    shape = _shape(per_roi, idx_y, idx_x)
    outside = f"{out_y.name} || {out_x.name}"
    bref = b.ref(batch)
    expr = f"({outside}) ? {bref} * {hw} : {bref} * {hw} + {idx_y.name} * {width} + {idx_x.name}"
    wexpr = f"({outside}) ? 0.0 : {w_y.name} * {w_x.name}"
    if gh is not None and gw is not None and mode == "avg":
        # samples past a roi's own grid read the zero row, with weight 0
        lay_h = np.arange(gh_max).reshape(1, 1, 1, gh_max, 1, 1, 1) < gh.reshape(nr, *one)
        lay_w = np.arange(gw_max).reshape(1, 1, 1, 1, gw_max, 1, 1) < gw.reshape(nr, *one)
        keep = b.ref(_const(lay_h & lay_w))
        expr = f"{keep} ? ({expr}) : {nb * hw}"
        wexpr = f"{keep} ? ({wexpr}) : 0.0"
    pos = b.eltwise(expr, shape, I64)
    weights = b.eltwise(wexpr, _shape(shape, per_roi), dt)
    rows = pixel_rows(b, data)
    got = _gather_rows(b, rows, pos)
    sizes = ", ".join(map(str, out_shape))
    taps = "r, ph, pw, iy, ix, qy, qx"
    agg = "+" if mode == "avg" else ">"
    y = b.contraction(
        f"{{out}}[r, c, ph, pw : {sizes}] = {agg}({got.name}[{taps}, c] * {weights.name}[{taps}])",
        out_shape,
        dt,
    )
    if mode == "avg":
        if gh is None or gw is None:
            count = literal(max(ratio * ratio, 1), dt)
        else:
            counts = np.maximum(gh * gw, 1).astype(dt).reshape(nr, 1, 1, 1)
            count = b.ref(_const(counts))
        y = b.eltwise(f"{y.name} / {count}", out_shape, dt)
    elif gh is not None and gw is not None and np.any((gh <= 0) | (gw <= 0)):
        # a roi with no sample at all: the reference's 0
        none = b.ref(_const(((gh <= 0) | (gw <= 0)).reshape(nr, 1, 1, 1)))
        y = b.eltwise(f"{none} ? 0.0 : {y.name}", out_shape, dt)
    return [as_dtype(b, y, x.dtype)]


# -- DeformConv -------------------------------------------------------------------


def _group_channel(groups: int, per: int, name: str) -> str:
    """The channel polynomial ``per * q + name`` of a grouped convolution (``q``
    the group index)."""
    if groups == 1:
        return name
    if per == 1:
        return "q"
    return affine((per, "q"), (1, name))


@op("DeformConv")
def deform_conv(b: Builder, n: Node) -> list[Value | None]:
    """DeformConv: any spatial rank, group, offset_group, strides, dilations, pads, optional bias and mask.

    As the reference (``op_deform_conv``): every kernel tap of every output
    position samples the input bilinearly (zero outside) at its place moved by
    the run-time offset, scaled by the mask; the sampled columns (an im2col
    matrix, per offset group) are a ``gather`` of the taps' channels and a
    contraction over the four (2**r) bilinear taps, then the convolution is
    one contraction with the weights, as Conv's.  (The reference runs 2-D
    inputs only; other ranks follow the same definition.)"""
    x, w, offset = n.input(0), n.input(1), n.input(2)
    bias, mask = n.opt(3), n.opt(4)
    _float_data(n, x)
    for v, what in ((w, "W"), (offset, "offset"), (bias, "B"), (mask, "mask")):
        if v is not None and v.dtype != x.dtype:
            raise n.error(f"{what} ({v.dtype}) and X ({x.dtype}) differ in type")
    r = x.rank - 2
    if r < 1 or w.rank != x.rank:
        raise n.error(
            f"X {x.shape} and W {w.shape} must be (N, C, D1, ...) and (M, C/group, k1, ...)"
        )
    kernel = ints(n, "kernel_shape", list(w.shape[2:]))
    if list(kernel) != list(w.shape[2:]):
        raise n.error(f"kernel_shape {kernel} differs from the weights' shape {w.shape}")
    groups = int(n.attr("group", 1))
    ogroups = int(n.attr("offset_group", 1))
    nb, c, *spatial = x.shape
    oc = w.shape[0]
    if groups < 1 or ogroups < 1:
        raise n.error(f"group {groups} and offset_group {ogroups} must be positive")
    if c != w.shape[1] * groups or oc % groups:
        raise n.error(f"X {x.shape} and W {w.shape} do not fit group {groups}")
    if c % ogroups:
        raise n.error(f"{c} input channels do not split into {ogroups} offset groups")
    win = window(n, spatial, kernel)
    ktot = math.prod(kernel)
    out = tuple(win.out)
    if offset.shape != (nb, ogroups * ktot * r, *out):
        raise n.error(
            f"offset of shape {offset.shape} should be {(nb, ogroups * ktot * r, *out)} "
            f"(offset_group {ogroups}, kernel {kernel}, output {out})"
        )
    if mask is not None and mask.shape != (nb, ogroups * ktot, *out):
        raise n.error(f"mask of shape {mask.shape} should be {(nb, ogroups * ktot, *out)}")
    if bias is not None and bias.shape != (oc,):
        raise n.error(f"B of shape {bias.shape} should be ({oc},)")
    out_shape = (nb, oc, *out)
    e = empty(out_shape, x.dtype)
    if e is not None:
        return [e]
    if x.size == 0 or w.size == 0:
        raise n.error(f"X {x.shape} or W {w.shape} has no elements")
    dt = compute_dtype(x.dtype)
    bits = dt.itemsize * 8
    data, wts, offs = (as_dtype(b, v, dt) for v in (x, w, offset))
    cg = c // ogroups
    lead = (nb, ogroups, *kernel, *out)
    taps = (1,) * r
    cshape = lead + taps
    ks, os_ = _idx("k", r), _idx("o", r)
    kstr = [math.prod(kernel[i + 1 :]) for i in range(r)]
    head = ", ".join(["n", "g", *ks, *os_, *("0" for _ in taps)])
    sizes = ", ".join(map(str, cshape))
    oref = b.ref(offs)
    axes = []
    for i, size in enumerate(spatial):
        chan = affine((r * ktot, "g"), *((r * st, k) for st, k in zip(kstr, ks)), const=i)
        comp = b.contraction(
            f"{{out}}[{head} : {sizes}] = =({oref}[n, {chan}, {', '.join(os_)}])", cshape, dt
        ).name
        # (h_coord + offset) in the data's type, plus the kernel tap's place in float64
        moved = (
            f"as_float(index({comp}, {2 + r + i}) * {win.strides[i]} - {win.begin[i]}, {bits})"
            f" + {comp}"
        )
        coord = (
            f"as_float(as_float(index({comp}, {2 + i}) * {win.dilations[i]}, 64) + "
            f"as_float({moved}, 64), 32)"
        )
        xi = b.eltwise(coord, cshape, F32)
        axes.append(axis_taps(b, xi, size, "linear", "zeros", True, (2,) + (1,) * (r - 1 - i)))
    scale = None
    if mask is not None:
        chan = affine((ktot, "g"), *((st, k) for st, k in zip(kstr, ks)))
        scale = b.contraction(
            f"{{out}}[{head} : {sizes}] = =({b.ref(as_dtype(b, mask, dt))}[n, {chan}, "
            f"{', '.join(os_)}])",
            cshape,
            dt,
        )
    s_total = math.prod(spatial)
    strides = [math.prod(spatial[i + 1 :]) * ogroups for i in range(r)]
    first = axes[0].idx.name
    base = [f"index({first}, 0) * {s_total * ogroups}"] if nb > 1 else []
    base += [f"index({first}, 1)"] if ogroups > 1 else []
    pos = tap_positions(
        b, axes, strides, " + ".join(base), axes[0].idx.shape, nb * s_total * ogroups
    )
    rows = pixel_rows(b, data, ogroups)
    got = _gather_rows(b, rows, pos)
    weights = tap_weights(b, axes, dt, scale)
    assert weights is not None
    ts = _idx("t", r)
    cols_shape = (nb, ogroups, cg, *kernel, *out)
    cols = b.contraction(
        f"{{out}}[{', '.join(['n', 'g', 'cg', *ks, *os_])} : {', '.join(map(str, cols_shape))}]"
        f" = +({got.name}[{', '.join(['n', 'g', *ks, *os_, *ts, 'cg'])}] * "
        f"{weights.name}[{', '.join(['n', 'g', *ks, *os_, *ts])}])",
        cols_shape,
        dt,
    )
    cols = reshape(b, cols, (nb, c, *kernel, *out))
    cig, cog = c // groups, oc // groups
    co = _group_channel(groups, cog, "co")
    ci = _group_channel(groups, cig, "ci")
    wci = "ci" if cig > 1 or groups == 1 else "0"
    text = (
        f"{{out}}[n, {co}, {', '.join(os_)} : {', '.join(map(str, out_shape))}] = "
        f"+({cols.name}[n, {ci}, {', '.join(ks)}, {', '.join(os_)}] * "
        f"{b.ref(wts)}[{co}, {wci}, {', '.join(ks)}])"
    )
    if groups > 1 and cog > 1:
        text += f", co < {cog}"
    y = b.contraction(text, out_shape, dt)
    if bias is not None:
        y = b.eltwise(f"{y.name} + {channel_vector(b, bias, y.rank, dt, 'B')}", out_shape, dt)
    return [as_dtype(b, y, x.dtype)]
