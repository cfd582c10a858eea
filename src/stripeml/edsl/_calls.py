"""The EDSL's calls that are not operators: Tile functions by name, statement
builtins (``reshape``, ``gather`` ...), and gradients of the statements traced
so far."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._core import Tensor, _operand_tree, eltwise
from ._poly import Poly
from ._trace import GradNode, Tree, assigned_names, current, misuse, scalar_tree, user_loc


def call(fn: str, *args: Any) -> Tensor:
    return eltwise(("call", fn, [_operand_tree(a) for a in args]))


def builtin(fn: str, tensors: Sequence[Any], rest: Sequence[Any]) -> Tensor:
    """A statement builtin (``reshape``, ``gather`` ...): always a statement of its own."""
    loc = user_loc()
    trace = current(f"E.{fn}")
    for x in tensors:
        if not isinstance(x, Tensor):
            raise misuse(f"E.{fn}: {x!r} is not a tensor", loc)
        _operand_tree(x)
    extra: list[Tree] = []
    for r in rest:
        if isinstance(r, str):
            extra.append(("name", r))
        elif isinstance(r, Poly):
            extra.append(r.tree)
        else:
            lit = scalar_tree(r)
            if lit is None or not isinstance(r, (int, np.integer)):
                raise misuse(f"E.{fn}: {r!r} is not an integer or a dimension expression", loc)
            extra.append(lit)
    node = Tensor(trace, "builtin", None, loc)
    node.tree = ("call", fn, [*tensors, *extra])
    trace.last_on_line[loc] = node
    return node


# --------------------------------------------------------------------- gradients
def gradients(loss: Tensor, wrt: Sequence[Tensor]) -> list[Tensor]:
    """``[d sum(loss) / d w for w in wrt]``: tensors of the traced function (each
    of its input's shape), computed by the adjoint of the statements written so
    far (:func:`stripeml.autodiff.adjoint_statements`).  ``loss`` is usually a
    scalar; any other tensor has an implicit all-ones cotangent (the gradient
    of the sum of its elements).  ``wrt``: inputs of the traced function."""
    loc = user_loc()
    trace = current("E.gradients")
    if not isinstance(loss, Tensor) or loss.trace is not trace:
        raise misuse(
            f"E.gradients: the loss must be a tensor of this traced function, got {loss!r}", loc
        )
    if loss.kind == "param":
        raise misuse(f"E.gradients: the loss {loss.name} is an input, not computed from one", loc)
    _operand_tree(loss)
    if isinstance(wrt, Tensor) or not isinstance(wrt, (list, tuple)):
        raise misuse("E.gradients(loss, wrt): wrt is a list or tuple of input tensors", loc)
    if not wrt:
        raise misuse("E.gradients: wrt is empty; name at least one input", loc)
    for w in wrt:
        if not isinstance(w, Tensor) or w.trace is not trace or w.kind != "param":
            raise misuse(
                f"E.gradients differentiates with respect to inputs of the traced function; "
                f"{w!r} is not one",
                loc,
            )
    if len({id(w) for w in wrt}) != len(wrt):
        raise misuse("E.gradients: wrt names an input twice", loc)
    found = assigned_names(loc)
    want = found if found is not None and len(found) == len(wrt) else [""] * len(wrt)
    node = GradNode(loss, tuple(wrt), want, loc)
    trace.nodes.append(node)
    node.results = tuple(Tensor(trace, "gradient", None, loc) for _ in wrt)
    return list(node.results)
