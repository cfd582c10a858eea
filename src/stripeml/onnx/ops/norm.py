"""Normalisations: LayerNormalization, GroupNormalization, InstanceNormalization,
RMSNormalization, LRN, LpNormalization, MeanVarianceNormalization.

Each statistic is one contraction with ``keepdims`` shape, so it broadcasts back
over the input; the elementwise tails fuse.  float16 inputs compute in float32
(or in ``stash_type`` where the op has one) and are cast back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import axis, broadcast_shape, ints, literal
from .reduce import as_dtype, compute_dtype, normalise_axes, reduce


def _float_input(n: Node, i: int = 0) -> Value:
    x = n.input(i)
    if x.dtype.kind != "f":
        raise n.error(f"element type {x.dtype} is not supported (floats only)")
    if x.size == 0:
        raise n.error(f"empty tensors (shape {x.shape}) are not supported")
    return x


def _stash(n: Node, x: Value) -> np.dtype:
    """The dtype of the statistics: ``stash_type`` (default float32)."""
    code = int(n.attr("stash_type", 1))
    try:
        from onnx import helper

        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(code))
    except Exception:  # noqa: BLE001 - unknown enum values
        raise n.error(f"stash_type {code} is not supported") from None
    if dtype.kind != "f":
        raise n.error(f"stash_type {code} ({dtype}) is not a float type")
    return compute_dtype(dtype)


def _count(shape: Sequence[int], axes: Sequence[int]) -> int:
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


def _moments(b: Builder, x: Value, axes: Sequence[int], eps: float) -> tuple[Value, Value, Value]:
    """Mean, ``x - mean`` and ``1 / sqrt(var + eps)`` of ``x`` over ``axes``
    (keepdims), two-pass."""
    cnt = literal(_count(x.shape, axes), x.dtype)
    s = reduce(b, "+", x, axes, True)
    mean = b.eltwise(f"{b.ref(s)} / {cnt}", s.shape, x.dtype)
    d = b.eltwise(f"{b.ref(x)} - {b.ref(mean)}", x.shape, x.dtype)
    v = reduce(b, "+", d, axes, True, square=True)
    inv = b.eltwise(f"1.0 / sqrt({b.ref(v)} / {cnt} + {literal(eps, x.dtype)})", v.shape, x.dtype)
    return mean, d, inv


def _affine(b: Builder, n: Node, y: Value, scale: Value | None, bias: Value | None) -> Value:
    """``y * scale + bias`` (either optional), NumPy broadcasting, keeping ``y``'s shape."""
    expr, shapes = b.ref(y), [y.shape]
    if scale is not None:
        expr = f"{expr} * {b.ref(as_dtype(b, scale, y.dtype))}"
        shapes.append(scale.shape)
    if bias is not None:
        expr = f"{expr} + {b.ref(as_dtype(b, bias, y.dtype))}"
        shapes.append(bias.shape)
    if len(shapes) == 1:
        return y
    if broadcast_shape(n, *shapes) != y.shape:
        raise n.error(
            f"scale/bias shapes {[tuple(s) for s in shapes[1:]]} do not broadcast to the "
            f"input's shape {y.shape}"
        )
    return b.eltwise(expr, y.shape, y.dtype)


def _per_channel(b: Builder, n: Node, v: Value, x: Value, what: str, groups: int = 0) -> Value:
    """A per-channel vector ``v`` (length C, or ``groups`` with each value
    repeated C/groups times) as shape ``(C, 1, ..., 1)`` broadcasting over an
    ``(N, C, ...)`` input."""
    c = x.shape[1]
    tail = (1,) * (x.rank - 2)
    shape = (c, *tail)
    if v.rank != 1 or v.shape[0] not in (c, groups):
        want = f"({c},)" + (f" or ({groups},)" if groups else "")
        raise n.error(f"{what} must have shape {want}, got {v.shape}")
    rep = c // v.shape[0]
    if v.is_const and not b.tile_name(v):
        arr = np.repeat(np.asarray(v.const), rep).reshape(shape)
        return Value("", shape, arr.dtype, arr)
    zeros = ", ".join(["0"] * len(tail))
    lhs = f"{rep} * g + c" if rep > 1 else "g"
    out = f"{{out}}[{lhs}{', ' + zeros if zeros else ''} : {', '.join(map(str, shape))}]"
    cons = f", c < {rep}" if rep > 1 else ""
    return b.contraction(f"{out} = =({b.ref(v)}[g]){cons}", shape, v.dtype)


# -- LayerNormalization / RMSNormalization ---------------------------------------


@op("LayerNormalization")
def layer_normalization(b: Builder, n: Node) -> list[Value | None]:
    """LayerNormalization: axis, epsilon, stash_type, optional bias, Mean/InvStdDev outputs.

    stash_type must be a float type; float16 statistics compute in float32."""
    x = _float_input(n)
    ax = axis(n, int(n.attr("axis", -1)), x.rank)
    axes = list(range(ax, x.rank))
    stash = _stash(n, x)
    xs = as_dtype(b, x, stash)
    mean, d, inv = _moments(b, xs, axes, float(n.attr("epsilon", 1e-5)))
    y = as_dtype(b, b.eltwise(f"{b.ref(d)} * {b.ref(inv)}", x.shape, stash), x.dtype)
    ct = compute_dtype(x.dtype)
    y = _affine(b, n, as_dtype(b, y, ct), n.input(1), n.opt(2))
    return [as_dtype(b, y, x.dtype), mean, inv]


@op("RMSNormalization")
def rms_normalization(b: Builder, n: Node) -> list[Value | None]:
    """RMSNormalization: axis, epsilon, stash_type (a float type)."""
    x = _float_input(n)
    ax = axis(n, int(n.attr("axis", -1)), x.rank)
    axes = list(range(ax, x.rank))
    stash = _stash(n, x)
    xs = as_dtype(b, x, stash)
    s = reduce(b, "+", xs, axes, True, square=True)
    cnt = literal(_count(x.shape, axes), stash)
    eps = literal(float(n.attr("epsilon", 1e-5)), stash)
    inv = b.eltwise(f"1.0 / sqrt({b.ref(s)} / {cnt} + {eps})", s.shape, stash)
    y = as_dtype(b, b.eltwise(f"{b.ref(xs)} * {b.ref(inv)}", x.shape, stash), x.dtype)
    ct = compute_dtype(x.dtype)
    y = _affine(b, n, as_dtype(b, y, ct), n.input(1), None)
    return [as_dtype(b, y, x.dtype)]


# -- Instance / group normalisation ----------------------------------------------


@op("InstanceNormalization")
def instance_normalization(b: Builder, n: Node) -> list[Value | None]:
    """InstanceNormalization: epsilon; scale and bias per channel."""
    x = _float_input(n)
    if x.rank < 2:
        raise n.error(f"needs an (N, C, D1, ...) input, got shape {x.shape}")
    ct = compute_dtype(x.dtype)
    xc = as_dtype(b, x, ct)
    _, d, inv = _moments(b, xc, list(range(2, x.rank)), float(n.attr("epsilon", 1e-5)))
    scale = _per_channel(b, n, n.input(1), x, "scale")
    bias = _per_channel(b, n, n.input(2), x, "B")
    y = b.eltwise(
        f"{b.ref(d)} * {b.ref(inv)} * {b.ref(as_dtype(b, scale, ct))} + "
        f"{b.ref(as_dtype(b, bias, ct))}",
        x.shape,
        ct,
    )
    return [as_dtype(b, y, x.dtype)]


@op("GroupNormalization")
def group_normalization(b: Builder, n: Node) -> list[Value | None]:
    """GroupNormalization: num_groups, epsilon, stash_type; scale/bias per channel or group.

    Per channel as in opset 21, or per group (length num_groups) as in opset 18;
    stash_type must be a float type."""
    x = _float_input(n)
    if x.rank < 2:
        raise n.error(f"needs an (N, C, D1, ...) input, got shape {x.shape}")
    groups = int(n.attr("num_groups", 0))
    nb, c = x.shape[0], x.shape[1]
    if groups <= 0 or c % groups:
        raise n.error(f"num_groups {groups} must divide the {c} channels")
    cg = c // groups
    stash = _stash(n, x)
    xs = as_dtype(b, x, stash)
    spatial = [f"d{k}" for k in range(x.rank - 2)]
    sp = "".join(f", {d}" for d in spatial)
    zeros = ", 0" * len(spatial)
    ones = ", 1" * len(spatial)
    cnt = literal(cg * _count(x.shape, range(2, x.rank)), stash)
    eps = literal(float(n.attr("epsilon", 1e-5)), stash)
    cons = f", c < {cg}" if cg > 1 else ""
    chan = f"{cg} * g + c" if cg > 1 else "g"
    gshape = (nb, groups)

    def group_sum(v: Value, square: bool) -> Value:
        acc = f"{b.ref(v)}[n, {chan}{sp}]"
        combo = f"{acc} * {acc}" if square else acc
        return b.contraction(f"{{out}}[n, g : {nb}, {groups}] = +({combo}){cons}", gshape, stash)

    def to_channels(v: Value) -> Value:
        shape = (nb, c) + (1,) * len(spatial)
        return b.contraction(
            f"{{out}}[n, {chan}{zeros} : {nb}, {c}{ones}] = =({b.ref(v)}[n, g]){cons}",
            shape,
            stash,
        )

    s = group_sum(xs, False)
    mean = to_channels(b.eltwise(f"{b.ref(s)} / {cnt}", gshape, stash))
    d = b.eltwise(f"{b.ref(xs)} - {b.ref(mean)}", x.shape, stash)
    v = group_sum(d, True)
    inv = to_channels(b.eltwise(f"1.0 / sqrt({b.ref(v)} / {cnt} + {eps})", gshape, stash))
    ct = compute_dtype(x.dtype)
    y = as_dtype(b, b.eltwise(f"{b.ref(d)} * {b.ref(inv)}", x.shape, stash), x.dtype)
    scale = _per_channel(b, n, n.input(1), x, "scale", groups)
    bias = _per_channel(b, n, n.input(2), x, "bias", groups)
    y = b.eltwise(
        f"{b.ref(as_dtype(b, y, ct))} * {b.ref(as_dtype(b, scale, ct))} + "
        f"{b.ref(as_dtype(b, bias, ct))}",
        x.shape,
        ct,
    )
    return [as_dtype(b, y, x.dtype)]


# -- LRN, LpNormalization, MeanVarianceNormalization -------------------------------


@op("LRN")
def lrn(b: Builder, n: Node) -> list[Value | None]:
    """LRN: size, alpha, beta, bias, across the channels of an (N, C, ...) input."""
    x = _float_input(n)
    if x.rank < 3:
        raise n.error(f"needs an (N, C, D1, ...) input, got shape {x.shape}")
    size = int(n.attr("size", 0))
    if size <= 0:
        raise n.error(f"size must be a positive integer, got {size}")
    alpha = float(n.attr("alpha", 1e-4))
    beta = float(n.attr("beta", 0.75))
    bias = float(n.attr("bias", 1.0))
    ct = compute_dtype(x.dtype)
    xc = as_dtype(b, x, ct)
    lo = math.floor((size - 1) / 2)
    idx = [f"i{k}" for k in range(x.rank)]
    src = list(idx)
    src[1] = f"i1 + k - {lo}" if lo else "i1 + k"
    acc = f"{b.ref(xc)}[{', '.join(src)}]"
    q = b.contraction(
        f"{{out}}[{', '.join(idx)} : {', '.join(map(str, x.shape))}] = "
        f"+({acc} * {acc}), k < {size}",
        x.shape,
        ct,
    )
    y = b.eltwise(
        f"{b.ref(xc)} / pow({literal(bias, ct)} + {literal(alpha / size, ct)} * {b.ref(q)}, "
        f"{literal(beta, ct)})",
        x.shape,
        ct,
    )
    return [as_dtype(b, y, x.dtype)]


@op("LpNormalization")
def lp_normalization(b: Builder, n: Node) -> list[Value | None]:
    """LpNormalization: axis, p (1 or 2; other p are rejected); a zero norm gives 0."""
    x = _float_input(n)
    if x.rank == 0:
        raise n.error("needs an input of rank 1 or more")
    ax = axis(n, int(n.attr("axis", -1)), x.rank)
    p = int(n.attr("p", 2))
    if p not in (1, 2):
        raise n.error(f"p = {p} is not supported (1 or 2)")
    ct = compute_dtype(x.dtype)
    xc = as_dtype(b, x, ct)
    if p == 2:
        s = reduce(b, "+", xc, [ax], True, square=True)
        norm = b.eltwise(f"sqrt({b.ref(s)})", s.shape, ct)
    else:
        a = b.eltwise(f"abs({b.ref(xc)})", x.shape, ct)
        norm = reduce(b, "+", a, [ax], True)
    y = b.eltwise(f"{b.ref(norm)} == 0 ? 0 : {b.ref(xc)} / {b.ref(norm)}", x.shape, ct)
    return [as_dtype(b, y, x.dtype)]


@op("MeanVarianceNormalization")
def mean_variance_normalization(b: Builder, n: Node) -> list[Value | None]:
    """MeanVarianceNormalization: axes (default 0, 2, 3).

    ``(x - mean) / (sqrt(E[x^2] - mean^2) + 1e-9)``, the variance clamped at 0."""
    x = _float_input(n)
    axes = normalise_axes(n, ints(n, "axes", [0, 2, 3]), x.rank)
    ct = compute_dtype(x.dtype)
    xc = as_dtype(b, x, ct)
    cnt = literal(_count(x.shape, axes), ct)
    s1 = reduce(b, "+", xc, axes, True)
    s2 = reduce(b, "+", xc, axes, True, square=True)
    mean = b.eltwise(f"{b.ref(s1)} / {cnt}", s1.shape, ct)
    std = b.eltwise(
        f"sqrt(max({b.ref(s2)} / {cnt} - {b.ref(mean)} * {b.ref(mean)}, 0))", s1.shape, ct
    )
    y = b.eltwise(
        f"({b.ref(xc)} - {b.ref(mean)}) / ({b.ref(std)} + {literal(1e-9, ct)})", x.shape, ct
    )
    return [as_dtype(b, y, x.dtype)]
