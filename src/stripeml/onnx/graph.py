"""The parts of an ONNX ``ModelProto`` the importer uses, as plain data.

:class:`Graph` reads the model once: opset, initializers, typed graph inputs,
outputs and the nodes (:class:`NodeInfo`, attributes decoded to Python
values).  It knows which graph inputs some operator needs the *value* of when
compiling (:meth:`Graph.static_inputs`) and which operators are unsupported;
:func:`call_arrays` checks a call's arguments against the graph inputs.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ShapeError
from .builder import OnnxError
from .load import require_onnx
from .ops import lookup
from .validate import check_model, node_where, tensor_problem

__all__ = [
    "SHAPE_ONLY",
    "Graph",
    "GraphInput",
    "NodeInfo",
    "call_arrays",
    "node_info",
    "require_onnx",
    "tensor_value",
]

# Ops whose result depends only on the *shape* of their data input.
SHAPE_ONLY = {"Shape": (0,), "Size": (0,)}


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

    def __init__(
        self,
        model: Any,
        source: str | None = None,
        raws: Mapping[int, np.ndarray] | None = None,
        opset: int | None = None,
    ):
        """Read ``model`` (a ``ModelProto`` with its data in memory), checking it
        first (:func:`~.validate.check_model`); ``source``, the file it came
        from, prefixes the error messages; ``raws``, per initializer position,
        the raw bytes of an initializer the message holds none of (read from
        the file by :func:`~.wire.read_split`).  ``opset``: the model validated
        before (:mod:`.validated`), this is its ``ai.onnx`` opset, and it is not
        checked again."""
        raws = raws or {}
        onnx = require_onnx()
        self.opset = check_model(model, source) if opset is None else opset
        if len(model.functions):
            model = _inline_functions(onnx, model, source)
        g = model.graph
        self.name = g.name or "model"
        if len(g.sparse_initializer):
            raise OnnxError("sparse initializers are not supported")
        self.initializers: dict[str, np.ndarray] = {
            t.name: _array(onnx, t, f"initializer {t.name!r}", raws.get(k))
            for k, t in enumerate(g.initializer)
        }
        self.inputs: list[GraphInput] = []
        for vi in g.input:
            if vi.name in self.initializers:
                continue
            self.inputs.append(_graph_input(vi, onnx))
        self.outputs = [vi.name for vi in g.output]
        self.nodes: list[NodeInfo] = [node_info(n, k) for k, n in enumerate(g.node)]

    def static_inputs(self) -> set[str]:
        """Graph inputs whose values some op needs at compile time (an op inside
        an ``If``'s branch too)."""
        nodes = _flat(self.nodes)
        producer = {o: n for n in nodes for o in n[2] if o}
        want: list[str] = []
        for op_type, inputs, _, domain in nodes:
            d = lookup(op_type, domain)
            if d is None:
                continue
            want += [inputs[i] for i in d.static if i < len(inputs) and inputs[i]]
        seen: set[str] = set()
        while want:
            t = want.pop()
            if t in seen:
                continue
            seen.add(t)
            node = producer.get(t)
            if node is None or node[0] in SHAPE_ONLY:
                continue
            want += [i for i in node[1] if i]
        return {i.name for i in self.inputs if i.name in seen}

    def remainder(
        self, start: int, inputs: list[GraphInput], initializers: dict[str, np.ndarray]
    ) -> Graph:
        """The graph of the nodes from ``start`` on, reading ``inputs`` and
        ``initializers`` (what the nodes before left), with this graph's outputs
        and opset."""
        rest = object.__new__(Graph)
        rest.opset = self.opset
        rest.name = f"{self.name}_from_{start}"
        rest.initializers = dict(initializers)
        rest.inputs = list(inputs)
        rest.outputs = list(self.outputs)
        rest.nodes = list(self.nodes[start:])
        return rest

    def unsupported(self) -> list[NodeInfo]:
        return [n for n in self.nodes if lookup(n.op_type, n.domain) is None]


def call_arrays(
    inputs: Sequence[GraphInput], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> list[np.ndarray]:
    """A call's arguments (positional in graph input order, or by input name) as
    arrays in graph input order, each checked against its input's dtype and
    declared dims (a :class:`~stripeml.errors.ShapeError` otherwise)."""
    names = [gi.name for gi in inputs]
    if len(args) > len(names):
        raise ShapeError(f"the model takes {len(names)} input(s), got {len(args)}")
    values = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise ShapeError(f"the model has no input named {k!r} (inputs: {', '.join(names)})")
        if k in values:
            raise ShapeError(f"input {k!r} given twice")
        values[k] = v
    missing = [n for n in names if n not in values]
    if missing:
        raise ShapeError(f"missing input(s) {', '.join(missing)}")
    out = []
    from ..api import as_array  # loaded by the first compile anyway

    for gi in inputs:
        arr = as_array(values[gi.name])
        if arr.dtype != gi.dtype:
            raise ShapeError(f"input {gi.name!r} must be {gi.dtype}, got {arr.dtype}")
        if gi.dims is not None:
            if arr.ndim != len(gi.dims):
                raise ShapeError(
                    f"input {gi.name!r} must have rank {len(gi.dims)}, got shape {arr.shape}"
                )
            for ax, (want, got) in enumerate(zip(gi.dims, arr.shape)):
                if isinstance(want, int) and want > 0 and want != got:
                    raise ShapeError(
                        f"input {gi.name!r} dimension {ax} must be {want}, got shape {arr.shape}"
                    )
        out.append(arr)
    return out


def live_after(g: Graph, k: int) -> list[str]:
    """The names that nodes ``k`` on (their subgraphs too) or the graph's outputs
    read, in order of first reading, without those the nodes from ``k`` make."""
    made: set[str] = set()
    order: list[str] = []
    for _, inputs, outputs, _ in _flat(g.nodes[k:]):
        order += [i for i in inputs if i and i not in made]
        made |= {o for o in outputs if o}
    order += [o for o in g.outputs if o not in made]
    return list(dict.fromkeys(order))


def _inline_functions(onnx: Any, model: Any, source: str | None) -> Any:
    """``model`` with each call of one of its own functions (``model.functions``,
    as exporters write repeated blocks) replaced by the function's nodes, by
    onnx's inliner (names made unique, attributes bound)."""
    import onnx.inliner

    try:
        inlined = onnx.inliner.inline_local_functions(model)
    except Exception as exc:  # noqa: BLE001 - the C++ inliner's errors
        where = f"{source}: " if source else ""
        raise OnnxError(f"{where}cannot inline the model's functions: {exc}") from None
    before = [t.name for t in model.graph.initializer]
    if [t.name for t in inlined.graph.initializer] != before:  # raws are by position
        raise OnnxError("inlining the model's functions reordered its initializers")
    return inlined


#: A node as :meth:`Graph.static_inputs` follows it: operator, inputs, outputs.
_Flat = tuple[str, list[str], list[str], str]


def _flat(nodes: Any) -> list[_Flat]:
    """``nodes`` (:class:`NodeInfo` or ``NodeProto``) and the nodes of their
    subgraphs, a node with subgraphs reading what they read from around it."""
    out: list[_Flat] = []
    for n in nodes:
        attrs = n.attrs.values() if isinstance(n, NodeInfo) else n.attribute
        graphs = [g for a in attrs for g in _graphs(a)]
        inner = [x for g in graphs for x in _flat(g.node)]
        made = {o for x in inner for o in x[2]} | {i.name for g in graphs for i in g.input}
        made |= {t.name for g in graphs for t in g.initializer}
        free = [i for x in inner for i in x[1] if i and i not in made]
        out.append(
            (
                n.op_type,
                list(n.input if not isinstance(n, NodeInfo) else n.inputs) + free,
                list(n.output if not isinstance(n, NodeInfo) else n.outputs),
                n.domain,
            )
        )
        out += inner
    return out


def _graphs(a: Any) -> list[Any]:
    """The subgraphs an attribute holds (a raw ``AttributeProto``; none for a decoded value)."""
    if not hasattr(a, "HasField"):
        return []
    return ([a.g] if a.HasField("g") else []) + list(a.graphs)


def node_info(n: Any, k: int, where: str = "") -> NodeInfo:
    """The ``NodeProto`` ``n`` (the ``k``-th of its graph) as a :class:`NodeInfo`,
    its attributes decoded; ``where`` prefixes the messages of bad attributes."""
    onnx = require_onnx()
    attrs: dict[str, Any] = {}
    for a in n.attribute:
        at = f"{where + ' ' if where else ''}{node_where(n, k)} attribute {a.name!r}"
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            attrs[a.name] = a  # kept raw; ops with subgraphs reject them
        elif a.type == onnx.AttributeProto.TENSOR:
            attrs[a.name] = _array(onnx, a.t, at)
        else:
            attrs[a.name] = _attribute(onnx, a, at)
    return NodeInfo(n.op_type, n.domain, n.name, list(n.input), list(n.output), attrs)


def tensor_value(t: Any, where: str) -> np.ndarray:
    """The value of ``TensorProto`` ``t`` (checked; ``where`` names it in messages)."""
    return _array(require_onnx(), t, where)


#: Element types whose raw little-endian bytes NumPy reads as they are.
_PLAIN = ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8",
          "uint16", "uint32", "uint64")  # fmt: skip


def _array(onnx: Any, t: Any, where: str, given: np.ndarray | None = None) -> np.ndarray:
    """A tensor's value (its declared shape and stored data checked to agree).  Raw
    data of a plain numeric type on a little-endian host is read in place (one copy
    out of the protobuf, read-only), not through ``numpy_helper``'s copies;
    ``given`` is its raw data read from the file (a read-only ``uint8`` array,
    viewed as it is)."""
    if given is not None:
        problem = tensor_problem(onnx, t, given)
        if problem is not None:
            raise OnnxError(f"{where}: {problem}")
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).newbyteorder("<")
        arr = given.view(dtype).reshape(tuple(int(d) for d in t.dims))
        return arr if sys.byteorder == "little" else arr.astype(dtype.newbyteorder("="))
    raw = t.raw_data if t.HasField("raw_data") else None
    problem = tensor_problem(onnx, t, raw)
    if problem is not None:
        raise OnnxError(f"{where}: {problem}")
    if raw is not None and sys.byteorder == "little" and not t.external_data:
        try:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
        except Exception:  # noqa: BLE001 - element types NumPy has no plain dtype for
            dtype = None
        if dtype is not None and dtype.name in _PLAIN:
            return np.frombuffer(raw, dtype).reshape(tuple(int(d) for d in t.dims))
    try:
        return np.asarray(onnx.numpy_helper.to_array(t))
    except Exception as exc:  # noqa: BLE001 - whatever numpy_helper finds wrong in the data
        raise OnnxError(f"{where}: cannot read the tensor: {exc}") from None


def _attribute(onnx: Any, a: Any, where: str) -> Any:
    """An attribute's value as Python data (bytes decoded as UTF-8)."""
    try:
        v = onnx.helper.get_attribute_value(a)
    except Exception as exc:  # noqa: BLE001 - malformed attributes
        raise OnnxError(f"{where}: cannot read the attribute: {exc}") from None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [x.decode("utf-8", "replace") for x in v]
    return v


def _graph_input(vi: Any, onnx: Any) -> GraphInput:
    """A graph input (its type checked by :func:`~.validate.check_model`)."""
    tt = vi.type
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


def live_values(g: Graph, k: int, env: Mapping[str, object]) -> list[str]:
    """The values that the nodes from ``k`` on (node ``k`` is the split) or the
    graph's outputs read, and that exist before node ``k``, in a fixed order."""
    return [name for name in live_after(g, k) if name in env]
