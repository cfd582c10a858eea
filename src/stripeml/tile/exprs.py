"""Utilities over Tile expressions shared by the checks and the lowering.

* :func:`poly_to_affine` turns an index polynomial into integer coefficients,
* :func:`eval_size` evaluates a size expression once dimensions are bound,
* :func:`indices_of` / :func:`contraction_indices` collect index names,
* :func:`format_expr` prints an expression back as Tile text,
* :data:`FUNCTION_ARITY` and :data:`CAST_BITS` list the built-in functions,
  :data:`STATEMENT_FUNCTIONS` the builtins that are whole statements.

Naming convention (DESIGN §3): names starting with a lower-case letter are
indices; names starting with an upper-case letter are tensors or dimensions.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import TileTypeError
from ..ir.stmt_rules import REDUCTIONS, TOPK_ORDERS
from . import ast

#: Sizes, index polynomials and constraint bounds are int64 values.
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)

UNARY_FUNCTIONS = frozenset(
    "exp log sqrt tanh sigmoid sin cos tan abs erf floor ceil round relu".split()
)
BINARY_FUNCTIONS = frozenset({"pow", "max", "min"})
# Casts: the allowed bit widths of the second argument (``as_bool`` takes none).
CAST_BITS: dict[str, tuple[int, ...]] = {
    "as_float": (16, 32, 64),
    "as_int": (8, 16, 32, 64),
    "as_uint": (8, 16, 32, 64),
    "as_bool": (),
    # Bit casts: the operand's bits as a float/int/uint of its own width.
    "bitcast_float": (16, 32, 64),
    "bitcast_int": (8, 16, 32, 64),
    "bitcast_uint": (8, 16, 32, 64),
}
FUNCTION_ARITY: dict[str, int] = {
    **{f: 1 for f in UNARY_FUNCTIONS},
    **{f: 2 for f in BINARY_FUNCTIONS},
    **{f: (2 if bits else 1) for f, bits in CAST_BITS.items()},
    "index": 2,  # index(X, axis): each element's position along an axis of X (int64)
    # dot4(a, b): int32 words as four uint8 (a) times four int8 (b) bytes, summed in int32.
    "dot4": 2,
}
# Builtins that are whole statements (``O = reshape(X, 2, N);``), not expressions:
# the function name -> how a statement using it reads (for error messages).
STATEMENT_FUNCTIONS: dict[str, str] = {
    "reshape": "O = reshape(X, size, ...);",
    "gather": "O = gather(X, I, axis);",
    "scatter": "O = scatter(X, I, U, axis);",
    "scatter_nd": "O = scatter_nd(X, I, U);",
    "topk": "O = topk(X, K, axis);",
    "view_int": "O = view_int(X, bits);",
    "view_uint": "O = view_uint(X, bits);",
    "view_float": "O = view_float(X, bits);",
}
#: The byte views (``O = view_int(X, 32);``): the kind of the result's dtype, and
#: the allowed bit widths (the bit casts' own).
VIEW_BITS: dict[str, tuple[str, tuple[int, ...]]] = {
    "view_int": ("i", CAST_BITS["bitcast_int"]),
    "view_uint": ("u", CAST_BITS["bitcast_uint"]),
    "view_float": ("f", CAST_BITS["bitcast_float"]),
}
#: The words that may end a ``scatter``/``scatter_nd`` (its reduction, ``none``
#: when left out) and a ``topk`` (which elements, ``largest`` when left out):
#: the IR's words for the specials' ``reduce`` and ``order`` params.
BUILTIN_WORDS: dict[str, tuple[str, ...]] = {
    "scatter": REDUCTIONS,
    "scatter_nd": REDUCTIONS,
    "topk": TOPK_ORDERS,
}


def literal_int(expr: ast.Expr) -> int | None:
    """The value of an integer literal, possibly negated (``2``, ``-1``), else ``None``."""
    if isinstance(expr, ast.IntLit):
        return expr.value
    if isinstance(expr, ast.Unary) and expr.op == "-":
        inner = literal_int(expr.operand)
        return None if inner is None else -inner
    return None


def is_index_name(name: str) -> bool:
    """Index names start with a lower-case letter."""
    return name[:1].islower()


def is_upper_name(name: str) -> bool:
    """Tensor and dimension names start with an upper-case letter."""
    return name[:1].isupper()


def _fail(expr: ast.Expr, message: str) -> TileTypeError:
    return TileTypeError(f"{expr.pos.line}:{expr.pos.column}: {message}")


def poly_to_affine(expr: ast.Expr, dims: Mapping[str, int]) -> tuple[dict[str, int], int]:
    """Convert an index polynomial to ``(coefficients, constant)``.

    Indices (lower-case names) become coefficients; dimensions (upper-case
    names, looked up in ``dims``) and integer literals are constants.  Allowed:
    ``+``, ``-``, unary ``-``, ``*`` where one side is constant, and ``/``
    (floor) between constants.  Zero coefficients are dropped.  Anything else
    raises :class:`~stripeml.errors.TileTypeError` naming its position.
    """
    if isinstance(expr, ast.IntLit):
        return {}, expr.value
    if isinstance(expr, ast.Name):
        if is_index_name(expr.name):
            return {expr.name: 1}, 0
        if expr.name in dims:
            return {}, int(dims[expr.name])
        raise _fail(expr, f"unknown dimension '{expr.name}' in index polynomial")
    if isinstance(expr, ast.Unary) and expr.op == "-":
        coeffs, const = poly_to_affine(expr.operand, dims)
        return {k: -v for k, v in coeffs.items()}, -const
    if isinstance(expr, ast.Binary) and expr.op in ("+", "-", "*", "/"):
        lc, lk = poly_to_affine(expr.lhs, dims)
        rc, rk = poly_to_affine(expr.rhs, dims)
        if expr.op in ("+", "-"):
            sign = 1 if expr.op == "+" else -1
            coeffs = dict(lc)
            for name, c in rc.items():
                coeffs[name] = coeffs.get(name, 0) + sign * c
            return {k: v for k, v in coeffs.items() if v}, lk + sign * rk
        if expr.op == "*":
            if lc and rc:
                raise _fail(expr, f"'{format_expr(expr)}' multiplies two indices: not affine")
            scale, (coeffs, const) = (rk, (lc, lk)) if not rc else (lk, (rc, rk))
            return {k: v * scale for k, v in coeffs.items() if v * scale}, const * scale
        if lc or rc:
            raise _fail(expr, f"'{format_expr(expr)}' divides an index: not affine")
        if rk == 0:
            raise _fail(expr, f"division by zero in '{format_expr(expr)}'")
        return {}, lk // rk
    raise _fail(expr, f"'{format_expr(expr)}' is not allowed in an index polynomial")


def eval_size(expr: ast.Expr, dims: Mapping[str, int]) -> int:
    """Evaluate a size expression: integer literals and dimensions combined
    with ``+ - *``, floor ``/`` and unary ``-``.

    Raises :class:`~stripeml.errors.TileTypeError` on an unknown dimension, an
    index, division by zero or any other construct.
    """
    if isinstance(expr, ast.IntLit):
        return expr.value
    if isinstance(expr, ast.Name):
        if expr.name in dims:
            return int(dims[expr.name])
        if is_index_name(expr.name):
            raise _fail(expr, f"index '{expr.name}' in a size expression")
        raise _fail(expr, f"unknown dimension '{expr.name}' in a size expression")
    if isinstance(expr, ast.Unary) and expr.op == "-":
        return -eval_size(expr.operand, dims)
    if isinstance(expr, ast.Binary) and expr.op in ("+", "-", "*", "/"):
        lhs, rhs = eval_size(expr.lhs, dims), eval_size(expr.rhs, dims)
        if expr.op == "+":
            return lhs + rhs
        if expr.op == "-":
            return lhs - rhs
        if expr.op == "*":
            return lhs * rhs
        if rhs == 0:
            raise _fail(expr, f"division by zero in size '{format_expr(expr)}'")
        return lhs // rhs
    raise _fail(expr, f"'{format_expr(expr)}' is not allowed in a size expression")


def children(expr: ast.Expr) -> tuple[ast.Expr, ...]:
    """The direct sub-expressions of ``expr``."""
    if isinstance(expr, ast.Unary):
        return (expr.operand,)
    if isinstance(expr, ast.Binary):
        return (expr.lhs, expr.rhs)
    if isinstance(expr, ast.Ternary):
        return (expr.cond, expr.then, expr.other)
    if isinstance(expr, ast.Call):
        return expr.args
    return ()


def names_of(expr: ast.Expr) -> list[ast.Name]:
    """Every :class:`~stripeml.tile.ast.Name` in ``expr``, in source order."""
    out: list[ast.Name] = []
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Name):
            out.append(e)
        stack.extend(reversed(children(e)))
    return out


def indices_of(expr: ast.Expr) -> set[str]:
    """The index names (lower-case initial) used in ``expr``."""
    return {n.name for n in names_of(expr) if is_index_name(n.name)}


def contraction_indices(stmt: ast.Contraction) -> list[str]:
    """Every index of a contraction, in order of first appearance (output
    indices, then operands, then constraints)."""
    exprs = list(stmt.out_indices)
    for access in stmt.operands:
        exprs.extend(access.indices)
    for c in stmt.constraints:
        exprs.extend((c.poly, c.bound))
    seen: dict[str, None] = {}
    for e in exprs:
        for n in names_of(e):
            if is_index_name(n.name):
                seen.setdefault(n.name)
    return list(seen)


# Precedence for printing (the parser's, C's); ternary lowest, atoms highest.
_PREC = {"?": 0, "||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6}
_PREC.update({"<": 7, ">": 7, "<=": 7, ">=": 7, "<<": 8, ">>": 8})
_PREC.update({"+": 9, "-": 9, "*": 10, "/": 10, "%": 10})
_UNARY_PREC = 11


def format_expr(expr: ast.Expr) -> str:
    """Tile text for ``expr`` with only the parentheses the grammar needs."""
    return _fmt(expr, 0)


def _fmt(expr: ast.Expr, outer: int) -> str:
    if isinstance(expr, ast.Name):
        return expr.name
    if isinstance(expr, ast.IntLit):
        return str(expr.value)
    if isinstance(expr, ast.FloatLit):
        return repr(expr.value)
    if isinstance(expr, ast.Call):
        return f"{expr.func}({', '.join(_fmt(a, 0) for a in expr.args)})"
    if isinstance(expr, ast.Unary):
        text, prec = f"{expr.op}{_fmt(expr.operand, _UNARY_PREC)}", _UNARY_PREC
    elif isinstance(expr, ast.Binary):
        prec = _PREC[expr.op]
        # left-associative: the right operand needs parentheses at equal precedence
        text = f"{_fmt(expr.lhs, prec)} {expr.op} {_fmt(expr.rhs, prec + 1)}"
    elif isinstance(expr, ast.Ternary):
        prec = 0
        text = f"{_fmt(expr.cond, 1)} ? {_fmt(expr.then, 0)} : {_fmt(expr.other, 0)}"
    else:  # pragma: no cover - exhaustive over ast.Expr
        raise TypeError(f"not a Tile expression: {expr!r}")
    return f"({text})" if prec < outer else text
