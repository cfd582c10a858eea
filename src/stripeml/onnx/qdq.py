"""The QDQ pattern of quantised models, found in the graph.

A model quantised in the QDQ format (``onnxruntime.quantization.quantize_static``'s
default) writes each convolution as ``Conv(DequantizeLinear(xq), DequantizeLinear(wq))``
and each residual sum as ``Add(DequantizeLinear(a), DequantizeLinear(b))``, each
followed by a ``QuantizeLinear`` (sometimes after a ``Relu``).  :func:`fuse_qdq`
rewrites such a ``Conv`` into the internal ``_QConv`` node and such an ``Add`` into
``_QAdd``, and folds the ``[Relu ->] QuantizeLinear`` that is the only reader of
either into it; :mod:`.ops.integer` writes them as integer dot products and one
requantising expression over the quantised bytes (see there).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .graph import NodeInfo

U8, I8, F32 = np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.float32)


def fuse_qdq(
    nodes: list[NodeInfo], initializers: dict[str, np.ndarray], outputs: Sequence[str] = ()
) -> list[NodeInfo]:
    """Each ``Conv`` whose input and constant weights come from ``DequantizeLinear``
    of 8-bit integers becomes ``_QConv(xq, sx, zx, wq, sw, zw, bias)`` with the
    convolution's attributes (``_w_axis``: the weights' quantisation axis); each
    ``Add`` of two per-tensor ``DequantizeLinear`` results becomes ``_QAdd(a, sa,
    za, b, sb, zb)``.  Then a ``QuantizeLinear`` (per tensor, constant scale and
    zero point) that is the only reader of one of them, directly or through a
    ``Relu`` read by it alone, is folded in: its scale and zero point become the
    node's next two inputs (``_relu``: 1 when a ``Relu`` was folded too) and its
    output the node's (``outputs``: the graph's, never folded away).  The
    ``DequantizeLinear`` nodes stay for any other reader (unread ones are dropped
    with the rest of the dead code)."""
    producer = {n.outputs[0]: n for n in nodes if n.outputs}
    out: list[NodeInfo] = []
    for n in nodes:
        fused = None
        if n.op_type == "Conv" and n.domain in ("", "ai.onnx"):
            fused = _fused_conv(n, producer, initializers)
        elif n.op_type == "Add" and n.domain in ("", "ai.onnx"):
            fused = _fused_add(n, producer, initializers)
        elif n.op_type == "Gemm" and n.domain in ("", "ai.onnx"):
            fused = _fused_gemm(n, producer, initializers)
        out.append(fused or n)
    return _fold_quantize(_byte_max_pools(out, initializers, outputs), initializers, outputs)


def _dequantized(name: str, producer: dict[str, NodeInfo]) -> NodeInfo | None:
    p = producer.get(name)
    if p is None or p.op_type != "DequantizeLinear" or p.domain not in ("", "ai.onnx"):
        return None
    if p.attrs.get("block_size") or p.attrs.get("output_dtype") or len(p.inputs) < 2:
        return None
    return p


def _operands(
    x: str, w: str, producer: dict[str, NodeInfo], inits: dict[str, np.ndarray]
) -> tuple[list[str], int] | None:
    """``x`` and ``w`` dequantized, ``w`` from constant 8-bit values: the inputs
    ``x, sx, zx, w, sw, zw`` of a fused node (``""`` for an absent zero point)
    and ``w``'s quantisation axis; else None."""
    dx = _dequantized(x, producer)
    dw = _dequantized(w, producer)
    if dx is None or dw is None or dw.inputs[0] not in inits:
        return None
    if np.asarray(inits[dw.inputs[0]]).dtype not in (U8, I8):
        return None
    zx = dx.inputs[2] if len(dx.inputs) > 2 else ""
    zw = dw.inputs[2] if len(dw.inputs) > 2 else ""
    return [dx.inputs[0], dx.inputs[1], zx, dw.inputs[0], dw.inputs[1], zw], int(
        dw.attrs.get("axis", 1)
    )


def _fused_conv(
    n: NodeInfo, producer: dict[str, NodeInfo], inits: dict[str, np.ndarray]
) -> NodeInfo | None:
    if len(n.inputs) < 2 or int(n.attrs.get("group", 1)) != 1:
        return None
    found = _operands(n.inputs[0], n.inputs[1], producer, inits)
    if found is None:
        return None
    ins, axis = found
    bias = n.inputs[2] if len(n.inputs) > 2 else ""
    attrs = dict(n.attrs, _w_axis=axis)
    return NodeInfo("_QConv", n.domain, n.name, [*ins, bias], list(n.outputs), attrs)


def _scalar_params(scale: str, zero: str, inits: dict[str, np.ndarray], zero_needed: bool) -> bool:
    """Whether ``scale`` is a float32 constant of one value and ``zero`` (``""``:
    absent, allowed unless ``zero_needed``) an 8-bit constant of one value."""
    s = inits.get(scale)
    if s is None or np.asarray(s).dtype != F32 or np.asarray(s).size != 1:
        return False
    if not zero:
        return not zero_needed
    z = inits.get(zero)
    return z is not None and np.asarray(z).dtype in (U8, I8) and np.asarray(z).size == 1


def _fused_add(
    n: NodeInfo, producer: dict[str, NodeInfo], inits: dict[str, np.ndarray]
) -> NodeInfo | None:
    """``Add(DequantizeLinear(a), DequantizeLinear(b))``, both per tensor with
    constant scales and 8-bit zero points (which give the quantised type)."""
    if len(n.inputs) != 2:
        return None
    ins: list[str] = []
    for name in n.inputs:
        d = _dequantized(name, producer)
        if (
            d is None
            or len(d.inputs) != 3
            or not _scalar_params(d.inputs[1], d.inputs[2], inits, True)
        ):
            return None
        ins += d.inputs
    return NodeInfo("_QAdd", n.domain, n.name, ins, list(n.outputs), {})


def _fused_gemm(
    n: NodeInfo, producer: dict[str, NodeInfo], inits: dict[str, np.ndarray]
) -> NodeInfo | None:
    """``Gemm(DequantizeLinear(a), DequantizeLinear(w)[, c])`` with constant 8-bit
    ``w``, ``alpha = beta = 1`` and ``a`` not transposed (a classifier's last
    layer): ``_QGemm(a, sa, za, w, sw, zw, c)`` (``transB`` and ``_w_axis`` kept)."""
    if len(n.inputs) < 2 or n.attrs.get("transA", 0) or len(n.outputs) != 1:
        return None
    if float(n.attrs.get("alpha", 1.0)) != 1.0 or float(n.attrs.get("beta", 1.0)) != 1.0:
        return None
    found = _operands(n.inputs[0], n.inputs[1], producer, inits)
    if found is None:
        return None
    ins, axis = found
    c = n.inputs[2] if len(n.inputs) > 2 else ""
    attrs = {"transB": int(n.attrs.get("transB", 0)), "_w_axis": axis}
    return NodeInfo("_QGemm", n.domain, n.name, [*ins, c], list(n.outputs), attrs)


#: The fused nodes a QuantizeLinear folds into, and how many inputs each has before it.
_QUANTISED_BY = {"_QConv": 7, "_QAdd": 6, "_QGemm": 7}


def _fold_quantize(
    nodes: list[NodeInfo], inits: dict[str, np.ndarray], outputs: Sequence[str]
) -> list[NodeInfo]:
    readers: dict[str, list[int]] = {}
    for k, n in enumerate(nodes):
        for name in set(n.inputs):
            if name:
                readers.setdefault(name, []).append(k)

    def only_reader(name: str) -> NodeInfo | None:
        found = readers.get(name, [])
        if name in outputs or len(found) != 1:
            return None
        r = nodes[found[0]]
        return r if r.domain in ("", "ai.onnx") and list(r.inputs[:1]) == [name] else None

    drop: set[int] = set()
    out = list(nodes)
    for k, n in enumerate(nodes):
        first = _QUANTISED_BY.get(n.op_type)
        if first is None or len(n.outputs) != 1 or len(n.inputs) > first:
            continue
        q = only_reader(n.outputs[0])
        relu = q is not None and q.op_type == "Relu" and len(q.inputs) == 1
        if relu and q is not None:
            q = only_reader(q.outputs[0])
        if q is None or q.op_type != "QuantizeLinear" or not _plain_quantize(q, inits):
            continue
        ins = list(n.inputs) + [""] * (first - len(n.inputs))
        ins += [q.inputs[1], q.inputs[2] if len(q.inputs) > 2 else ""]
        attrs = dict(n.attrs, _relu=int(relu))
        out[k] = NodeInfo(n.op_type, n.domain, n.name, ins, list(q.outputs), attrs)
        drop.add(readers[q.inputs[0]][0])
        if relu:
            drop.add(readers[n.outputs[0]][0])
    return [n for k, n in enumerate(out) if k not in drop]


def _byte_max_pools(
    nodes: list[NodeInfo], inits: dict[str, np.ndarray], outputs: Sequence[str]
) -> list[NodeInfo]:
    """``Q(MaxPool(DQ(xq)))`` with the same positive scale and zero point on both
    sides (the pool's result read by that ``QuantizeLinear`` alone) becomes
    ``MaxPool(xq)``: dequantising is increasing, so the largest byte is the
    largest value, and quantising its value again gives that byte back."""
    producer = {n.outputs[0]: n for n in nodes if n.outputs}
    readers: dict[str, list[int]] = {}
    for k, n in enumerate(nodes):
        for name in set(n.inputs):
            if name:
                readers.setdefault(name, []).append(k)
    out = list(nodes)
    drop: set[int] = set()
    for k, n in enumerate(nodes):
        if n.op_type != "MaxPool" or n.domain not in ("", "ai.onnx") or len(n.outputs) != 1:
            continue
        d = _dequantized(n.inputs[0], producer)
        found = readers.get(n.outputs[0], [])
        if d is None or len(found) != 1 or n.outputs[0] in outputs:
            continue
        q = nodes[found[0]]
        if q.op_type != "QuantizeLinear" or q.domain not in ("", "ai.onnx"):
            continue
        if not (_plain_quantize(q, inits) and len(d.inputs) == 3 and len(q.inputs) == 3):
            continue
        if not _scalar_params(d.inputs[1], d.inputs[2], inits, True):
            continue
        ds, qs = (np.asarray(inits[x.inputs[1]]).reshape(()) for x in (d, q))
        dz, qz = (np.asarray(inits[x.inputs[2]]) for x in (d, q))
        if not (ds == qs and ds > 0 and dz.dtype == qz.dtype and dz.reshape(()) == qz.reshape(())):
            continue
        out[k] = NodeInfo(n.op_type, n.domain, n.name, [d.inputs[0]], list(q.outputs), n.attrs)
        drop.add(found[0])
    return [n for k, n in enumerate(out) if k not in drop]


def _plain_quantize(q: NodeInfo, inits: dict[str, np.ndarray]) -> bool:
    """A per-tensor ``QuantizeLinear`` to 8 bits with a constant scale and zero point
    (the type the zero point's, else uint8) and one output."""
    if len(q.inputs) < 2 or len(q.outputs) != 1:
        return False
    if any(q.attrs.get(a) for a in ("block_size", "output_dtype", "precision")):
        return False
    zero = q.inputs[2] if len(q.inputs) > 2 else ""
    return _scalar_params(q.inputs[1], zero, inits, False)
