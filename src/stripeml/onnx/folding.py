"""The values of one ONNX node: folded at import when its inputs are all known,
else its Tile statements written into the program.

:func:`fold` runs a node whose inputs are all constants once, on the
interpreter, so shape arithmetic and weight preprocessing never reach the
generated program; :data:`Folds` remembers, per model, what a node folded to
for the input arrays it had (another input shape folds again only the nodes
whose inputs changed).  Any other node is written in its layout-aware form
(:func:`.layout.dispatch`) when there is one, else as the op library writes it
on logical inputs.  :func:`.importer.run_node` calls :func:`write` for every
node.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..phases import phase
from .builder import Builder, Node, Value
from .graph import NodeInfo
from .layout import dispatch
from .registry import OpDef

#: Folded nodes: (id of the node, ids of its input arrays) -> (what keeps those
#: alive, the outputs).
Folds = dict[tuple[object, ...], tuple[tuple[object, ...], tuple["Value | None", ...]]]


def write(
    b: Builder,
    d: OpDef,
    node: Node,
    info: NodeInfo | None = None,
    folds: Folds | None = None,
) -> list[Value | None]:
    """The values of ``node``'s outputs: folded when its inputs are all known,
    else written into ``b``."""
    present = [v for v in node.inputs if v is not None]
    if d.foldable and all(v.const is not None for v in present):
        key = None
        if folds is not None and info is not None:
            key = (id(info), tuple(None if v is None else id(v.const) for v in node.inputs))
            hit = folds.get(key)
            if hit is not None:
                return list(hit[1])
        with phase("onnx fold", whole=True):
            outs = fold(d, node)
        if key is not None and all(v is None or v.const is not None for v in outs):
            # the node and its input arrays are kept with the entry: their ids stay theirs
            assert folds is not None
            folds[key] = ((info, *(v.const for v in present)), tuple(outs))
        return outs
    b.comment(f"{node.op_type} {node.name}".rstrip())
    laid_out = dispatch(b, d, node)
    if laid_out is not None:
        return laid_out
    logical = tuple(None if v is None else b.logical(v) for v in node.inputs)
    return d.fn(b, replace(node, inputs=logical))


def fold(d: OpDef, node: Node) -> list[Value | None]:
    """Evaluate a node whose inputs are all constants, at import time."""
    from .. import api

    sub = Builder()
    local = tuple(None if v is None else Value("", v.shape, v.dtype, v.const) for v in node.inputs)
    node = replace(node, inputs=local)
    outs = d.fn(sub, node)
    pending = [(i, v) for i, v in enumerate(outs) if v is not None and v.const is None]
    if not pending:
        return outs
    names = []
    for _, v in pending:
        if any(v is p for p in sub.params) or v.name in names:
            v = sub.eltwise(v.name, v.shape, v.dtype)
        names.append(v.name)
    source = sub.source(names)
    fn = api.compile(source, "interp", name=f"fold_{node.op_type}")
    sub.check(fn.ast)
    results = fn(*[p.const for p in sub.params])
    if not isinstance(results, tuple):
        results = (results,)
    folded = list(outs)
    for (i, v), arr in zip(pending, results):
        folded[i] = Value("", v.shape, v.dtype, np.asarray(arr))
    return folded
