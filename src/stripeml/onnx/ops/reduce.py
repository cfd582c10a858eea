"""Reductions, arg-reductions, softmax and cumulative sums.

A reduction over several axes is one contraction whose output keeps the
untouched indices (``0`` in place of a reduced axis when ``keepdims``):
``O[i0, 0, i2 : 2, 1, 4] = +(X[i0, i1, i2])``.  Softmax-like ops reduce with
``keepdims`` and let the size-1 dimensions broadcast back over the input.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import axis, cast, ints, literal

# -- helpers shared with norm.py ----------------------------------------------


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype arithmetic runs in: float16 computes in float32."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def as_dtype(b: Builder, v: Value, dtype: np.dtype) -> Value:
    """``v`` converted to ``dtype`` (``v`` itself when it already is)."""
    dtype = np.dtype(dtype)
    if v.dtype == dtype:
        return v
    if v.is_const and not b.tile_name(v):
        arr = np.asarray(v.const).astype(dtype)
        return Value("", arr.shape, dtype, arr)
    return b.eltwise(cast(b.ref(v), dtype), v.shape, dtype)


def reduced_shape(shape: Sequence[int], axes: Iterable[int], keepdims: bool) -> tuple[int, ...]:
    axes = set(axes)
    if keepdims:
        return tuple(1 if a in axes else s for a, s in enumerate(shape))
    return tuple(s for a, s in enumerate(shape) if a not in axes)


def reduce(
    b: Builder,
    agg: str,
    x: Value,
    axes: Iterable[int],
    keepdims: bool,
    *,
    square: bool = False,
    dtype: np.dtype | None = None,
) -> Value:
    """One contraction aggregating ``x`` (``x * x`` when ``square``) over
    ``axes`` with ``agg`` (``+ * > <``)."""
    axes = set(axes)
    idx = [f"i{k}" for k in range(x.rank)]
    out_idx: list[str] = []
    sizes: list[str] = []
    for a, s in enumerate(x.shape):
        if a in axes:
            if keepdims:
                out_idx.append("0")
                sizes.append("1")
        else:
            out_idx.append(idx[a])
            sizes.append(str(s))
    access = f"{b.ref(x)}[{', '.join(idx)}]"
    combo = f"{access} * {access}" if square else access
    lhs = f"{{out}}[{', '.join(out_idx)} : {', '.join(sizes)}]" if out_idx else "{out}[]"
    shape = reduced_shape(x.shape, axes, keepdims)
    return b.contraction(f"{lhs} = {agg}({combo})", shape, x.dtype if dtype is None else dtype)


def squeeze(b: Builder, v: Value, axes: Iterable[int]) -> Value:
    """``v`` (size 1 along ``axes``) without those axes."""
    axes = set(axes)
    if not axes:
        return v
    idx = [f"i{k}" for k in range(v.rank)]
    access = ", ".join("0" if a in axes else idx[a] for a in range(v.rank))
    kept = [a for a in range(v.rank) if a not in axes]
    shape = tuple(v.shape[a] for a in kept)
    if kept:
        lhs = f"{{out}}[{', '.join(idx[a] for a in kept)} : {', '.join(map(str, shape))}]"
    else:
        lhs = "{out}[]"
    return b.contraction(f"{lhs} = =({b.ref(v)}[{access}])", shape, v.dtype)


def normalise_axes(n: Node, axes: Iterable[int], rank: int) -> list[int]:
    out = [axis(n, int(a), rank, "axis") for a in axes]
    if len(set(out)) != len(out):
        raise n.error(f"axes {list(axes)} repeat an axis")
    return sorted(out)


def _reduce_axes(n: Node, x: Value) -> list[int]:
    """The axes to reduce: the ``axes`` input (opset 13+ ReduceSum, 18+ the
    rest) or attribute; empty means all, or none with noop_with_empty_axes."""
    given = n.const_input(1, "axes")
    if given is not None:
        axes = [int(a) for a in np.asarray(given).ravel()]
    else:
        axes = ints(n, "axes", [])
    if not axes:
        return [] if n.attr("noop_with_empty_axes", 0) else list(range(x.rank))
    return normalise_axes(n, axes, x.rank)


def _empty(x: Value, axes: list[int], keep: bool, fill: str) -> list[Value | None] | None:
    """The result of reducing an input with a 0-sized dimension, known from the
    shapes alone: the aggregation's identity (``fill``: zero, one, low, high,
    nan) over empty sets, or an empty result.  ``None`` when ``x`` is not empty."""
    if x.size:
        return None
    dtype = x.dtype
    if fill in ("low", "high"):
        if dtype.kind == "f":
            value: float | int | bool = -np.inf if fill == "low" else np.inf
        elif dtype.kind == "b":
            value = fill == "high"
        else:
            info = np.iinfo(dtype)
            value = int(info.min if fill == "low" else info.max)
    elif fill == "nan":
        value = np.nan if dtype.kind == "f" else 0
    else:
        value = {"zero": 0, "one": 1}[fill]
    arr = np.full(reduced_shape(x.shape, axes, keep), value, dtype=dtype)
    return [Value("", arr.shape, dtype, arr)]


def _operand(
    n: Node, fill: str, allow_bool: bool = False
) -> tuple[Value, list[int], bool, list[Value | None] | None]:
    """A Reduce* node's input, axes and keepdims, and its result when the input
    is empty (``_empty``'s ``fill``), else ``None``."""
    x = n.input(0)
    _check_numeric(n, x, allow_bool)
    axes, keep = _reduce_axes(n, x), bool(n.attr("keepdims", 1))
    return x, axes, keep, _empty(x, axes, keep, fill)


def _check_numeric(n: Node, x: Value, allow_bool: bool = False) -> None:
    kind = x.dtype.kind
    if kind not in "iuf" and not (allow_bool and kind == "b"):
        raise n.error(f"element type {x.dtype} is not supported")


def _finish(b: Builder, v: Value, dtype: np.dtype) -> Value:
    """Cast the result back to the input's ``dtype``."""
    return as_dtype(b, v, dtype)


def _post(b: Builder, expr: str, v: Value, dtype: np.dtype) -> Value:
    """``expr`` (``{v}`` names ``v``) applied to ``v``, cast to ``dtype``: one
    elementwise statement."""
    text = expr.format(v=b.ref(v))
    if np.dtype(dtype).kind != "f" or v.dtype != dtype:
        text = cast(text, dtype)
    return b.eltwise(text, v.shape, dtype)


# -- Reduce* ---------------------------------------------------------------------


@op("ReduceSum", static=(1,))
def reduce_sum(b: Builder, n: Node) -> list[Value | None]:
    """ReduceSum: axes (attribute or static input), keepdims, noop_with_empty_axes."""
    x, axes, keep, done = _operand(n, "zero")
    if done is not None:
        return done
    ct = compute_dtype(x.dtype)
    return [_finish(b, reduce(b, "+", as_dtype(b, x, ct), axes, keep), x.dtype)]


@op("ReduceProd", static=(1,))
def reduce_prod(b: Builder, n: Node) -> list[Value | None]:
    """ReduceProd: axes (attribute or static input), keepdims, noop_with_empty_axes."""
    x, axes, keep, done = _operand(n, "one")
    if done is not None:
        return done
    ct = compute_dtype(x.dtype)
    return [_finish(b, reduce(b, "*", as_dtype(b, x, ct), axes, keep), x.dtype)]


@op("ReduceMax", static=(1,))
def reduce_max(b: Builder, n: Node) -> list[Value | None]:
    """ReduceMax: axes (attribute or static input), keepdims, noop_with_empty_axes; bool too."""
    x, axes, keep, done = _operand(n, "low", allow_bool=True)
    if done is not None:
        return done
    return [reduce(b, ">", x, axes, keep)]


@op("ReduceMin", static=(1,))
def reduce_min(b: Builder, n: Node) -> list[Value | None]:
    """ReduceMin: axes (attribute or static input), keepdims, noop_with_empty_axes; bool too."""
    x, axes, keep, done = _operand(n, "high", allow_bool=True)
    if done is not None:
        return done
    return [reduce(b, "<", x, axes, keep)]


@op("ReduceMean", static=(1,))
def reduce_mean(b: Builder, n: Node) -> list[Value | None]:
    """ReduceMean: axes (attribute or static input), keepdims, noop_with_empty_axes.

    Integer means truncate toward zero."""
    x, axes, keep, done = _operand(n, "nan")
    if done is not None:
        return done
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    ct = compute_dtype(x.dtype)
    s = reduce(b, "+", as_dtype(b, x, ct), axes, keep)
    if ct.kind == "f":
        return [_post(b, "{v} / " + literal(count, ct), s, x.dtype)]
    return [_post(b, f"as_float({{v}}, 64) / {literal(count, np.float64)}", s, x.dtype)]


@op("ReduceSumSquare", static=(1,))
def reduce_sum_square(b: Builder, n: Node) -> list[Value | None]:
    """ReduceSumSquare: axes (attribute or static input), keepdims, noop_with_empty_axes.

    With noop_with_empty_axes and no axes: the squares (as the ONNX reference)."""
    x, axes, keep, done = _operand(n, "zero")
    if done is not None:
        return done
    ct = compute_dtype(x.dtype)
    return [_finish(b, reduce(b, "+", as_dtype(b, x, ct), axes, keep, square=True), x.dtype)]


@op("ReduceL1", static=(1,))
def reduce_l1(b: Builder, n: Node) -> list[Value | None]:
    """ReduceL1: axes (attribute or static input), keepdims, noop_with_empty_axes.

    With noop_with_empty_axes and no axes: the absolute values (as the ONNX reference)."""
    x, axes, keep, done = _operand(n, "zero")
    if done is not None:
        return done
    ct = compute_dtype(x.dtype)
    a = b.eltwise(f"abs({b.ref(as_dtype(b, x, ct))})", x.shape, ct)
    return [_finish(b, reduce(b, "+", a, axes, keep), x.dtype)]


@op("ReduceL2", static=(1,))
def reduce_l2(b: Builder, n: Node) -> list[Value | None]:
    """ReduceL2: axes (attribute or static input), keepdims, noop_with_empty_axes.

    With noop_with_empty_axes and no axes: the absolute values (as the ONNX reference)."""
    x, axes, keep, done = _operand(n, "zero")
    if done is not None:
        return done
    ct = compute_dtype(x.dtype)
    s = reduce(b, "+", as_dtype(b, x, ct), axes, keep, square=True)
    return [_post(b, "sqrt({v})", s, x.dtype)]


@op("ReduceLogSum", static=(1,))
def reduce_log_sum(b: Builder, n: Node) -> list[Value | None]:
    """ReduceLogSum: axes (attribute or static input), keepdims, noop_with_empty_axes.

    With noop_with_empty_axes and no axes: the logarithms (as the ONNX reference)."""
    x, axes, keep, done = _operand(n, "low")
    if done is not None:
        return done
    ct = compute_dtype(x.dtype)
    s = reduce(b, "+", as_dtype(b, x, ct), axes, keep)
    return [_post(b, "log({v})", s, x.dtype)]


@op("ReduceLogSumExp", static=(1,))
def reduce_log_sum_exp(b: Builder, n: Node) -> list[Value | None]:
    """ReduceLogSumExp: axes (attribute or static input), keepdims, noop_with_empty_axes.

    Subtracts the maximum before ``exp``; with noop_with_empty_axes and no axes:
    the input."""
    x, axes, keep, done = _operand(n, "low")
    if done is not None:
        return done
    ct = compute_dtype(x.dtype)
    if ct.kind != "f":
        ct = np.dtype(np.float64)
    xc = as_dtype(b, x, ct)
    m = reduce(b, ">", xc, axes, True)
    e = b.eltwise(f"exp({b.ref(xc)} - {b.ref(m)})", x.shape, ct)
    s = reduce(b, "+", e, axes, True)
    r = b.eltwise(f"log({b.ref(s)}) + {b.ref(m)}", s.shape, ct)
    if not keep:
        r = squeeze(b, r, axes)
    return [_finish(b, r, x.dtype)]


# -- ArgMax / ArgMin --------------------------------------------------------------


def _arg(b: Builder, n: Node, agg: str) -> list[Value | None]:
    x = n.input(0)
    _check_numeric(n, x, allow_bool=True)
    if x.rank == 0:
        raise n.error("needs an input of rank 1 or more")
    ax = axis(n, int(n.attr("axis", 0)), x.rank)
    keep = bool(n.attr("keepdims", 1))
    last = bool(n.attr("select_last_index", 0))
    m = reduce(b, agg, x, [ax], True)
    pos = f"index({b.ref(x)}, {ax})"
    miss = "(-1)" if last else str(x.shape[ax])
    c = b.eltwise(f"{b.ref(x)} == {b.ref(m)} ? {pos} : {miss}", x.shape, np.int64)
    return [reduce(b, ">" if last else "<", c, [ax], keep)]


@op("ArgMax")
def arg_max(b: Builder, n: Node) -> list[Value | None]:
    """ArgMax: axis, keepdims, select_last_index."""
    return _arg(b, n, ">")


@op("ArgMin")
def arg_min(b: Builder, n: Node) -> list[Value | None]:
    """ArgMin: axis, keepdims, select_last_index."""
    return _arg(b, n, "<")


# -- Softmax family -------------------------------------------------------------


def _softmax_axes(n: Node, x: Value) -> list[int]:
    """Opset 13+: the one ``axis`` (default -1); before: the input coerced to
    2-D at ``axis`` (default 1), i.e. every axis from ``axis`` on."""
    if x.rank == 0:
        raise n.error("needs an input of rank 1 or more")
    if n.opset >= 13:
        return [axis(n, int(n.attr("axis", -1)), x.rank)]
    return list(range(axis(n, int(n.attr("axis", 1)), x.rank), x.rank))


def _softmax(b: Builder, n: Node, log: bool) -> list[Value | None]:
    x = n.input(0)
    if x.dtype.kind != "f":
        raise n.error(f"element type {x.dtype} is not supported (floats only)")
    axes = _softmax_axes(n, x)
    ct = compute_dtype(x.dtype)
    xc = as_dtype(b, x, ct)
    m = reduce(b, ">", xc, axes, True)
    e = b.eltwise(f"exp({b.ref(xc)} - {b.ref(m)})", x.shape, ct)
    s = reduce(b, "+", e, axes, True)
    if log:
        y = b.eltwise(f"{b.ref(xc)} - {b.ref(m)} - log({b.ref(s)})", x.shape, ct)
    else:
        y = b.eltwise(f"{b.ref(e)} / {b.ref(s)}", x.shape, ct)
    return [_finish(b, y, x.dtype)]


@op("Softmax")
def softmax(b: Builder, n: Node) -> list[Value | None]:
    """Softmax: axis (opset < 13: the input coerced to 2-D at axis); max-subtracted."""
    return _softmax(b, n, log=False)


@op("LogSoftmax")
def log_softmax(b: Builder, n: Node) -> list[Value | None]:
    """LogSoftmax: axis (opset < 13: the input coerced to 2-D at axis); max-subtracted."""
    return _softmax(b, n, log=True)


@op("Hardmax")
def hardmax(b: Builder, n: Node) -> list[Value | None]:
    """Hardmax: axis (opset < 13: the input coerced to 2-D at axis); first maximum."""
    x = n.input(0)
    _check_numeric(n, x)
    axes = _softmax_axes(n, x)
    m = reduce(b, ">", x, axes, True)
    # Position along the reduced axes, row-major.
    terms = []
    stride = 1
    for a in reversed(axes):
        pos = f"index({b.ref(x)}, {a})"
        terms.append(pos if stride == 1 else f"{pos} * {stride}")
        stride *= x.shape[a]
    flat = b.eltwise(" + ".join(reversed(terms)), x.shape, np.int64)
    c = b.eltwise(f"{b.ref(x)} == {b.ref(m)} ? {b.ref(flat)} : {stride}", x.shape, np.int64)
    first = reduce(b, "<", c, axes, True)
    return [b.eltwise(cast(f"{b.ref(flat)} == {b.ref(first)}", x.dtype), x.shape, x.dtype)]


# -- CumSum ----------------------------------------------------------------------


@op("CumSum", static=(1,))
def cum_sum(b: Builder, n: Node) -> list[Value | None]:
    """CumSum: the axis input (static), exclusive, reverse."""
    return [_cumulative(b, n, "+")]


@op("CumProd", static=(1,))
def cum_prod(b: Builder, n: Node) -> list[Value | None]:
    """CumProd: the axis input (static), exclusive (the first product is 1), reverse."""
    return [_cumulative(b, n, "*")]


def _cumulative(b: Builder, n: Node, agg: str) -> Value:
    """A running sum or product: one contraction whose constraint keeps the
    elements up to (or, reversed, from) each position."""
    x = n.input(0)
    _check_numeric(n, x)
    if x.rank == 0:
        raise n.error("needs an input of rank 1 or more")
    given = n.const_input(1, "axis")
    if given is None or np.asarray(given).size != 1:
        raise n.error("needs a scalar axis input")
    ax = axis(n, int(np.asarray(given).ravel()[0]), x.rank)
    exclusive, reverse = bool(n.attr("exclusive", 0)), bool(n.attr("reverse", 0))
    ct = compute_dtype(x.dtype)
    xc = as_dtype(b, x, ct)
    idx = [f"i{k}" for k in range(x.rank)]
    src = list(idx)
    src[ax] = "k"
    i = idx[ax]
    # forward: k <= i (k < i exclusive); reverse: k >= i (k > i exclusive)
    poly = f"{'k - ' + i if reverse else i + ' - k'}{' - 1' if exclusive else ''}"
    size = x.shape[ax]
    tail = ""
    if agg == "*" and exclusive:  # the empty product at the first position is 1
        ones = np.ones(x.shape, ct)
        tail = f", default {b.ref(Value('', ones.shape, ones.dtype, ones))}"
    text = (
        f"{{out}}[{', '.join(idx)} : {', '.join(map(str, x.shape))}] = "
        f"{agg}({b.ref(xc)}[{', '.join(src)}]), {poly} < {size}{tail}"
    )
    return _finish(b, b.contraction(text, x.shape, ct), x.dtype)
