"""Control flow: ``If``.

An ``If`` whose condition is known when compiling (a constant, or computed
from shapes and constants, as in the bodies of ``AffineGrid`` and many
exported models) is replaced by the branch it takes: its nodes are written
in place, reading the values around the node by name, as ONNX scopes them.

An ``If`` whose condition is computed at run time compiles both branches
into the program and selects each output elementwise (``cond ? then : else``).
Both branches then run; ONNX nodes have no side effects, so the result is
the one the taken branch gives.  This needs each output to have the same
shape and element type in both branches: where they differ, the output's
shape would depend on the data, and the importer says so.
"""

from __future__ import annotations

from collections import ChainMap
from typing import Any

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from .shape import reshape


def _branch(n: Node, name: str) -> Any:
    """The ``GraphProto`` of attribute ``name``."""
    a: Any = n.attrs.get(name)
    if a is None or not hasattr(a, "HasField") or not a.HasField("g"):
        raise n.error(f"the {name} attribute (a graph) is required")
    return a.g


def run_subgraph(b: Builder, n: Node, g: Any, what: str) -> list[Value]:
    """Write the nodes of subgraph ``g`` of ``n`` into ``b``; its outputs.  Names
    it does not define are read from the scope of ``n``."""
    if n.nested is None:
        raise n.error("subgraphs are written only by the importer")
    local: dict[str, Value] = {}
    env: ChainMap[str, Value] = ChainMap(local, dict(n.scope or {}))
    if len(g.input):
        raise n.error(f"its {what} takes inputs; an If branch takes none")
    for t in g.initializer:
        arr = n.nested.tensor(t, f"{n.where()} {what} initializer {t.name!r}")
        local[t.name] = Value("", arr.shape, arr.dtype, arr)
    for k, node in enumerate(g.node):
        n.nested.run(b, node, k, env, n.opset, f"{n.where()} {what}:")
    outs = []
    for vi in g.output:
        v = env.get(vi.name)
        if v is None:
            raise n.error(f"its {what} does not produce its output {vi.name!r}")
        outs.append(v)
    return outs


@op("If", foldable=False)
def if_op(b: Builder, n: Node) -> list[Value | None]:
    """The branch taken; both, selected elementwise, when the condition is known only at run time."""
    cond = n.input(0)
    then_g, else_g = _branch(n, "then_branch"), _branch(n, "else_branch")
    if cond.size != 1:
        raise n.error(f"the condition must hold one element, got shape {cond.shape}")
    if cond.const is not None:
        taken = bool(np.asarray(cond.const).reshape(-1)[0])
        chosen = run_subgraph(
            b, n, then_g if taken else else_g, f"{'then' if taken else 'else'}_branch"
        )
        return list(chosen[: n.n_outputs])
    then_outs = run_subgraph(b, n, then_g, "then_branch")
    else_outs = run_subgraph(b, n, else_g, "else_branch")
    if len(then_outs) != len(else_outs):
        raise n.error(
            f"its branches produce {len(then_outs)} and {len(else_outs)} outputs; they must agree"
        )
    c = b.logical(cond)
    if c.dtype != np.bool_:
        raise n.error(f"the condition must be bool, got {c.dtype}")
    if c.rank:
        c = reshape(b, c, ())  # a scalar broadcasts against any output
    outs: list[Value | None] = []
    for k, (x, y) in enumerate(zip(then_outs, else_outs)):
        if x.shape != y.shape or x.dtype != y.dtype:
            raise n.error(
                f"output {k} is {x.dtype}{list(x.shape)} in then_branch and "
                f"{y.dtype}{list(y.shape)} in else_branch, and the condition is known only "
                "at run time: the output's shape would depend on the data (not supported)"
            )
        x, y = b.logical(x), b.logical(y)
        outs.append(b.eltwise(f"{b.ref(c)} ? {b.ref(x)} : {b.ref(y)}", x.shape, x.dtype))
    return outs[: n.n_outputs]
