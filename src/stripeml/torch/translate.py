"""One ATen graph, for one input signature, written into one Tile program.

:func:`translate` walks an FX graph's nodes in order and writes each through
the rule table (:func:`~.lower.write`) into one
:class:`~stripeml.onnx.builder.Builder`; every node's result is checked against
the shape PyTorch's trace gives it.  Parameters bound as constants (inference)
fold at import; runtime inputs become the program's parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..onnx.builder import Builder, Value
from ..onnx.importer import Folds
from ..onnx.narrow_types import is_narrow, wide_dtype
from .lower import IGNORED, Lowering, Unsupported, full_name, np_dtype, op_name, write
from .tensors import to_numpy


@dataclass
class Translation:
    """A graph written into a Builder, ready for ``stripeml.onnx.importer.finish``."""

    builder: Builder
    produced: list[Value]  # the program's outputs
    input_index: dict[Value, int]  # per program input: the graph input's index
    #: per graph output: ("value", k) (the k-th of ``produced``), ("input", k)
    #: (graph input k handed back, no copy), ("view", (k, perm)) (graph input k
    #: permuted, a view), ("reshape", (k, shape)) (a view of the k-th of
    #: ``produced`` in another shape), ("permuted", (k, shape, order)) (the
    #: k-th of ``produced`` holds it stored permuted: ``.view(shape)`` of it,
    #: then ``.permute(order)``) or ("literal", x)
    plan: list[tuple[str, Any]]


def translate(
    fx: Any,
    state: list[bool],
    metas: list[Any],
    args: list[Any] | None,
    folds: Folds,
    static: bool,
    layouts: list[tuple[int, ...] | None] | None = None,
    free_outputs: int | None = None,
) -> Translation:
    """Write ``fx`` for these inputs (real tensors in ``args``; fake or real in
    ``metas``; ``state``: which inputs are parameters, bound as constants when
    ``args`` are given; ``layouts``: per input, the axis order its memory is
    contiguous in when that is not the logical one, see
    :func:`~.tensors.dense_layout`; ``free_outputs``: the outputs from this
    position on may be returned in any strides, see ``CompiledGraph``).  Raises :class:`~.lower.Unsupported` with
    ``node`` set to the operator node that failed (None: an input or the output)."""
    import torch

    placeholders = [n for n in fx.graph.nodes if n.op == "placeholder"]
    concrete = None if static or args is None else _concrete(fx, args)
    b = Builder()
    L = Lowering(b, folds)
    vals: dict[Any, Any] = {}
    input_index: dict[Value, int] = {}
    stored: dict[str, tuple[int, tuple[int, ...]]] = {}  # input name -> (k, its layout)
    for k, (n, m, s) in enumerate(zip(placeholders, metas, state)):
        if not isinstance(m, torch.Tensor):
            vals[n] = m
            continue
        dtype = np_dtype(m.dtype)
        if s and args is not None:
            t = args[k].detach()
            if t.device.type != "cpu":
                raise Unsupported("input", "a parameter not on the CPU")
            vals[n] = L.const(to_numpy(t))
        elif s:
            vals[n] = L.const(np.zeros(tuple(m.shape), dtype))
        else:
            shape = tuple(int(d) for d in m.shape)
            lay = layouts[k] if layouts is not None else None
            if lay is not None:  # stored permuted: declared in its memory's order
                v = b.input(tuple(shape[i] for i in lay), wide_dtype(dtype))
            else:
                v = b.input(shape, wide_dtype(dtype))
            if v.const is None:
                input_index[v] = k
                stored[v.name] = (k, lay or tuple(range(len(shape))))
            if lay is not None:
                v = replace(v, shape=shape, layout=lay)
            # bfloat16 is held in float32 (onnx/narrow.py), rounded after each operator
            vals[n] = replace(v, narrow=dtype) if is_narrow(dtype) else v
    output = None
    for n in fx.graph.nodes:
        if n.op == "output":
            output = n
            break
        if n.op != "placeholder":
            try:
                _node(fx, n, L, vals, concrete)
            except Unsupported as exc:
                exc.node = n
                raise
    assert output is not None
    produced: list[Value] = []
    at: dict[str, int] = {}  # name -> its position in produced

    def produce(v: Value) -> int:
        if not v.name:  # a constant (all named "")
            produced.append(v)
            return len(produced) - 1
        if v.name not in at:
            at[v.name] = len(produced)
            produced.append(v)
        return at[v.name]

    plan: list[tuple[str, Any]] = []
    nodes = list(output.args[0])
    reps = _representatives(nodes, vals, stored)
    reshapes: dict[str, tuple[str, tuple[int, ...]]] | None = None
    for pos, (r, base) in enumerate(zip(_resolve(nodes, vals), reps)):
        if base is not None and isinstance(r, Value):
            # a row-major reshape of another value: PyTorch's view of that one
            # (a graph output too, often: a forward saves relu(x) and its view)
            plan.append(("reshape", (produce(base), r.shape)))
        elif isinstance(r, Value) and r.const is None and r.name in stored:
            # an input handed back, or a permutation of one (``t(W)`` a forward
            # graph saves): PyTorch's view of the input, not a copy
            k, lay = stored[r.name]
            out = r.layout or tuple(range(r.rank))
            inv = [int(i) for i in np.argsort(out)]
            perm = tuple(lay[i] for i in inv)
            plan.append(("input", k) if perm == tuple(range(r.rank)) else ("view", (k, perm)))
        elif (
            isinstance(r, Value)
            and r.layout is not None
            and r.const is None
            and free_outputs is not None
            and pos >= free_outputs
        ):
            # stored permuted (channels-last, attention's heads ...): returned as
            # PyTorch's permuted view of the stored tensor, which the backward
            # reads as it is; a stored tensor that is a Tile reshape of another
            # is viewed from that one (so it can stay a temporary that
            # ``alias_reshape`` removes)
            if reshapes is None:
                reshapes = _tile_reshapes(b)
            name, shape = r.name, r.phys_shape
            while name in reshapes and reshapes[name][0] in reshapes:
                name = reshapes[name][0]
                shape = reshapes[name][1]
            base = replace(r, name=name, shape=shape, layout=None)
            order = tuple(int(i) for i in np.argsort(r.layout))
            plan.append(("permuted", (produce(base), r.phys_shape, order)))
        elif isinstance(r, Value):
            plan.append(("value", produce(r)))
        elif isinstance(r, (tuple, list)):
            raise Unsupported("output", "a tuple-valued output")
        else:
            plan.append(("literal", r))
    return Translation(b, produced, input_index, plan)


_RESHAPE_STATEMENT = re.compile(r"(\w+) = reshape\((\w+), ([\d, ]+)\);")


def _tile_reshapes(b: Builder) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Per tensor the Tile program makes with ``reshape``: its source and shape."""
    out = {}
    for text in b.statements:
        m = _RESHAPE_STATEMENT.fullmatch(text)
        if m is not None:
            out[m[1]] = (m[2], tuple(int(d) for d in m[3].split(",")))
    return out


#: ATen operators that keep row-major order (views, and the identities that the
#: translation already gives their argument's value: ``clone`` ...): graph
#: outputs made by chains of them from one computed value are returned as
#: PyTorch's views of one of them.
_RESHAPES = frozenset(
    {"view", "_unsafe_view", "reshape", "squeeze", "unsqueeze", "flatten", "view_as"}
    | {"_reshape_alias", "unflatten", "alias", "clone", "detach", "contiguous"}
)


def _chain(node: Any, vals: dict[Any, Any], stored: dict[str, Any]) -> tuple[Any, list[Value]]:
    """The values from graph output ``node`` down a chain of ``_RESHAPES`` to the
    node it starts from (that node, and the values: ``node``'s first), as long as
    each is a value the program computes (not an input), row-major, of one
    type."""
    import torch

    first = vals.get(node)
    n, chain = node, []
    while isinstance(n, torch.fx.Node):
        v = vals.get(n)
        if (
            not isinstance(v, Value)
            or not v.name
            or v.name in stored
            or v.layout is not None
            or not isinstance(first, Value)
            or (v.dtype, v.narrow) != (first.dtype, first.narrow)
        ):
            break
        chain.append(v)
        if not (
            n.op == "call_function"
            and op_name(n.target) in _RESHAPES
            and isinstance(n.args[0], torch.fx.Node)
        ):
            return n, chain
        n = n.args[0]
    return (chain and n), chain


def _representatives(outputs: list[Any], vals: dict[Any, Any], stored: dict[str, Any]) -> list[Any]:
    """Per graph output: the value the program computes for it and PyTorch views
    in its shape (None: the output's own).  Outputs reshaped from one value share
    one: the one of fewest dimensions among those values (the coarsest: the
    finer ones are then temporaries, which ``alias_reshape`` removes, or not
    computed at all)."""
    chains = [_chain(n, vals, stored) for n in outputs]
    family: dict[Any, list[Value]] = {}
    for root, chain in chains:
        if chain:
            family.setdefault(root, []).extend(chain)
    best = {root: min(members, key=lambda v: len(v.shape)) for root, members in family.items()}
    out: list[Any] = []
    for (root, chain), node in zip(chains, outputs):
        rep = best.get(root) if chain else None
        own = vals.get(node)
        same = rep is None or (isinstance(own, Value) and own.name == rep.name)
        out.append(None if same else rep)
    return out


def _node(fx: Any, n: Any, L: Lowering, vals: dict[Any, Any], concrete: Any) -> None:
    """Write node ``n`` (not a placeholder or the output); its value in ``vals``."""
    import torch

    if n.op == "get_attr":
        t = getattr(fx, str(n.target))
        vals[n] = L.const(to_numpy(t.detach().cpu()).copy()) if isinstance(t, torch.Tensor) else t
        return
    if n.op != "call_function":
        raise Unsupported(n.op, "only ATen operator calls are translated")
    meta = concrete[n] if concrete is not None else n.meta.get("val")
    if not isinstance(meta, (torch.Tensor, tuple, list)) or op_name(n.target) == "getitem":
        if op_name(n.target) == "getitem" and not isinstance(meta, (int, float)):
            vals[n] = _resolve(n.args[0], vals)[n.args[1]]
            if vals[n] is None:
                raise Unsupported("getitem", "an output the translation does not produce")
            return
        if op_name(n.target) in IGNORED:
            return
        if meta is not None and not isinstance(meta, torch.Tensor):
            vals[n] = _number(meta)  # a size, computed by PyTorch's trace
            return
    a = _resolve(list(n.args), vals)
    kw = _resolve(dict(n.kwargs), vals)
    L.where = n.name
    L.used = {u.args[1] for u in n.users if op_name(u.target) == "getitem"}
    if any(op_name(u.target) != "getitem" for u in n.users):
        L.used = None
    first = meta[0] if isinstance(meta, (tuple, list)) else meta
    out: Any = write(L, n.target, a, kw, first)
    if isinstance(out, Value) and isinstance(meta, torch.Tensor):
        out = _checked(L, out, meta, n)
    elif isinstance(out, tuple) and isinstance(meta, (tuple, list)):
        out = tuple(
            _checked(L, x, m, n) if isinstance(x, Value) and isinstance(m, torch.Tensor) else x
            for x, m in zip(out, meta)
        )
    vals[n] = out


def symbolic(n: Any) -> bool:
    """A placeholder whose value dynamo left with symbolic sizes (or a SymInt)."""
    import torch

    val = n.meta.get("val")
    if isinstance(val, torch.Tensor):
        return any(isinstance(d, torch.SymInt) for d in val.shape)
    return val is not None


def _number(x: Any) -> Any:
    import torch

    if isinstance(x, torch.SymInt):
        return int(x)
    if isinstance(x, torch.SymFloat):
        return float(x)
    if isinstance(x, torch.SymBool):
        return bool(x)
    return x


def _resolve(x: Any, vals: dict[Any, Any]) -> Any:
    import torch

    if isinstance(x, torch.fx.Node):
        return vals[x]
    if isinstance(x, (list, tuple)):
        return type(x)(_resolve(a, vals) for a in x)
    if isinstance(x, dict):
        return {k: _resolve(a, vals) for k, a in x.items()}
    return _number(x)


def _checked(L: Lowering, v: Value, meta: Any, n: Any) -> Value:
    """``v`` with the shape PyTorch says the node has, in its dtype."""
    shape = tuple(int(d) for d in meta.shape)
    if v.shape != shape:
        raise Unsupported(full_name(n.target), f"made shape {v.shape}, PyTorch says {shape}")
    return L.cast(v, np_dtype(meta.dtype))


def _concrete(fx: Any, args: list[Any]) -> dict[Any, Any]:
    """Every node's value for these real inputs (tensors as their metadata only):
    the graph run once, eagerly, where dynamo left sizes symbolic."""
    import torch

    seen: dict[Any, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            out = super().run_node(n)
            seen[n] = (
                torch.empty(out.shape, dtype=out.dtype, device="meta")
                if isinstance(out, torch.Tensor)
                else tuple(
                    torch.empty(o.shape, dtype=o.dtype, device="meta")
                    if isinstance(o, torch.Tensor) else o for o in out
                )
                if isinstance(out, (tuple, list))
                else out
            )  # fmt: skip
            return out

    with torch.no_grad():
        Recorder(fx).run(*args)
    return seen
