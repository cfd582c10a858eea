"""Emission: a finished trace (:mod:`._core`) as Tile source text, with the
Python line that wrote each statement (for error messages), and the adjoint
statements of ``E.gradients`` appended."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..autodiff import AutodiffError, adjoint_statements
from ..errors import StripeError
from ._core import (
    Tensor,
)
from ._poly import (
    Dim,
)
from ._trace import (
    Contraction,
    GradNode,
    Loc,
    Trace,
    Tree,
    assigned_names,
    misuse,
    text_of,
)


# --------------------------------------------------------------------- emission
@dataclass
class Emitted:
    """The generated program and, per line of it, the Python line that wrote it."""

    source: str
    lines: dict[int, tuple[Loc, str]]  # Tile line -> (python loc, Tile text)
    header: list[tuple[int, int, Loc, str]]  # (first col, last col, loc, text) per param


def emit(
    trace: Trace, params: list[Tensor], outputs: list[Tensor], def_loc: Loc, ret_loc: Loc
) -> Emitted:
    # Uses: a tensor becomes a statement unless it is an elementwise node used
    # once, by an elementwise node written on the same Python line.
    users: dict[int, list[Any]] = {}

    def use(t: Any, by: Any) -> None:
        if isinstance(t, Tensor):
            users.setdefault(id(t), []).append(by)
        elif isinstance(t, tuple):
            for x in t[1:]:
                if isinstance(x, list):
                    for y in x:
                        use(y, by)
                else:
                    use(x, by)

    for n in trace.nodes:
        if isinstance(n, GradNode):
            use(n.loss, n)
            use(n.loss, n)  # always named: the output of the adjoint's prefix
        elif isinstance(n, Contraction):
            for a in n.combo.accesses:
                use(a.tensor, n)
            if n.output.default is not None:
                use(n.output.default, n)
        elif n.kind == "builtin":
            assert n.tree is not None
            for x in n.tree[2]:
                if isinstance(x, Tensor):
                    use(x, n)
                    use(x, n)  # always named
        elif n.kind == "eltwise":
            assert n.tree is not None
            use(n.tree, n)
            if n.tree[0] == "call" and n.tree[1] == "index":
                use(n.tree[2][0], n)  # index(X, axis) names X
    for o in outputs:
        users.setdefault(id(o), []).extend([None, None])

    def inlined(t: Tensor) -> bool:
        if t.kind != "eltwise":
            return False
        us = users.get(id(t), [])
        return (
            len(us) == 1
            and isinstance(us[0], Tensor)
            and us[0].kind == "eltwise"
            and (us[0].loc == t.loc)
        )

    def resolve(t: Tensor) -> Tree:
        if t.kind == "eltwise" and inlined(t):
            assert t.tree is not None
            return t.tree
        assert t.name is not None, t
        return ("name", t.name)

    body: list[tuple[Loc, str]] = []
    for n in trace.nodes:
        if isinstance(n, Contraction):
            body.append((n.loc, _contraction_text(n)))
            continue
        if isinstance(n, GradNode):
            _emit_gradients(trace, n, params, body, def_loc, ret_loc)
            continue
        if n.kind in ("param", "output", "gradient") or inlined(n):
            continue
        if n.name is None:
            found = assigned_names(n.loc)
            if found is not None and len(found) == 1 and trace.last_on_line.get(n.loc) is n:
                n.name = trace.fresh(found[0], True, "")
            else:
                n.name = trace.temp()
        assert n.tree is not None
        body.append((n.loc, f"{n.name} = {text_of(n.tree, resolve)};"))

    return _assemble(params, [o.name or "" for o in outputs], body, def_loc, ret_loc)


def _assemble(
    params: list[Tensor],
    outputs: list[str],
    body: list[tuple[Loc, str]],
    def_loc: Loc,
    ret_loc: Loc,
) -> Emitted:
    head = "function ("
    header = []
    for i, p in enumerate(params):
        text = p.name or ""
        if p.dims is not None:
            text += f"[{', '.join(map(str, p.dims))}]"
        if i:
            head += ", "
        header.append((len(head) + 1, len(head) + len(text), p.dims_loc or def_loc, text))
        head += text
    arrow = len(head) + 1
    head += f") -> ({', '.join(outputs)}) {{"
    header.append((arrow, len(head), ret_loc, head))
    lines = {1: (def_loc, head)}
    src = [head]
    for loc, text in body:
        src.append(f"    {text}")
        lines[len(src)] = (loc, text)
    src.append("}")
    lines[len(src)] = (ret_loc, "}")
    return Emitted("\n".join(src) + "\n", lines, header)


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _emit_gradients(
    trace: Trace,
    n: GradNode,
    params: list[Tensor],
    body: list[tuple[Loc, str]],
    def_loc: Loc,
    ret_loc: Loc,
) -> None:
    """Append the adjoint of ``body`` (the statements written before ``n``) for
    ``n``'s loss, naming ``n``'s results."""
    names = [trace.fresh(want, True, f"D{w.name}") for want, w in zip(n.want, n.wrt)]
    assert n.loss.name is not None
    prefix = _assemble(params, [n.loss.name], body, def_loc, ret_loc)
    try:
        adj = adjoint_statements(
            prefix.source, n.loss.name, [w.name or "" for w in n.wrt], names, sorted(trace.used)
        )
    except AutodiffError as e:
        message = str(e).removeprefix("grad: ")
        raise misuse(f"E.gradients: {message}", n.loc) from None
    except StripeError as e:  # the Tile frontend, about a statement written before
        e.edsl_emitted = prefix  # type: ignore[attr-defined]
        raise
    for p in params:
        if p.name in adj.param_dims and p.dims is None:
            p.dims = tuple(Dim(d) for d in adj.param_dims[p.name])
            trace.used.update(adj.param_dims[p.name])
    for text in adj.statements:
        body.append((n.loc, text))
        trace.used.update(_IDENT.findall(text))
    for r, name in zip(n.results, names):
        r.name = name


def _contraction_text(c: Contraction) -> str:
    out = c.output
    idx = ", ".join(map(str, c.indices))
    sizes = ", ".join(map(str, out.sizes))
    lhs = f"{out.name}[{idx} : {sizes}]" if out.sizes else f"{out.name}[]"
    acc = [f"{a.tensor.name}[{', '.join(map(str, a.indices))}]" for a in c.combo.accesses]
    combo = {
        "none": lambda: acc[0],
        "mul": lambda: f"{acc[0]} * {acc[1]}",
        "add": lambda: f"{acc[0]} + {acc[1]}",
        "eq": lambda: f"{acc[0]} == {acc[1]}",
        "dot4": lambda: f"dot4({acc[0]}, {acc[1]})",
        "cond": lambda: f"{acc[0]} == {acc[1]} ? ({acc[2]})",
    }[c.combo.kind]()
    text = f"{lhs} = {c.agg}({combo})"
    for poly, bound, _ in c.constraints:
        text += f", {poly} < {bound}"
    if out.default is not None:
        text += f", default {out.default.name}"
    return text + ";"
