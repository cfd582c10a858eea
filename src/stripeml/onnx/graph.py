"""The parts of an ONNX ``ModelProto`` the importer uses, as plain data.

:class:`Graph` reads the model once: opset, initializers, typed graph inputs,
outputs and the nodes (:class:`NodeInfo`, attributes decoded to Python
values).  It knows which graph inputs some operator needs the *value* of when
compiling (:meth:`Graph.static_inputs`) and which operators are unsupported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import StripeError
from .builder import OnnxError
from .ops import lookup

# Ops whose result depends only on the *shape* of their data input.
SHAPE_ONLY = {"Shape": (0,), "Size": (0,)}


def require_onnx() -> Any:
    """The ``onnx`` package (a StripeError saying how to install it when missing)."""
    try:
        import onnx
    except ImportError:  # pragma: no cover - onnx is a dependency of the extra
        raise StripeError(
            "the ONNX frontend needs the 'onnx' package: pip install 'stripeml[onnx]'"
        ) from None
    return onnx


@dataclass(frozen=True)
class GraphInput:
    """A graph input that is not an initializer: its element type and, when the
    model states them, its dimensions (sizes, symbolic names or ``None``)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | str | None, ...] | None  # None: rank unknown


@dataclass(frozen=True)
class NodeInfo:
    """One node as the model writes it: tensor names (``""`` for an omitted
    optional input) and decoded attributes."""

    op_type: str
    domain: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]


class Graph:
    """The parts of an ONNX ``ModelProto`` the importer uses, as plain data."""

    def __init__(self, model: Any):
        onnx = require_onnx()
        from onnx import helper, numpy_helper

        g = model.graph
        self.name = g.name or "model"
        self.opset = 1
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = int(imp.version)
        self.initializers: dict[str, np.ndarray] = {
            t.name: numpy_helper.to_array(t) for t in g.initializer
        }
        if len(g.sparse_initializer):
            raise OnnxError("sparse initializers are not supported")
        self.inputs: list[GraphInput] = []
        for vi in g.input:
            if vi.name in self.initializers:
                continue
            self.inputs.append(_graph_input(vi, onnx))
        self.outputs = [vi.name for vi in g.output]
        self.nodes: list[NodeInfo] = []
        for n in g.node:
            attrs = {}
            for a in n.attribute:
                if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                    attrs[a.name] = a  # kept raw; ops with subgraphs reject them
                elif a.type == onnx.AttributeProto.TENSOR:
                    attrs[a.name] = numpy_helper.to_array(a.t)
                else:
                    v = helper.get_attribute_value(a)
                    if isinstance(v, bytes):
                        v = v.decode("utf-8", "replace")
                    elif isinstance(v, list) and v and isinstance(v[0], bytes):
                        v = [x.decode("utf-8", "replace") for x in v]
                    attrs[a.name] = v
            self.nodes.append(
                NodeInfo(n.op_type, n.domain, n.name, list(n.input), list(n.output), attrs)
            )

    def static_inputs(self) -> set[str]:
        """Graph inputs whose values some op needs at compile time."""
        producer = {o: n for n in self.nodes for o in n.outputs if o}
        want: list[str] = []
        for n in self.nodes:
            d = lookup(n.op_type, n.domain)
            if d is None:
                continue
            want += [n.inputs[i] for i in d.static if i < len(n.inputs) and n.inputs[i]]
        seen: set[str] = set()
        while want:
            t = want.pop()
            if t in seen:
                continue
            seen.add(t)
            node = producer.get(t)
            if node is None or node.op_type in SHAPE_ONLY:
                continue
            want += [i for i in node.inputs if i]
        return {i.name for i in self.inputs if i.name in seen}

    def unsupported(self) -> list[NodeInfo]:
        return [n for n in self.nodes if lookup(n.op_type, n.domain) is None]


def _graph_input(vi: Any, onnx: Any) -> GraphInput:
    tt = vi.type
    if not tt.HasField("tensor_type"):
        raise OnnxError(f"input {vi.name!r}: only tensor inputs are supported")
    elem = tt.tensor_type.elem_type
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    except Exception:  # noqa: BLE001 - unknown enum values
        raise OnnxError(f"input {vi.name!r}: element type {elem} is not supported") from None
    dims: tuple[int | str | None, ...] | None = None
    if tt.tensor_type.HasField("shape"):
        dims = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tt.tensor_type.shape.dim
        )
    return GraphInput(vi.name, dtype, dims)
