"""Integer kernels for quantised convolutions and matrix products.

A model quantised in the QDQ format (``onnxruntime.quantization.quantize_static``'s
default) writes each convolution as ``Conv(DequantizeLinear(xq), DequantizeLinear(wq))``:
float arithmetic on dequantised values.  Since ``(x - zx) * sx`` and
``(w - zw) * sw`` are exact integers times scales,

    sum (xq - zx) * sx * wq * sw  =  sx * sw * (sum xq * wq  -  zx * sum wq)

(symmetric weights: ``zw = 0``), so the convolution is an int32 sum of uint8 x int8
products, then one scale per output channel.  :func:`~..qdq.fuse_qdq` rewrites
such a ``Conv`` into the internal ``_QConv`` node; :func:`qconv_nhwc` writes it as

* the activations' bytes viewed as int32 words of four channels
  (``view_int(X, 32)``, no copy of values),
* the weights packed when compiling as int32 words of four input channels,
  ``(KH, KW, CI/4, CO)`` (output channels contiguous, as the float convolution's),
* one contraction ``+(dot4(X4[n, y, x, c], W4[ky, kx, c, co]))``: Stripe's ``dot4``
  intrinsic, which the CPU backend runs as ``vpdpbusd`` where the CPU has VNNI
  (16 lanes x 4 products per instruction, four times the float FMA's),
* the zero-point term ``zx * sum wq`` (per output channel, or per output pixel and
  channel where padding leaves taps out) and the scale in the epilogue, which
  the ``epilogue`` pass fuses into the kernel.

Signed activations are made unsigned by adding 128 (the zero point too), unsigned
weights signed by subtracting 128 (only when their zero point is 128 everywhere:
``zw`` must end at 0).  Anything else (grouped convolutions, input channels not a
multiple of four, asymmetric weights, non-constant scales) keeps the float
convolution of the dequantised values, which computes the same numbers.

``MatMulInteger`` with constant 8-bit weights (``quantize_dynamic``'s form) takes
the same route (:func:`matmul_integer_dot4`): exact int32 results.

A ``QuantizeLinear`` that :func:`~..qdq.fuse_qdq` folded into a ``_QConv`` (inputs 7
and 8, ``_relu``) makes the epilogue one multiply-add per element,
``round(acc * sx*sw/sy + bias/sy) + zy`` clamped to the bytes (the multiplier
``QLinearConv`` uses; the model's nodes divide by ``sy``: the two differ by float
rounding, so a value within a rounding of a tie may land one step away).
``_QAdd`` (:func:`qadd_value`) is a residual block's sum read from the operands'
bytes, requantised the same way when a ``QuantizeLinear`` is folded into it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ..builder import Builder, Node, Value
from ._util import cast, literal
from .conv import affine, window

U8, I8, I32, F32 = (np.dtype(t) for t in (np.uint8, np.int8, np.int32, np.float32))
#: Writes one DequantizeLinear node.
DQ = Callable[[Builder, Node], list[Value | None]]


def _scalar(v: Value | None) -> float | int | None:
    """The one value of a constant scalar (or 1-element) input."""
    if v is None or v.const is None or v.size != 1:
        return None
    value: float | int = np.asarray(v.const).reshape(()).item()
    return value


def _per_channel(v: Value | None, co: int, default: float) -> np.ndarray | None:
    """A constant per-tensor or per-output-channel input as ``co`` values."""
    if v is None:
        return np.full(co, default)
    if v.const is None or v.size not in (1, co):
        return None
    return np.broadcast_to(np.asarray(v.const).reshape(-1), (co,)).astype(np.float64)


def qconv_nhwc(b: Builder, node: Node, nhwc: Callable[[Value], Value]) -> Value | None:
    """``_QConv`` as one dot4 contraction on channels-last data: the result stored
    NHWC (a float32 tensor of the logical shape's NHWC order); ``None`` when the
    integer form does not apply (the caller then convolves dequantised floats).
    ``nhwc``: the input's NHWC-stored Tile tensor."""
    xq, sx_v, zx_v, wq_v, sw_v, zw_v, bias_v = (node.opt(i) for i in range(7))
    if wq_v is None or wq_v.rank != 4:
        return None
    co = wq_v.shape[0]
    sx = _scalar(sx_v)
    axis = int(node.attr("_w_axis", 1)) % 4
    sw = _per_channel(sw_v, co, 1.0) if sw_v is not None and (sw_v.size == 1 or axis == 0) else None
    if sx is None or sw is None or sx_v is None or sx_v.dtype != F32 or sw_v is None:
        return None
    if sw_v.dtype != F32 or (zw_v is not None and zw_v.size != 1 and axis != 0):
        return None
    bias = np.zeros(co)
    if bias_v is not None:
        if bias_v.const is None or bias_v.shape != (co,):
            return None
        bias = np.asarray(bias_v.const, np.float64)
    acc = conv_accumulator(b, node, xq, zx_v, wq_v, zw_v, nhwc)
    if acc is None:
        return None
    scale = np.float64(np.float32(sx)) * sw
    out = requantized_acc(b, node, acc, scale, bias)  # one multiply-add, no division
    if out is not None:
        return out
    if len(node.inputs) > 7 and node.opt(7) is not None:
        return None  # a folded QuantizeLinear not requantised here: the float form
    out_expr = (
        f"as_float({b.ref(acc)}, 32) * {b.ref(Value('', (co,), F32, scale.astype(np.float32)))}"
    )
    if np.any(bias != 0):
        out_expr += f" + {b.ref(Value('', (co,), F32, bias.astype(np.float32)))}"
    return b.eltwise(out_expr, acc.shape, F32)


def fused_quantize(node: Node, first: int) -> tuple[float, int, np.dtype, int] | None:
    """The ``QuantizeLinear`` folded into ``node`` (inputs ``first`` and ``first +
    1``: its scale and zero point; attribute ``_relu``: a ``Relu`` before it, see
    :func:`~..qdq.fuse_qdq`) as ``(scale, zero point, type, lowest value)`` when
    its scale is a float32 constant and its zero point an 8-bit one (or absent);
    ``None`` when nothing is folded or the parameters are computed at run time
    (then :func:`.quantize.quantize_tail` writes it as the model does)."""
    if len(node.inputs) <= first or node.opt(first) is None:
        return None
    s_v, z_v = node.opt(first), node.opt(first + 1)
    sy = _scalar(s_v)
    if sy is None or s_v is None or s_v.dtype != F32 or not np.isfinite(sy) or sy == 0:
        return None
    zy, dtype = 0, U8
    if z_v is not None:
        z = _scalar(z_v)
        if z is None or z_v.dtype not in (U8, I8):
            return None
        zy, dtype = int(z), z_v.dtype
    lo = -128 if dtype == I8 else 0
    return float(np.float32(sy)), zy, dtype, max(lo, zy) if node.attr("_relu", 0) else lo


def requantized_acc(
    b: Builder, node: Node, acc: Value, scale: np.ndarray, bias: np.ndarray
) -> Value | None:
    """``acc * scale + bias`` (int32 sums, per last-axis constants) quantised by the
    ``QuantizeLinear`` folded into ``node`` at input 7: ``round(acc * scale/sy +
    bias/sy) + zy`` clamped to the bytes; ``None`` when none is folded (or its
    constants are not finite)."""
    q = fused_quantize(node, 7)
    if q is None:
        return None
    sy, zy, dtype, lo = q
    mult, shift = (v.astype(np.float32) for v in (scale / sy, bias / sy))
    if not (np.all(np.isfinite(mult)) and np.all(np.isfinite(shift))):
        return None
    m, s = (b.ref(Value("", v.shape, F32, v)) for v in (mult, shift))
    expr = f"as_float({b.ref(acc)}, 32) * {m} + {s}"
    return requantized(b, expr, acc.shape, dtype, lo, zy)


def requantized(
    b: Builder, expr: str, shape: tuple[int, ...], dtype: np.dtype, lo: int, zero: int
) -> Value:
    """Float ``expr`` (finite) rounded half to even, plus the integer ``zero``,
    clamped to ``[lo, dtype's largest]`` and cast to ``dtype``, in four
    instructions per vector where ``zero`` is even: adding ``1.5 * 2**23 + zero``
    rounds into the low bits of the mantissa (exactly, for ``|expr| < 2**22``;
    anything larger clamps to an end all the same; an odd ``zero`` is added
    after the rounding, else a tie would go to the wrong neighbour), the clamp
    compares and selects in that biased range (``vminps``/``vmaxps``, where
    ``min``/``max`` would also carry a NaN through), and the low byte of its bits
    is the result (a truncation, where a float-to-int cast checks its range:
    seven instructions in all).  The biased sum is a statement of its own, fused
    into the kernel; the clamped value, unbiased, is recorded for
    :func:`as_float_of`."""
    if zero % 2 == 0:
        text = f"({expr}) + {literal(_BIAS + zero, F32)}"
    else:
        text = f"(({expr}) + {literal(_BIAS, F32)}) + {literal(float(zero), F32)}"
    r = b.ref(b.eltwise(text, shape, F32))
    hi_b = literal(_BIAS + int(np.iinfo(dtype).max), F32)
    lo_b = literal(_BIAS + lo, F32)
    below = f"({r} < {hi_b} ? {r} : {hi_b})"
    biased = f"({below} > {lo_b} ? {below} : {lo_b})"
    out = b.eltwise(cast(f"bitcast_int({biased}, 32)", dtype), shape, dtype)
    unbiased = f"({biased} - {literal(_BIAS, F32)})"
    vars(b).setdefault(_FLOATS, {})[out.name] = (unbiased, len(b.statements))
    return out


#: ``1.5 * 2**23``: a float32 in ``[2**23, 2**24)`` holds its integer part in the
#: mantissa's low bits, so adding this rounds a smaller value to an integer there.
_BIAS = 12582912.0


#: The builder's record of the requantised convolution outputs: ``{name: (the
#: clamped float expression cast to bytes, the statement count after it)}``.
_FLOATS = "_integer_requantised"


def as_float_of(b: Builder, v: Value) -> str:
    """``v`` (8-bit) as float32: the clamped float a convolution's requantisation
    cast to ``v`` (an integer in range: the same number) when ``v`` was written by
    :func:`qconv_nhwc` and nothing but its own ``DequantizeLinear`` came after,
    so the reader joins that kernel and skips the round trip through bytes (four
    instructions per vector of the residual sum's epilogue); else the cast."""
    found = vars(b).get(_FLOATS, {}).get(v.name) if v.name else None
    if found is not None:
        expr, at = found
        later = [t for t in b.statements[at:] if not t.startswith("//")]
        if b.statements[at - 1].startswith(f"{v.name} = ") and all(
            "[" not in t.split(" = ", 1)[0] and f"({v.name}," in t for t in later
        ):
            return f"({expr})"
    return f"as_float({b.ref(v)}, 32)"


def conv_accumulator(
    b: Builder,
    node: Node,
    xq: Value | None,
    zx_v: Value | None,
    wq_v: Value | None,
    zw_v: Value | None,
    nhwc: Callable[[Value], Value],
) -> Value | None:
    """``sum (xq - zx) * (wq - zw)`` of a 2-D convolution (``node``'s window
    attributes, one group) as an NHWC int32 tensor: one dot4 contraction and the
    zero point's term; ``None`` unless ``xq`` is 8-bit, ``wq`` constant 8-bit with a
    zero point of 0 (or 128 everywhere for uint8) and ``zx`` a constant scalar.
    Input channels are padded to a multiple of four (zero weights)."""
    if xq is None or wq_v is None or wq_v.const is None:
        return None
    wq = np.asarray(wq_v.const)
    if xq.rank != 4 or xq.dtype not in (U8, I8) or xq.const is not None or wq.ndim != 4:
        return None
    if wq.dtype not in (U8, I8) or int(node.attr("group", 1)) != 1:
        return None
    co, ci, kh, kw = wq.shape
    n_, ci2, h, wd = xq.shape
    zx = _scalar(zx_v) if zx_v is not None else 0
    zw = _per_channel(zw_v, co, 0.0)
    if zx is None or zw is None or ci != ci2:
        return None
    kernel = node.attr("kernel_shape")
    if kernel is not None and list(kernel) != [kh, kw]:
        return None
    # weights to int8 with a zero point of 0
    w = wq.astype(np.int32)
    if wq.dtype == U8:
        w -= 128
        zw = zw - 128
    if np.any(zw != 0):
        return None
    # activations to uint8
    x = nhwc(xq)
    if xq.dtype == I8:
        x = b.eltwise(f"as_uint(as_int({b.ref(x)}, 16) + 128, 8)", x.shape, U8)
        zx = int(zx) + 128
    win = window(node, (h, wd), (kh, kw))
    oh, ow = win.out
    # input channels in words of four: zero weights for the channels added
    words = -(-ci // 4)
    wp = np.zeros((co, 4 * words, kh, kw), np.int8)
    wp[:, :ci] = w
    # (CO, CI, KH, KW) -> (KH, KW, CI/4, CO, 4) int8 -> int32 words (KH, KW, CI/4, CO)
    packed = np.ascontiguousarray(
        wp.transpose(2, 3, 1, 0).reshape(kh, kw, words, 4, co).transpose(0, 1, 2, 4, 3)
    ).view(np.int32)[..., 0]
    # One copy into zero bytes around the image (and after its channels, when
    # they are not whole words): the convolution then has no constraints, so its
    # register tiles span rows of pixels.  Zero bytes add nothing; ``_tap_sums``
    # leaves the padding out of the zero point's term.  The spatial padding is
    # copied as words, after the view: a copy of the bytes would take the
    # producer's elementwise epilogue (the quantisation) out of its kernel.
    pads = (win.begin[0], win.begin[1], win.end[0], win.end[1])
    if 4 * words != ci:
        x = _padded(b, x, pads, 4 * words, U8)
        pads = (0, 0, 0, 0)
    x4 = b.statement(f"{{out}} = view_int({b.ref(x)}, 32)", (*x.shape[:3], words), I32)
    if any(pads):
        x4 = _padded(b, x4, pads, words, I32)
    wr = b.ref(Value("", packed.shape, I32, packed))
    ys = affine((win.strides[0], "y"), (win.dilations[0], "ky"))
    xs = affine((win.strides[1], "x"), (win.dilations[1], "kx"))
    acc = b.contraction(
        f"{{out}}[n, y, x, co : {n_}, {oh}, {ow}, {co}] = "
        f"+(dot4({b.ref(x4)}[n, {ys}, {xs}, c], {wr}[ky, kx, c, co]))",
        (n_, oh, ow, co),
        I32,
    )
    if int(zx) == 0:
        return acc
    corr = int(zx) * _tap_sums(w, win, (xq.shape[2], xq.shape[3]))  # (OH, OW, CO) or (CO,)
    cv = b.ref(Value("", corr.shape, I32, corr.astype(np.int32)))
    return b.eltwise(f"{b.ref(acc)} - {cv}", acc.shape, I32)


def _padded(
    b: Builder, x: Value, pads: tuple[int, int, int, int], channels: int, dtype: np.dtype
) -> Value:
    """NHWC ``x`` copied into zeros: ``pads`` (top, left, bottom, right) around the
    image and ``channels`` channels (``x``'s first, then zeros)."""
    n_, h, wd, _ = x.shape
    t, left, bot, right = pads
    shape = (n_, h + t + bot, wd + left + right, channels)
    return b.contraction(
        f"{{out}}[n, y + {t}, x + {left}, c : {', '.join(str(d) for d in shape)}]"
        f" = =({b.ref(x)}[n, y, x, c])",
        shape,
        dtype,
    )


def _tap_sums(w: np.ndarray, win: object, spatial: tuple[int, int]) -> np.ndarray:
    """``sum wq`` over the taps inside the image for each output pixel and channel
    ``(OH, OW, CO)``, or ``(CO,)`` when every window lies inside."""
    wsum = w.astype(np.int64).sum(axis=1)  # (CO, KH, KW)
    co, kh, kw = wsum.shape
    masks = []
    for d, (size, k) in enumerate(zip(spatial, (kh, kw))):
        o = np.arange(win.out[d])[:, None]  # type: ignore[attr-defined]
        at = o * win.strides[d] + np.arange(k)[None] * win.dilations[d] - win.begin[d]  # type: ignore[attr-defined]
        masks.append((at >= 0) & (at < size))
    if all(m.all() for m in masks):
        return wsum.sum(axis=(1, 2))
    return np.einsum("yk,xl,ckl->yxc", masks[0], masks[1], wsum)


def _dequantized_const(wq: Value, sw: Value, zw: Value | None, axis: int) -> Value | None:
    """``(wq - zw) * sw`` of constant weights, computed now in float32 as
    DequantizeLinear does (per tensor or along ``axis``); ``None`` unless every
    part is a constant of a per-tensor or per-axis shape."""
    if wq.const is None or sw.const is None or (zw is not None and zw.const is None):
        return None
    w = np.asarray(wq.const)
    ax = axis % w.ndim
    shape = [1] * w.ndim
    s, z = np.asarray(sw.const), np.asarray(zw.const) if zw is not None else np.zeros(1)
    for a in (s, z):
        if a.size not in (1, w.shape[ax]):
            return None
    if s.size > 1:
        shape[ax] = s.size
    zshape = [1] * w.ndim
    if z.size > 1:
        zshape[ax] = z.size
    wf = (w.astype(np.float32) - z.astype(np.float32).reshape(zshape)) * s.reshape(shape)
    return Value("", w.shape, s.dtype, wf.astype(s.dtype))


def dequantized_conv(b: Builder, node: Node, dequantize: DQ) -> Node:
    """``_QConv``'s float form: ``Conv`` of the dequantised input and weights (the
    numbers ``DequantizeLinear`` then ``Conv`` compute); ``dequantize`` writes one
    ``DequantizeLinear`` node (layout-aware or not, as the caller's)."""
    xq, sx, zx, wq, sw, zw, bias = (node.opt(i) for i in range(7))
    if xq is None or wq is None or sx is None or sw is None:
        raise node.error("needs the quantised input and weights and their scales")
    axis = int(node.attr("_w_axis", 1))
    dq = replace(node, op_type="DequantizeLinear", attrs={}, n_outputs=1)
    x = dequantize(b, replace(dq, inputs=(xq, sx, zx)))[0]
    w = _dequantized_const(wq, sw, zw, axis)
    if w is None:  # the scale or zero point computed at run time
        w = dequantize(b, replace(dq, inputs=(wq, sw, zw), attrs={"axis": axis}))[0]
    if x is None or w is None:
        raise node.error("dequantising the input or the weights gave no value")
    attrs = {k: v for k, v in node.attrs.items() if not k.startswith("_")}
    ins = (x, w) if bias is None else (x, w, bias)
    return replace(node, op_type="Conv", inputs=ins, attrs=attrs)


def matmul_integer_dot4(b: Builder, n: Node) -> Value | None:
    """``MatMulInteger(A, B)`` with constant 8-bit ``B`` of shape ``(K, N)``, ``K`` a
    multiple of four, a scalar zero point for ``A`` and none (or 0, or 128 for
    uint8) for ``B``: one dot4 contraction over ``A``'s bytes as int32 words and
    ``B`` packed when compiling, minus ``za * sum B`` per column.  Exact, as the
    reference's int32 arithmetic.  ``None`` when another form is needed."""
    a, w_v = n.input(0), n.input(1)
    za, zb = n.opt(2), n.opt(3)
    if w_v.const is None or w_v.rank != 2 or a.rank < 1 or a.const is not None:
        return None
    w = np.asarray(w_v.const)
    k, cols = w.shape
    if a.dtype not in (U8, I8) or w.dtype not in (U8, I8) or k % 4 or a.shape[-1] != k:
        return None
    if a.layout is not None or (za is not None and (za.size != 1 or za.dtype != a.dtype)):
        return None
    wi = w.astype(np.int32)
    zb_val = 0
    if zb is not None:
        if zb.const is None or zb.dtype != w.dtype or np.unique(np.asarray(zb.const)).size != 1:
            return None
        zb_val = int(np.asarray(zb.const).reshape(-1)[0])
    if w.dtype == U8:
        wi -= 128
        zb_val -= 128
    if zb_val != 0:
        return None
    x = a
    shift = 0
    if a.dtype == I8:
        x = b.eltwise(f"as_uint(as_int({b.ref(a)}, 16) + 128, 8)", a.shape, U8)
        shift = 128
    lead = a.shape[:-1]
    x4 = b.statement(f"{{out}} = view_int({b.ref(x)}, 32)", (*lead, k // 4), I32)
    packed = np.ascontiguousarray(
        wi.astype(np.int8).reshape(k // 4, 4, cols).transpose(0, 2, 1)
    ).view(np.int32)[..., 0]
    # The zero point's term first: a scalar computed at run time written between
    # the contraction and its epilogue would keep them two kernels (BERT's
    # ``DynamicQuantizeLinear``: the int32 sums stored and read back).
    colsum = wi.sum(axis=0).astype(np.int32)
    zterm = ""
    if za is not None or shift:
        cs = b.ref(Value("", (cols,), I32, colsum))
        if za is None:
            zterm = f"{shift} * {cs}"
        elif za.const is not None:
            total = int(np.asarray(za.const).reshape(())) + shift
            zterm = f"{total} * {cs}" if total else ""
        else:
            from .shape import reshape

            z = za if za.rank == 0 else reshape(b, za, ())
            zs = b.eltwise(f"as_int({b.ref(z)}, 32) + {shift}", (), I32)
            zterm = f"{b.ref(zs)} * {cs}"
    idx = [f"i{d}" for d in range(len(lead))]
    sizes = ", ".join(str(s) for s in (*lead, cols))
    out_idx = ", ".join([*idx, "j"])
    acc = b.contraction(
        f"{{out}}[{out_idx} : {sizes}] = "
        f"+(dot4({b.ref(x4)}[{', '.join([*idx, 'k'])}], {b.ref(Value('', packed.shape, I32, packed))}[k, j]))",
        (*lead, cols),
        I32,
    )
    if not zterm:
        return acc
    return b.eltwise(f"{b.ref(acc)} - {zterm}", (*lead, cols), I32)
