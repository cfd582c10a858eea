"""Quantised blocks' other nodes on their bytes: ``_QAdd`` (a residual sum of two
``DequantizeLinear`` results) and ``_QGemm`` (a ``Gemm`` of a ``DequantizeLinear``'d
input and constant weights), the internal nodes :func:`~stripeml.onnx.qdq.fuse_qdq`
writes, with the ``[Relu ->] QuantizeLinear`` after them folded in; the convolution
and the requantisation they share are :mod:`.integer`'s."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import broadcast_shape, literal
from .integer import (
    F32,
    I8,
    U8,
    _dequantized_const,
    _per_channel,
    _scalar,
    as_float_of,
    fused_quantize,
    matmul_integer_dot4,
    requantized,
    requantized_acc,
)
from .quantize import dequantize_linear, quantize_tail, rank0


@op("_QAdd")
def qadd(b: Builder, n: Node) -> list[Value | None]:
    """_QAdd: ``Add`` of two DequantizeLinear'd tensors (internal, from
    :func:`~stripeml.onnx.qdq.fuse_qdq`), with the Relu and QuantizeLinear folded in."""
    return [qadd_value(b, n)]


def qadd_value(b: Builder, n: Node) -> Value:
    """``_QAdd(a, sa, za, c, sc, zc[, sy, zy])`` as one elementwise expression over
    the quantised inputs (NumPy broadcasting; any layout, both the same): with a
    folded ``QuantizeLinear``, ``saturate(round(a * sa/sy + c * sc/sy + k) + zy)``
    (``k`` holding the inputs' zero points), ``QLinearAdd``'s arithmetic, where the
    model's nodes write 4-byte floats between them; else ``(a - za) * sa + (c - zc)
    * sc``, the model's numbers exactly.  Scales or zero points that are not
    constants take the nodes as the model writes them."""
    a, sa_v, za_v, c, sc_v, zc_v = (n.opt(i) for i in range(6))
    assert a is not None and c is not None
    sa, za, sc, zc = (_scalar(v) for v in (sa_v, za_v, sc_v, zc_v))
    shape = broadcast_shape(n, a.shape, c.shape)
    plain = sa is None or sc is None or za is None or zc is None
    if plain or any(v is None or v.dtype != F32 for v in (sa_v, sc_v)):
        return quantize_tail(b, n, _dequantized_sum(b, n, shape), 6)
    if a.dtype not in (U8, I8) or c.dtype not in (U8, I8):
        return quantize_tail(b, n, _dequantized_sum(b, n, shape), 6)
    assert sa is not None and sc is not None and za is not None and zc is not None
    q = fused_quantize(n, 6)
    if q is None:
        fa, fc = f"as_float({b.ref(a)}, 32)", f"as_float({b.ref(c)}, 32)"
        f32 = [b.ref(Value("", (), F32, np.float32(v))) for v in (sa, sc)]
        za_f, zc_f = literal(float(za), F32), literal(float(zc), F32)
        expr = f"({fa} - {za_f}) * {f32[0]} + ({fc} - {zc_f}) * {f32[1]}"
        return quantize_tail(b, n, b.eltwise(expr, shape, F32), 6)
    sy, zy, dtype, lo = q
    sa64, sc64 = float(np.float32(sa)), float(np.float32(sc))
    k = [np.float32(v) for v in (sa64 / sy, sc64 / sy, -(za * sa64 + zc * sc64) / sy)]
    if not all(np.isfinite(v) for v in k):
        return quantize_tail(b, n, _dequantized_sum(b, n, shape), 6)
    ka, kc, k0 = (b.ref(Value("", (), F32, v)) for v in k)
    expr = f"{as_float_of(b, a)} * {ka} + ({as_float_of(b, c)} * {kc} + {k0})"
    return requantized(b, expr, shape, dtype, lo, zy)


def _dequantized_sum(b: Builder, n: Node, shape: tuple[int, ...]) -> Value:
    """``DequantizeLinear(a) + DequantizeLinear(c)`` as the model writes them."""
    parts = []
    for i in (0, 3):
        ins = (n.inputs[i], *(rank0(b, v) for v in n.inputs[i + 1 : i + 3]))
        dq = replace(n, op_type="DequantizeLinear", inputs=ins, attrs={}, n_outputs=1)
        v = dequantize_linear(b, dq)[0]
        assert v is not None
        parts.append(v)
    x, y = parts
    return b.eltwise(f"{b.ref(x)} + {b.ref(y)}", shape, np.result_type(x.dtype, y.dtype))


@op("_QGemm")
def qgemm(b: Builder, n: Node) -> list[Value | None]:
    """_QGemm: Gemm of DequantizeLinear'd input and constant weights (internal, from
    :func:`~stripeml.onnx.qdq.fuse_qdq`), with the Relu and QuantizeLinear folded in."""
    out = _qgemm_dot4(b, n)
    if out is not None:
        return [out]
    from .linalg import gemm

    a, sa, za, wq, sw, zw, c = (n.opt(i) for i in range(7))
    assert a is not None and wq is not None and sa is not None and sw is not None
    dq = replace(n, op_type="DequantizeLinear", attrs={}, n_outputs=1)
    x = dequantize_linear(b, replace(dq, inputs=(a, sa, za)))[0]
    axis = int(n.attr("_w_axis", 1))
    w = _dequantized_const(wq, sw, zw, axis)
    if w is None:
        w = dequantize_linear(b, replace(dq, inputs=(wq, sw, zw), attrs={"axis": axis}))[0]
    ins = (x, w) if c is None else (x, w, c)
    y = gemm(b, replace(n, op_type="Gemm", inputs=ins, attrs={"transB": n.attr("transB", 0)}))[0]
    assert y is not None
    return [quantize_tail(b, n, y, 7)]


def _qgemm_dot4(b: Builder, n: Node) -> Value | None:
    """``_QGemm`` as :func:`matmul_integer_dot4` (exact int32 sums over the bytes of
    ``a`` and the weights packed when compiling, a quarter of their float bytes)
    scaled per output column, plus the bias, requantised when a ``QuantizeLinear``
    is folded in; ``None`` when the integer form does not apply."""
    a, sa_v, za_v, wq_v, sw_v, zw_v, c_v = (n.opt(i) for i in range(7))
    if a is None or wq_v is None or wq_v.const is None or a.rank != 2 or wq_v.rank != 2:
        return None
    w = np.asarray(wq_v.const)
    trans = bool(n.attr("transB", 0))
    cols = w.shape[0] if trans else w.shape[1]
    sa = _scalar(sa_v)
    axis = int(n.attr("_w_axis", 1)) % 2
    per_col = sw_v is not None and (sw_v.size == 1 or axis == (0 if trans else 1))
    sw = _per_channel(sw_v, cols, 1.0) if per_col else None
    zw = _per_channel(zw_v, cols, 0.0)
    if sa is None or sw is None or zw is None or sa_v is None or sw_v is None:
        return None
    if sa_v.dtype != F32 or sw_v.dtype != F32 or np.unique(zw).size != 1:
        return None
    bias = np.zeros(cols)
    if c_v is not None:
        if c_v.const is None or c_v.size not in (1, cols) or c_v.rank > 1:
            return None
        bias = np.broadcast_to(np.asarray(c_v.const, np.float64).reshape(-1), (cols,))
    wk = np.ascontiguousarray(w.T if trans else w)
    zb = None if zw_v is None else Value("", (), w.dtype, np.asarray(zw[0], w.dtype))
    mm = replace(n, op_type="MatMulInteger", inputs=(a, Value("", wk.shape, w.dtype, wk), za_v, zb))
    acc = matmul_integer_dot4(b, replace(mm, attrs={}, n_outputs=1))
    if acc is None:
        return None
    scale = np.float64(np.float32(sa)) * sw
    out = requantized_acc(b, n, acc, scale, bias)
    if out is not None:
        return out
    m = b.ref(Value("", (cols,), F32, scale.astype(np.float32)))
    expr = f"as_float({b.ref(acc)}, 32) * {m} + {b.ref(Value('', (cols,), F32, bias.astype(np.float32)))}"
    return b.eltwise(expr, acc.shape, F32)
