"""Channels-last through batch norm and max pooling in training graphs; elementwise
work moved before reshapes.

A convolution's output is stored channels-last (NHWC, ``onnx/layout.py``).  The
ONNX importer keeps it so through elementwise operators whose other operands
are constants or laid out the same way, and through inference-mode batch norm
and pooling; anything else reads the logical (NCHW) tensor, which costs a
transposing copy.  Training graphs (AOTAutograd's, core ATen decompositions)
break that at every batch norm and max pool: batch statistics are reductions
over ``(N, H, W)``, the normalisation broadcasts per-channel vectors shaped
``(C, 1, 1)`` or ``(1, C, 1, 1)`` that are computed (not constants), and
``max_pool2d_with_indices`` and its backward index the logical layout.  A small
CNN's step had seven such copies (about a fifth of its kernel time).

Here, for an NHWC image ``x`` (4-D, float):

* :func:`per_channel`: in a binary elementwise operator with an NHWC operand,
  a computed per-channel operand (``(C, 1, 1)``, ``(1, C, 1, 1)``, ``(N, C, 1,
  1)``) becomes a laid-out value over the same memory (a Tile ``reshape`` to
  ``(1, 1, 1, C)``, no copy), and a plain image (a pooling's gradient,
  broadcast back) is transposed once, so the operator stays channels-last;
* :func:`reduce_channels`: ``ReduceSum``/``ReduceMean`` over ``(0, 2, 3)`` of
  ``x`` is one contraction over the stored tensor (per channel, contiguous);
* :func:`max_pool_with_indices` and :func:`max_pool_backward`: the forward
  (values and PyTorch's indices: the flat position in the spatial plane of
  the first tap equal to the maximum) and the window scatter of its backward,
  written over NHWC storage.

And, for any tensor, :func:`before_reshape`: an elementwise operator on a
row-major reshape of a computed value (a linear layer on a 3-D input is ``mm``
of the flattened rows, viewed back) applies to that value instead, its result
reshaped, so the bias and activation land in the matrix product's kernel.

Each returns ``None`` (or the inputs unchanged) where it does not apply, and the
caller writes the operator as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..onnx.builder import Builder, Value
from ..onnx.layout_values import NHWC, nhwc_input, physical
from ..onnx.ops._util import literal
from ..onnx.ops.conv import Window, affine

#: binary (and ternary) elementwise operators whose operands broadcast
BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Where", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "And", "Or", "Xor",
})  # fmt: skip


def _nhwc(v: Value | None) -> bool:
    return v is not None and v.layout == NHWC and v.const is None and v.rank == 4


def _laid(b: Builder, v: Value, c: int) -> Value:
    """The per-channel value ``v`` (``c`` elements) as a laid-out ``(1, C, 1, 1)``."""
    phys = b.statement(f"{{out}} = reshape({b.ref(v)}, 1, 1, 1, {c})", (1, 1, 1, c), v.dtype)
    return Value(phys.name, (1, c, 1, 1), v.dtype, layout=NHWC)


def per_channel(
    b: Builder, op: str, inputs: Sequence[Value | None], copies: dict[str, Value]
) -> list[Value | None]:
    """``inputs`` with their computed plain operands laid out NHWC, when another
    operand of the broadcasting operator ``op`` is stored NHWC (see the module
    docstring): a per-channel one (``(C, 1, 1)``, ``(1, C, 1, 1)`` or ``(N, C,
    1, 1)``) over the same memory, a whole image by one transposing copy (kept
    in ``copies`` for its other uses), so that the operator's result is stored
    NHWC too; else as given."""
    given = list(inputs)
    if op not in BROADCASTING:
        return given
    images = [v for v in given if v is not None and v.layout is not None]
    if not images or not all(_nhwc(v) for v in images):
        return given
    n, c = images[0].shape[:2]
    if c < 2:
        return given
    out: list[Value | None] = []
    for v in given:
        if v is not None and v.layout is None and v.const is None and v.rank in (3, 4):
            shape = (1,) * (4 - v.rank) + tuple(v.shape)
            if shape == (1, c, 1, 1):
                v = _laid(b, v, c)
            elif shape == (n, c, 1, 1) and v.rank == 4:
                phys = b.statement(
                    f"{{out}} = reshape({b.ref(v)}, {n}, 1, 1, {c})", (n, 1, 1, c), v.dtype
                )
                v = Value(phys.name, shape, v.dtype, layout=NHWC)
            elif shape == images[0].shape and v.rank == 4:
                copy = copies.get(v.name)
                if copy is None:
                    copy = copies[v.name] = Value(
                        nhwc_input(b, v).name, shape, v.dtype, layout=NHWC
                    )
                v = copy
        out.append(v)
    return out


def reduce_channels(
    b: Builder, op: str, inputs: Sequence[Value | None], attrs: dict[str, Any]
) -> Value | None:
    """``ReduceSum``/``ReduceMean`` of an NHWC image over ``(0, 2, 3)`` (batch
    statistics) or ``(2, 3)`` (a global average pool): one contraction over its
    storage, ``(C,)`` or ``(N, C)`` (with ``keepdims`` laid out NHWC, the same
    memory); None where that does not apply."""
    if op not in ("ReduceSum", "ReduceMean") or len(inputs) != 2:
        return None
    x, axes = inputs
    if x is None or not _nhwc(x) or axes is None or axes.const is None:
        return None
    dims = sorted(int(a) % 4 for a in np.ravel(axes.const))
    if x.dtype.kind != "f" or dims not in ([0, 2, 3], [2, 3]):
        return None
    n, c, h, w = x.shape
    batch = dims == [2, 3]
    shape = (n, c) if batch else (c,)
    idx = "n, c" if batch else "c"
    sizes = ", ".join(str(d) for d in shape)
    s = b.contraction(f"{{out}}[{idx} : {sizes}] = +({b.ref(x)}[n, h, w, c])", shape, x.dtype)
    if op == "ReduceMean":
        count = h * w if batch else n * h * w
        s = b.eltwise(f"{s.name} / {literal(float(count), x.dtype)}", shape, x.dtype)
    if not int(attrs.get("keepdims", 1)):
        return s
    if not batch:
        return _laid(b, s, c)
    phys = b.statement(f"{{out}} = reshape({s.name}, {n}, 1, 1, {c})", (n, 1, 1, c), x.dtype)
    return Value(phys.name, (n, c, 1, 1), x.dtype, layout=NHWC)


def _positions(win: Window) -> list[str]:
    return [
        affine((win.strides[i], f"y{i}"), (win.dilations[i], f"k{i}"), const=-win.begin[i])
        for i in range(2)
    ]


def max_pool_with_indices(b: Builder, x: Value, win: Window) -> tuple[Value, Value] | None:
    """2-D max pooling of an NHWC image and PyTorch's indices (int64, the flat
    position in the input's spatial plane of the first tap, row-major, equal
    to the maximum), both laid out NHWC; None unless ``x`` is one.

    As the op library's ``MaxPool`` does: each tap ``t`` is the constant
    ``(KK - t) << 32 | offset(t)`` (its offset from the window's origin in the
    plane); the largest of those over the taps equal to the maximum is the
    first one, its low 32 bits the offset."""
    if not _nhwc(x) or x.dtype.kind != "f" or len(win.kernel) != 2:
        return None
    n, c, h, w = x.shape
    oh, ow = win.out
    k0, k1 = win.kernel
    pos = _positions(win)
    bounds = f"k0 < {k0}, k1 < {k1}"
    tap = f"{b.ref(x)}[n, {pos[0]}, {pos[1]}, c]"
    sizes = f"{n}, {oh}, {ow}, {c}"
    y = b.contraction(
        f"{{out}}[n, y0, y1, c : {sizes}] = >({tap}), {bounds}", (n, oh, ow, c), x.dtype
    )
    kk = k0 * k1
    grid = np.indices((k0, k1)).reshape(2, -1)
    offsets = win.dilations[0] * w * grid[0] + win.dilations[1] * grid[1]
    taps = ((kk - np.arange(kk, dtype=np.int64)) << 32 | offsets).reshape(k0, k1)
    tref = b.ref(Value("", taps.shape, np.dtype(np.int64), taps))
    m = b.contraction(
        f"{{out}}[n, y0, y1, c : {sizes}] = >({tap} == {b.ref(y)}[n, y0, y1, c] ? "
        f"({tref}[k0, k1])), {bounds}",
        (n, oh, ow, c),
        np.dtype(np.int64),
    )
    mr = b.ref(m)
    origin = (
        f"({win.strides[0]} * index({mr}, 1) - {win.begin[0]}) * {w} "
        f"+ {win.strides[1]} * index({mr}, 2) - {win.begin[1]}"
    )
    idx = b.eltwise(f"{origin} + ({mr} & {(1 << 32) - 1})", m.shape, np.int64)
    laid = (n, c, oh, ow)
    return (
        Value(y.name, laid, x.dtype, layout=NHWC),
        Value(idx.name, laid, np.dtype(np.int64), layout=NHWC),
    )


def max_pool_backward(
    b: Builder, go: Value, indices: Value, shape: tuple[int, ...], win: Window
) -> Value | None:
    """The input's gradient of a 2-D max pool whose saved ``indices`` are stored
    NHWC: each window's gradient scattered to the tap its index names, over
    NHWC storage (``go`` read channels-last, transposed first if it is
    stored NCHW); laid out NHWC.  None unless ``indices`` is such a value."""
    if not _nhwc(indices) or len(win.kernel) != 2 or go.rank != 4 or go.const is not None:
        return None
    if go.layout not in (None, NHWC) or go.dtype.kind != "f":
        return None
    n, c, h, w = shape
    g = nhwc_input(b, go)
    plane = np.arange(h * w, dtype=np.int64).reshape(h, w)
    pos = _positions(win)
    ys = "y0, y1"
    operand = (
        f"{b.ref(physical(indices))}[n, {ys}, c] == {b.ref(Value('', plane.shape, plane.dtype, plane))}"
        f"[{pos[0]}, {pos[1]}] ? ({b.ref(g)}[n, {ys}, c])"
    )
    # windows that do not overlap write each tap once: an assignment, not a sum
    disjoint = all(s >= (k - 1) * d + 1 for s, k, d in zip(win.strides, win.kernel, win.dilations))
    agg = "=" if disjoint else "+"
    out = b.contraction(
        f"{{out}}[n, {pos[0]}, {pos[1]}, c : {n}, {h}, {w}, {c}] = {agg}({operand}), "
        f"k0 < {win.kernel[0]}, k1 < {win.kernel[1]}",
        (n, h, w, c),
        go.dtype,
    )
    return Value(out.name, (n, c, h, w), go.dtype, layout=NHWC)


#: elementwise operators of one operand that commute with a reshape
UNARY = frozenset({
    "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Neg", "Abs", "Sqrt", "Erf", "Gelu", "Reciprocal",
})  # fmt: skip


def before_reshape(
    op: str, inputs: Sequence[Value | None], reshaped: dict[str, Value]
) -> list[Value | None] | None:
    """The operands to apply elementwise ``op`` to before a row-major reshape
    (its result is then reshaped back), or None: ``op``'s one computed operand
    is a reshape (``reshaped``: result name -> the value reshaped) of a value
    with the same last dimension, and any other operand is a scalar or a vector
    along that dimension (a linear layer's bias, on a 3-D input: its ``mm``
    then fuses the bias and an activation, where on the 3-D view they were
    kernels of their own)."""
    if op not in UNARY and op not in ("Add", "Sub", "Mul", "Div"):
        return None
    if any(v is None for v in inputs) or (op in UNARY) != (len(inputs) == 1):
        return None
    shaped = [v for v in inputs if v is not None and v.rank > 1]
    if len(shaped) != 1:
        return None
    x = shaped[0]
    src = reshaped.get(x.name) if x.const is None and x.layout is None else None
    if src is None or src.rank < 1 or src.shape[-1] != x.shape[-1]:
        return None
    out: list[Value | None] = []
    for v in inputs:
        assert v is not None
        if v is x:
            out.append(src)
        elif v.rank == 0 or (v.rank == 1 and v.shape[0] in (1, x.shape[-1])):
            out.append(v)
        else:
            return None
    return out
