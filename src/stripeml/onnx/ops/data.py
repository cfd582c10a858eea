"""Data-movement operators: Concat, Split, Slice, Pad, Tile, Gather,
GatherElements, GatherND, Trilu and OneHot.

Each output is written by ``=`` contractions (affine copies: offsets, strides,
repeats) or by Tile's ``gather`` builtin (data-dependent or non-affine
positions: runtime indices, reflect/edge/wrap padding).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import axis, indices, ints, known_take, literal, scalar
from .shape import empty, reshape


def _aff(idx: str, coef: int = 1, off: int = 0) -> str:
    """The Tile index polynomial ``off + coef * idx``."""
    if coef == 0:
        term = ""
    elif coef == 1:
        term = idx
    elif coef == -1:
        term = f"-{idx}"
    else:
        term = f"{coef} * {idx}"
    if not term:
        return str(off)
    if off == 0:
        return term
    if term.startswith("-"):
        return f"{off} - {term[1:]}"
    return f"{term} + {off}" if off > 0 else f"{term} - {-off}"


def _sizes(shape: Sequence[int]) -> str:
    return ", ".join(str(int(s)) for s in shape)


def _static_ints(n: Node, i: int, what: str) -> list[int] | None:
    arr = n.const_input(i, what)
    return None if arr is None else [int(v) for v in np.asarray(arr).reshape(-1)]


def _const(arr: np.ndarray) -> Value:
    arr = np.asarray(arr)
    return Value("", arr.shape, arr.dtype, arr)


def _fill(b: Builder, value: Value | float, dtype: np.dtype) -> str:
    """A Tile rank-0 (or broadcastable) operand of ``dtype`` holding ``value``
    (a Python scalar, or a one-element tensor of the graph)."""
    if isinstance(value, Value):
        if value.is_const:
            return scalar(b, np.asarray(value.const).reshape(-1)[0], dtype)
        return b.ref(reshape(b, value, ()))
    return scalar(b, value, dtype)


# -- Concat / Split ------------------------------------------------------------


@op("Concat")
def concat(b: Builder, n: Node) -> list[Value | None]:
    """Concat: any axis (negative too), any number of inputs (empty ones skipped).

    One `=` contraction per input, each writing its slab over the previous
    result (`default`)."""
    xs = [v for v in n.inputs if v is not None]
    if not xs:
        raise n.error("needs at least one input")
    first = xs[0]
    ax = axis(n, int(n.attr("axis", 0)), first.rank)
    for x in xs:
        if x.rank != first.rank or any(
            x.shape[k] != first.shape[k] for k in range(x.rank) if k != ax
        ):
            raise n.error(f"input shapes {[v.shape for v in xs]} differ outside axis {ax}")
    dtype = np.result_type(*[x.dtype for x in xs])
    if any(x.dtype != dtype for x in xs):
        raise n.error(f"inputs have different element types {[str(x.dtype) for x in xs]}")
    shape = list(first.shape)
    shape[ax] = sum(x.shape[ax] for x in xs)
    e = empty(shape, dtype)
    if e is not None:
        return [e]
    xs = [x for x in xs if x.size]  # empty inputs add nothing
    if len(xs) == 1:
        return [xs[0]]
    if all(x.const is not None and not b.tile_name(x) for x in xs):
        # known values (a shape being built): joined here, as reshape does, not
        # compiled and run on the interpreter (3.7 ms per Concat of shape vectors)
        joined = np.concatenate([np.asarray(x.const) for x in xs], axis=ax)
        return [Value("", tuple(joined.shape), dtype, joined)]
    idx = indices(first.rank)
    prev: Value | None = None
    off = 0
    for x in xs:
        out_idx = list(idx)
        out_idx[ax] = _aff(idx[ax], 1, off)
        tail = f", default {prev.name}" if prev is not None else ""
        prev = b.contraction(
            f"{{out}}[{', '.join(out_idx)} : {_sizes(shape)}] = "
            f"=({b.ref(x)}[{', '.join(idx)}]){tail}",
            shape,
            dtype,
        )
        off += x.shape[ax]
    return [prev]


def slab(b: Builder, x: Value, ax: int, start: int, length: int) -> Value:
    """``x[..., start : start + length, ...]`` along ``ax``."""
    shape = list(x.shape)
    shape[ax] = length
    e = empty(shape, x.dtype)
    if e is not None:
        return e
    if start == 0 and length == x.shape[ax]:
        return x
    idx = indices(x.rank)
    access = list(idx)
    access[ax] = _aff(idx[ax], 1, start)
    return b.contraction(
        f"{{out}}[{', '.join(idx)} : {_sizes(shape)}] = =({b.ref(x)}[{', '.join(access)}])",
        shape,
        x.dtype,
    )


@op("Split", static=(1,))
def split(b: Builder, n: Node) -> list[Value | None]:
    """Split: sizes from the `split` input/attribute, or equal parts (uneven with num_outputs).

    Zero-sized parts are empty constants."""
    x = n.input(0)
    ax = axis(n, int(n.attr("axis", 0)), x.rank)
    dim = x.shape[ax]
    sizes = ints(n, "split") if n.opset < 13 else _static_ints(n, 1, "split")
    if not sizes:
        parts = int(n.attr("num_outputs", n.n_outputs))
        if parts <= 0:
            raise n.error("needs a positive number of outputs")
        if n.opset >= 18 and "num_outputs" in n.attrs:
            each = -(-dim // parts)
            sizes = [min(each, dim - k * each) for k in range(parts)]
        else:
            if dim % parts:
                raise n.error(f"axis {ax} of size {dim} does not split into {parts} equal parts")
            sizes = [dim // parts] * parts
    if sum(sizes) != dim or any(s < 0 for s in sizes):
        raise n.error(f"split sizes {sizes} do not add up to {dim} (axis {ax})")
    if len(sizes) < n.n_outputs:
        raise n.error(f"{len(sizes)} split sizes for {n.n_outputs} outputs")
    outs: list[Value | None] = []
    off = 0
    for s in sizes:
        outs.append(slab(b, x, ax, off, s))
        off += s
    return outs


# -- Slice ---------------------------------------------------------------------


@op("Slice", static=(1, 2, 3, 4))
def slice_op(b: Builder, n: Node) -> list[Value | None]:
    """Slice: starts/ends/axes/steps known when compiling, negative steps, ONNX clamping.

    Attributes before opset 10; an empty result is an empty constant."""
    x = n.input(0)
    starts: list[int] | None
    ends: list[int] | None
    if n.opset < 10:
        starts, ends = ints(n, "starts"), ints(n, "ends")
        axes = ints(n, "axes") or None
        steps = None
    else:
        starts = _static_ints(n, 1, "starts")
        ends = _static_ints(n, 2, "ends")
        axes = _static_ints(n, 3, "axes")
        steps = _static_ints(n, 4, "steps")
        if starts is None or ends is None:
            raise n.error("needs starts and ends")
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise n.error("starts, ends, axes and steps must have the same length")
    first = [0] * x.rank
    step = [1] * x.rank
    shape = list(x.shape)
    seen: set[int] = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = axis(n, a, x.rank, "axes entry")
        if a in seen:
            raise n.error(f"axis {a} is sliced twice")
        seen.add(a)
        if st == 0:
            raise n.error("steps must not be 0")
        r = range(x.shape[a])[slice(s, e, st)]  # Python's clamping is ONNX's
        first[a], step[a], shape[a] = r.start, r.step, len(r)
    out = empty(shape, x.dtype)
    if out is not None:
        return [out]
    if tuple(shape) == x.shape and all(st == 1 for st in step):
        return [x]
    idx = indices(x.rank)
    access = [_aff(i, st, f) for i, st, f in zip(idx, step, first)]
    return [
        b.contraction(
            f"{{out}}[{', '.join(idx)} : {_sizes(shape)}] = =({b.ref(x)}[{', '.join(access)}])",
            shape,
            x.dtype,
        )
    ]


# -- Pad -----------------------------------------------------------------------


@op("Pad", static=(1, 3), oldest=1)
def pad(b: Builder, n: Node) -> list[Value | None]:
    """Pad: modes constant (runtime value too), reflect, edge, wrap; negative pads crop; axes.

    Pads and axes must be known when compiling; reflect/edge/wrap use one
    `gather` per padded axis."""
    x = n.input(0)
    mode = n.attr("mode", "constant")
    value: Value | float = 0.0
    axes: list[int] | None = None
    pads: list[int] | None
    if n.opset < 11:
        pads = ints(n, "paddings" if n.opset < 2 else "pads")
        value = float(n.attr("value", 0.0))
    else:
        pads = _static_ints(n, 1, "pads")
        if pads is None:
            raise n.error("input 1 (pads) is required")
        cv = n.opt(2)
        if cv is not None:
            if cv.size != 1:
                raise n.error(f"constant_value must be a scalar, got shape {cv.shape}")
            value = cv
        axes = _static_ints(n, 3, "axes")
    if axes is None:
        axes = list(range(x.rank))
    axes = [axis(n, a, x.rank, "axes entry") for a in axes]
    if len(pads) != 2 * len(axes):
        raise n.error(f"{len(pads)} pads for {len(axes)} axes")
    before, after = [0] * x.rank, [0] * x.rank
    for k, a in enumerate(axes):
        before[a], after[a] = pads[k], pads[len(axes) + k]
    shape = [d + p + q for d, p, q in zip(x.shape, before, after)]
    if any(s <= 0 for s in shape):
        raise n.error(f"padding {x.shape} by {pads} leaves an empty tensor")
    if not any(before) and not any(after):
        return [x]
    if mode == "constant":
        return [_pad_constant(b, x, before, after, shape, value)]
    if mode not in ("reflect", "edge", "wrap"):
        raise n.error(f"mode {mode!r} is not supported (constant, reflect, edge or wrap)")
    out = x
    for a in range(x.rank):
        p, q = before[a], after[a]
        if p == 0 and q == 0:
            continue
        src = np.arange(x.shape[a])[max(-p, 0) : x.shape[a] - max(-q, 0)]
        if len(src) == 0:
            raise n.error(f"pads {pads} crop axis {a} to nothing")
        if mode == "reflect" and len(src) == 1 and max(p, q) > 0:
            raise n.error(f"reflect padding of axis {a} needs at least 2 elements")
        pos = np.pad(src, (max(p, 0), max(q, 0)), mode=mode).astype(np.int64)
        new_shape = list(out.shape)
        new_shape[a] = len(pos)
        out = b.statement(
            f"{{out}} = gather({b.ref(out)}, {b.ref(_const(pos))}, {a})", new_shape, x.dtype
        )
    return [out]


def _pad_constant(
    b: Builder,
    x: Value,
    before: list[int],
    after: list[int],
    shape: list[int],
    value: Value | float,
) -> Value:
    idx = indices(x.rank)
    out_idx = [_aff(i, 1, p) for i, p in zip(idx, before)]
    padded = b.contraction(
        f"{{out}}[{', '.join(out_idx)} : {_sizes(shape)}] = =({b.ref(x)}[{', '.join(idx)}])",
        shape,
        x.dtype,
    )
    if isinstance(value, float) and value == 0.0:
        return padded
    if isinstance(value, Value) and value.is_const:
        v = np.asarray(value.const).reshape(-1)[0]
        if v == 0 and not (x.dtype.kind == "f" and np.signbit(v)):
            return padded
    conds = []
    for a, (p, q) in enumerate(zip(before, after)):
        if p > 0:
            conds.append(f"index({padded.name}, {a}) >= {p}")
        if q > 0:
            conds.append(f"index({padded.name}, {a}) < {p + x.shape[a]}")
    if not conds:  # only cropping
        return padded
    fill = _fill(b, value, x.dtype)
    return b.eltwise(f"({' && '.join(conds)}) ? {padded.name} : {fill}", shape, x.dtype)


# -- Tile ----------------------------------------------------------------------


@op("Tile", static=(1,))
def tile(b: Builder, n: Node) -> list[Value | None]:
    """Tile: repeats known when compiling, as one `=` contraction."""
    x = n.input(0)
    reps = _static_ints(n, 1, "repeats")
    if reps is None or len(reps) != x.rank:
        raise n.error(f"needs {x.rank} repeats, got {reps}")
    if any(r < 0 for r in reps):
        raise n.error(f"repeats {reps} must not be negative")
    if all(r == 1 for r in reps):
        return [x]
    shape = [d * r for d, r in zip(x.shape, reps)]
    e = empty(shape, x.dtype)
    if e is not None:
        return [e]
    idx = indices(x.rank)
    out_idx, cons = [], []
    for k, (i, d, r) in enumerate(zip(idx, x.shape, reps)):
        if r == 1:
            out_idx.append(i)
        else:
            out_idx.append(f"{i} + {d} * r{k}")
            cons.append(f"r{k} < {r}")
    return [
        b.contraction(
            f"{{out}}[{', '.join(out_idx)} : {_sizes(shape)}] = "
            f"=({b.ref(x)}[{', '.join(idx)}]), {', '.join(cons)}",
            shape,
            x.dtype,
        )
    ]


# -- Gather --------------------------------------------------------------------


def _check_indices(n: Node, i: Value) -> None:
    if i.dtype.kind not in "iu":
        raise n.error(f"indices must be integers, got {i.dtype}")


@op("Gather")
def gather(b: Builder, n: Node) -> list[Value | None]:
    """Gather: any axis, runtime or constant indices (negative too), via Tile's `gather`."""
    x, i = n.input(0), n.input(1)
    _check_indices(n, i)
    ax = axis(n, int(n.attr("axis", 0)), x.rank)
    shape = x.shape[:ax] + i.shape + x.shape[ax + 1 :]
    e = empty(shape, x.dtype)
    if e is not None:
        return [e]
    taken = known_take(b, n, x, i, ax)
    if taken is not None:  # a shape's entries being picked: no program for them
        return [taken]
    if i.is_const and i.rank <= 1:
        step = _progression(n, np.asarray(i.const).reshape(-1), x.shape[ax])
        if step is not None:  # a constant slice: an affine copy, which later passes can fuse
            first, stride = step
            xi = indices(x.rank)
            out = xi[:ax] + (["g"] if i.rank else []) + xi[ax + 1 :]
            xi[ax] = _aff("g", stride, first) if i.rank else str(first)
            return [
                b.contraction(
                    f"{{out}}[{', '.join(out)} : {_sizes(shape)}] = =({b.ref(x)}[{', '.join(xi)}])",
                    shape,
                    x.dtype,
                )
            ]
    return [b.statement(f"{{out}} = gather({b.ref(x)}, {b.ref(i)}, {ax})", shape, x.dtype)]


def _progression(n: Node, values: np.ndarray, dim: int) -> tuple[int, int] | None:
    """``(first, step)`` when the constant indices (negative ones counted from
    ``dim``) are ``first + step * g``; ``None`` for any other pattern.  An index
    outside ``[-dim, dim)`` is the node's error."""
    v = values.astype(np.int64)
    bad = (v < -dim) | (v >= dim)
    if bad.any():
        raise n.error(f"index {int(v[bad][0])} is out of range for an axis of size {dim}")
    v = np.where(v < 0, v + dim, v)
    if v.size == 0:
        return None
    step = int(v[1] - v[0]) if v.size > 1 else 1
    if not np.array_equal(v, v[0] + step * np.arange(v.size)):
        return None
    return int(v[0]), step


def checked_indices(b: Builder, n: Node, i: Value, dim: int, ax: int) -> Value:
    """Indices ``i`` into axis ``ax`` (of size ``dim``) of a node's data, as
    int64 in ``[0, dim)`` (negative ones counted from ``dim``): constant ones
    checked here (the node's error), the others by a `gather` from
    ``arange(dim)`` laid along axis ``ax`` (leading axes of size 1, so its
    error at run time names the index, its position in ``i`` and the node's
    axis).  Unsigned indices are compared in their own type, never wrapped."""
    if i.is_const:
        v = np.asarray(i.const)
        bad = v >= dim if v.dtype.kind == "u" else (v < -dim) | (v >= dim)
        if bad.any():
            at = tuple(int(p) for p in np.argwhere(bad)[0])
            raise n.error(
                f"index {int(v[at])} at position {at} of the indices is out of range "
                f"for axis {ax} of size {dim}"
            )
        wide = v.astype(np.int64)
        return _const(np.where(wide < 0, wide + dim, wide))
    ramp = _const(np.arange(dim, dtype=np.int64).reshape((1,) * ax + (dim,)))
    taken = b.statement(
        f"{{out}} = gather({b.ref(ramp)}, {b.ref(i)}, {ax})", (1,) * ax + i.shape, np.int64
    )
    return reshape(b, taken, i.shape)


@op("GatherElements")
def gather_elements(b: Builder, n: Node) -> list[Value | None]:
    """GatherElements: any axis, negative indices (checked against the axis); a `gather` from the flattened data.

    Each index is first checked against the axis and wrapped by a `gather` from
    ``arange(size)`` laid along the axis (an index outside ``-size .. size-1``
    is an ``ExecutionError`` naming it, its position and the axis when the
    model runs; constant indices are checked when compiling), then turned
    into a flat position: a bad index never reads another row."""
    x, i = n.input(0), n.input(1)
    _check_indices(n, i)
    if i.rank != x.rank:
        raise n.error(f"indices rank {i.rank} differs from data rank {x.rank}")
    ax = axis(n, int(n.attr("axis", 0)), x.rank)
    for k in range(x.rank):
        if k != ax and i.shape[k] > x.shape[k]:
            raise n.error(f"indices shape {i.shape} exceeds data shape {x.shape} on axis {k}")
    e = empty(i.shape, x.dtype)
    if e is not None:
        return [e]
    dim = x.shape[ax]
    if dim == 0:
        raise n.error(f"indices {i.shape} into axis {ax} of data {x.shape}, which is empty")
    strides = [int(np.prod(x.shape[k + 1 :], dtype=np.int64)) for k in range(x.rank)]
    wrapped = checked_indices(b, n, i, dim, ax)
    wr = b.ref(wrapped)
    terms = [f"{wr} * {strides[ax]}" if strides[ax] != 1 else wr]
    terms += [f"index({wr}, {k}) * {strides[k]}" for k in range(x.rank) if k != ax]
    pos = b.eltwise(" + ".join(terms), i.shape, np.int64)
    flat = reshape(b, x, (x.size,))
    return [b.statement(f"{{out}} = gather({b.ref(flat)}, {pos.name}, 0)", i.shape, x.dtype)]


@op("GatherND")
def gather_nd(b: Builder, n: Node) -> list[Value | None]:
    """GatherND: `batch_dims`, negative indices (each checked against its axis); a `gather` from the flattened leading axes.

    Each entry of an index tuple is checked against its axis and wrapped first
    (as GatherElements' indices): one out of range is an error, never another
    row's element."""
    x, i = n.input(0), n.input(1)
    _check_indices(n, i)
    bd = int(n.attr("batch_dims", 0))
    if i.rank < 1 or bd < 0 or bd >= min(x.rank, i.rank):
        raise n.error(f"batch_dims {bd} does not fit data {x.shape} and indices {i.shape}")
    k = i.shape[-1]
    if x.shape[:bd] != i.shape[:bd]:
        raise n.error(f"batch dimensions of data {x.shape} and indices {i.shape} differ")
    if k < 1 or bd + k > x.rank:
        raise n.error(f"indices of depth {k} do not fit data {x.shape} (batch_dims {bd})")
    block = x.shape[bd : bd + k]
    rest = x.shape[bd + k :]
    bsize = int(np.prod(block, dtype=np.int64))
    pos_shape = i.shape[:-1]
    if 0 in block and i.size:
        raise n.error(f"indices {i.shape} into data {x.shape}, whose indexed axes are empty")
    # each entry of the tuples checked against its axis and wrapped, then the
    # tuple made one flat position in the block (a bad entry never reads the
    # next row)
    terms = []
    for j in range(k):
        if i.is_const:
            col = _const(np.asarray(i.const)[..., j])
        elif k == 1:
            col = reshape(b, i, pos_shape)
        else:
            idx = indices(i.rank - 1)
            col = b.contraction(
                f"{{out}}[{', '.join(idx)} : {_sizes(pos_shape)}] = "
                f"=({b.ref(i)}[{', '.join(idx + [str(j)])}])",
                pos_shape,
                i.dtype,
            )
        w = b.ref(checked_indices(b, n, col, block[j], bd + j))
        stride = int(np.prod(block[j + 1 :], dtype=np.int64))
        terms.append(w if stride == 1 else f"{w} * {stride}")
    pos = b.eltwise(" + ".join(terms), pos_shape, np.int64)
    if bd:
        terms = [pos.name]
        for a in range(bd):
            stride = int(np.prod(x.shape[a + 1 : bd], dtype=np.int64)) * bsize
            terms.append(f"index({pos.name}, {a}) * {stride}")
        pos = b.eltwise(" + ".join(terms), pos_shape, np.int64)
    flat = reshape(b, x, (int(np.prod(x.shape[:bd], dtype=np.int64)) * bsize, *rest))
    shape = pos_shape + rest
    return [b.statement(f"{{out}} = gather({b.ref(flat)}, {pos.name}, 0)", shape, x.dtype)]


# -- Trilu / OneHot --------------------------------------------------------------


@op("Trilu", static=(1,))
def trilu(b: Builder, n: Node) -> list[Value | None]:
    """Trilu: upper (default) or lower triangle of the last two axes, `k` known when compiling."""
    x = n.input(0)
    if x.rank < 2:
        raise n.error(f"needs rank >= 2, got shape {x.shape}")
    ks = _static_ints(n, 1, "k")
    k = ks[0] if ks else 0
    upper = int(n.attr("upper", 1))
    if x.size == 0:
        return [empty(x.shape, x.dtype)]
    xr = b.ref(x)
    diff = f"index({xr}, {x.rank - 1}) - index({xr}, {x.rank - 2})"
    cond = f"{diff} {'>=' if upper else '<='} {literal(k, np.dtype(np.int64))}"
    expr = f"({cond}) && {xr}" if x.dtype == np.bool_ else f"({cond}) ? {xr} : 0"
    return [b.eltwise(expr, x.shape, x.dtype)]


@op("OneHot", static=(1,))
def one_hot(b: Builder, n: Node) -> list[Value | None]:
    """OneHot: any axis, depth known when compiling, runtime or constant values, negative indices.

    Out-of-range indices give all off values."""
    i, v = n.input(0), n.input(2)
    d = n.const_input(1, "depth")
    if d is None:
        raise n.error("input 1 (depth) is required")
    depth = int(np.asarray(d).reshape(-1)[0])
    if depth < 1:
        raise n.error(f"depth must be positive, got {depth}")
    if v.size != 2:
        raise n.error(f"values must hold (off, on), got shape {v.shape}")
    rank = i.rank + 1
    ax = axis(n, int(n.attr("axis", -1)), rank)
    pos = _const(
        np.arange(depth, dtype=np.int64).reshape([depth if k == ax else 1 for k in range(rank)])
    )
    ii = reshape(b, i, i.shape[:ax] + (1,) + i.shape[ax:])
    if v.is_const:
        off, on = (scalar(b, s, v.dtype) for s in np.asarray(v.const).reshape(-1))
    else:
        flat = reshape(b, v, (2,))
        off, on = (
            b.contraction(f"{{out}}[] = =({flat.name}[{k}])", (), v.dtype).name for k in (0, 1)
        )
    ir = b.ref(ii)
    shape = i.shape[:ax] + (depth,) + i.shape[ax:]
    hit = f"{b.ref(pos)} == ({ir} < 0 ? {ir} + {depth} : {ir})"
    return [b.eltwise(f"({hit}) ? {on} : {off}", shape, v.dtype)]
