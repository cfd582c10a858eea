"""Operators that ONNX defines as functions of other operators.

Some ONNX operators come with a definition in terms of simpler ones: a
*function body* in the operator's schema (``HannWindow``, ``AffineGrid``,
``SwiGLU``), or a *context-dependent* function that ONNX builds for one node
from its attributes and input types (``Attention``, ``RotaryEmbedding``,
``SoftmaxCrossEntropyLoss``).  The onnx package ships those definitions and
builds them (``OpSchema.get_function_with_opset_version``,
``get_context_dependent_function_with_opset_version``).  The writers here ask
it for the body of the node at hand and write the body's nodes in its place,
each through the same op library as any other node (so attention becomes
the importer's matrix products and softmax, and fusion sees through it).
Nodes of the body whose inputs are all known are folded, as elsewhere.

The body is the operator's definition, so the result is what the ONNX
specification says it is; the body's own opset (its ``opset_import``)
decides the versions of the operators inside it.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np

from ..builder import Builder, Node, OnnxError, Value
from ..registry import op

#: Operator -> the input positions whose values the body needs when compiling
#: (a window's size, a crop's shape): the importer specialises on them.
FUNCTION_OPS: dict[str, tuple[int, ...]] = {
    "Attention": (),
    "AffineGrid": (1,),
    "BlackmanWindow": (0,),
    "CausalConvWithState": (),
    "CenterCropPad": (1,),
    "DynamicQuantizeLinear": (),
    "HammingWindow": (0,),
    "HannWindow": (0,),
    "LinearAttention": (),
    "NegativeLogLikelihoodLoss": (),
    "RotaryEmbedding": (),
    "SoftmaxCrossEntropyLoss": (),
    "SwiGLU": (),
}

#: Bodies nest (an operator's body may use another function operator); past
#: this depth the definitions are taken to be circular.
MAX_DEPTH = 16

_counter = itertools.count()
_nesting = threading.local()


def body_of(n: Node) -> tuple[Any, dict[str, Any]]:
    """The ``FunctionProto`` that defines ``n``, built by onnx for ``n``'s
    attributes and input types at the model's opset, and the default value of
    each of the operator's attributes that has one (an ``AttributeProto``)."""
    import onnx
    import onnx.defs

    try:
        schema: Any = onnx.defs.get_schema(n.op_type, n.opset, n.domain or "")
    except onnx.defs.SchemaError:
        raise n.error(f"onnx has no definition of {n.op_type} at opset {n.opset}") from None
    plain = [v for v in schema.function_opset_versions if v <= n.opset]
    context = [v for v in schema.context_dependent_function_opset_versions if v <= n.opset]
    try:
        if plain:
            raw = schema.get_function_with_opset_version(max(plain))
        elif context:
            raw = schema.get_context_dependent_function_with_opset_version(
                max(context), _node_proto(n).SerializeToString(), _input_types(n)
            )
        else:
            raise n.error(f"onnx defines no function body for {n.op_type} at opset {n.opset}")
    except OnnxError:
        raise
    except Exception as exc:  # noqa: BLE001 - onnx's C++ builders raise RuntimeError and friends
        raise n.error(f"onnx could not build its definition for this node: {exc}") from None
    fn = onnx.FunctionProto()
    fn.ParseFromString(raw)
    if not fn.node:
        raise n.error(f"onnx gave an empty definition of {n.op_type} for this node")
    defaults = {
        name: a.default_value
        for name, a in schema.attributes.items()
        if a.default_value.type != onnx.AttributeProto.UNDEFINED
    }
    return fn, defaults


def _node_proto(n: Node) -> Any:
    """``n`` as a ``NodeProto`` (inputs ``i0``, ``i1`` ..., ``""`` for an omitted
    one; outputs ``o0`` ...), for onnx's context-dependent function builders."""
    import onnx
    from onnx import helper, numpy_helper

    proto = helper.make_node(
        n.op_type,
        [f"i{k}" if v is not None else "" for k, v in enumerate(n.inputs)],
        [f"o{k}" for k in range(n.n_outputs)],
        name=n.name,
        domain=n.domain or None,
    )
    for key, value in n.attrs.items():
        if isinstance(value, onnx.AttributeProto):
            proto.attribute.append(value)
        elif isinstance(value, np.ndarray):
            proto.attribute.append(helper.make_attribute(key, numpy_helper.from_array(value)))
        else:
            proto.attribute.append(helper.make_attribute(key, value))
    return proto


def _input_types(n: Node) -> list[bytes]:
    """The ``TypeProto`` of each input of ``n`` (an empty one where omitted)."""
    import onnx
    from onnx import helper

    types = []
    for v in n.inputs:
        if v is None:
            types.append(onnx.TypeProto().SerializeToString())
            continue
        elem = helper.np_dtype_to_tensor_dtype(v.dtype)
        types.append(helper.make_tensor_type_proto(elem, list(v.shape)).SerializeToString())
    return types


def _attributes(body_node: Any, caller: dict[str, Any], defaults: dict[str, Any]) -> Any:
    """``body_node``'s attributes with each reference to an attribute of the
    function (``ref_attr_name``) replaced by the caller's value, else the
    function's default; a reference to neither is dropped (the attribute is
    absent), as the specification says."""
    import onnx
    from onnx import helper, numpy_helper

    out = onnx.NodeProto()
    out.CopyFrom(body_node)
    del out.attribute[:]
    for a in body_node.attribute:
        if not a.ref_attr_name:
            out.attribute.append(a)
            continue
        if a.ref_attr_name in caller:
            value = caller[a.ref_attr_name]
            if isinstance(value, onnx.AttributeProto):
                made = onnx.AttributeProto()
                made.CopyFrom(value)
                made.name = a.name
            elif isinstance(value, np.ndarray):
                made = helper.make_attribute(a.name, numpy_helper.from_array(value))
            else:
                made = helper.make_attribute(a.name, value)
            out.attribute.append(made)
        elif a.ref_attr_name in defaults:
            made = onnx.AttributeProto()
            made.CopyFrom(defaults[a.ref_attr_name])
            made.name = a.name
            out.attribute.append(made)
    return out


def expand(b: Builder, n: Node) -> list[Value | None]:
    """Write ``n`` as the nodes of its ONNX definition: one value per output."""
    depth = getattr(_nesting, "depth", 0)
    if depth >= MAX_DEPTH:
        raise n.error(f"its definition nests more than {MAX_DEPTH} functions deep")
    _nesting.depth = depth + 1
    try:
        return _expand(b, n)
    finally:
        _nesting.depth = depth


def _expand(b: Builder, n: Node) -> list[Value | None]:
    if n.nested is None:
        raise n.error("function bodies are written only by the importer")
    fn, defaults = body_of(n)
    opset = n.opset
    for imp in fn.opset_import:
        if imp.domain in ("", "ai.onnx"):
            opset = int(imp.version)
    if len(n.inputs) > len(fn.input):
        raise n.error(f"has {len(n.inputs)} inputs; its definition takes {len(fn.input)}")
    # The body's names live in an environment of their own (so do those of any
    # subgraph inside it, which read them by name): only the formal inputs are bound.
    env: dict[str, Value] = {}
    for formal, actual in zip(fn.input, n.inputs):
        if actual is not None:
            env[formal] = actual
    defaults.update({a.name: a for a in fn.attribute_proto})
    scope = f"{n.name or n.op_type}#{next(_counter)}/"
    for k, body_node in enumerate(fn.node):
        proto = _attributes(body_node, n.attrs, defaults)
        proto.name = f"{scope}{body_node.name or body_node.op_type + str(k)}"
        n.nested.run(b, proto, k, env, opset, f"{n.where()}:")
    return [env.get(fn.output[k]) if k < len(fn.output) else None for k in range(n.n_outputs)]


def _writer(b: Builder, n: Node) -> list[Value | None]:
    """Written as the nodes of its ONNX function definition (its schema's body)."""
    return expand(b, n)


#: Operators of ``ai.onnx.preview`` defined by functions, likewise.
PREVIEW_FUNCTION_OPS: dict[str, tuple[int, ...]] = {"FlexAttention": ()}

for _name, _static in FUNCTION_OPS.items():
    op(_name, static=_static)(_writer)
for _name, _static in PREVIEW_FUNCTION_OPS.items():
    op(_name, static=_static, domain="ai.onnx.preview")(_writer)
