"""Channels-last layout for image tensors.

ONNX image models are NCHW.  The CPU pipeline's register tiles want the
contiguous dimension of a convolution's output and weights to be the output
channels (a convolution written over NCHW runs about 50x slower), so the
importer keeps 4-D activations **physically NHWC** between the operators that
understand it, and transposes back to NCHW only where an operator needs the
logical layout (a ``Reshape``, say) or at the graph outputs.

A :class:`~.builder.Value` with ``layout = (0, 2, 3, 1)`` has the logical
(NCHW) ``shape`` of the ONNX tensor but is stored as
``logical.transpose(layout)`` (:mod:`.layout_values`: the views and helpers
every form shares).  :func:`dispatch` writes the layout-aware form of the
operators below; for every other operator the importer materialises the
logical tensor first (``Builder.logical``), so op functions in ``ops/`` never
see a layout.

Layout-aware:

* ``Conv`` (2-D, weights known when compiling): one NHWC contraction over
  weights rearranged when compiling to ``(KH, KW, CI, CO)`` (output channels
  contiguous), bound as constants: how they are blocked for the register
  tiles is the target pipeline's business (``unroll`` lays constant panels
  out once, in the tile's width); a ``BatchNormalization``
  that only reads the convolution's output is folded into its weights and
  bias (``fuse_conv_bn``).  Also with weights computed at run time, and the
  quantised ``_QConv`` and ``QLinearConv``: all in :mod:`.layout_conv`.
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

import numpy as np

from ..ir.reshape import refinement_groups
from .builder import Builder, Node, Value
from .layout_conv import conv, qconv, qlinear_conv
from .layout_values import (
    NHWC,
    Fallback,
    const_input,
    layout_of,
    need,
    needed,
    physical,
    with_layout,
)
from .ops._util import literal
from .ops.conv import affine, window
from .ops.linalg import matmul_contraction
from .ops.pool import divisor
from .registry import OpDef

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


def dispatch(b: Builder, d: OpDef, node: Node) -> list[Value | None] | None:
    """The layout-aware form of ``node``, or ``None`` to use the op as written
    (on logical inputs)."""
    op = node.op_type
    try:
        if op in ("Conv", "_ConvBN"):
            return conv(b, node)
        if op == "_QConv":
            return qconv(b, node, _dequantize)
        if op == "QLinearConv":
            return qlinear_conv(b, node)
        if op == "BatchNormalization":
            return _batchnorm(b, node)
        if op in ("MaxPool", "AveragePool"):
            return _pool(b, node)
        if op in ("GlobalAveragePool", "GlobalMaxPool"):
            return _global_pool(b, node)
        if op == "Concat":
            return _concat(b, d, node)
        if op in UNARY or op in BINARY or op == "_QAdd":
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
    except Fallback:
        return None
    return None


# -- elementwise --------------------------------------------------------------


def _eltwise(b: Builder, d: OpDef, node: Node) -> list[Value | None]:
    layout = needed(layout_of(node))
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
            raise Fallback
    outs = d.fn(b, replace(node, inputs=tuple(views)))
    for o in outs:
        need(o is None or o.const is not None or o.rank == rank)
    return [with_layout(o, layout) for o in outs]


def _quant(b: Builder, d: OpDef, node: Node) -> list[Value | None]:
    """QuantizeLinear/DequantizeLinear of a laid-out tensor: elementwise, their
    per-tensor or per-axis scale and zero point read along the axis's physical
    position (blocked quantisation takes the logical tensor)."""
    layout = needed(layout_of(node))
    x = node.inputs[0]
    need(x is not None and x.layout == layout and not node.attr("block_size", 0))
    assert x is not None
    others = node.inputs[1:]
    need(all(v is None or v.layout is None for v in others))
    ax = int(node.attr("axis", 1)) % len(layout)
    attrs = dict(node.attrs, axis=layout.index(ax))
    outs = d.fn(b, replace(node, inputs=(physical(x), *others), attrs=attrs))
    return [with_layout(o, layout) for o in outs]


def _dequantize(b: Builder, node: Node) -> list[Value | None]:
    """``DequantizeLinear`` in its input's layout: how a quantised convolution's
    float form (:func:`.layout_conv.qconv`) dequantises its input and weights."""
    from .ops.quantize import dequantize_linear

    v = node.inputs[0]
    if v is not None and v.layout is not None:
        return _quant(b, OpDef("DequantizeLinear", dequantize_linear), node)
    return dequantize_linear(b, node)


def _resize(b: Builder, d: OpDef, node: Node) -> list[Value | None]:
    """Resize/Upsample of a laid-out image over its spatial axes only: the same op
    on the stored tensor, its per-axis ``scales``, ``sizes`` and ``roi`` permuted
    to the physical order (the spatial axes keep their relative order, so they
    are resized in the reference's order)."""
    layout = needed(layout_of(node))
    x = node.inputs[0]
    need(x is not None and x.layout == layout and not node.attr("axes"))
    assert x is not None
    rank = len(layout)
    perm = list(layout)

    def per_axis(v: Value | None, count: int) -> Value | None:
        if v is None or v.size == 0:
            return v
        need(v.const is not None and v.size == count * rank)
        arr = np.asarray(v.const).reshape(count, rank)
        out = np.ascontiguousarray(arr[:, perm]).reshape(-1)
        return Value("", out.shape, v.dtype, out)

    inputs = list(node.inputs)
    attrs = dict(node.attrs)
    if node.op_type == "Upsample" and node.opset < 9:
        factors = [float(s) for s in (node.attr("scales") or [])]
        need(len(factors) == rank and factors[0] == 1.0 and factors[1] == 1.0)
        attrs["scales"] = [factors[k] for k in perm]
    elif node.op_type == "Upsample" or node.opset < 11:
        given = inputs[1] if len(inputs) > 1 else None
        need(given is not None and given.const is not None)
        assert given is not None
        need(list(np.asarray(given.const).reshape(-1)[:2]) == [1.0, 1.0])
        inputs[1] = per_axis(given, 1)
    else:
        # only the spatial axes may change (batch and channels: scale 1, same size)
        scales = inputs[2] if len(inputs) > 2 else None
        sizes = inputs[3] if len(inputs) > 3 else None
        if scales is not None and scales.size:
            need(scales.const is not None)
            need(list(np.asarray(scales.const).reshape(-1)[:2]) == [1.0, 1.0])
        if sizes is not None and sizes.size:
            need(sizes.const is not None)
            need(list(np.asarray(sizes.const).reshape(-1)[:2]) == [x.shape[0], x.shape[1]])
        for k, count in ((1, 2), (2, 1), (3, 1)):
            if k < len(inputs):
                inputs[k] = per_axis(inputs[k], count)
    inputs[0] = physical(x)
    outs = d.fn(b, replace(node, inputs=tuple(inputs), attrs=attrs))
    return [with_layout(o, layout) for o in outs]


def _concat(b: Builder, d: OpDef, node: Node) -> list[Value | None]:
    layout = needed(layout_of(node))
    inputs = [v for v in node.inputs if v is not None]
    need(len(inputs) == len(node.inputs) and all(v.layout == layout for v in inputs))
    axis = int(node.attr("axis", 1)) % len(layout)
    attrs = dict(node.attrs, axis=layout.index(axis))
    views = [physical(v) for v in inputs]
    inner = replace(node, inputs=tuple(views), attrs=attrs)
    return [with_layout(o, layout) for o in d.fn(b, inner)]


def _batchnorm(b: Builder, node: Node) -> list[Value | None]:
    x = node.input(0)
    need(x.layout == NHWC and node.n_outputs == 1 and not int(node.attr("training_mode", 0)))
    c = x.shape[1]
    params = [needed(const_input(node, i)) for i in range(1, 5)]
    need(all(p.shape == (c,) for p in params))
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
    need(x.layout == NHWC and node.n_outputs == 1)
    need(x.dtype.kind == "f" or node.op_type == "MaxPool")  # a quantised CNN's: bytes
    need(int(node.attr("storage_order", 0)) == 0)
    kernel = [int(k) for k in node.attr("kernel_shape", [])]
    need(len(kernel) == 2)
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
    need(x.layout == NHWC and x.dtype.kind == "f")
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


# -- transposes, reshapes, matrix products ----------------------------------------------


def _laid_out(name: str, shape: tuple[int, ...], dtype: np.dtype, layout: tuple[int, ...]) -> Value:
    """The value of logical ``shape`` stored as the Tile tensor ``name`` in ``layout``."""
    plain = layout == tuple(range(len(layout)))
    return Value(name, shape, dtype, None, None if plain else layout)


def _transpose(node: Node) -> list[Value | None]:
    x = node.input(0)
    need(x.const is None and bool(x.name) and x.size > 0)
    perm = [int(p) for p in node.attr("perm", None) or range(x.rank)[::-1]]
    need(sorted(perm) == list(range(x.rank)))  # else the op's own error
    stored = x.layout or tuple(range(x.rank))
    inv = np.argsort(perm)
    layout = tuple(int(inv[d]) for d in stored)
    return [_laid_out(x.name, tuple(x.shape[p] for p in perm), x.dtype, layout)]


def _reshape(b: Builder, d: OpDef, node: Node) -> list[Value | None]:
    x = node.input(0)
    need(x.layout is not None and x.const is None and x.size > 0)
    # The op itself on a stand-in constant (zero strides, no memory) gives the
    # result's logical shape with every rule of the op (0, -1, axes ...).
    probe = Value("", x.shape, x.dtype, np.broadcast_to(np.zeros((), x.dtype), x.shape))
    outs = d.fn(b, replace(node, inputs=(probe, *node.inputs[1:])))
    need(len(outs) == 1)
    out = needed(outs[0])
    need(out.const is not None)
    shape = out.shape
    stored = needed(x.layout)
    split = refinement_groups(x.shape, shape)
    if split is not None:  # each stored dimension splits into its group, in order
        seq = [j for dim in stored for j in split[dim] if shape[j] > 1]
        return [_stored_reshape(b, physical(x), shape, _order(seq, shape))]
    merge = needed(refinement_groups(shape, x.shape))
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
        need(_order(runs, shape) in (tuple(range(len(shape))), NHWC))
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
    stored = needed(x.layout)
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
    need(x.layout is not None or y.layout is not None)
    need(x.dtype == y.dtype and x.dtype.kind in "fiu")
    return [
        matmul_contraction(
            b, node, b.ref(physical(x)), x.shape, b.ref(physical(y)), y.shape, x.dtype,
            x.layout, y.layout,
        )
    ]  # fmt: skip
