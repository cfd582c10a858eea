"""What a model must be before the importer reads it.

:func:`check_model` runs once per model, in time linear in its size, and
raises an :class:`~.builder.OnnxError` naming the file, node, initializer or
input at the first problem.  A valid model has:

* an IR version from 1 to the newest the installed ``onnx`` knows, and a graph
  with at least one node and at least one output (an empty file parses as an
  empty ``ModelProto``: no IR version, no graph);
* one opset import for the ``ai.onnx`` domain, from :data:`MIN_OPSET` to the
  newest opset ``onnx`` knows (a model whose main graph has only nodes of
  other domains, and no functions, may leave it out: the ``ai.onnx.ml`` node
  tests do); at most one import per domain, each of a domain ``onnx`` knows
  (``ai.onnx.ml``, ``ai.onnx.preview`` ...) or that a function of the model
  defines; every node's domain imported.  Operators of domains the op library
  has no table for are unsupported (the importer names them).  Below
  :data:`MIN_OPSET` a node is accepted only where the version of its operator
  that the opset selects is one the op library implements
  (:attr:`~.registry.OpDef.oldest`, by default the version in effect at
  :data:`MIN_OPSET`): ``Not`` of opset 1 has not changed since, ``Add`` of
  opset 1 (``broadcast``/``axis`` attributes) has.  The same holds for the
  ``ai.onnx.ml`` operators the library implements, against that domain's
  imported opset (``LabelEncoder-1``, whose keys are strings, is not
  implemented; ``TreeEnsemble`` needs ``ai.onnx.ml`` opset 5);
* initializers with unique names, non-negative dims and exactly as many
  stored values as their shape declares;
* typed graph inputs (a tensor type with an element type) whose dims are
  non-negative and at most :data:`~.builder.MAX_ELEMENTS` (so is their product);
* nodes in single assignment form (no tensor named twice, no node output
  named like a graph input or initializer) and in topological order (every
  input a graph input, an initializer or the output of an earlier node), and
  graph outputs that something produces;
* nodes that ``onnx.checker.check_node`` accepts against their operator's
  schema: attribute types, unknown attributes, the number of inputs and
  outputs (a string where an integer belongs would otherwise reach an op
  writer's ``int()``).

Operators the op library does not implement are reported by the importer
(all of them at once), not here.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .builder import MAX_ELEMENTS, OnnxError
from .load import bad_dims, element_count, expected_bytes, full_model
from .ops import lookup

if TYPE_CHECKING:
    import numpy as np

#: The oldest ``ai.onnx`` opset whose operators the op library implements:
#: opset 7 brought NumPy broadcasting to the binary operators (before it,
#: ``broadcast``/``axis`` attributes said how to align the operands).
MIN_OPSET = 7

#: The oldest opset of each other domain whose operators the op library implements.
MIN_DOMAIN_OPSET = {"ai.onnx.ml": 1, "ai.onnx.preview": 1, "ai.onnx.preview.training": 1}

DEFAULT_DOMAINS = ("", "ai.onnx")

Fail = Callable[[str], OnnxError]  # an error with the file's name in front


def max_opset() -> int:
    """The newest ``ai.onnx`` opset the installed ``onnx`` package knows."""
    import onnx

    return int(onnx.defs.onnx_opset_version())


@lru_cache(maxsize=1)
def onnx_domains() -> frozenset[str]:
    """The operator domains the installed ``onnx`` has schemas for ("" for ai.onnx)."""
    import onnx

    return frozenset(s.domain for s in onnx.defs.get_all_schemas_with_history())


def supported_range() -> str:
    """The opsets the importer supports, as error messages name them."""
    return f"ai.onnx opsets {MIN_OPSET} to {max_opset()}"


def check_model(model: Any, source: str | None = None) -> int:
    """Check ``model`` (a ``ModelProto`` with its data in memory); return its
    ``ai.onnx`` opset.  ``source`` (the file) prefixes the messages."""
    import onnx

    def fail(message: str) -> OnnxError:
        return OnnxError(f"{source}: {message}" if source else message)

    if model.ir_version <= 0:
        raise fail("no IR version: not an ONNX model (an empty or truncated file?)")
    if model.ir_version > onnx.IR_VERSION:
        raise fail(
            f"IR version {model.ir_version} is newer than the installed onnx "
            f"{onnx.__version__} knows ({onnx.IR_VERSION})"
        )
    if not model.HasField("graph"):
        raise fail("the model has no graph")
    opset, domains = _opsets(model, fail)
    g = model.graph
    if not len(g.node):
        raise fail(f"graph {g.name!r} has no nodes: nothing to compute")
    if not len(g.output):
        raise fail(f"graph {g.name!r} has no outputs")
    known = _initializers(onnx, g, fail)
    inits = set(known)
    for vi in g.input:
        if not vi.name:
            raise fail("a graph input has no name")
        if vi.name in inits:
            continue  # an initializer's default: the importer uses the initializer
        if vi.name in known:
            raise fail(f"graph input {vi.name!r} is declared twice")
        _check_input(vi, fail)
        known.add(vi.name)
    _check_nodes(g, known, opset, domains, _checker_context(model), fail)
    for vi in g.output:
        if not vi.name:
            raise fail("a graph output has no name")
        if vi.name not in known:
            raise fail(
                f"graph output {vi.name!r} is not produced by any node, initializer or input"
            )
    return opset


def _opsets(model: Any, fail: Fail) -> tuple[int, dict[str, int]]:
    """The ai.onnx opset and the imported domains' opsets ("" for ai.onnx).  A
    model with no ai.onnx import (allowed where no node of its main graph is of
    ai.onnx and it has no functions) gets the newest opset, which none of its
    nodes reads."""
    versions: dict[str, int] = {}
    for imp in model.opset_import:
        domain = "" if imp.domain in DEFAULT_DOMAINS else imp.domain
        shown = imp.domain or "ai.onnx"
        if domain in versions:
            raise fail(f"opset_import lists domain {shown!r} twice")
        if imp.version < 1:
            raise fail(f"opset_import: version {imp.version} of domain {shown!r} is not an opset")
        versions[domain] = int(imp.version)
    local = {fn.domain for fn in model.functions}
    for domain in versions:
        # ai.onnx ("") always has schemas: listing them all takes 20-25 ms, which a
        # model that imports only ai.onnx (most do) need not pay
        if domain and domain not in onnx_domains() and domain not in local:
            raise fail(
                f"opset_import names domain {domain!r}, which neither onnx nor a function "
                f"of the model defines (the importer supports {supported_range()})"
            )
    if "" not in versions:
        others = all(n.domain not in DEFAULT_DOMAINS for n in model.graph.node)
        if len(model.graph.node) and others and not len(model.functions):
            return max_opset(), versions
        raise fail(
            f"no opset_import for the ai.onnx domain (the importer supports {supported_range()})"
        )
    opset = versions[""]
    if opset > max_opset():
        raise fail(
            f"ai.onnx opset {opset} is newer than the installed onnx knows "
            f"(the importer supports {supported_range()})"
        )
    return opset, versions


def _initializers(onnx: Any, g: Any, fail: Fail) -> set[str]:
    names: set[str] = set()
    for t in g.initializer:
        where = f"initializer {t.name!r}"
        if not t.name:
            raise fail("an initializer has no name")
        if t.name in names:
            raise fail(f"{where} is declared twice")
        names.add(t.name)
        # the stored data is checked where it is read (graph._array): reading a
        # protobuf's raw bytes copies them, and a model's weights are most of it
        problem = tensor_problem(onnx, t, data=False)
        if problem is not None:
            raise fail(f"{where}: {problem}")
    return names


def tensor_problem(
    onnx: Any, t: Any, raw: bytes | np.ndarray | None = None, data: bool = True
) -> str | None:
    """What is wrong with a ``TensorProto``'s declared shape and stored data, or ``None``.
    ``raw``: its ``raw_data``, when the caller read it already; ``data=False``
    checks the declaration only."""
    bad = bad_dims(t)
    if bad is not None:
        return bad
    if t.data_type == onnx.TensorProto.UNDEFINED:
        return "no element type"
    count = element_count(t)
    shape = tuple(int(d) for d in t.dims)
    if not data:
        return None
    if raw is not None or t.HasField("raw_data"):
        have = len(raw if raw is not None else t.raw_data)
        want = expected_bytes(onnx, t)
        if want is not None and have != want:
            return f"holds {have} bytes, but shape {shape} needs {want}"
        return None
    try:
        field = onnx.helper.tensor_dtype_to_field(t.data_type)
    except Exception:  # noqa: BLE001 - element types with no typed field
        return None
    per = 2 if t.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128) else 1
    if expected_bytes(onnx, t) is None and t.data_type != onnx.TensorProto.STRING:
        return None  # packed 4-bit and 2-bit types: numpy_helper checks them
    have = len(getattr(t, field))
    if have != count * per:
        return f"holds {have // per} values, but shape {shape} needs {count}"
    return None


def _check_input(vi: Any, fail: Fail) -> None:
    where = f"graph input {vi.name!r}"
    if not vi.HasField("type"):
        raise fail(f"{where} has no type")
    if not vi.type.HasField("tensor_type"):
        raise fail(f"{where}: only tensor inputs are supported")
    tt = vi.type.tensor_type
    if tt.elem_type == 0:
        raise fail(f"{where} has no element type")
    if not tt.HasField("shape"):
        return
    total = 1
    for k, d in enumerate(tt.shape.dim):
        if not d.HasField("dim_value"):
            continue
        if d.dim_value < 0:
            raise fail(f"{where}: dimension {k} is {d.dim_value}")
        if d.dim_value > MAX_ELEMENTS:
            raise fail(f"{where}: dimension {k} is {d.dim_value}, more than {MAX_ELEMENTS}")
        total *= d.dim_value
    if total > MAX_ELEMENTS:
        raise fail(f"{where} declares {total} elements, more than {MAX_ELEMENTS}")


def node_where(n: Any, k: int) -> str:
    """A ``NodeProto`` (the ``k``-th of its graph) as messages name it."""
    return f"node {n.name!r} ({n.op_type})" if n.name else f"node #{k} ({n.op_type})"


def _check_nodes(
    g: Any, known: set[str], opset: int, domains: dict[str, int], ctx: Any, fail: Fail
) -> None:
    """Single assignment, topological order, imported domains, operator versions and
    schemas (for the operators the op library implements)."""
    import onnx

    producer: dict[str, int] = {}
    for k, n in enumerate(g.node):
        for name in n.output:
            if not name:
                continue
            if name in known:
                raise fail(f"{node_where(n, k)}: output {name!r} is a graph input or initializer")
            if name in producer:
                first = g.node[producer[name]]
                raise fail(
                    f"{node_where(n, k)}: output {name!r} is also produced by "
                    f"{node_where(first, producer[name])}"
                )
            producer[name] = k
    for k, n in enumerate(g.node):
        where = node_where(n, k)
        domain = "" if n.domain in DEFAULT_DOMAINS else n.domain
        if domain not in domains:
            raise fail(f"{where}: domain {n.domain!r} has no opset_import")
        for name in n.input:
            if not name or name in known or producer.get(name, k) < k:
                continue
            if name in producer:
                later = g.node[producer[name]]
                raise fail(
                    f"{where} reads {name!r} before {node_where(later, producer[name])} "
                    "produces it (the nodes are not in topological order)"
                )
            raise fail(
                f"{where} reads {name!r}, which no node, initializer or graph input produces"
            )
        if lookup(n.op_type, domain) is not None:
            version = opset if domain == "" else domains[domain]
            problem = _version_problem(n.op_type, version, domain)
            if problem is not None:
                raise fail(f"{where}: {problem}")
            for a in n.attribute:
                if a.HasField("t"):
                    problem = tensor_problem(onnx, a.t)
                    if problem is not None:
                        raise fail(f"{where} attribute {a.name!r}: {problem}")
            deprecated = _deprecated(n.op_type, version, domain)
            problem = None if deprecated else _schema_problem(n, ctx)
            if problem is not None:
                raise fail(f"{where}: {problem}")
    known.update(producer)


def _checker_context(model: Any) -> Any:
    """The context ``onnx.checker.check_node`` checks a node of ``model`` in."""
    import onnx

    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = {
        ("" if o.domain in DEFAULT_DOMAINS else o.domain): o.version for o in model.opset_import
    }
    return ctx


def _schema_problem(n: Any, ctx: Any) -> str | None:
    """What ``onnx.checker`` finds wrong with a node against its operator's schema
    (attribute types, unknown attributes, the number of inputs and outputs)."""
    import onnx

    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
        # onnx's checker reads a subgraph without the names around the node, so it
        # rejects every branch that reads one (as ONNX allows); the importer checks
        # the branch's nodes as it writes them (``ops/control.py``).
        return None
    try:
        onnx.checker.check_node(n, ctx)
    except onnx.checker.ValidationError as exc:
        return str(exc).strip().splitlines()[0]
    return None


def conversion_target(model: Any) -> int | None:
    """The lowest ai.onnx opset above the model's at which every operator of its
    main graph is one the op library implements, when the model's opset selects
    an operator version the library does not implement (``Add-1``, with its
    ``broadcast`` attribute); ``None`` when the model needs no conversion (or
    none helps)."""
    versions = {imp.version for imp in model.opset_import if imp.domain in ("", *DEFAULT_DOMAINS)}
    if len(versions) != 1:
        return None
    opset = int(versions.pop())
    if opset > max_opset():
        return None
    ops = {n.op_type for n in model.graph.node if n.domain in ("", *DEFAULT_DOMAINS)}
    # an operator the opset does not have, or the library does not, is no version problem
    ops = {op for op in ops if lookup(op) is not None and _schema_version(op, opset) is not None}
    if not any(_version_problem(op, opset) for op in ops):
        return None
    for target in range(max(opset + 1, MIN_OPSET), max_opset() + 1):
        if not any(_version_problem(op, target) for op in ops):
            return target
    return None


@lru_cache(maxsize=4096)
def _version_problem(op_type: str, opset: int, domain: str = "") -> str | None:
    """Why the op library cannot run ``op_type`` as ``opset`` of ``domain`` ("":
    ai.onnx) defines it."""
    d = lookup(op_type, domain)
    if d is None:
        return None
    shown = domain or "ai.onnx"
    version = _schema_version(op_type, opset, domain)
    if version is None:
        return f"operator {op_type} does not exist in {shown} opset {opset}"
    oldest = MIN_DOMAIN_OPSET.get(domain, MIN_OPSET)
    lowest = d.oldest or _schema_version(op_type, oldest, domain) or 1
    if version < lowest:
        supports = f"; it supports {supported_range()}" if domain == "" else ""
        return (
            f"{shown} opset {opset} selects {op_type}-{version}, which the importer does not "
            f"implement ({op_type}-{lowest} and later are{supports})"
        )
    return None


@lru_cache(maxsize=4096)
def _deprecated(op_type: str, opset: int, domain: str = "") -> bool:
    """Whether onnx marks the operator's definition in ``opset`` deprecated:
    ``check_node`` refuses those, but the op library implements the one it has
    (``GroupNormalization``-18, whose scale and bias are per group)."""
    import onnx

    try:
        return bool(onnx.defs.get_schema(op_type, opset, domain).deprecated)
    except onnx.defs.SchemaError:
        return False


def _schema_version(op_type: str, opset: int, domain: str = "") -> int | None:
    import onnx

    try:
        return int(onnx.defs.get_schema(op_type, opset, domain).since_version)
    except onnx.defs.SchemaError:
        return None


def upgraded(
    model: Any, source: str | None, raws: dict[int, np.ndarray]
) -> tuple[Any, dict[int, np.ndarray], str | None]:
    """``model`` converted by ``onnx.version_converter`` to the lowest opset whose
    operator versions the op library implements, when its own opset selects an
    older one (``Add-1`` with ``broadcast``); the model as it was otherwise.  The
    converter sees every weight (a model read from a file is read again whole).
    Third: why the converter failed (the model is then checked, and refused, as
    it is, the reason added to the message)."""
    target = conversion_target(model)
    if target is None:
        return model, raws, None
    import onnx.version_converter

    whole = full_model(source) if raws and source is not None else model
    try:
        converted = onnx.version_converter.convert_version(whole, target)
    except Exception as exc:  # noqa: BLE001 - the converter's own errors, reported
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (
            model,
            raws,
            f"onnx.version_converter could not convert it to opset {target}: {reason}",
        )
    return converted, {}, None
