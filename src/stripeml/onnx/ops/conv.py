"""Convolutions: Conv, ConvTranspose, ConvInteger.

Each convolution is one Tile contraction over the input and the weights, with
the padding expressed as an offset in the input's index polynomial: taps that
fall outside the input are skipped, which is zero padding for free.  A bias is
one elementwise statement after it (which the compiler fuses).  The window
geometry helpers here (:func:`window`) are shared with the pooling ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import cast, ints, literal

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def affine(*terms: tuple[int, str], const: int = 0) -> str:
    """The Tile polynomial ``c1 * i1 + c2 * i2 + const`` (terms with a zero
    coefficient are left out)."""
    out = ""
    for coef, name in terms:
        if coef == 0:
            continue
        mag = abs(coef)
        text = name if mag == 1 else f"{mag} * {name}"
        if not out:
            out = text if coef > 0 else f"-{text}"
        else:
            out += f" + {text}" if coef > 0 else f" - {text}"
    if const or not out:
        if not out:
            out = str(const)
        else:
            out += f" + {const}" if const > 0 else f" - {-const}"
    return out


@dataclass
class Window:
    """The geometry of a sliding window over the spatial dimensions."""

    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    begin: list[int]  # padding before (the offset of the first window)
    end: list[int]  # padding after (as the model states it)
    out: list[int]  # output spatial sizes


def _attr_list(n: Node, key: str, rank: int, default: int) -> list[int]:
    v = ints(n, key, [default] * rank)
    if len(v) != rank:
        raise n.error(f"{key} has {len(v)} entries, expected {rank}")
    return v


def window(
    n: Node,
    spatial: Sequence[int],
    kernel: Sequence[int],
    *,
    ceil_mode: bool = False,
    has_dilations: bool = True,
) -> Window:
    """Output sizes and padding of a convolution or pooling window over the
    spatial sizes ``spatial`` (ONNX's ``auto_pad``/``pads``/``strides``/
    ``dilations`` attributes of ``n``)."""
    r = len(spatial)
    kernel = [int(k) for k in kernel]
    strides = _attr_list(n, "strides", r, 1)
    dil = _attr_list(n, "dilations", r, 1) if has_dilations else [1] * r
    if any(s <= 0 for s in strides) or any(d <= 0 for d in dil):
        raise n.error("strides and dilations must be positive")
    auto_pad = n.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in AUTO_PADS:
        raise n.error(f"auto_pad {auto_pad!r} is not one of {', '.join(AUTO_PADS)}")
    ext = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]  # dilated kernel extent
    begin, end, out = [0] * r, [0] * r, [0] * r
    if auto_pad == "NOTSET":
        pads = ints(n, "pads", [0] * (2 * r))
        if len(pads) != 2 * r:
            raise n.error(f"pads has {len(pads)} entries, expected {2 * r}")
        if any(p < 0 for p in pads):
            raise n.error("negative pads are not supported")
        begin, end = pads[:r], pads[r:]
        for i in range(r):
            span = spatial[i] + begin[i] + end[i] - ext[i]
            if ceil_mode:
                o = -(-span // strides[i]) + 1
                # the last window must start inside the input or its left padding
                if (o - 1) * strides[i] >= spatial[i] + begin[i]:
                    o -= 1
            else:
                o = span // strides[i] + 1
            out[i] = o
    elif auto_pad == "VALID":
        for i in range(r):
            out[i] = (spatial[i] - ext[i]) // strides[i] + 1
    else:
        for i in range(r):
            out[i] = -(-spatial[i] // strides[i])
            total = max(0, (out[i] - 1) * strides[i] + ext[i] - spatial[i])
            small, big = total // 2, total - total // 2
            begin[i], end[i] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    if any(o <= 0 for o in out):
        raise n.error(
            f"the window (kernel {kernel}, dilations {dil}) does not fit the input "
            f"(spatial shape {list(spatial)}, pads {begin + end})"
        )
    return Window(kernel, strides, dil, begin, end, out)


def channel_vector(b: Builder, v: Value, rank: int, dtype: np.dtype, what: str) -> str:
    """``v`` (shape ``(C,)``) as a ``(C, 1, ..., 1)`` tensor of ``dtype`` that
    broadcasts along axis 1 of a rank-``rank`` tensor."""
    c = v.shape[0]
    shape = (c,) + (1,) * (rank - 2)
    if v.is_const:
        arr = np.asarray(v.const).astype(dtype).reshape(shape)
        return b.ref(Value("", shape, np.dtype(dtype), arr))
    if len(shape) == 1:
        src = v
    else:
        zeros = ", ".join("0" for _ in shape[1:])
        sizes = ", ".join(str(s) for s in shape)
        src = b.contraction(f"{{out}}[c, {zeros} : {sizes}] = =({b.ref(v)}[c])", shape, v.dtype)
    if src.dtype != np.dtype(dtype):
        src = b.eltwise(cast(b.ref(src), dtype), shape, dtype)
    return b.ref(src)


def _check_float(n: Node, v: Value) -> None:
    if v.dtype.kind != "f":
        raise n.error(f"element type {v.dtype} is not supported (floating point only)")


def _groups(n: Node, x: Value, w: Value, transpose: bool) -> tuple[int, int, int]:
    """(group, input channels per group, output channels per group)."""
    g = int(n.attr("group", 1))
    if g <= 0:
        raise n.error(f"group must be positive, got {g}")
    c = x.shape[1]
    if c % g:
        raise n.error(f"{c} input channels do not split into {g} groups")
    cig = c // g
    if transpose:
        if w.shape[0] != c:
            raise n.error(f"weights of shape {w.shape} need {w.shape[0]} input channels, got {c}")
        cog = w.shape[1]
    else:
        if w.shape[1] != cig:
            raise n.error(
                f"weights of shape {w.shape} need {w.shape[1] * g} input channels "
                f"in {g} group(s), got {c}"
            )
        if w.shape[0] % g:
            raise n.error(f"{w.shape[0]} output channels do not split into {g} groups")
        cog = w.shape[0] // g
    return g, cig, cog


def _channel_index(g: int, per: int, name: str) -> str:
    """The channel polynomial ``per * g + name`` for a grouped convolution
    (``g`` names the group index; group 1 or one channel per group simplify)."""
    if g == 1:
        return name
    if per == 1:
        return "g"
    return affine((per, "g"), (1, name))


def _check_inputs(n: Node, x: Value, w: Value) -> int:
    if x.rank < 3:
        raise n.error(f"input must be N x C x D1 ... (rank 3 or more), got shape {x.shape}")
    if w.rank != x.rank:
        raise n.error(f"weights of shape {w.shape} do not match an input of rank {x.rank}")
    kshape = ints(n, "kernel_shape", list(w.shape[2:]))
    if list(kshape) != list(w.shape[2:]):
        raise n.error(f"kernel_shape {kshape} differs from the weights' shape {w.shape}")
    return x.rank - 2


def _add_bias(b: Builder, n: Node, out: Value, bias: Value | None) -> Value:
    if bias is None:
        return out
    if bias.shape != (out.shape[1],):
        raise n.error(f"bias of shape {bias.shape} does not match {out.shape[1]} output channels")
    bref = channel_vector(b, bias, out.rank, out.dtype, "bias")
    return b.eltwise(f"{b.ref(out)} + {bref}", out.shape, out.dtype)


def conv_contraction(
    b: Builder, n: Node, xref: str, x: Value, wref: str, w: Value, dtype: np.dtype
) -> Value:
    """The contraction of Conv (``xref``/``wref`` name the operands in Tile)."""
    r = _check_inputs(n, x, w)
    win = window(n, x.shape[2:], w.shape[2:])
    g, cig, cog = _groups(n, x, w, transpose=False)
    oy = [f"y{i}" for i in range(r)]
    ky = [f"k{i}" for i in range(r)]
    ispatial = [
        affine((win.strides[i], oy[i]), (win.dilations[i], ky[i]), const=-win.begin[i])
        for i in range(r)
    ]
    co = _channel_index(g, cog, "co")
    ci = _channel_index(g, cig, "ci")
    wci = "ci" if cig > 1 or g == 1 else "0"
    out_shape = (x.shape[0], w.shape[0], *win.out)
    sizes = ", ".join(str(s) for s in out_shape)
    text = (
        f"{{out}}[n, {co}, {', '.join(oy)} : {sizes}] = "
        f"+({xref}[n, {ci}, {', '.join(ispatial)}] * {wref}[{co}, {wci}, {', '.join(ky)}])"
    )
    if g > 1 and cog > 1:
        text += f", co < {cog}"
    return b.contraction(text, out_shape, dtype)


@op("Conv")
def conv(b: Builder, n: Node) -> list[Value | None]:
    """Conv: 1-D/2-D/3-D (any rank), group (incl. depthwise), strides, dilations, pads, auto_pad, bias.

    Floating-point types only.
    """
    x, w, bias = n.input(0), n.input(1), n.opt(2)
    _check_float(n, x)
    if w.dtype != x.dtype:
        raise n.error(f"input ({x.dtype}) and weights ({w.dtype}) differ in type")
    out = conv_contraction(b, n, b.ref(x), x, b.ref(w), w, x.dtype)
    return [_add_bias(b, n, out, bias)]


def _zero_point(b: Builder, n: Node, i: int, v: Value, per_channel: bool) -> str:
    """``v - zero_point`` as int32 Tile text; the zero point is a scalar, or
    (``per_channel``) one per slice along axis 0 of ``v``."""
    zp = n.opt(i)
    base = f"as_int({b.ref(v)}, 32)"
    if zp is None or (zp.is_const and not np.any(zp.const)):
        return base
    if zp.dtype != v.dtype:
        raise n.error(f"zero point {i} ({zp.dtype}) differs in type from its input ({v.dtype})")
    if zp.size == 1:
        if zp.is_const:
            return f"{base} - {int(np.asarray(zp.const).reshape(()))}"
        return f"{base} - as_int({b.ref(zp)}, 32)"
    if not per_channel or zp.shape != (v.shape[0],):
        raise n.error(f"zero point {i} of shape {zp.shape} is not supported")
    return f"{base} - {channel_vector(b, zp, v.rank + 1, np.dtype(np.int32), 'zero point')}"


@op("ConvInteger")
def conv_integer(b: Builder, n: Node) -> list[Value | None]:
    """ConvInteger: int8/uint8 Conv with zero points (scalar, or per output channel for w), int32 result."""
    x, w = n.input(0), n.input(1)
    for v in (x, w):
        if v.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
            raise n.error(f"element type {v.dtype} is not supported (int8/uint8)")
    xs = _zero_point(b, n, 2, x, False)
    xz = b.eltwise(xs, x.shape, np.int32)
    ws = _zero_point(b, n, 3, w, True)
    wz = b.eltwise(ws, w.shape, np.int32)
    return [conv_contraction(b, n, b.ref(xz), x, b.ref(wz), w, np.dtype(np.int32))]


@op("ConvTranspose")
def conv_transpose(b: Builder, n: Node) -> list[Value | None]:
    """ConvTranspose: any rank, group, strides, dilations, pads, output_padding, output_shape, auto_pad, bias.

    Floating-point types only.
    """
    x, w, bias = n.input(0), n.input(1), n.opt(2)
    _check_float(n, x)
    if w.dtype != x.dtype:
        raise n.error(f"input ({x.dtype}) and weights ({w.dtype}) differ in type")
    r = _check_inputs(n, x, w)
    g, cig, cog = _groups(n, x, w, transpose=True)
    strides = _attr_list(n, "strides", r, 1)
    dil = _attr_list(n, "dilations", r, 1)
    outpad = _attr_list(n, "output_padding", r, 0)
    if any(s <= 0 for s in strides) or any(d <= 0 for d in dil):
        raise n.error("strides and dilations must be positive")
    auto_pad = n.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in AUTO_PADS:
        raise n.error(f"auto_pad {auto_pad!r} is not one of {', '.join(AUTO_PADS)}")
    spatial = x.shape[2:]
    ext = [(k - 1) * d + 1 for k, d in zip(w.shape[2:], dil)]
    full = [strides[i] * (spatial[i] - 1) + outpad[i] + ext[i] for i in range(r)]
    out_shape_attr = ints(n, "output_shape", None) or None
    if out_shape_attr is not None and len(out_shape_attr) == r + 2:
        out_shape_attr = out_shape_attr[2:]
    if out_shape_attr is not None and len(out_shape_attr) != r:
        raise n.error(f"output_shape {out_shape_attr} does not have {r} spatial sizes")
    pads = ints(n, "pads", None)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") or (out_shape_attr is not None and not pads):
        out = out_shape_attr or [spatial[i] * strides[i] for i in range(r)]
        begin = []
        for i in range(r):
            total = full[i] - out[i]
            small, big = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else big)
    else:
        if auto_pad == "VALID" or not pads:
            pads = [0] * (2 * r)
        if len(pads) != 2 * r:
            raise n.error(f"pads has {len(pads)} entries, expected {2 * r}")
        begin = pads[:r]
        out = out_shape_attr or [full[i] - pads[i] - pads[r + i] for i in range(r)]
    if any(o <= 0 for o in out):
        raise n.error(f"the output would have spatial shape {out}")
    xs = [f"x{i}" for i in range(r)]
    ks = [f"k{i}" for i in range(r)]
    ospatial = [affine((strides[i], xs[i]), (dil[i], ks[i]), const=-begin[i]) for i in range(r)]
    co = _channel_index(g, cog, "co")
    ci = _channel_index(g, cig, "ci")
    wco = "co" if cog > 1 or g == 1 else "0"
    out_shape = (x.shape[0], g * cog, *out)
    sizes = ", ".join(str(s) for s in out_shape)
    text = (
        f"{{out}}[n, {co}, {', '.join(ospatial)} : {sizes}] = "
        f"+({b.ref(x)}[n, {ci}, {', '.join(xs)}] * {b.ref(w)}[{ci}, {wco}, {', '.join(ks)}])"
    )
    if g > 1 and cig > 1:
        text += f", ci < {cig}"
    y = b.contraction(text, out_shape, x.dtype)
    return [_add_bias(b, n, y, bias)]


@op("BatchNormalization")
def batch_normalization(b: Builder, n: Node) -> list[Value | None]:
    """BatchNormalization: inference mode (epsilon; per-channel scale, bias, mean, var).

    ``training_mode=1`` (and the running-statistics outputs) is not supported,
    nor the per-activation form of opset 6 and older (``spatial=0``).
    """
    x = n.input(0)
    _check_float(n, x)
    if int(n.attr("training_mode", 0)) or n.n_outputs > 1:
        raise n.error("training mode is not supported (inference only)")
    if not int(n.attr("spatial", 1)):
        raise n.error("spatial=0 (per-activation statistics) is not supported")
    if x.rank < 2:
        raise n.error(f"input must be N x C x ... (rank 2 or more), got shape {x.shape}")
    c = x.shape[1]
    params = []
    for i, what in enumerate(("scale", "B", "mean", "var"), start=1):
        v = n.input(i)
        if v.shape != (c,):
            raise n.error(f"{what} of shape {v.shape} does not match {c} channels")
        if v.dtype.kind != "f":
            raise n.error(f"{what} has element type {v.dtype} (floating point expected)")
        params.append(channel_vector(b, v, x.rank, x.dtype, what))
    scale, bias, mean, var = params
    eps = float(n.attr("epsilon", 1e-5))
    shape = (c,) + (1,) * (x.rank - 2)
    # per channel: y = x * a + (B - mean * a) with a = scale / sqrt(var + eps)
    a = b.eltwise(f"{scale} / sqrt({var} + {literal(eps, x.dtype)})", shape, x.dtype)
    sh = b.eltwise(f"{bias} - {mean} * {b.ref(a)}", shape, x.dtype)
    return [b.eltwise(f"{b.ref(x)} * {b.ref(a)} + {b.ref(sh)}", x.shape, x.dtype)]


@op("_ConvBN")
def conv_bn(b: Builder, n: Node) -> list[Value | None]:
    """_ConvBN: a Conv followed by a BatchNormalization (internal, from
    :func:`~stripeml.onnx.layout.fuse_conv_bn`) when the channels-last form does not apply."""
    attrs = {k: v for k, v in n.attrs.items() if k != "_bn_epsilon"}
    ins = list(n.inputs[:3])
    while ins and ins[-1] is None:
        ins.pop()
    y = conv(b, Node("Conv", n.name, tuple(ins), attrs, n.opset, 1, n.domain))[0]
    bn_attrs = {"epsilon": n.attrs.get("_bn_epsilon", 1e-5)}
    bn = Node("BatchNormalization", n.name, (y, *n.inputs[3:7]), bn_attrs, n.opset, 1, n.domain)
    return batch_normalization(b, bn)


@op("Col2Im", static=(1, 2))
def col2im(b: Builder, n: Node) -> list[Value | None]:
    """Col2Im: sliding blocks summed back into an image (any rank), one contraction.

    The output index of each tap is ``stride * block + dilation * k - pad``: taps
    that land in the padding fall outside the image and are skipped."""
    x = n.input(0)
    given, block = n.const_input(1, "image_shape"), n.const_input(2, "block_shape")
    if given is None or block is None:
        raise n.error("image_shape and block_shape are required")
    image = [int(v) for v in np.asarray(given).reshape(-1)]
    kernel = [int(v) for v in np.asarray(block).reshape(-1)]
    r = len(image)
    if len(kernel) != r or r == 0:
        raise n.error(f"image_shape {image} and block_shape {kernel} must have one size per axis")
    if x.rank != 3:
        raise n.error(f"the input must be [N, C * prod(block_shape), L], got {list(x.shape)}")
    strides = _attr_list(n, "strides", r, 1)
    dil = _attr_list(n, "dilations", r, 1)
    pads = ints(n, "pads", None) or [0] * (2 * r)
    if len(pads) != 2 * r:
        raise n.error(f"pads {pads} must have {2 * r} values")
    if any(v <= 0 for v in (*image, *kernel, *strides, *dil)):
        raise n.error("image_shape, block_shape, strides and dilations must be positive")
    kprod = int(np.prod(kernel))
    if x.shape[1] % kprod:
        raise n.error(
            f"input channels {x.shape[1]} are not a multiple of prod(block_shape) {kprod}"
        )
    blocks = [
        (image[i] + pads[i] + pads[i + r] - dil[i] * (kernel[i] - 1) - 1) // strides[i] + 1
        for i in range(r)
    ]
    if any(v < 1 for v in blocks) or int(np.prod(blocks)) != x.shape[2]:
        raise n.error(
            f"{x.shape[2]} blocks given; the image, block shape, pads, strides and dilations "
            f"make {' x '.join(map(str, blocks))}"
        )
    ks, bs = [f"k{i}" for i in range(r)], [f"b{i}" for i in range(r)]
    kstride = [int(np.prod(kernel[i + 1 :])) for i in range(r)]
    bstride = [int(np.prod(blocks[i + 1 :])) for i in range(r)]
    chan = " + ".join([f"{kprod} * c", *(f"{s} * {k}" for s, k in zip(kstride, ks))])
    where = " + ".join(f"{s} * {bb}" for s, bb in zip(bstride, bs))
    out = [f"{strides[i]} * {bs[i]} + {dil[i]} * {ks[i]} - {pads[i]}" for i in range(r)]
    shape = (x.shape[0], x.shape[1] // kprod, *image)
    bounds = ", ".join(
        [*(f"{k} < {v}" for k, v in zip(ks, kernel)), *(f"{bb} < {v}" for bb, v in zip(bs, blocks))]
    )
    text = (
        f"{{out}}[n, c, {', '.join(out)} : {', '.join(map(str, shape))}] = "
        f"+({b.ref(x)}[n, {chan}, {where}]), {bounds}"
    )
    return [b.contraction(text, shape, x.dtype)]
