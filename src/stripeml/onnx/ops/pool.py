"""Pooling: MaxPool, AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool.

A pooling window is one contraction whose window indices are bounded by
constraints (``k0 < 3``); taps in the padding are out of bounds and so are
skipped: they do not take part in a maximum and add nothing to a sum.  The
divisor of an average depends only on shapes, so it is a literal or a small
NumPy constant.
"""

from __future__ import annotations

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import ints, literal
from .conv import Window, affine, window


def _check_input(n: Node, x: Value, floats_only: bool = True) -> int:
    if x.rank < 3:
        raise n.error(f"input must be N x C x D1 ... (rank 3 or more), got shape {x.shape}")
    if floats_only and x.dtype.kind != "f":
        raise n.error(f"element type {x.dtype} is not supported (floating point only)")
    return x.rank - 2


def _window(n: Node, x: Value, r: int, has_dilations: bool = True) -> Window:
    kernel = ints(n, "kernel_shape", None)
    if not kernel:
        raise n.error("the kernel_shape attribute is required")
    if len(kernel) != r:
        raise n.error(f"kernel_shape {kernel} does not have {r} spatial sizes")
    if any(k <= 0 for k in kernel):
        raise n.error(f"kernel_shape {kernel} must be positive")
    ceil_mode = bool(n.attr("ceil_mode", 0))
    return window(n, x.shape[2:], kernel, ceil_mode=ceil_mode, has_dilations=has_dilations)


def _contraction(
    b: Builder, x: Value, win: Window, agg: str, operand: str, dtype: np.dtype
) -> Value:
    r = len(win.kernel)
    ys = [f"y{i}" for i in range(r)]
    ks = [f"k{i}" for i in range(r)]
    shape = (x.shape[0], x.shape[1], *win.out)
    sizes = ", ".join(str(s) for s in shape)
    text = f"{{out}}[n, c, {', '.join(ys)} : {sizes}] = {agg}({operand})"
    for k, kk in zip(ks, win.kernel):
        if kk > 1:
            text += f", {k} < {kk}"
    return b.contraction(text, shape, dtype)


def _access(xref: str, win: Window) -> str:
    r = len(win.kernel)
    parts = []
    for i in range(r):
        k = f"k{i}" if win.kernel[i] > 1 else ""
        terms = [(win.strides[i], f"y{i}")]
        if k:
            terms.append((win.dilations[i], k))
        parts.append(affine(*terms, const=-win.begin[i]))
    return f"{xref}[n, c, {', '.join(parts)}]"


@op("MaxPool")
def max_pool(b: Builder, n: Node) -> list[Value | None]:
    """MaxPool: kernel_shape, strides, pads, dilations, ceil_mode, auto_pad, and the Indices output (storage_order)."""
    x = n.input(0)
    r = _check_input(n, x, floats_only=False)
    win = _window(n, x, r)
    xref = b.ref(x)
    y = _contraction(b, x, win, ">", _access(xref, win), x.dtype)
    if n.n_outputs < 2:
        return [y]
    # Indices: the flat index (row-major) of the first tap equal to the maximum.
    # Each tap t of the window is the constant  (KK - t) << 32 | offset(t), its
    # offset from the window's origin in the flat input; the largest over the
    # taps equal to the maximum is the first one, its low 32 bits its offset.
    # A constant of the kernel's size, and no division at run time.
    order = int(n.attr("storage_order", 0))
    if order not in (0, 1):
        raise n.error(f"storage_order must be 0 or 1, got {order}")
    spatial = x.shape[2:]
    kk = int(np.prod(win.kernel))
    strides_flat = [int(np.prod(spatial[i + 1 :])) for i in range(r)]
    grid = np.indices(win.kernel).reshape(r, -1)
    offsets = sum(win.dilations[i] * strides_flat[i] * grid[i] for i in range(r))
    taps = ((kk - np.arange(kk, dtype=np.int64)) << 32 | offsets).reshape(win.kernel)
    tref = b.ref(Value("", taps.shape, np.dtype(np.int64), taps))
    ks = ", ".join(f"k{i}" for i in range(r))
    operand = f"{_access(xref, win)} == {b.ref(y)}[n, c, {', '.join(f'y{i}' for i in range(r))}]"
    operand += f" ? ({tref}[{ks}])"
    m = _contraction(b, x, win, ">", operand, np.dtype(np.int64))
    mr = b.ref(m)
    flat = f"index({mr}, 0) * {x.shape[1]} + index({mr}, 1)"
    for i in range(r):
        flat = f"({flat}) * {spatial[i]} + {win.strides[i]} * index({mr}, {2 + i}) - {win.begin[i]}"
    idx = b.eltwise(f"{flat} + ({mr} & {(1 << 32) - 1})", m.shape, np.int64)
    if order == 1:
        # column-major over the spatial axes: the first spatial axis varies fastest
        spatial = x.shape[2:]
        per = int(np.prod(spatial))
        f = b.ref(idx)
        expr, inner = f"{f} / {per} * {per}", 1
        for k in range(r - 1, -1, -1):  # position along spatial axis k (row-major)
            pos = f"{f} / {inner} % {spatial[k]}"
            inner *= spatial[k]
            col_stride = int(np.prod(spatial[:k]))
            expr += f" + {pos} * {col_stride}" if col_stride > 1 else f" + {pos}"
        idx = b.eltwise(expr, m.shape, np.int64)
    return [y, idx]


def divisor(win: Window, spatial: tuple[int, ...], include_pad: bool) -> np.ndarray:
    """The number of taps of each window that are counted (per spatial output)."""
    counts = []
    for i, size in enumerate(spatial):
        lo, hi = (-win.begin[i], size + win.end[i]) if include_pad else (0, size)
        y = np.arange(win.out[i])[:, None]
        k = np.arange(win.kernel[i])[None, :]
        pos = win.strides[i] * y + win.dilations[i] * k - win.begin[i]
        counts.append(((pos >= lo) & (pos < hi)).sum(axis=1))
    total = counts[0]
    for c in counts[1:]:
        total = np.multiply.outer(total, c)
    return total


@op("AveragePool")
def average_pool(b: Builder, n: Node) -> list[Value | None]:
    """AveragePool: kernel_shape, strides, pads, dilations, ceil_mode, auto_pad, count_include_pad."""
    x = n.input(0)
    r = _check_input(n, x)
    win = _window(n, x, r)
    s = _contraction(b, x, win, "+", _access(b.ref(x), win), x.dtype)
    include = bool(n.attr("count_include_pad", 0))
    div = divisor(win, x.shape[2:], include)
    if np.all(div == div.flat[0]):
        return [b.eltwise(f"{b.ref(s)} / {literal(float(div.flat[0]), x.dtype)}", s.shape, x.dtype)]
    dref = b.ref(Value("", div.shape, x.dtype, div.astype(x.dtype)))
    return [b.eltwise(f"{b.ref(s)} / {dref}", s.shape, x.dtype)]


@op("LpPool")
def lp_pool(b: Builder, n: Node) -> list[Value | None]:
    """LpPool: p, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad."""
    x = n.input(0)
    r = _check_input(n, x)
    win = _window(n, x, r)
    p = n.attr("p", 2)
    if p <= 0:
        raise n.error(f"p must be positive, got {p}")
    xref = b.ref(x)
    if p == 2:
        acc = _access(xref, win)
        s = _contraction(b, x, win, "+", f"{acc} * {acc}", x.dtype)
        return [b.eltwise(f"sqrt({b.ref(s)})", s.shape, x.dtype)]
    if p == 1:
        a = b.eltwise(f"abs({xref})", x.shape, x.dtype)
        return [_contraction(b, x, win, "+", _access(b.ref(a), win), x.dtype)]
    lit = literal(float(p), x.dtype)
    a = b.eltwise(f"pow(abs({xref}), {lit})", x.shape, x.dtype)
    s = _contraction(b, x, win, "+", _access(b.ref(a), win), x.dtype)
    inv = literal(1.0 / float(p), x.dtype)
    return [b.eltwise(f"pow({b.ref(s)}, {inv})", s.shape, x.dtype)]


def _global(b: Builder, n: Node, agg: str) -> Value:
    x = n.input(0)
    if x.rank < 2:
        raise n.error(f"input must be N x C x D1 ... (rank 2 or more), got shape {x.shape}")
    r = x.rank - 2
    ds = [f"d{i}" for i in range(r)]
    shape = (x.shape[0], x.shape[1]) + (1,) * r
    outs = ", ".join(["n", "c"] + ["0"] * r)
    sizes = ", ".join(str(s) for s in shape)
    text = f"{{out}}[{outs} : {sizes}] = {agg}({b.ref(x)}[{', '.join(['n', 'c'] + ds)}])"
    return b.contraction(text, shape, x.dtype)


@op("GlobalAveragePool")
def global_average_pool(b: Builder, n: Node) -> list[Value | None]:
    """GlobalAveragePool: the mean over all spatial axes."""
    x = n.input(0)
    if x.dtype.kind != "f":
        raise n.error(f"element type {x.dtype} is not supported (floating point only)")
    s = _global(b, n, "+")
    count = int(np.prod(x.shape[2:], dtype=np.int64))
    if count == 1:
        return [s]
    return [b.eltwise(f"{b.ref(s)} / {literal(float(count), x.dtype)}", s.shape, x.dtype)]


@op("GlobalMaxPool")
def global_max_pool(b: Builder, n: Node) -> list[Value | None]:
    """GlobalMaxPool: the maximum over all spatial axes."""
    return [_global(b, n, ">")]
