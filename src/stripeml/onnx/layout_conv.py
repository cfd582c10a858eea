"""Convolutions stored channels-last: the layout-aware forms of ``Conv``,
``_QConv`` and ``QLinearConv`` that :func:`.layout.dispatch` writes, and the
graph rewrite that folds a batch normalisation into the convolution before it.

* ``Conv`` (2-D, weights known when compiling): one NHWC contraction.  With
  one group and a multiple of :data:`AS_READ_CHANNELS` output channels (not a
  3 x 3, stride-1 one large enough for ``winograd``, which transforms its
  weights channels-last) it reads the
  weights as the file stores them, ``(CO, CI, KH, KW)``: the array read is
  bound as the constant, no copy at import, and the target's pipeline lays it
  out for its register tiles, once (the cpu target's panels,
  ``passes/_const_panels.py``, taken straight from that order: a warm start
  lays each weight out once, not twice).  Other weights are rearranged when
  compiling to ``(KH, KW, CI, CO)`` (output channels contiguous,
  :func:`_channels_last`).  ``_ConvBN`` (:func:`fuse_conv_bn`) is a ``Conv``
  whose only reader was a ``BatchNormalization``: its shift is folded into the
  bias, its scale into the weights or, for weights as read, into the epilogue
  (``sum * scale + bias``, one multiply per output fused into the
  convolution's kernel, rather than a scaled copy of the weights).
* ``Conv`` with weights computed at run time (one group, or depthwise): the same
  contraction reading the weights through one transposing copy in the program.
* ``_QConv`` (a quantised convolution, :mod:`.ops.integer`) and ``QLinearConv``:
  integer dot products on channels-last bytes, requantised as the op defines;
  else the float convolution of the dequantised values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .builder import Builder, Node, Value
from .graph import NodeInfo
from .layout_values import NHWC, const_input, need, needed, nhwc_input, physical, with_layout
from .ops.conv import affine, window

if TYPE_CHECKING:  # the quantised forms load it when first used
    from .ops.integer import DQ


#: A one-group convolution with a multiple of this many output channels reads its
#: weights as the file stores them: whole register tiles on any target of up to
#: 64 lanes a tile, so every tile's weights are laid out in panels.  Others (32
#: channels, 21 classes: a ragged or single narrow tile, which reads unlaid
#: weights in place) keep the channels-last copy, and so do 3 x 3, stride-1 ones
#: (``passes/winograd.py`` transforms weights in that layout).
AS_READ_CHANNELS = 64

#: The cpu target's ``winograd`` ``min_size`` (``targets/cpu.toml``): a 3 x 3,
#: stride-1 convolution with a smaller output side is convolved directly there
#: (ResNet-50's 7 x 7 maps), so its weights are read as stored too, not copied
#: channels-last (two 9.4 MB copies less at a warm start of ResNet-50).
WINOGRAD_MIN_SIZE = 8


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


def conv(b: Builder, node: Node) -> list[Value | None]:
    """``Conv`` or ``_ConvBN`` (2-D, float) as one NHWC contraction, the result
    stored NHWC."""
    x = node.input(0)
    need(x.rank == 4 and x.dtype.kind == "f" and x.layout in (None, NHWC))
    wv = node.input(1)
    w_const = const_input(node, 1) if wv.const is not None else None
    if w_const is None:  # weights computed at run time (a training graph's parameters)
        return _conv_runtime_weights(b, node, x, wv)
    w = w_const
    need(w.ndim == 4 and w.dtype == x.dtype)
    bias = const_input(node, 2)
    co, cig, kh, kw = w.shape
    groups = int(node.attr("group", 1))
    n_, ci, h, wd = x.shape
    need(groups >= 1 and ci == cig * groups and co % groups == 0)
    need(bias is None or bias.shape == (co,))
    kernel = node.attr("kernel_shape")
    need(kernel is None or list(kernel) == [kh, kw])
    dt = x.dtype
    bias = np.zeros(co, dt) if bias is None else bias
    factor = None  # per output channel: a batch normalisation's, folded in
    if node.op_type == "_ConvBN":
        params = [needed(const_input(node, i)) for i in range(3, 7)]
        need(all(p.shape == (co,) for p in params))
        scale, beta, mean, var = (p.astype(np.float64) for p in params)
        s = scale / np.sqrt(var + float(node.attr("_bn_epsilon", 1e-5)))
        factor = s.astype(dt)
        bias = ((bias.astype(np.float64) - mean) * s + beta).astype(dt)
    win = window(node, (h, wd), (kh, kw))
    oh, ow = win.out
    xin = nhwc_input(b, x)
    xr = b.ref(xin)
    ys = affine((win.strides[0], "y"), (win.dilations[0], "ky"), const=-win.begin[0])
    xs = affine((win.strides[1], "x"), (win.dilations[1], "kx"), const=-win.begin[1])
    if factor is not None and groups != 1:
        w = w * factor[:, None, None, None]  # one rounding per weight
    # (a 3 x 3, stride-1 convolution keeps the channels-last copy where the cpu
    # target's ``winograd`` pass may take it: it takes weights in that layout)
    winograd = (
        (kh, kw) == (3, 3)
        and tuple(win.strides) == (1, 1)
        and tuple(win.dilations) == (1, 1)
        and min(oh, ow) >= WINOGRAD_MIN_SIZE
    )
    as_read = groups == 1 and co % AS_READ_CHANNELS == 0 and not winograd
    if as_read:
        # the weights as the file has them: the program lays them out once, in the
        # register tiles' panels, and a batch normalisation's factors scale the
        # sums (no copy at import; see the module docstring)
        wr = b.ref(Value("", w.shape, dt, w))
        text = f"{{out}}[n, y, x, co : {n_}, {oh}, {ow}, {co}] = +({xr}[n, {ys}, {xs}, ci] * {wr}[co, ci, ky, kx])"
    elif groups == 1:
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
    expr = b.ref(out)
    if factor is not None and as_read:
        expr += f" * {b.ref(Value('', (co,), dt, np.asarray(factor, dt)))}"
    if np.any(bias != 0):
        expr += f" + {b.ref(Value('', (co,), dt, np.asarray(bias, dt)))}"
    if expr != b.ref(out):
        out = b.eltwise(expr, out.shape, dt)
    return [with_layout(out, NHWC)]


def _conv_runtime_weights(b: Builder, node: Node, x: Value, wv: Value) -> list[Value | None]:
    """``Conv`` (one group, or depthwise) whose weights are computed at run time:
    the same NHWC contraction, reading the weights through one transposing copy
    ``(KH, KW, CI, CO)`` made in the program (output channels contiguous)."""
    need(node.op_type == "Conv" and wv.rank == 4 and wv.dtype == x.dtype and wv.layout is None)
    co, cig, kh, kw = wv.shape
    groups = int(node.attr("group", 1))
    n_, ci, h, wd = x.shape
    need(groups >= 1 and ci == cig * groups and (groups == 1 or (groups == ci and co == ci)))
    kernel = node.attr("kernel_shape")
    need(kernel is None or list(kernel) == [kh, kw])
    bias = node.opt(2)
    need(bias is None or (bias.shape == (co,) and bias.layout is None))
    dt = x.dtype
    win = window(node, (h, wd), (kh, kw))
    oh, ow = win.out
    xr = b.ref(nhwc_input(b, x))
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


def qconv(b: Builder, node: Node, dequantize: DQ) -> list[Value | None]:
    """A quantised convolution (:mod:`.ops.integer`): integer dot products on
    channels-last bytes, else the float convolution of the dequantised values
    (``dequantize``: the layout-aware ``DequantizeLinear``, from :mod:`.layout`)."""
    from .ops.integer import dequantized_conv, qconv_nhwc
    from .ops.quantize import quantize_tail

    x = node.input(0)
    need(x.rank == 4 and x.layout in (None, NHWC))
    out = qconv_nhwc(b, node, lambda v: nhwc_input(b, v))
    if out is not None:
        return [with_layout(out, NHWC)]
    y = conv(b, dequantized_conv(b, node, dequantize))[0]
    assert y is not None
    return [with_layout(quantize_tail(b, node, physical(y), 7), NHWC)]


def qlinear_conv(b: Builder, node: Node) -> list[Value | None]:
    """QLinearConv on channels-last bytes: the int32 sum of dot products (see
    :func:`.ops.integer.conv_accumulator`) plus the int32 bias, requantised as
    the op defines (scales known when compiling)."""
    from .ops.integer import conv_accumulator
    from .ops.quantize import out_type, requantize

    x, sx, zx, w, sw, zw, sy, zy, bias = (node.opt(i) for i in range(9))
    need(x is not None and x.rank == 4 and x.layout in (None, NHWC))
    assert x is not None
    scales = [needed(None if v is None else v.const) for v in (sx, sw, sy)]
    need(all(np.asarray(v).dtype == np.float32 for v in scales))
    co = x.shape[1] if w is None else w.shape[0]
    need(np.asarray(scales[1]).size in (1, co) and np.asarray(scales[0]).size == 1)
    need(np.asarray(scales[2]).size == 1)
    need(
        bias is None or (bias.const is not None and bias.dtype == np.int32 and bias.shape == (co,))
    )
    need(zy is None or zy.const is not None)
    acc = needed(conv_accumulator(b, node, x, zx, w, zw, lambda v: nhwc_input(b, v)))
    if bias is not None and np.any(bias.const):
        acc = b.eltwise(f"{b.ref(acc)} + {b.ref(bias)}", acc.shape, np.int32)
    s0, s1, s2 = (np.asarray(v, np.float32).reshape(-1) for v in scales)
    mult = np.broadcast_to((s0 * s1) / s2, (co,)).astype(np.float32)  # as the reference: in float32
    m = Value("", (co,), np.dtype(np.float32), mult)
    z = None if zy is None else Value("", (), zy.dtype, np.asarray(zy.const).reshape(()))
    out = requantize(b, node, acc, m, z, out_type(node, x, zy))
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
