"""Shape operators: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Expand,
DepthToSpace, SpaceToDepth, Shape, Size, ConstantOfShape, Range, EyeLike and
Dropout (inference).

Re-shaping ops use Tile's ``reshape`` builtin (a pure re-interpretation of the
row-major buffer); permutations and broadcasts are single ``=`` contractions.
Ops whose result depends only on shapes or compile-time values produce
constants.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import axis, cast, checked_shape, indices, ints, literal


def empty(shape: Sequence[int], dtype: np.dtype) -> Value | None:
    """A constant for a result with no elements (Tile tensors cannot be
    empty, but an empty result needs no computation); ``None`` otherwise."""
    shape = tuple(int(s) for s in shape)
    if all(s > 0 for s in shape):
        return None
    return _empty_const(shape, dtype)


def _empty_const(shape: tuple[int, ...], dtype: np.dtype) -> Value:
    """The constant of a ``shape`` with no elements."""
    return Value("", shape, np.dtype(dtype), np.zeros(shape, dtype))


def reshape(b: Builder, x: Value, shape: Sequence[int]) -> Value:
    """``x`` re-read with ``shape`` (same element count, row-major)."""
    shape = tuple(int(s) for s in shape)
    if x.size == 0:  # so has ``shape``: the element counts match
        return _empty_const(shape, x.dtype)
    if shape == x.shape:
        return x
    if x.const is not None and not b.tile_name(x):
        arr = x.const.reshape(shape)
        return Value("", shape, x.dtype, arr)
    sizes = "".join(f", {s}" for s in shape)
    return b.statement(f"{{out}} = reshape({b.ref(x)}{sizes})", shape, x.dtype)


def permute(b: Builder, x: Value, perm: Sequence[int]) -> Value:
    """``x`` with its axes permuted: output axis ``k`` is input axis ``perm[k]``."""
    perm = list(perm)
    idx = indices(x.rank)
    out_idx = [idx[p] for p in perm]
    shape = tuple(x.shape[p] for p in perm)
    if x.size == 0:
        return _empty_const(shape, x.dtype)
    if perm == list(range(x.rank)):
        return x
    sizes = ", ".join(str(s) for s in shape)
    return b.contraction(
        f"{{out}}[{', '.join(out_idx)} : {sizes}] = =({b.ref(x)}[{', '.join(idx)}])",
        shape,
        x.dtype,
    )


def broadcast_to(b: Builder, x: Value, shape: Sequence[int]) -> Value:
    """``x`` broadcast (NumPy rules) to exactly ``shape``."""
    shape = tuple(int(s) for s in shape)
    if 0 in shape:
        return _empty_const(shape, x.dtype)
    if shape == x.shape:
        return x
    idx = indices(len(shape))
    lead = len(shape) - x.rank
    access = [
        "0" if x.shape[j] == 1 and shape[lead + j] != 1 else idx[lead + j] for j in range(x.rank)
    ]
    sizes = ", ".join(str(s) for s in shape)
    return b.contraction(
        f"{{out}}[{', '.join(idx)} : {sizes}] = =({b.ref(x)}[{', '.join(access)}])",
        shape,
        x.dtype,
    )


def _axes(n: Node, rank: int, attr_before: int, input_index: int = 1) -> list[int] | None:
    """The ``axes`` of Squeeze/Unsqueeze: an attribute before opset
    ``attr_before``, then an optional static input (``None`` when absent)."""
    if n.opset < attr_before:
        raw = n.attr("axes")
        return None if raw is None else [int(a) for a in raw]
    arr = n.const_input(input_index, "axes")
    return None if arr is None else [int(a) for a in np.asarray(arr).reshape(-1)]


@op("Reshape", static=(1,), oldest=1)
def reshape_op(b: Builder, n: Node) -> list[Value | None]:
    """Reshape: shape known when compiling; 0 copies a dimension (unless allowzero), -1 inferred.

    Uses Tile's `reshape` builtin."""
    x = n.input(0)
    if n.opset < 5:
        target = ints(n, "shape")
    else:
        arr = n.const_input(1, "shape")
        if arr is None:
            raise n.error("input 1 (shape) is required")
        target = [int(s) for s in np.asarray(arr).reshape(-1)]
    allowzero = int(n.attr("allowzero", 0))
    shape = []
    infer = None
    for k, s in enumerate(target):
        if s == 0 and not allowzero:
            if k >= x.rank:
                raise n.error(f"shape entry {k} is 0 (copy) but the input has rank {x.rank}")
            s = x.shape[k]
        elif s == -1:
            if infer is not None:
                raise n.error(f"shape {target} has more than one -1")
            infer = k
        elif s < -1:
            raise n.error(f"invalid shape entry {s} in {target}")
        shape.append(s)
    if infer is not None:
        known = int(np.prod([s for k, s in enumerate(shape) if k != infer], dtype=np.int64))
        if known == 0 or x.size % known:
            raise n.error(f"cannot reshape {x.shape} to {target}")
        shape[infer] = x.size // known
    if int(np.prod(shape, dtype=np.int64)) != x.size:
        raise n.error(f"cannot reshape {x.shape} ({x.size} elements) to {tuple(shape)}")
    return [reshape(b, x, shape)]


@op("Flatten")
def flatten(b: Builder, n: Node) -> list[Value | None]:
    """Flatten: to 2-D around `axis` (negative axes too)."""
    x = n.input(0)
    ax = int(n.attr("axis", 1))
    if not -x.rank <= ax <= x.rank:
        raise n.error(f"axis {ax} is out of range for rank {x.rank}")
    ax = ax + x.rank if ax < 0 else ax
    outer = int(np.prod(x.shape[:ax], dtype=np.int64))
    return [reshape(b, x, (outer, x.size // outer))]


@op("Squeeze", static=(1,))
def squeeze(b: Builder, n: Node) -> list[Value | None]:
    """Squeeze: axes from the attribute (opset < 13) or a static input; all size-1 axes if none."""
    x = n.input(0)
    axes = _axes(n, x.rank, 13)
    if axes is None:
        drop = {k for k, s in enumerate(x.shape) if s == 1}
    else:
        drop = {axis(n, a, x.rank, "axes entry") for a in axes}
        for a in drop:
            if x.shape[a] != 1:
                raise n.error(f"cannot squeeze axis {a} of size {x.shape[a]} (shape {x.shape})")
    return [reshape(b, x, [s for k, s in enumerate(x.shape) if k not in drop])]


@op("Unsqueeze", static=(1,))
def unsqueeze(b: Builder, n: Node) -> list[Value | None]:
    """Unsqueeze: axes from the attribute (opset < 13) or a static input, any order, negative.

    Negative axes count in the output rank."""
    x = n.input(0)
    axes = _axes(n, x.rank, 13)
    if axes is None:
        raise n.error("needs axes")
    rank = x.rank + len(axes)
    new = sorted({axis(n, a, rank, "axes entry") for a in axes})
    if len(new) != len(axes):
        raise n.error(f"axes {axes} repeat an axis")
    dims = iter(x.shape)
    return [reshape(b, x, [1 if k in new else next(dims) for k in range(rank)])]


@op("Transpose")
def transpose(b: Builder, n: Node) -> list[Value | None]:
    """Transpose: `perm` (default: the axes reversed), as one `=` contraction."""
    x = n.input(0)
    perm = ints(n, "perm") or list(range(x.rank))[::-1]
    if sorted(perm) != list(range(x.rank)):
        raise n.error(f"perm {perm} is not a permutation of the {x.rank} axes")
    return [permute(b, x, perm)]


@op("Expand", static=(1,))
def expand(b: Builder, n: Node) -> list[Value | None]:
    """Expand: bidirectional broadcast to a shape known when compiling."""
    x = n.input(0)
    arr = n.const_input(1, "shape")
    if arr is None:
        raise n.error("input 1 (shape) is required")
    target = tuple(int(s) for s in np.asarray(arr).reshape(-1))
    try:
        shape = tuple(int(s) for s in np.broadcast_shapes(x.shape, target))
    except ValueError:
        raise n.error(f"cannot expand shape {x.shape} to {target}") from None
    return [broadcast_to(b, x, shape)]


def _blocks(n: Node, x: Value) -> int:
    if x.rank != 4:
        raise n.error(f"needs a 4-D (N, C, H, W) input, got shape {x.shape}")
    bs = int(n.attr("blocksize", 0))
    if bs <= 0:
        raise n.error("needs a positive blocksize")
    return bs


@op("DepthToSpace")
def depth_to_space(b: Builder, n: Node) -> list[Value | None]:
    """DepthToSpace: 4-D, `mode` DCR (default) or CRD, as one `=` contraction."""
    x = n.input(0)
    bs = _blocks(n, x)
    nn, c, h, w = x.shape
    if c % (bs * bs):
        raise n.error(f"channels {c} are not a multiple of blocksize^2 = {bs * bs}")
    co = c // (bs * bs)
    mode = n.attr("mode", "DCR")
    if mode == "DCR":
        chan = f"{bs * co} * y + {co} * z + c"
    elif mode == "CRD":
        chan = f"{bs * bs} * c + {bs} * y + z"
    else:
        raise n.error(f"mode {mode!r} is not supported (DCR or CRD)")
    shape = (nn, co, h * bs, w * bs)
    return [
        b.contraction(
            f"{{out}}[n, c, {bs} * h + y, {bs} * w + z : {', '.join(map(str, shape))}] = "
            f"=({b.ref(x)}[n, {chan}, h, w]), y < {bs}, z < {bs}",
            shape,
            x.dtype,
        )
    ]


@op("SpaceToDepth")
def space_to_depth(b: Builder, n: Node) -> list[Value | None]:
    """SpaceToDepth: 4-D, `mode` DCR (default) or CRD, as one `=` contraction."""
    x = n.input(0)
    bs = _blocks(n, x)
    nn, c, h, w = x.shape
    if h % bs or w % bs:
        raise n.error(f"spatial size {(h, w)} is not a multiple of blocksize {bs}")
    mode = n.attr("mode", "DCR")
    if mode == "DCR":
        chan = f"{bs * c} * y + {c} * z + c"
    elif mode == "CRD":
        chan = f"{bs * bs} * c + {bs} * y + z"
    else:
        raise n.error(f"mode {mode!r} is not supported (DCR or CRD)")
    shape = (nn, c * bs * bs, h // bs, w // bs)
    return [
        b.contraction(
            f"{{out}}[n, {chan}, h, w : {', '.join(map(str, shape))}] = "
            f"=({b.ref(x)}[n, c, {bs} * h + y, {bs} * w + z]), y < {bs}, z < {bs}",
            shape,
            x.dtype,
        )
    ]


def _const(arr: np.ndarray) -> Value:
    arr = np.asarray(arr)
    return Value("", arr.shape, arr.dtype, arr)


@op("Shape")
def shape_op(b: Builder, n: Node) -> list[Value | None]:
    """Shape: a constant; `start`/`end` (opset 15) clamp like Python slices."""
    x = n.input(0)
    start = int(n.attr("start", 0))
    end = n.attr("end")
    dims = list(x.shape)[start : None if end is None else int(end)]
    return [_const(np.array(dims, dtype=np.int64))]


@op("Size")
def size_op(b: Builder, n: Node) -> list[Value | None]:
    """Size: a constant (the element count)."""
    return [_const(np.array(n.input(0).size, dtype=np.int64))]


@op("ConstantOfShape", static=(0,))
def constant_of_shape(b: Builder, n: Node) -> list[Value | None]:
    """ConstantOfShape: a constant; shape known when compiling, `value` (default float32 0)."""
    arr = n.const_input(0, "shape")
    if arr is None:
        raise n.error("input 0 (shape) is required")
    shape = checked_shape(n, [int(s) for s in np.asarray(arr).reshape(-1)])
    value = n.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if fill.size != 1:
        raise n.error(f"value must hold one element, got {fill.size}")
    return [_const(np.full(shape, fill[0], dtype=fill.dtype))]


@op("Range", static=(0, 1, 2))
def range_op(b: Builder, n: Node) -> list[Value | None]:
    """Range: start, limit and delta known when compiling (a constant)."""
    start, limit, delta = (n.const_input(i) for i in range(3))
    if start is None or limit is None or delta is None:
        raise n.error("needs start, limit and delta")
    start, limit, delta = (np.asarray(v) for v in (start, limit, delta))
    values = [v.item() for v in (start, limit, delta)]
    if not all(math.isfinite(v) for v in values):
        raise n.error(f"start, limit and delta must be finite, got {values}")
    if delta.item() == 0:
        raise n.error("delta must not be 0")
    count = max(math.ceil((limit.item() - start.item()) / delta.item()), 0)
    checked_shape(n, (count,), "the result's shape")
    return [_const(np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype))]


@op("EyeLike")
def eye_like(b: Builder, n: Node) -> list[Value | None]:
    """EyeLike: 2-D, diagonal `k`, `dtype` attribute (default: the input's)."""
    x = n.input(0)
    if x.rank != 2:
        raise n.error(f"needs a 2-D input, got shape {x.shape}")
    dtype = x.dtype
    if n.attr("dtype") is not None:
        from onnx import helper

        code = int(n.attr("dtype"))
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(code))
        except (KeyError, TypeError, ValueError):
            raise n.error(f"dtype {code} is not an ONNX element type") from None
    k = int(n.attr("k", 0))
    xr = b.ref(x)
    cond = f"index({xr}, 1) - index({xr}, 0) == {literal(k, np.dtype(np.int64))}"
    return [b.eltwise(cast(cond, dtype), x.shape, dtype)]


@op("Dropout", static=(2,), oldest=1)
def dropout(b: Builder, n: Node) -> list[Value | None]:
    """Dropout: inference only (identity; the optional mask is all true); no training mode.

    Training mode (`training_mode` true, or `is_test` = 0 before opset 7) is
    rejected."""
    x = n.input(0)
    training = n.const_input(2, "training_mode")
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        raise n.error("training mode is not supported (inference only)")
    if n.opset < 7 and int(n.attr("is_test", 0)) == 0:
        raise n.error("is_test = 0 (training mode) is not supported (inference only)")
    mask_dtype = np.dtype(bool) if n.opset >= 10 else x.dtype
    outs: list[Value | None] = [empty(x.shape, x.dtype) or x]
    if n.n_outputs > 1:
        outs.append(_const(np.ones(x.shape, mask_dtype)))
    return outs
