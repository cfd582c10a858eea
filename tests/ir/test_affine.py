"""Affine expressions: arithmetic, substitution, text."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stripeml.errors import IRSyntaxError
from stripeml.ir import Affine
from stripeml.ir.parser import parse_affine
from stripeml.ir.printer import format_affine

x, y, z = Affine.index("x"), Affine.index("y"), Affine.index("z")


def test_construction_keeps_terms_sorted_and_nonzero():
    assert Affine.build({"y": 2, "x": -1, "z": 0}, 3) == Affine((("x", -1), ("y", 2)), 3)
    assert Affine.index("x", 0) == Affine()
    assert Affine.lift(4) == Affine.constant(4)
    with pytest.raises(ValueError):
        Affine((("y", 1), ("x", 1)))
    with pytest.raises(ValueError):
        Affine((("x", 0),))


def test_arithmetic():
    assert x + y - x == y
    assert (x + 1) + (y - 3) == Affine.build({"x": 1, "y": 1}, -2)
    assert 5 + x == x + 5
    assert 5 - x == Affine.build({"x": -1}, 5)
    assert -(2 * x - y + 1) == Affine.build({"x": -2, "y": 1}, -1)
    assert (x + 2) * 3 == 3 * (x + 2) == Affine.build({"x": 3}, 6)
    assert (x + y) * 0 == Affine()
    assert x * np.int64(2) == 2 * x
    with pytest.raises(TypeError):
        x * x  # noqa: B018 - not affine
    with pytest.raises(TypeError):
        x * 1.5  # noqa: B018


def test_queries():
    e = 2 * x - y + 7
    assert e.coeffs == {"x": 2, "y": -1}
    assert e.names == ("x", "y")
    assert e.coeff("x") == 2 and e.coeff("z") == 0
    assert not e.is_constant and Affine.constant(3).is_constant


def test_substitute_and_rename():
    e = 2 * x - y + 1
    assert e.substitute({"x": y + 3}) == y + 7
    assert e.substitute({"x": 4}) == 9 - y
    assert e.substitute({}) == e
    assert e.substitute({"y": 2 * x}) == Affine.constant(1)
    assert e.rename({"x": "a", "y": "b"}) == Affine.build({"a": 2, "b": -1}, 1)


def test_evaluate():
    e = 2 * x - y + 1
    assert e.evaluate({"x": 3, "y": 1}) == 6
    got = e.evaluate({"x": np.arange(3), "y": np.ones(3, dtype=np.int64)})
    assert got.tolist() == [0, 2, 4]


@pytest.mark.parametrize(
    "expr, text",
    [
        (Affine(), "0"),
        (Affine.constant(-4), "-4"),
        (x, "x"),
        (-x, "-x"),
        (2 * x - y + 3, "2*x - y + 3"),
        (-3 * x + 2 * y - 1, "-3*x + 2*y - 1"),
        (x - 5, "x - 5"),
    ],
)
def test_str(expr: Affine, text: str):
    assert str(expr) == text
    assert format_affine(expr) == text
    assert parse_affine(text) == expr
    assert repr(expr) == f"Affine({text!r})"


def test_format_quotes_odd_names():
    e = Affine.build({"in": 1, "a b": -2, "$s": 3, "k.0": 1}, 0)
    text = format_affine(e)
    assert text == '3*$s - 2*"a b" + "in" + k.0'
    assert parse_affine(text) == e


def test_parse_accepts_other_spellings():
    assert parse_affine("x*2 + 3 - x") == x + 3
    assert parse_affine("-2*x+y") == y - 2 * x
    assert parse_affine("1 - 1") == Affine()


names = st.one_of(st.sampled_from(["x", "y", "kx", "io", "$i", "in", "a.b"]), st.text(max_size=4))
affines = st.builds(
    Affine.build,
    st.dictionaries(names, st.integers(-1000, 1000), max_size=4),
    st.integers(-(2**63), 2**63 - 1),
)


@given(affines)
def test_text_round_trip(e: Affine):
    assert parse_affine(format_affine(e)) == e


def test_integers_past_int64_are_syntax_errors():
    assert parse_affine("x - 9223372036854775808") == x - 2**63
    for text in ("x + 9223372036854775808", "99999999999999999999999 * x", "-9223372036854775809"):
        with pytest.raises(IRSyntaxError, match="past the int64 range"):
            parse_affine(text)


@given(affines, affines, st.integers(-5, 5))
def test_arith_laws(a: Affine, b: Affine, k: int):
    assert a + b == b + a
    assert (a + b) - b == a
    assert k * (a + b) == k * a + k * b
    assert a.substitute({n: Affine.index(n) for n in a.names}) == a
