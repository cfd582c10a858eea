"""The QDQ pattern of quantised models, found in the graph.

A model quantised in the QDQ format (``onnxruntime.quantization.quantize_static``'s
default) writes each convolution as ``Conv(DequantizeLinear(xq), DequantizeLinear(wq))``.
:func:`fuse_qdq` rewrites such a ``Conv`` into the internal ``_QConv`` node, which
:mod:`.ops.integer` writes as integer dot products (see there).
"""

from __future__ import annotations

import numpy as np

from .graph import NodeInfo

U8, I8 = np.dtype(np.uint8), np.dtype(np.int8)


def fuse_qdq(nodes: list[NodeInfo], initializers: dict[str, np.ndarray]) -> list[NodeInfo]:
    """Each ``Conv`` whose input and constant weights come from ``DequantizeLinear``
    of 8-bit integers becomes ``_QConv(xq, sx, zx, wq, sw, zw, bias)`` with the
    convolution's attributes (``_w_axis``: the weights' quantisation axis).  The
    ``DequantizeLinear`` nodes stay for any other reader (unread ones are dropped
    with the rest of the dead code)."""
    producer = {n.outputs[0]: n for n in nodes if n.outputs}
    out: list[NodeInfo] = []
    for n in nodes:
        fused = _fused_conv(n, producer, initializers) if n.op_type == "Conv" else None
        out.append(fused or n)
    return out


def _dequantized(name: str, producer: dict[str, NodeInfo]) -> NodeInfo | None:
    p = producer.get(name)
    if p is None or p.op_type != "DequantizeLinear" or p.domain not in ("", "ai.onnx"):
        return None
    if p.attrs.get("block_size") or p.attrs.get("output_dtype") or len(p.inputs) < 2:
        return None
    return p


def _fused_conv(
    n: NodeInfo, producer: dict[str, NodeInfo], inits: dict[str, np.ndarray]
) -> NodeInfo | None:
    if len(n.inputs) < 2 or int(n.attrs.get("group", 1)) != 1:
        return None
    dx = _dequantized(n.inputs[0], producer)
    dw = _dequantized(n.inputs[1], producer)
    if dx is None or dw is None or dw.inputs[0] not in inits:
        return None
    if np.asarray(inits[dw.inputs[0]]).dtype not in (U8, I8):
        return None
    zx = dx.inputs[2] if len(dx.inputs) > 2 else ""
    zw = dw.inputs[2] if len(dw.inputs) > 2 else ""
    bias = n.inputs[2] if len(n.inputs) > 2 else ""
    attrs = dict(n.attrs, _w_axis=int(dw.attrs.get("axis", 1)))
    ins = [dx.inputs[0], dx.inputs[1], zx, dw.inputs[0], dw.inputs[1], zw, bias]
    return NodeInfo("_QConv", n.domain, n.name, ins, list(n.outputs), attrs)
