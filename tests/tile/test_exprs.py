"""Expression utilities: affine conversion, size evaluation, index sets, printing."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stripeml.errors import TileTypeError
from stripeml.tile import ast
from stripeml.tile.exprs import (
    contraction_indices,
    eval_size,
    format_expr,
    indices_of,
    poly_to_affine,
)
from stripeml.tile.parser import parse

DIMS = {"N": 10, "X": 7, "K": 3}


def expr(text: str) -> ast.Expr:
    """Parse ``text`` as an elementwise expression (the grammar is shared)."""
    (stmt,) = parse(f"function () -> (O) {{ O = {text}; }}").stmts
    assert isinstance(stmt, ast.Assignment)
    return stmt.expr


def contraction(text: str) -> ast.Contraction:
    (stmt,) = parse(f"function () -> (O) {{ {text}; }}").stmts
    assert isinstance(stmt, ast.Contraction)
    return stmt


@pytest.mark.parametrize(
    ("text", "coeffs", "const"),
    [
        ("i", {"i": 1}, 0),
        ("7", {}, 7),
        ("X - 1 - x", {"x": -1}, 6),
        ("2 * x + i - 1", {"x": 2, "i": 1}, -1),
        ("x * 3 - (i - k) * -2", {"x": 3, "i": 2, "k": -2}, 0),
        ("-(i + N)", {"i": -1}, -10),
        ("i - i + 4", {}, 4),
        ("N / 3 + i", {"i": 1}, 3),
        ("(N - 1) * K * i", {"i": 27}, 0),
        ("0 * i + j", {"j": 1}, 0),
    ],
)
def test_poly_to_affine(text: str, coeffs: dict[str, int], const: int) -> None:
    assert poly_to_affine(expr(text), DIMS) == (coeffs, const)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("i * j", "'i * j' multiplies two indices"),
        ("i / 2", "'i / 2' divides an index"),
        ("N / (K - 3)", "division by zero"),
        ("i + Z", "unknown dimension 'Z'"),
        ("i % 2", "'i % 2' is not allowed"),
        ("1.5 * i", "'1.5' is not allowed"),
        ("exp(i)", "'exp(i)' is not allowed"),
    ],
)
def test_poly_to_affine_errors(text: str, fragment: str) -> None:
    e = expr(text)
    with pytest.raises(TileTypeError, match=re.escape(fragment)):
        poly_to_affine(e, DIMS)


def test_poly_error_names_position() -> None:
    (stmt,) = parse("function (A) -> (O) {\n  O[i : 3] = +(A[i + 2 * (j * k)]);\n}").stmts
    assert isinstance(stmt, ast.Contraction)
    with pytest.raises(TileTypeError) as info:
        poly_to_affine(stmt.operands[0].indices[0], {})
    assert str(info.value).startswith("2:27: 'j * k' multiplies two indices")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("N", 10),
        ("X / 2", 3),
        ("-X / 2", -4),  # floor division
        ("(N + X) * 2 - K", 31),
        ("N - 2 * (K - 1)", 6),
        ("-(-N)", 10),
    ],
)
def test_eval_size(text: str, value: int) -> None:
    assert eval_size(expr(text), DIMS) == value


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("N / (K - 3)", "division by zero"),
        ("Z + 1", "unknown dimension 'Z'"),
        ("N + i", "index 'i' in a size expression"),
        ("N % 2", "not allowed in a size expression"),
        ("2.0", "not allowed"),
    ],
)
def test_eval_size_errors(text: str, fragment: str) -> None:
    with pytest.raises(TileTypeError, match=re.escape(fragment)):
        eval_size(expr(text), DIMS)


def test_indices_of() -> None:
    assert indices_of(expr("2 * x + i - X + max(k, N)")) == {"x", "i", "k"}
    assert indices_of(expr("N + 1")) == set()


def test_contraction_indices_in_order_of_appearance() -> None:
    c = contraction("O[n, x : N, X] = +(I[n, x + k] * W[k, c]), c - n < q + 3")
    assert contraction_indices(c) == ["n", "x", "k", "c", "q"]


@pytest.mark.parametrize(
    "text",
    [
        "a + b * c",
        "(a + b) * c",
        "a - (b - c)",
        "a - b - c",
        "-(a + b)",
        "--a",
        "!(a && b) || c",
        "a ? b : c ? d : e",
        "(a ? b : c) ? d : e",
        "a ? b ? c : d : e",
        "max(a + 1, -b) / 2.5",
        "a < (b == c)",
        "a % (b * c)",
        "a | b ^ c & d",
        "(a | b) & c",
        "a & b == c",
        "(a & b) == c",
        "a << b + c",
        "(a << b) + c",
        "a << b < c >> d",
        "a << (b < c)",
        "~a & ~(b | c)",
        "-~!a",
        "a >> b >> c",
        "a >> (b >> c)",
        "a && b | c",
        "(a && b) | c",
    ],
)
def test_format_expr_round_trips(text: str) -> None:
    e = expr(text)
    assert format_expr(e) == text
    assert _strip(expr(format_expr(e))) == _strip(e)


def _strip(node: object) -> object:
    """``node`` as nested tuples without positions."""
    if isinstance(node, tuple):
        return tuple(_strip(n) for n in node)
    if dataclasses.is_dataclass(node):
        fields = [f.name for f in dataclasses.fields(node) if f.name != "pos"]
        return (type(node).__name__, *(_strip(getattr(node, f)) for f in fields))
    return node


_atoms = st.sampled_from(["a", "B", "1", "2.5"]).map(expr)
_exprs = st.recursive(
    _atoms,
    lambda sub: st.one_of(
        st.builds(
            lambda op, lhs, rhs: ast.Binary(op, lhs, rhs, ast.Pos(1, 1)),
            st.sampled_from(
                ["+", "-", "*", "/", "%", "<", "==", "&&", "||", "<=", "!="]
                + ["&", "|", "^", "<<", ">>"]
            ),
            sub,
            sub,
        ),
        st.builds(lambda op, e: ast.Unary(op, e, ast.Pos(1, 1)), st.sampled_from("-!~"), sub),
        st.builds(lambda c, a, b: ast.Ternary(c, a, b, ast.Pos(1, 1)), sub, sub, sub),
        st.builds(lambda a, b: ast.Call("max", (a, b), ast.Pos(1, 1)), sub, sub),
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(_exprs)
def test_format_expr_round_trips_random_trees(e: ast.Expr) -> None:
    assert _strip(expr(format_expr(e))) == _strip(e)
