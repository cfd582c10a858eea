"""What the differentiator (``_core``) and its adjoint rules (``_rules``) share:
the error, the operations without a gradient, the split forward operation, and
helpers that write Tile text (index lists, accesses, sizes, fresh names) or
take index polynomials apart.  Shapes are tuples of Tile size expressions."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import StripeError
from ..tile import ast
from ..tile.exprs import VIEW_BITS, format_expr

NOWHERE = ast.Pos(0, 0)
AGG_TOKEN = {v: k for k, v in ast.AGG_OPS.items()}

Shape = tuple[str, ...]

#: Elementwise functions whose derivative is zero or undefined: no gradient
#: flows through them (their results are piecewise constant, integers or bools).
NO_GRADIENT_FUNCTIONS = frozenset(
    {"floor", "ceil", "round", "index", "as_int", "as_uint", "as_bool"}
    | {"bitcast_float", "bitcast_int", "bitcast_uint"}
)
#: Binary operators whose result carries no gradient (bools, integer bit ops).
NO_GRADIENT_OPS = frozenset(
    {"<", ">", "<=", ">=", "==", "!=", "&&", "||", "&", "|", "^", "<<", ">>"}
)


class AutodiffError(StripeError):
    """A program (or a request) that :func:`stripeml.grad` cannot differentiate."""


@dataclass(frozen=True)
class Op:
    """One forward statement after splitting: an elementwise operation whose
    operands are atoms, or an original contraction / builtin."""

    out: str
    node: ast.Expr | ast.Contraction | ast.Builtin


def idx(polys: Iterable[str]) -> str:
    return ", ".join(polys)


def access(tensor: str, polys: Sequence[str]) -> str:
    return f"{tensor}[{idx(polys)}]"


def paren(text: str) -> str:
    return text if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*|\d+", text) else f"({text})"


def max_size(a: str, b: str) -> str:
    """``max(a, b)`` in Tile size arithmetic, for two sizes that broadcast
    (equal, or one of them 1; both at least 1): ``min = a / ((a + b - 1) / b)``
    and ``max = a + b - min``."""
    a, b = paren(a), paren(b)
    return f"{a} + {b} - {a} / (({a} + {b} - 1) / {b})"


def broadcast(shapes: Sequence[Shape]) -> Shape:
    rank = max((len(s) for s in shapes), default=0)
    out: list[str] = []
    for k in range(rank):
        sizes = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        distinct = list(dict.fromkeys(x for x in sizes if x != "1"))
        if not distinct:
            out.append("1")
            continue
        size = distinct[0]
        for other in distinct[1:]:
            size = max_size(size, other)
        out.append(size)
    return tuple(out)


class Names:
    """Fresh upper-case names that no name of the source uses."""

    def __init__(self, source: str) -> None:
        self.used = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source))

    def fresh(self, base: str) -> str:
        name, k = base, 2
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name


def tensor_names(e: ast.Expr, tensors: set[str]) -> list[str]:
    out: list[str] = []
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, ast.Name) and x.name in tensors:
            out.append(x.name)
        elif isinstance(x, ast.Unary):
            stack.append(x.operand)
        elif isinstance(x, ast.Binary):
            stack += [x.lhs, x.rhs]
        elif isinstance(x, ast.Ternary):
            stack += [x.cond, x.then, x.other]
        elif isinstance(x, ast.Call):
            stack += list(x.args)
    return out


def atom_text(e: ast.Expr) -> str:
    return paren(format_expr(e))


@dataclass(frozen=True)
class Solved:
    """A contraction's index polynomials (text) after ``_rules.AdjointRules._solved``."""

    out: list[str]  # the output's
    ops: list[list[str]]  # each operand's
    cons: list[tuple[str, str]]  # (poly, bound) of each constraint


def index_terms(e: ast.Expr) -> list[tuple[int, ast.Expr]]:
    """The signed additive terms of an index polynomial."""
    if isinstance(e, ast.Binary) and e.op in ("+", "-"):
        sign = 1 if e.op == "+" else -1
        return index_terms(e.lhs) + [(sign * s, t) for s, t in index_terms(e.rhs)]
    if isinstance(e, ast.Unary) and e.op == "-":
        return [(-s, t) for s, t in index_terms(e.operand)]
    return [(1, e)]


def sum_terms(terms: Sequence[tuple[int, ast.Expr]]) -> ast.Expr:
    if not terms:
        return ast.IntLit(0, NOWHERE)
    sign, first = terms[0]
    out: ast.Expr = first if sign > 0 else ast.Unary("-", first, NOWHERE)
    for sign, t in terms[1:]:
        out = ast.Binary("+" if sign > 0 else "-", out, t, NOWHERE)
    return out


def expr_names(e: ast.Expr) -> set[str]:
    if isinstance(e, ast.Name):
        return {e.name}
    if isinstance(e, ast.Unary):
        return expr_names(e.operand)
    if isinstance(e, ast.Binary):
        return expr_names(e.lhs) | expr_names(e.rhs)
    if isinstance(e, ast.Ternary):
        return expr_names(e.cond) | expr_names(e.then) | expr_names(e.other)
    if isinstance(e, ast.Call):
        return set().union(*(expr_names(a) for a in e.args))
    return set()


def substitute(e: ast.Expr, subs: dict[str, ast.Expr]) -> ast.Expr:
    if not subs:
        return e
    if isinstance(e, ast.Name):
        return subs.get(e.name, e)
    if isinstance(e, ast.Unary):
        return ast.Unary(e.op, substitute(e.operand, subs), e.pos)
    if isinstance(e, ast.Binary):
        return ast.Binary(e.op, substitute(e.lhs, subs), substitute(e.rhs, subs), e.pos)
    return e


#: Statement builtins that reinterpret bytes: no value of theirs is a smooth
#: function of their input's, so no gradient flows through them.
BYTE_VIEWS = frozenset(VIEW_BITS)


def refuse_integer_only(op: Op) -> None:
    """A gradient that would flow through ``dot4`` (the function or the
    combination) or a byte view is refused: they compute on the bytes of
    integers, and have no derivative (docs/autodiff.md)."""
    node = op.node
    if isinstance(node, ast.Contraction) and node.combo == "dot4":
        what, text = "the combination 'dot4' multiplies integer bytes", node.text
    elif isinstance(node, ast.Builtin) and node.func in BYTE_VIEWS:
        what, text = f"'{node.func}' reinterprets bytes", node.text
    elif isinstance(node, ast.Call) and node.func == "dot4":
        what, text = "'dot4' multiplies integer bytes", format_expr(node)
    else:
        return
    raise AutodiffError(
        f"grad: '{text}': {what}, an integer operation with no gradient, and a parameter "
        "named in wrt flows through it to an output; differentiate with respect to the "
        "parameters that do not reach it (a quantised model's float scales, say)"
    )


def reads_of(c: ast.Contraction) -> set[str]:
    reads = {a.tensor for a in c.operands}
    if c.default is not None:
        reads.add(c.default.name)
    return reads


def contraction_text(c: ast.Contraction) -> str:
    accs = [access(a.tensor, [format_expr(e) for e in a.indices]) for a in c.operands]
    combo = {
        "none": "{0}",
        "mul": "{0} * {1}",
        "add": "{0} + {1}",
        "eq": "{0} == {1}",
        "dot4": "dot4({0}, {1})",
        "cond": "{0} == {1} ? ({2})",
    }[c.combo].format(*accs)
    outs = [format_expr(e) for e in c.out_indices]
    head = f"[{idx(outs)} : {idx(format_expr(s) for s in c.sizes)}]" if outs else "[]"
    clauses = "".join(f", {format_expr(k.poly)} < {format_expr(k.bound)}" for k in c.constraints)
    if c.default is not None:
        clauses += f", default {c.default.name}"
    return f"{c.output}{head} = {AGG_TOKEN[c.agg]}({combo}){clauses};"
