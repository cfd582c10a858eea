"""Channels-last layout for image tensors.

ONNX image models are NCHW.  The CPU pipeline's register tiles want the
contiguous dimension of a convolution's output and weights to be the output
channels (a convolution written over NCHW runs about 50x slower), so the
importer keeps 4-D activations **physically NHWC** between the operators that
understand it, and transposes back to NCHW only where an operator needs the
logical layout (a ``Reshape``, say) or at the graph outputs.

A :class:`~.builder.Value` with ``layout = (0, 2, 3, 1)`` has the logical
(NCHW) ``shape`` of the ONNX tensor but is stored as
``logical.transpose(layout)``.  :func:`dispatch` writes the layout-aware form
of the operators below; for every other operator the importer materialises
the logical tensor first (``Builder.logical``), so op functions in ``ops/``
never see a layout.

Layout-aware:

* ``Conv`` (2-D, weights known when compiling): one NHWC contraction over
  weights rearranged when compiling to ``(KH, KW, CI, CO)`` (output channels
  contiguous), bound as constants: how they are blocked for the register
  tiles is the target pipeline's business (``unroll`` lays constant panels
  out once, in the tile's width); a ``BatchNormalization``
  that only reads the convolution's output is folded into its weights and
  bias (``fuse_conv_bn``).
* ``BatchNormalization`` (parameters known): ``x * s + t`` per channel.
* ``MaxPool``, ``AveragePool``, ``GlobalAveragePool``, ``GlobalMaxPool`` (2-D).
* elementwise operators (and ``Dropout``, the identity at inference): unary
  ones apply to the stored tensor as is; binary
  and variadic ones when every non-constant operand has the same layout
  (constants are transposed when compiling).
* ``Concat`` over channels.
* ``Transpose``: no copy; the result is the same tensor with the composed
  layout (any permutation, any rank).
* ``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze`` of a laid-out value:
  a split of logical dimensions splits the physical ones (no copy, the layout
  follows); a merge is a physical merge when the merged dimensions are
  stored together and in order, else one copy into the order that makes it
  one, when that leaves the result channels-last or plain (a channel shuffle:
  one copy instead of three); anything else materialises the logical tensor.
* ``MatMul`` with laid-out operands: the contraction reads them through
  permuted indices (attention's transposed heads and keys are not copied).
* ``Resize``, ``Upsample`` of the spatial axes: the stored tensor resized,
  its per-axis scales, sizes and roi permuted (a segmentation net's
  upsampling stays channels-last).
* ``QuantizeLinear``, ``DequantizeLinear`` (not blocked): elementwise, the
  axis of a per-channel scale moved to its physical position (a quantised
  CNN's QDQ pairs stay channels-last between its convolutions).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

import numpy as np

from ..ir.reshape import refinement_groups
from .builder import Builder, Node, Value
from .graph import NodeInfo
from .ops._util import literal
from .ops.conv import affine, window
from .ops.linalg import matmul_contraction
from .ops.pool import divisor
from .registry import OpDef

NHWC = (0, 2, 3, 1)

UNARY = {
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu", "Celu", "HardSigmoid",
    "HardSwish", "Softplus", "Softsign", "Abs", "Neg", "Exp", "Log", "Sqrt", "Erf",
    "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Identity", "Mish",
    "Gelu", "ThresholdedRelu", "Shrink", "Swish", "Cast", "Not", "IsNaN", "IsInf", "Dropout",
}  # fmt: skip
BINARY = {
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu", "Equal",
    "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where", "Clip",
}  # fmt: skip


RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}


def physical(v: Value) -> Value:
    """A view of ``v`` as the Tile tensor it is stored as (no layout)."""
    if v.layout is None:
        return v
    return Value(v.name, v.phys_shape, v.dtype)


def with_layout(v: Value | None, layout: tuple[int, ...]) -> Value | None:
    """Mark a value computed on physical views as stored in ``layout``."""
    if v is None or v.const is not None:
        return v
    inv = tuple(int(i) for i in np.argsort(layout))
    return replace(v, shape=tuple(v.shape[i] for i in inv), layout=layout)


def dispatch(b: Builder, d: OpDef, node: Node) -> list[Value | None] | None:
    """The layout-aware form of ``node``, or ``None`` to use the op as written
    (on logical inputs)."""
    op = node.op_type
    try:
        if op in ("Conv", "_ConvBN"):
            return _conv(b, node)
        if op == "_QConv":
            return _qconv(b, node)
        if op == "QLinearConv":
            return _qlinear_conv(b, node)
        if op == "BatchNormalization":
            return _batchnorm(b, node)
        if op in ("MaxPool", "AveragePool"):
            return _pool(b, node)
        if op in ("GlobalAveragePool", "GlobalMaxPool"):
            return _global_pool(b, node)
        if op == "Concat":
            return _concat(b, d, node)
        if op in UNARY or op in BINARY:
            return _eltwise(b, d, node)
        if op in ("QuantizeLinear", "DequantizeLinear"):
            return _quant(b, d, node)
        if op in ("Resize", "Upsample"):
            return _resize(b, d, node)
        if op == "Transpose":
            return _transpose(node)
        if op in RESHAPES:
            return _reshape(b, d, node)
        if op == "MatMul":
            return _matmul(b, node)
    except _Fallback:
        return None
    return None


class _Fallback(Exception):
    """The layout-aware form does not apply: use the op on logical inputs."""


def _need(cond: bool) -> None:
    if not cond:
        raise _Fallback


_T = TypeVar("_T")


def _needed(value: _T | None) -> _T:
    """``value``, which the layout-aware form cannot do without."""
    if value is None:
        raise _Fallback
    return value


def _layout_of(node: Node) -> tuple[int, ...] | None:
    layouts = {v.layout for v in node.inputs if v is not None and v.layout is not None}
    _need(len(layouts) <= 1)
    return layouts.pop() if layouts else None


# -- elementwise --------------------------------------------------------------


def _eltwise(b: Builder, d: OpDef, node: Node) -> list[Value | None]:
    layout = _needed(_layout_of(node))
    rank = len(layout)
    views: list[Value | None] = []
    for v in node.inputs:
        if v is None:
            views.append(None)
        elif v.layout is not None:
            views.append(physical(v))
        elif v.const is not None and v.rank <= rank:
            arr = np.asarray(v.const).reshape((1,) * (rank - v.rank) + v.shape)
            arr = np.ascontiguousarray(arr.transpose(layout)) if v.rank else v.const
            views.append(Value("", arr.shape, v.dtype, arr))
        elif v.rank == 0:
            views.append(v)
        else:
            raise _Fallback
    outs = d.fn(b, replace(node, inputs=tuple(views)))
    for o in outs:
        _need(o is None or o.const is not None or o.rank == rank)
    return [with_layout(o, layout) for o in outs]


def _quant(b: Builder, d: OpDef, node: Node) -> list[Value | None]:
    """QuantizeLinear/DequantizeLinear of a laid-out tensor: elementwise, their
    per-tensor or per-axis scale and zero point read along the axis's physical
    position (blocked quantisation takes the logical tensor)."""
    layout = _needed(_layout_of(node))
    x = node.inputs[0]
    _need(x is not None and x.layout == layout and not node.attr("block_size", 0))
    assert x is not None
    others = node.inputs[1:]
    _need(all(v is None or v.layout is None for v in others))
    ax = int(node.attr("axis", 1)) % len(layout)
    attrs = dict(node.attrs, axis=layout.index(ax))
    outs = d.fn(b, replace(node, inputs=(physical(x), *others), attrs=attrs))
    return [with_layout(o, layout) for o in outs]


def _resize(b: Builder, d: OpDef, node: Node) -> list[Value | None]:
    """Resize/Upsample of a laid-out image over its spatial axes only: the same op
    on the stored tensor, its per-axis ``scales``, ``sizes`` and ``roi`` permuted
    to the physical order (the spatial axes keep their relative order, so they
    are resized in the reference's order)."""
    layout = _needed(_layout_of(node))
    x = node.inputs[0]
    _need(x is not None and x.layout == layout and not node.attr("axes"))
    assert x is not None
    rank = len(layout)
    perm = list(layout)

    def per_axis(v: Value | None, count: int) -> Value | None:
        if v is None or v.size == 0:
            return v
        _need(v.const is not None and v.size == count * rank)
        arr = np.asarray(v.const).reshape(count, rank)
        out = np.ascontiguousarray(arr[:, perm]).reshape(-1)
        return Value("", out.shape, v.dtype, out)

    inputs = list(node.inputs)
    attrs = dict(node.attrs)
    if node.op_type == "Upsample" and node.opset < 9:
        factors = [float(s) for s in (node.attr("scales") or [])]
        _need(len(factors) == rank and factors[0] == 1.0 and factors[1] == 1.0)
        attrs["scales"] = [factors[k] for k in perm]
    elif node.op_type == "Upsample" or node.opset < 11:
        given = inputs[1] if len(inputs) > 1 else None
        _need(given is not None and given.const is not None)
        assert given is not None
        _need(list(np.asarray(given.const).reshape(-1)[:2]) == [1.0, 1.0])
        inputs[1] = per_axis(given, 1)
    else:
        # only the spatial axes may change (batch and channels: scale 1, same size)
        scales = inputs[2] if len(inputs) > 2 else None
        sizes = inputs[3] if len(inputs) > 3 else None
        if scales is not None and scales.size:
            _need(scales.const is not None)
            _need(list(np.asarray(scales.const).reshape(-1)[:2]) == [1.0, 1.0])
        if sizes is not None and sizes.size:
            _need(sizes.const is not None)
            _need(list(np.asarray(sizes.const).reshape(-1)[:2]) == [x.shape[0], x.shape[1]])
        for k, count in ((1, 2), (2, 1), (3, 1)):
            if k < len(inputs):
                inputs[k] = per_axis(inputs[k], count)
    inputs[0] = physical(x)
    outs = d.fn(b, replace(node, inputs=tuple(inputs), attrs=attrs))
    return [with_layout(o, layout) for o in outs]


def _concat(b: Builder, d: OpDef, node: Node) -> list[Value | None]:
    layout = _needed(_layout_of(node))
    inputs = [v for v in node.inputs if v is not None]
    _need(len(inputs) == len(node.inputs) and all(v.layout == layout for v in inputs))
    axis = int(node.attr("axis", 1)) % len(layout)
    attrs = dict(node.attrs, axis=layout.index(axis))
    views = [physical(v) for v in inputs]
    inner = replace(node, inputs=tuple(views), attrs=attrs)
    return [with_layout(o, layout) for o in d.fn(b, inner)]


# -- convolution ----------------------------------------------------------------


def _nhwc_input(b: Builder, x: Value) -> Value:
    """``x`` (logical NCHW) stored as NHWC: its physical view, transposing first
    when it is stored as NCHW."""
    if x.layout == NHWC:
        return physical(x)
    _need(x.layout is None and x.const is None)
    n, c, h, w = x.shape
    t = b.contraction(
        f"{{out}}[n, h, w, c : {n}, {h}, {w}, {c}] = =({b.ref(x)}[n, c, h, w])",
        (n, h, w, c),
        x.dtype,
    )
    return t


def _const(node: Node, i: int) -> np.ndarray | None:
    v = node.opt(i)
    if v is None:
        return None
    _need(v.const is not None)
    return np.asarray(v.const)


def _channels_last(w: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
    """Convolution weights ``(CO, CI, KH, KW)`` as a new contiguous ``(KH, KW, CI,
    CO)`` array; ``scale`` (one factor per output channel, a batch normalisation
    folded in) multiplies each weight on the way, one rounding per weight as
    ``w * scale`` then the copy.  In native code (:func:`stripeml.api.reversed_axes`):
    NumPy's transposed copy runs at about 1 GB/s here, a quarter to a third of a
    warm start of ResNet-50 (94 MB of weights).  The result owns its memory (no
    view), so ``compile`` binds it read-only without another copy."""
    from .. import api

    co, ci, kh, kw = w.shape
    out = api.reversed_axes(w.reshape(co, ci, kh * kw), scale)  # (tap, ci, co)
    out.shape = (kh, kw, ci, co)  # in place: out stays the owner
    return out


def _conv(b: Builder, node: Node) -> list[Value | None]:
    x = node.input(0)
    _need(x.rank == 4 and x.dtype.kind == "f" and x.layout in (None, NHWC))
    wv = node.input(1)
    w_const = _const(node, 1) if wv.const is not None else None
    if w_const is None:  # weights computed at run time (a training graph's parameters)
        return _conv_runtime_weights(b, node, x, wv)
    w = w_const
    _need(w.ndim == 4 and w.dtype == x.dtype)
    bias = _const(node, 2)
    co, cig, kh, kw = w.shape
    groups = int(node.attr("group", 1))
    n_, ci, h, wd = x.shape
    _need(groups >= 1 and ci == cig * groups and co % groups == 0)
    _need(bias is None or bias.shape == (co,))
    kernel = node.attr("kernel_shape")
    _need(kernel is None or list(kernel) == [kh, kw])
    dt = x.dtype
    bias = np.zeros(co, dt) if bias is None else bias
    factor = None  # per output channel: a batch normalisation's, folded in
    if node.op_type == "_ConvBN":
        params = [_needed(_const(node, i)) for i in range(3, 7)]
        _need(all(p.shape == (co,) for p in params))
        scale, beta, mean, var = (p.astype(np.float64) for p in params)
        s = scale / np.sqrt(var + float(node.attr("_bn_epsilon", 1e-5)))
        factor = s.astype(dt)
        bias = ((bias.astype(np.float64) - mean) * s + beta).astype(dt)
    win = window(node, (h, wd), (kh, kw))
    oh, ow = win.out
    xin = _nhwc_input(b, x)
    xr = b.ref(xin)
    ys = affine((win.strides[0], "y"), (win.dilations[0], "ky"), const=-win.begin[0])
    xs = affine((win.strides[1], "x"), (win.dilations[1], "kx"), const=-win.begin[1])
    if factor is not None and groups != 1:
        w = w * factor[:, None, None, None]  # one rounding per weight
    if groups == 1:
        wt = _channels_last(w.astype(dt, copy=False), factor)  # KH, KW, CI, CO
        wr = b.ref(Value("", wt.shape, dt, wt))
        text = f"{{out}}[n, y, x, co : {n_}, {oh}, {ow}, {co}] = +({xr}[n, {ys}, {xs}, ci] * {wr}[ky, kx, ci, co])"
    elif groups == ci and co == ci:
        wt = _channels_last(w[:, :1].astype(dt, copy=False))  # KH, KW, 1, C
        wt.shape = (kh, kw, co)
        wr = b.ref(Value("", wt.shape, dt, wt))
        text = f"{{out}}[n, y, x, c : {n_}, {oh}, {ow}, {co}] = +({xr}[n, {ys}, {xs}, c] * {wr}[ky, kx, c])"
    else:
        cog = co // groups
        # KH, KW, CIg, G, COg (output channel g * COg + co, as the weights number them)
        wt = _channels_last(w.astype(dt, copy=False))
        wt.shape = (kh, kw, cig, groups, cog)  # in place: wt stays the owner
        wr = b.ref(Value("", wt.shape, dt, wt))
        text = (
            f"{{out}}[n, y, x, {cog} * g + co : {n_}, {oh}, {ow}, {co}] = "
            f"+({xr}[n, {ys}, {xs}, {cig} * g + ci] * {wr}[ky, kx, ci, g, co])"
        )
    out = b.contraction(text, (n_, oh, ow, co), dt)
    if np.any(bias != 0):
        bv = b.ref(Value("", (co,), dt, np.asarray(bias, dt)))
        out = b.eltwise(f"{b.ref(out)} + {bv}", out.shape, dt)
    return [with_layout(out, NHWC)]


def _conv_runtime_weights(b: Builder, node: Node, x: Value, wv: Value) -> list[Value | None]:
    """``Conv`` (one group, or depthwise) whose weights are computed at run time:
    the same NHWC contraction, reading the weights through one transposing copy
    ``(KH, KW, CI, CO)`` made in the program (output channels contiguous)."""
    _need(node.op_type == "Conv" and wv.rank == 4 and wv.dtype == x.dtype and wv.layout is None)
    co, cig, kh, kw = wv.shape
    groups = int(node.attr("group", 1))
    n_, ci, h, wd = x.shape
    _need(groups >= 1 and ci == cig * groups and (groups == 1 or (groups == ci and co == ci)))
    kernel = node.attr("kernel_shape")
    _need(kernel is None or list(kernel) == [kh, kw])
    bias = node.opt(2)
    _need(bias is None or (bias.shape == (co,) and bias.layout is None))
    dt = x.dtype
    win = window(node, (h, wd), (kh, kw))
    oh, ow = win.out
    xr = b.ref(_nhwc_input(b, x))
    wref = b.ref(wv)
    ys = affine((win.strides[0], "y"), (win.dilations[0], "ky"), const=-win.begin[0])
    xs = affine((win.strides[1], "x"), (win.dilations[1], "kx"), const=-win.begin[1])
    if groups == 1:
        wt = b.contraction(
            f"{{out}}[ky, kx, ci, co : {kh}, {kw}, {ci}, {co}] = =({wref}[co, ci, ky, kx])",
            (kh, kw, ci, co),
            dt,
        )
        text = f"{{out}}[n, y, x, co : {n_}, {oh}, {ow}, {co}] = +({xr}[n, {ys}, {xs}, ci] * {b.ref(wt)}[ky, kx, ci, co])"
    else:
        wt = b.contraction(
            f"{{out}}[ky, kx, c : {kh}, {kw}, {co}] = =({wref}[c, 0, ky, kx])", (kh, kw, co), dt
        )
        text = f"{{out}}[n, y, x, c : {n_}, {oh}, {ow}, {co}] = +({xr}[n, {ys}, {xs}, c] * {b.ref(wt)}[ky, kx, c])"
    out = b.contraction(text, (n_, oh, ow, co), dt)
    if bias is not None:
        out = b.eltwise(f"{b.ref(out)} + {b.ref(bias)}", out.shape, dt)
    return [with_layout(out, NHWC)]


def _qconv(b: Builder, node: Node) -> list[Value | None]:
    """A quantised convolution (:mod:`.ops.integer`): integer dot products on
    channels-last bytes, else the float convolution of the dequantised values."""
    from .ops.integer import dequantized_conv, qconv_nhwc
    from .ops.quantize import dequantize_linear

    x = node.input(0)
    _need(x.rank == 4 and x.layout in (None, NHWC))
    out = qconv_nhwc(b, node, lambda v: _nhwc_input(b, v))
    if out is not None:
        return [with_layout(out, NHWC)]
    dq = OpDef("DequantizeLinear", dequantize_linear)

    def dequantize(b: Builder, n: Node) -> list[Value | None]:
        v = n.inputs[0]
        if v is not None and v.layout is not None:
            return _quant(b, dq, n)
        return dequantize_linear(b, n)

    return _conv(b, dequantized_conv(b, node, dequantize))


def _qlinear_conv(b: Builder, node: Node) -> list[Value | None]:
    """QLinearConv on channels-last bytes: the int32 sum of dot products (see
    :func:`.ops.integer.conv_accumulator`) plus the int32 bias, requantised as
    the op defines (scales known when compiling)."""
    from .ops.integer import conv_accumulator
    from .ops.quantize import out_type, requantize

    x, sx, zx, w, sw, zw, sy, zy, bias = (node.opt(i) for i in range(9))
    _need(x is not None and x.rank == 4 and x.layout in (None, NHWC))
    assert x is not None
    scales = [_needed(None if v is None else v.const) for v in (sx, sw, sy)]
    _need(all(np.asarray(v).dtype == np.float32 for v in scales))
    co = x.shape[1] if w is None else w.shape[0]
    _need(np.asarray(scales[1]).size in (1, co) and np.asarray(scales[0]).size == 1)
    _need(np.asarray(scales[2]).size == 1)
    _need(bias is None or (bias.const is not None and bias.dtype == np.int32 and bias.shape == (co,)))
    _need(zy is None or zy.const is not None)
    acc = _needed(conv_accumulator(b, node, x, zx, w, zw, lambda v: _nhwc_input(b, v)))
    if bias is not None and np.any(bias.const):
        acc = b.eltwise(f"{b.ref(acc)} + {b.ref(bias)}", acc.shape, np.int32)
    s0, s1, s2 = (np.asarray(v, np.float32).reshape(-1) for v in scales)
    mult = np.broadcast_to((s0 * s1) / s2, (co,)).astype(np.float32)  # as the reference: in float32
    m = Value("", (co,), np.dtype(np.float32), mult)
    z = None if zy is None else Value("", (), zy.dtype, np.asarray(zy.const).reshape(()))
    out = requantize(b, node, acc, m, z, out_type(node, x, zy))
    return [with_layout(out, NHWC)]


def _batchnorm(b: Builder, node: Node) -> list[Value | None]:
    x = node.input(0)
    _need(x.layout == NHWC and node.n_outputs == 1 and not int(node.attr("training_mode", 0)))
    c = x.shape[1]
    params = [_needed(_const(node, i)) for i in range(1, 5)]
    _need(all(p.shape == (c,) for p in params))
    scale, beta, mean, var = (p.astype(np.float64) for p in params)
    s = scale / np.sqrt(var + float(node.attr("epsilon", 1e-5)))
    t = beta - mean * s
    sv = b.ref(Value("", (c,), x.dtype, s.astype(x.dtype)))
    tv = b.ref(Value("", (c,), x.dtype, t.astype(x.dtype)))
    out = b.eltwise(f"{x.name} * {sv} + {tv}", x.phys_shape, x.dtype)
    return [with_layout(out, NHWC)]


# -- pooling ------------------------------------------------------------------


def _pool(b: Builder, node: Node) -> list[Value | None]:
    x = node.input(0)
    _need(x.layout == NHWC and x.dtype.kind == "f" and node.n_outputs == 1)
    _need(int(node.attr("storage_order", 0)) == 0)
    kernel = [int(k) for k in node.attr("kernel_shape", [])]
    _need(len(kernel) == 2)
    n_, c, h, wd = x.shape
    win = window(node, (h, wd), kernel, ceil_mode=bool(node.attr("ceil_mode", 0)))
    oh, ow = win.out
    ys = affine((win.strides[0], "y"), (win.dilations[0], "ky"), const=-win.begin[0])
    xs = affine((win.strides[1], "x"), (win.dilations[1], "kx"), const=-win.begin[1])
    agg = ">" if node.op_type == "MaxPool" else "+"
    text = (
        f"{{out}}[n, y, x, c : {n_}, {oh}, {ow}, {c}] = {agg}({x.name}[n, {ys}, {xs}, c]), "
        f"ky < {kernel[0]}, kx < {kernel[1]}"
    )
    out = b.contraction(text, (n_, oh, ow, c), x.dtype)
    if node.op_type == "AveragePool":
        div = divisor(win, (h, wd), bool(node.attr("count_include_pad", 0)))
        if np.all(div == div.flat[0]):
            expr = f"{out.name} / {literal(float(div.flat[0]), x.dtype)}"
        else:
            dv = b.ref(Value("", (oh, ow, 1), x.dtype, div.reshape(oh, ow, 1).astype(x.dtype)))
            expr = f"{out.name} / {dv}"
        out = b.eltwise(expr, out.shape, x.dtype)
    return [with_layout(out, NHWC)]


def _global_pool(b: Builder, node: Node) -> list[Value | None]:
    x = node.input(0)
    _need(x.layout == NHWC and x.dtype.kind == "f")
    n_, c, h, wd = x.shape
    agg = ">" if node.op_type == "GlobalMaxPool" else "+"
    out = b.contraction(
        f"{{out}}[n, 0, 0, c : {n_}, 1, 1, {c}] = {agg}({x.name}[n, y, x, c])",
        (n_, 1, 1, c),
        x.dtype,
    )
    if agg == "+":
        out = b.eltwise(f"{out.name} / {literal(float(h * wd), x.dtype)}", out.shape, x.dtype)
    return [with_layout(out, NHWC)]


# -- graph rewrite --------------------------------------------------------------


def fuse_conv_bn(nodes: list[NodeInfo], outputs: list[str]) -> list[NodeInfo]:
    """Merge each ``Conv`` whose only reader is a ``BatchNormalization`` into one
    ``_ConvBN`` node (folded into the weights when both are constants)."""
    readers: dict[str, int] = {}
    for n in nodes:
        for i in n.inputs:
            readers[i] = readers.get(i, 0) + 1
    producer = {n.outputs[0]: k for k, n in enumerate(nodes) if n.op_type == "Conv"}
    merged: dict[int, NodeInfo] = {}
    drop: set[int] = set()
    for k, n in enumerate(nodes):
        if n.op_type != "BatchNormalization" or len([o for o in n.outputs if o]) != 1:
            continue
        src = n.inputs[0]
        j = producer.get(src)
        if j is None or readers.get(src) != 1 or src in outputs or j in drop:
            continue
        if int(n.attrs.get("training_mode", 0)) or len(n.inputs) != 5:
            continue
        conv = nodes[j]
        ins = list(conv.inputs) + [""] * (3 - len(conv.inputs))
        attrs = dict(conv.attrs, _bn_epsilon=float(n.attrs.get("epsilon", 1e-5)))
        merged[k] = NodeInfo(
            "_ConvBN",
            conv.domain,
            conv.name or n.name,
            ins[:3] + list(n.inputs[1:5]),
            list(n.outputs),
            attrs,
        )
        drop.add(j)
    return [merged.get(k, n) for k, n in enumerate(nodes) if k not in drop]


# -- transposes, reshapes, matrix products ----------------------------------------------


def _laid_out(name: str, shape: tuple[int, ...], dtype: np.dtype, layout: tuple[int, ...]) -> Value:
    """The value of logical ``shape`` stored as the Tile tensor ``name`` in ``layout``."""
    plain = layout == tuple(range(len(layout)))
    return Value(name, shape, dtype, None, None if plain else layout)


def _transpose(node: Node) -> list[Value | None]:
    x = node.input(0)
    _need(x.const is None and bool(x.name) and x.size > 0)
    perm = [int(p) for p in node.attr("perm", None) or range(x.rank)[::-1]]
    _need(sorted(perm) == list(range(x.rank)))  # else the op's own error
    stored = x.layout or tuple(range(x.rank))
    inv = np.argsort(perm)
    layout = tuple(int(inv[d]) for d in stored)
    return [_laid_out(x.name, tuple(x.shape[p] for p in perm), x.dtype, layout)]


def _reshape(b: Builder, d: OpDef, node: Node) -> list[Value | None]:
    x = node.input(0)
    _need(x.layout is not None and x.const is None and x.size > 0)
    # The op itself on a stand-in constant (zero strides, no memory) gives the
    # result's logical shape with every rule of the op (0, -1, axes ...).
    probe = Value("", x.shape, x.dtype, np.broadcast_to(np.zeros((), x.dtype), x.shape))
    outs = d.fn(b, replace(node, inputs=(probe, *node.inputs[1:])))
    _need(len(outs) == 1)
    out = _needed(outs[0])
    _need(out.const is not None)
    shape = out.shape
    stored = _needed(x.layout)
    split = refinement_groups(x.shape, shape)
    if split is not None:  # each stored dimension splits into its group, in order
        seq = [j for dim in stored for j in split[dim] if shape[j] > 1]
        return [_stored_reshape(b, physical(x), shape, _order(seq, shape))]
    merge = _needed(refinement_groups(shape, x.shape))
    owner = {dim: j for j, group in enumerate(merge) for dim in group}
    wanted = [dim for dim in stored if x.shape[dim] > 1]
    runs: list[int] = []  # the result dimension of each stored run, in order
    for dim in wanted:
        if not runs or runs[-1] != owner[dim]:
            runs.append(owner[dim])
    if len(runs) != len(set(runs)) or any(
        owner[a] == owner[c] and a > c for a, c in zip(wanted, wanted[1:])
    ):
        # Store it in the order that makes the merge a physical one, if that
        # gives a layout the importer keeps (plain, or channels-last).
        runs = list(dict.fromkeys(owner[dim] for dim in wanted))
        _need(_order(runs, shape) in (tuple(range(len(shape))), NHWC))
        dims = [dim for j in runs for dim in merge[j] if x.shape[dim] > 1]
        x = _relaid(b, x, tuple(dims + [dim for dim in range(x.rank) if dim not in dims]))
    return [_stored_reshape(b, physical(x), shape, _order(runs, shape))]


def _order(seq: list[int], shape: tuple[int, ...]) -> tuple[int, ...]:
    """A layout whose dimensions of more than one element come in the order
    ``seq``: plain or channels-last when one is (size-1 dimensions go anywhere)."""
    for cand in (tuple(range(len(shape))), NHWC):
        if len(cand) == len(shape) and [j for j in cand if shape[j] > 1] == seq:
            return cand
    return tuple(seq + [j for j in range(len(shape)) if j not in seq])


def _relaid(b: Builder, x: Value, layout: tuple[int, ...]) -> Value:
    """``x`` copied into storage ``layout`` (one ``=`` contraction)."""
    stored = _needed(x.layout)
    idx = [f"i{k}" for k in range(x.rank)]
    sizes = ", ".join(str(x.shape[dim]) for dim in layout)
    out = ", ".join(idx[dim] for dim in layout)
    src = ", ".join(idx[dim] for dim in stored)
    copy = b.contraction(
        f"{{out}}[{out} : {sizes}] = =({x.name}[{src}])",
        tuple(x.shape[dim] for dim in layout),
        x.dtype,
    )
    return _laid_out(copy.name, x.shape, x.dtype, layout)


def _stored_reshape(
    b: Builder, stored: Value, shape: tuple[int, ...], layout: tuple[int, ...]
) -> Value:
    """The value of logical ``shape`` in ``layout`` whose storage is ``stored``
    re-read row-major (a Tile ``reshape``, which ``alias_reshape`` removes)."""
    phys = tuple(shape[j] for j in layout)
    if phys != stored.shape:
        stored = b.statement(
            f"{{out}} = reshape({stored.name}{''.join(f', {n}' for n in phys)})",
            phys,
            stored.dtype,
        )
    return _laid_out(stored.name, shape, stored.dtype, layout)


def _matmul(b: Builder, node: Node) -> list[Value | None]:
    x, y = node.input(0), node.input(1)
    _need(x.layout is not None or y.layout is not None)
    _need(x.dtype == y.dtype and x.dtype.kind in "fiu")
    return [
        matmul_contraction(
            b, node, b.ref(physical(x)), x.shape, b.ref(physical(y)), y.shape, x.dtype,
            x.layout, y.layout,
        )
    ]  # fmt: skip
