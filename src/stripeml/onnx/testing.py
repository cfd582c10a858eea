"""Model rewrites for testing and benchmarking imported models.

The light models shipped with ``onnx`` make every weight with
``ConstantOfShape(0.02)``, so their reference outputs are a uniform softmax
that proves little.  :func:`randomize_weights` gives them random weights (He
scaling, so activations stay in range through deep networks) and
:func:`strip_softmax` exposes the logits, so a comparison against onnxruntime
is meaningful.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def randomize_weights(model: Any, seed: int = 0) -> Any:
    """A copy of ``model`` whose float weights (initializers and
    ``ConstantOfShape`` outputs) are random; BatchNormalization variances and
    scales stay positive."""
    import onnx
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    positive: set[str] = set()
    for n in g.node:
        if n.op_type == "BatchNormalization":
            positive.update((n.input[1], n.input[4]))  # scale and variance

    def weight(name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        if name in positive:
            return rng.uniform(0.5, 1.5, shape).astype(dtype)
        if len(shape) >= 2:
            fan_in = int(np.prod(shape[1:]))
            return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(dtype)
        return (rng.standard_normal(shape) * 0.1).astype(dtype)

    keep = []
    new_inits = []
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = tuple(int(s) for s in inits[n.input[0]])
            value = next((a.t for a in n.attribute if a.name == "value"), None)
            dtype = (
                numpy_helper.to_array(value).dtype if value is not None else np.dtype(np.float32)
            )
            if dtype.kind == "f":
                arr = weight(n.output[0], shape, dtype)
                new_inits.append(numpy_helper.from_array(arr, n.output[0]))
                continue
        keep.append(n)
    for t in g.initializer:
        arr = inits[t.name]
        if arr.dtype.kind == "f" and arr.size > 1:
            t.CopyFrom(numpy_helper.from_array(weight(t.name, arr.shape, arr.dtype), t.name))
    del g.node[:]
    g.node.extend(keep)
    g.initializer.extend(new_inits)
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    unused = [t for t in g.initializer if t.name not in used]
    for t in unused:  # the shapes ConstantOfShape read
        g.initializer.remove(t)
    inputs = [vi for vi in g.input if vi.name in {t.name for t in unused}]
    for vi in inputs:
        g.input.remove(vi)
    return m


def strip_softmax(model: Any) -> Any:
    """A copy of ``model`` whose trailing ``Softmax`` nodes are removed: the
    graph outputs become the logits."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    outputs = {o.name: o for o in g.output}
    for n in list(g.node):
        if n.op_type == "Softmax" and n.output[0] in outputs:
            o = outputs[n.output[0]]
            o.name = n.input[0]
            g.node.remove(n)
    return m
