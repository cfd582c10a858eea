"""The ATen operators training graphs add, written into the same Tile program.

AOTAutograd's forward and backward graphs (core ATen decompositions) are mostly
the operators of ``lower.py``: the decompositions turn the backward of softmax,
layer norm, batch norm, ReLU, linear ... into elementwise work, reductions and
matmuls.  What is left is here:

* training-mode forward operators: ``_native_batch_norm_legit_functional``
  (batch statistics, the new running statistics as outputs) and
  ``_embedding_bag`` (sum and mean bags);
* backward operators with no decomposition: ``convolution_backward`` (the
  input's gradient is the op library's ``ConvTranspose``, the weight's one
  contraction), ``max_pool2d_with_indices_backward`` and ``avg_pool2d_backward``
  (one contraction each, the window scattered back), ``embedding_dense_backward``
  and ``_embedding_bag_backward`` (``ScatterND`` with ``add``), and
  ``_scaled_dot_product_flash_attention_for_cpu_backward`` (matmuls and
  elementwise work, from the log-sum-exp the forward saved).

A use a rule does not handle raises :class:`~.lower.Unsupported`, so the node
runs in PyTorch and the rest of the graph still compiles.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..onnx.builder import Value
from ..onnx.layout_values import NHWC, nhwc_input, with_layout
from ..onnx.ops.conv import Window, affine
from ..onnx.ops.pool import divisor
from .lower import Lowering, Meta, Unsupported, _arg, rule
from .lower_layout import max_pool_backward

F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)


def _per_axis(v: Any, n: int, default: int) -> list[int]:
    if v is None or (isinstance(v, (list, tuple)) and not v):
        return [default] * n
    v = [int(a) for a in v] if isinstance(v, (list, tuple)) else [int(v)]
    return v * n if len(v) == 1 else v


def _channel_bcast(L: Lowering, v: Value, rank: int) -> Value:
    """A per-channel vector ``(C,)`` as ``(C, 1, ...)``: broadcasts along axis 1."""
    return L.one("Reshape", v, L.ints([v.shape[0]] + [1] * (rank - 2)))


# -- convolution -------------------------------------------------------------
@rule("convolution_backward")
def _convolution_backward(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    go, x, w, _bias_sizes, stride, padding, dilation, transposed, outpad, groups, mask = args[:11]
    if transposed:
        raise Unsupported("convolution_backward", "transposed convolution")
    r = x.rank - 2
    s, p, d = _per_axis(stride, r, 1), _per_axis(padding, r, 0), _per_axis(dilation, r, 1)
    g = int(groups)
    gi = gw = gb = None
    stride1 = r == 2 and s == [1, 1] and _flip_pads(w, p, d) is not None
    if mask[0] and stride1 and mask[1] and g == 1 and go.layout is None and _nhwc_readable(go):
        # both gradients read the output's channels-last: transposed once, here
        go = with_layout(nhwc_input(L.b, go), NHWC)
    if mask[0] and stride1:
        gi = _conv_input_grad_stride1(L, go, w, p, d, g)
    elif mask[0]:
        # the input's gradient: the transposed convolution of the output's,
        # sized back to the input (a strided conv's last rows may be unread)
        kernel = list(w.shape[2:])
        end, extra_out = [], []
        for i in range(r):
            made = s[i] * (go.shape[2 + i] - 1) + (kernel[i] - 1) * d[i] + 1 - 2 * p[i]
            extra = x.shape[2 + i] - made
            extra_out.append(max(extra, 0))
            end.append(p[i] - min(extra, 0))
        gi = L.one(
            "ConvTranspose", go, w, strides=s, pads=p + end, dilations=d, group=g,
            output_padding=extra_out, kernel_shape=kernel,
        )  # fmt: skip
    if mask[1] and r == 2 and g == 1 and _nhwc_readable(x) and _nhwc_readable(go):
        gw = _conv_weight_grad_nhwc(L, go, x, w, s, p, d)
    elif mask[1]:
        gw = _conv_weight_grad(L, go, x, w, s, p, d, g)
    if mask[2]:
        gb = L.one("ReduceSum", go, L.ints([0, *range(2, go.rank)]), keepdims=0)
    return (gi, gw, gb)


def _nhwc_readable(v: Value) -> bool:
    """Whether ``v`` is a computed 4-D tensor stored NCHW or NHWC (so it can be
    read channels-last, with at most one transposing copy)."""
    return v.const is None and v.rank == 4 and v.layout in (None, (0, 2, 3, 1))


def _flip_pads(w: Value, p: list[int], d: list[int]) -> list[int] | None:
    """The padding of a stride-1 convolution's input gradient written as a
    convolution (``d * (k - 1) - p`` each side), or ``None`` where it is negative."""
    pads = [d[i] * (w.shape[2 + i] - 1) - p[i] for i in range(len(p))]
    return pads if all(q >= 0 for q in pads) else None


def _conv_input_grad_stride1(
    L: Lowering, go: Value, w: Value, p: list[int], d: list[int], g: int
) -> Value:
    """A stride-1 convolution's input gradient as a convolution of the output's
    gradient with the weights flipped and their channels swapped (one copy of
    the weights), so it runs channels-last like the forward convolution."""
    b = L.b
    w = b.logical(w)  # (the contractions below index the logical layout)
    co, cig, kh, kw = w.shape
    if g == 1:
        wf = b.contraction(
            f"{{out}}[ci, co, ky, kx : {cig}, {co}, {kh}, {kw}] = "
            f"=({b.ref(w)}[co, ci, {kh - 1} - ky, {kw - 1} - kx])",
            (cig, co, kh, kw),
            w.dtype,
        )
    else:  # grouped: flipped within each group, channels swapped per group
        cog = co // g
        wf = b.contraction(
            f"{{out}}[{cig} * gr + ci, co, ky, kx : {g * cig}, {cog}, {kh}, {kw}] = "
            f"=({b.ref(w)}[{cog} * gr + co, ci, {kh - 1} - ky, {kw - 1} - kx]), "
            f"ci < {cig}, co < {cog}",
            (g * cig, cog, kh, kw),
            w.dtype,
        )
    pads = _flip_pads(w, p, d)
    assert pads is not None
    return L.one("Conv", go, wf, pads=pads * 2, dilations=d, group=g, kernel_shape=[kh, kw])


def _conv_weight_grad_nhwc(
    L: Lowering, go: Value, x: Value, w: Value, s: list[int], p: list[int], d: list[int]
) -> Value:
    """``dW`` of a 2-D convolution (one group) read channels-last: one contraction
    into ``(KH, KW, CI, CO)`` (output channels contiguous: register tiles over
    the input channels), then one transposing copy into PyTorch's layout."""
    b = L.b
    co, ci, kh, kw = w.shape
    xr = b.ref(nhwc_input(b, x))
    gr = b.ref(nhwc_input(b, go))
    ys = affine((s[0], "y"), (d[0], "ky"), const=-p[0])
    xs = affine((s[1], "x"), (d[1], "kx"), const=-p[1])
    t = b.contraction(
        f"{{out}}[ky, kx, ci, co : {kh}, {kw}, {ci}, {co}] = "
        f"+({xr}[n, {ys}, {xs}, ci] * {gr}[n, y, x, co]), ky < {kh}, kx < {kw}",
        (kh, kw, ci, co),
        go.dtype,
    )
    return b.contraction(
        f"{{out}}[co, ci, ky, kx : {co}, {ci}, {kh}, {kw}] = =({b.ref(t)}[ky, kx, ci, co])",
        w.shape,
        go.dtype,
    )


def _conv_weight_grad(
    L: Lowering, go: Value, x: Value, w: Value, s: list[int], p: list[int], d: list[int], g: int
) -> Value:
    """``dW[co, ci, k] = sum over n, y of X[n, ci, s*y + d*k - p] * dY[n, co, y]``
    (per group), one contraction; taps in the padding fall outside X and are skipped."""
    b = L.b
    x, go = b.logical(x), b.logical(go)  # (indexed in the logical layout below)
    r = x.rank - 2
    cog, cig = w.shape[0] // g, w.shape[1]

    def chan(per: int, name: str) -> str:
        if g == 1:
            return name
        return "g" if per == 1 else affine((per, "g"), (1, name))

    ys, ks = [f"y{i}" for i in range(r)], [f"k{i}" for i in range(r)]
    spatial = [affine((s[i], ys[i]), (d[i], ks[i]), const=-p[i]) for i in range(r)]
    co, ci = chan(cog, "co"), chan(cig, "ci")
    wci = "ci" if g == 1 or cig > 1 else "0"
    sizes = ", ".join(str(v) for v in w.shape)
    text = (
        f"{{out}}[{co}, {wci}, {', '.join(ks)} : {sizes}] = "
        f"+({b.ref(x)}[n, {ci}, {', '.join(spatial)}] * {b.ref(go)}[n, {co}, {', '.join(ys)}])"
    )
    bounds = [f"k{i} < {w.shape[2 + i]}" for i in range(r)]
    if g > 1 and cog > 1:
        bounds.append(f"co < {cog}")
    if g > 1 and cig > 1:
        bounds.append(f"ci < {cig}")
    return b.contraction(text + "".join(f", {c}" for c in bounds), w.shape, go.dtype)


# -- pooling -----------------------------------------------------------------
def _scatter_windows(
    L: Lowering, shape: tuple[int, ...], win: Window, operand: str, dtype: np.dtype
) -> Value:
    """``dX[n, c, s*y + d*k - p] = +(operand)`` over the windows (``operand`` in
    ``n, c, y*, k*``): each window's gradient summed back onto the taps it read."""
    r = len(win.kernel)
    ys, ks = [f"y{i}" for i in range(r)], [f"k{i}" for i in range(r)]
    pos = [affine((win.strides[i], ys[i]), (win.dilations[i], ks[i]), const=-win.begin[i])
           for i in range(r)]  # fmt: skip
    sizes = ", ".join(str(v) for v in shape)
    bounds = "".join(f", {k} < {n}" for k, n in zip(ks, win.kernel))
    text = f"{{out}}[n, c, {', '.join(pos)} : {sizes}] = +({operand}){bounds}"
    return L.b.contraction(text, shape, dtype)


def _pool_window(args: list[Any], kw: dict[str, Any], x: Value, go: Value) -> Window:
    r = x.rank - 2
    kernel = _per_axis(args[2], r, 1)
    stride = _per_axis(_arg(args, kw, 3, "stride"), r, 0)
    stride = kernel if not any(stride) else stride
    padding = _per_axis(_arg(args, kw, 4, "padding", 0), r, 0)
    return Window(kernel, stride, [1] * r, padding, padding, list(go.shape[2:]))


@rule("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward")
def _max_pool_backward(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    """Each window's gradient goes to the tap its saved index names (PyTorch's
    index: the flat position in the input's spatial plane)."""
    go, x = args[0], args[1]
    win = _pool_window(args, kw, x, go)
    win.dilations = _per_axis(_arg(args, kw, 5, "dilation", 1), x.rank - 2, 1)
    indices = _arg(args, kw, 7, "indices")
    if x.rank == 4:  # indices saved channels-last: the scatter too (lower_layout.py)
        done = max_pool_backward(L.b, go, indices, x.shape, win)
        if done is not None:
            return done
    spatial = x.shape[2:]
    flat = np.arange(int(np.prod(spatial)), dtype=np.int64).reshape(spatial)
    b = L.b
    r = len(spatial)
    ys = ", ".join(f"y{i}" for i in range(r))
    pos = ", ".join(
        affine((win.strides[i], f"y{i}"), (win.dilations[i], f"k{i}"), const=-win.begin[i])
        for i in range(r)
    )
    indices, go = b.logical(indices), b.logical(go)  # (indexed in the logical layout)
    operand = (
        f"{b.ref(indices)}[n, c, {ys}] == {b.ref(L.const(flat))}[{pos}] ? ({b.ref(go)}[n, c, {ys}])"
    )
    return _scatter_windows(L, x.shape, win, operand, go.dtype)


@rule("avg_pool2d_backward", "avg_pool3d_backward")
def _avg_pool_backward(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    go, x = args[0], args[1]
    win = _pool_window(args, kw, x, go)
    override = _arg(args, kw, 7, "divisor_override")
    if override is not None:
        div: Any = float(override)
    else:
        include = bool(_arg(args, kw, 6, "count_include_pad", True))
        div = divisor(win, x.shape[2:], include).astype(go.dtype)
    scaled = L.b.logical(L.one("Div", go, L.const(div, go.dtype)))
    r = x.rank - 2
    ys = ", ".join(f"y{i}" for i in range(r))
    return _scatter_windows(L, x.shape, win, f"{L.b.ref(scaled)}[n, c, {ys}]", go.dtype)


# -- batch norm in training mode -------------------------------------------------
@rule("_native_batch_norm_legit_functional", "_native_batch_norm_legit")
def _batch_norm_train(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    """(y, saved mean, saved 1/std[, new running mean, new running var]): the
    batch's statistics normalise; the running ones move by ``momentum`` (the
    variance unbiased, as PyTorch keeps it)."""
    x, w, bias = args[0], args[1], args[2]
    no_stats = isinstance(args[3], bool)  # the .no_stats overload: no running statistics
    rm, rv = (None, None) if no_stats else (args[3], args[4])
    training, momentum, eps = args[3:6] if no_stats else args[5:8]
    dtype = x.dtype
    if not training:
        if rm is None or rv is None:
            raise Unsupported("_native_batch_norm_legit", "evaluation without statistics")
        c = x.shape[1]
        w = w if w is not None else L.const(np.ones(c, dtype))
        bias = bias if bias is not None else L.const(np.zeros(c, dtype))
        y = L.one("BatchNormalization", x, w, bias, rm, rv, epsilon=float(eps))
        empty = L.const(np.zeros(0, dtype))
        return (y, empty, empty, rm, rv)
    axes = L.ints([0, *range(2, x.rank)])
    mean = L.one("ReduceMean", x, axes, keepdims=0)
    xc = L.one("Sub", x, _channel_bcast(L, mean, x.rank))
    var = L.one("ReduceMean", L.one("Mul", xc, xc), axes, keepdims=0)
    rstd = L.one("Reciprocal", L.one("Sqrt", L.one("Add", var, L.const(eps, dtype))))
    y = L.one("Mul", xc, _channel_bcast(L, rstd, x.rank))
    if w is not None:
        y = L.one("Mul", y, _channel_bcast(L, w, x.rank))
    if bias is not None:
        y = L.one("Add", y, _channel_bcast(L, bias, x.rank))
    if rm is None or rv is None:
        return (y, mean, rstd)
    count = x.size // x.shape[1]
    m = float(momentum)
    keep = L.const(1.0 - m, dtype)
    new_rm = L.one("Add", L.one("Mul", rm, keep), L.one("Mul", mean, L.const(m, dtype)))
    unbiased = m * count / max(count - 1, 1)
    new_rv = L.one("Add", L.one("Mul", rv, keep), L.one("Mul", var, L.const(unbiased, dtype)))
    return (y, mean, rstd, new_rm, new_rv)


# -- embeddings ----------------------------------------------------------------
def _scatter_rows(L: Lowering, rows: Value, indices: Value, num: int, pad: int) -> Value:
    """``out[indices[i]] += rows[i]`` into ``num`` zero rows (index ``pad``: skipped)."""
    d = rows.shape[-1]
    idx = L.one("Reshape", indices, L.ints([-1, 1]))
    rows = L.one("Reshape", rows, L.ints([-1, d]))
    if pad >= 0:
        keep = L.one("Not", L.one("Equal", idx, L.const(pad, indices.dtype)))
        rows = L.one("Where", keep, rows, L.const(0.0, rows.dtype))
    zeros = L.const(np.zeros((num, d), rows.dtype))
    return L.one("ScatterND", zeros, L.cast(idx, I64), rows, reduction="add")


@rule("embedding_dense_backward")
def _embedding_backward(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    go, indices, num, pad, by_freq = args[:5]
    if by_freq:
        raise Unsupported("embedding_dense_backward", "scale_grad_by_freq")
    return _scatter_rows(L, go, indices, int(num), int(pad))


def _bags(L: Lowering, indices: Value, offsets: Value, pad: int) -> tuple[Value, Value]:
    """(which bag each index is in, ``[N]`` int64; the membership matrix ``[B, N]``
    of 0/1 floats, an index equal to ``pad`` in no bag)."""
    n, nb = indices.shape[0], offsets.shape[0]
    pos = L.const(np.arange(n, dtype=np.int64).reshape(n, 1))
    starts = L.one("Reshape", L.cast(offsets, I64), L.ints([1, nb]))
    started = L.cast(L.one("LessOrEqual", starts, pos), I64)  # [N, B]
    bag = L.one("Sub", L.one("ReduceSum", started, L.ints([1]), keepdims=0), L.const(1, I64))
    which = L.const(np.arange(nb, dtype=np.int64).reshape(nb, 1))
    member = L.one("Equal", L.one("Reshape", bag, L.ints([1, n])), which)  # [B, N]
    if pad >= 0:
        real = L.one("Not", L.one("Equal", indices, L.const(pad, indices.dtype)))
        member = L.one("And", member, L.one("Reshape", real, L.ints([1, n])))
    return bag, L.cast(member, F32)


def _bag_mode(name: str, args: list[Any], kw: dict[str, Any], mode_at: int) -> int:
    mode = int(_arg(args, kw, mode_at, "mode", 0))
    if mode not in (0, 1):
        raise Unsupported(name, "mode='max'")
    return mode


@rule("_embedding_bag", "_embedding_bag_forward_only")
def _embedding_bag(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    """``(output, offset2bag, bag_size, max_indices)`` as PyTorch's CPU kernel
    gives them: sum bags leave offset2bag empty and the sizes zero; mean bags
    give both (``max_indices`` repeats the sizes)."""
    name = "_embedding_bag"
    weight, indices, offsets = args[0], args[1], args[2]
    mode = _bag_mode(name, args, kw, 4)
    psw = _arg(args, kw, 6, "per_sample_weights")
    if _arg(args, kw, 7, "include_last_offset", False):
        raise Unsupported(name, "include_last_offset")
    if indices.rank != 1:
        raise Unsupported(name, "2-D indices")
    pad = int(_arg(args, kw, 8, "padding_idx", -1) or -1)
    bag, member = _bags(L, indices, offsets, pad)
    dtype = weight.dtype
    rows = L.one("Gather", weight, indices, axis=0)
    scaled = member
    if psw is not None:
        scaled = L.one("Mul", member, L.one("Reshape", psw, L.ints([1, -1])))
    out = L.one("MatMul", L.cast(scaled, dtype), rows)
    nb = offsets.shape[0]
    if mode == 0:
        zeros = L.const(np.zeros(nb, np.int64))
        return (out, L.const(np.zeros(0, np.int64)), zeros, zeros)
    count = L.one("ReduceSum", member, L.ints([1]), keepdims=1)
    out = L.one("Div", out, L.cast(L.one("Max", count, L.const(1.0, F32)), dtype))
    size = L.cast(L.one("Reshape", count, L.ints([nb])), I64)
    return (out, bag, size, size)


@rule("_embedding_bag_backward", "_embedding_bag_dense_backward")
def _embedding_bag_backward(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    name = "_embedding_bag_backward"
    grad, indices, offsets = args[0], args[1], args[2]
    dense = kw["__op__"] == "_embedding_bag_dense_backward"
    # dense: (grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
    #         scale_grad_by_freq, mode, per_sample_weights, padding_idx)
    at = 5 if dense else 6
    if dense:
        raise Unsupported(name, "the dense form (its offsets are not given)")
    num, by_freq = int(args[at]), bool(args[at + 1])
    mode = _bag_mode(name, args, kw, at + 2)
    if _arg(args, kw, at + 3, "sparse", False) or by_freq:
        raise Unsupported(name, "sparse or scale_grad_by_freq")
    psw = _arg(args, kw, at + 4, "per_sample_weights")
    pad = int(_arg(args, kw, at + 5, "padding_idx", -1) or -1)
    if indices.rank != 1:
        raise Unsupported(name, "2-D indices")
    bag, member = _bags(L, indices, offsets, pad)
    rows = L.one("Gather", grad, bag, axis=0)  # [N, D]: each index's bag's gradient
    if mode == 1:
        count = L.one("ReduceSum", member, L.ints([1]), keepdims=0)
        per = L.one("Gather", L.one("Max", count, L.const(1.0, F32)), bag, axis=0)
        rows = L.one("Div", rows, L.cast(L.one("Unsqueeze", per, L.ints([1])), rows.dtype))
    if psw is not None:
        rows = L.one("Mul", rows, L.one("Unsqueeze", psw, L.ints([1])))
    return _scatter_rows(L, rows, indices, num, pad)


# -- attention -------------------------------------------------------------------
@rule("_scaled_dot_product_flash_attention_for_cpu_backward")
def _attention_backward(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    """With P = exp(S - logsumexp), S = scale * Q K^T (+ mask): dV = P^T dO,
    dS = P * (dO V^T - rowsum(dO * O)), dQ = scale * dS K, dK = scale * dS^T Q."""
    name = "_scaled_dot_product_flash_attention_for_cpu_backward"
    go, q, k, v, out, lse, dropout, causal = args[:8]
    mask, scale = kw.get("attn_mask"), kw.get("scale")
    if dropout:
        raise Unsupported(name, "dropout")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise Unsupported(name, "grouped-query attention")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    dtype = q.dtype
    r = q.rank
    swap = list(range(r - 2)) + [r - 1, r - 2]
    s = L.one("Mul", L.one("MatMul", q, L.one("Transpose", k, perm=swap)), L.const(scale, dtype))
    nl, ns = q.shape[-2], k.shape[-2]
    if causal:
        keep = np.tril(np.ones((nl, ns), dtype=bool))
        s = L.one("Add", s, L.const(np.where(keep, 0.0, -np.inf).astype(dtype)))
    if mask is not None:
        if mask.dtype == np.bool_:
            s = L.one("Where", mask, s, L.const(-np.inf, dtype))
        else:
            s = L.one("Add", s, L.cast(mask, dtype))
    p = L.one("Exp", L.one("Sub", s, L.one("Unsqueeze", lse, L.ints([-1]))))
    dv = L.one("MatMul", L.one("Transpose", p, perm=swap), go)
    dp = L.one("MatMul", go, L.one("Transpose", v, perm=swap))
    rowsum = L.one("ReduceSum", L.one("Mul", go, out), L.ints([-1]), keepdims=1)
    ds = L.one("Mul", p, L.one("Sub", dp, rowsum))
    dq = L.one("Mul", L.one("MatMul", ds, k), L.const(scale, dtype))
    dk = L.one("Mul", L.one("MatMul", L.one("Transpose", ds, perm=swap), q), L.const(scale, dtype))
    return (dq, dk, dv)


def flash_attention_decomposition(
    q: Any, k: Any, v: Any, dropout_p: float = 0.0, is_causal: bool = False, *,
    attn_mask: Any = None, scale: Any = None,
) -> Any:  # fmt: skip
    """``_scaled_dot_product_flash_attention_for_cpu`` as matmuls and softmax,
    returning the true log-sum-exp.  PyTorch's core decomposition returns the
    attention weights in its place, which its backward operator then reads as
    the log-sum-exp: wrong gradients (torch 2.13).  Dropout is left alone."""
    import torch

    if dropout_p:
        return NotImplemented
    nl, ns = q.size(-2), k.size(-2)
    sc = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    a = (q @ k.transpose(-2, -1)) * sc
    if is_causal:
        keep = torch.ones(nl, ns, dtype=torch.bool, device=q.device).tril()
        a = a.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            a = a.masked_fill(~attn_mask, float("-inf"))
        else:
            a = a + attn_mask
    return torch.softmax(a, -1) @ v, torch.logsumexp(a, -1)
