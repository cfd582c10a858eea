"""Integer and float literals of any length, and constants that do not fit.

Literals parse exactly whatever their length (Python's ``int()`` refuses
strings over 4300 digits: the parser counts first); a literal over 64 bits is
a syntax error at the literal, one over int64 where the language computes in
int64 (shapes, sizes, index polynomials, constraints) a type error at the
literal, and a constant that does not fit the dtype of the tensor it meets
is a type error at the constant, as NumPy 2 raises ``OverflowError`` there.
"""

from __future__ import annotations

import importlib.util
import time

import numpy as np
import pytest

import stripeml
from stripeml.errors import TileSyntaxError, TileTypeError

_NO_OPENCL = importlib.util.find_spec("pyopencl") is None
TARGETS = [
    "interp",
    "cpu",
    pytest.param("opencl_pocl", marks=pytest.mark.skipif(_NO_OPENCL, reason="no pyopencl")),
]

HUGE = "9" * 5000
U64_MAX = (1 << 64) - 1


def position(src: str, text: str) -> tuple[int, int]:
    """1-based line and column of the first ``text`` in ``src``."""
    offset = src.index(text)
    return src.count("\n", 0, offset) + 1, offset - (src.rfind("\n", 0, offset) + 1) + 1


def assert_at(err: Exception, src: str, text: str) -> None:
    """``err`` points at ``text``: its line and column, and a caret under it."""
    line, column = position(src, text)
    assert (getattr(err, "line", None), getattr(err, "column", None)) == (line, column), err
    lines = str(err).splitlines()
    assert lines[0].startswith(f"{line}:{column}: "), err
    assert lines[-1] == "    " + " " * (column - 1) + "^", err


# -- literals too long for any dtype: syntax errors, wherever they stand ---------------------

PLACES = {
    "elementwise": "function (A[N]) -> (O) {\n  O = A + LIT;\n}",
    "size": "function (A[N]) -> (O) {\n  O[i : LIT] = +(A[i]);\n}",
    "offset": "function (A[N]) -> (O) {\n  O[i : N] = +(A[i + LIT]);\n}",
    "constraint": "function (A[N]) -> (O) {\n  O[i : N] = +(A[i]), i < LIT;\n}",
    "cast": "function (A[N]) -> (O) {\n  O = as_int(A, LIT);\n}",
    "shape": "function (A[LIT]) -> (O) {\n  O = A;\n}",
    "reshape": "function (A[N]) -> (O) {\n  O = reshape(A, LIT);\n}",
    "axis": "function (A[N], I[K]) -> (O) {\n  O = gather(A, I, LIT);\n}",
}


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("literal", [HUGE, str(1 << 64)], ids=["5000_digits", "2**64"])
def test_literal_over_64_bits_is_a_syntax_error_at_it(place: str, literal: str) -> None:
    src = PLACES[place].replace("LIT", literal)
    with pytest.raises(TileSyntaxError, match="too large: integer literals hold at most 64 bits"):
        stripeml.compile(src, target="interp")
    try:
        stripeml.compile(src, target="interp")
    except TileSyntaxError as err:
        assert_at(err, src, literal)
        assert len(str(err).splitlines()[0]) < 200  # the message quotes only the literal's ends


def test_leading_zeros_do_not_count() -> None:
    f = stripeml.compile("function (A) -> (O) { O = A + " + "0" * 5000 + "7; }", target="interp")
    np.testing.assert_array_equal(f(np.zeros(2, np.int64)), [7, 7])


@pytest.mark.parametrize("place", ["size", "offset", "constraint", "shape", "reshape"])
def test_literal_over_int64_in_an_int64_place_is_a_type_error_at_it(place: str) -> None:
    literal = str(1 << 63)
    src = PLACES[place].replace("LIT", literal)
    with pytest.raises(TileTypeError, match="does not fit int64") as info:
        stripeml.compile(src, target="interp")
    assert_at(info.value, src, literal)


# -- constants and the dtype they meet (NumPy 2's rules for Python ints) ----------------------


def bind_fails(src: str, args: list[np.ndarray], fragment: str, at: str) -> None:
    f = stripeml.compile(src, target="interp")
    with pytest.raises(TileTypeError) as info:
        f(*args)
    assert fragment in str(info.value), info.value
    assert_at(info.value, src, at)


@pytest.mark.parametrize(
    ("expr", "dtype", "const", "numpy"),
    [
        ("A + 300", np.uint8, "300", lambda a: a + 300),
        ("A - 1099511627776", np.int32, "1099511627776", lambda a: a - 1099511627776),
        ("max(A, -1)", np.uint16, "-1", lambda a: np.maximum(a, -1)),
        ("A > 0 ? A : 128", np.int8, "128", lambda a: np.add(a, 128)),  # np.where would wrap
        ("A * 9223372036854775808", np.int64, "9223372036854775808", lambda a: a * (1 << 63)),
    ],
)
def test_constant_that_does_not_fit_the_tensors_dtype(expr: str, dtype, const: str, numpy) -> None:
    a = np.ones(3, dtype)
    with pytest.raises(OverflowError):  # NumPy 2 refuses the same constant
        numpy(a)
    src = f"function (A) -> (O) {{\n  O = {expr};\n}}"
    bind_fails(src, [a], f"the constant {const} does not fit", const)


def test_folded_constant_that_does_not_fit() -> None:
    src = "function (A) -> (O) {\n  O = A + (9223372036854775807 + 1);\n}"
    bind_fails(src, [np.ones(2, np.int64)], "(= 9223372036854775808) does not fit i64", "9223")


@pytest.mark.parametrize(
    ("expr", "shown"),
    [
        ("pow(10, 400)", "more than 2**128 in magnitude"),
        ("pow(2, 1000000000000000000)", "more than 2**128 in magnitude"),  # never computed
        ("18446744073709551615 * 2", "36893488147419103230"),
    ],
)
def test_constant_expression_past_64_bits(expr: str, shown: str) -> None:
    src = f"function (A) -> (O) {{\n  O = A + {expr};\n}}"
    start = time.perf_counter()
    bind_fails(src, [np.ones(2, np.float32)], f"is {shown}, which 64 bits cannot hold", expr)
    assert time.perf_counter() - start < 10


def test_constant_statement_is_int64() -> None:
    src = "function (A) -> (O, P) {\n  O = A;\n  P = 18446744073709551615;\n}"
    bind_fails(src, [np.ones(2)], "does not fit i64", "18446744073709551615")


@pytest.mark.parametrize("target", TARGETS)
def test_constants_that_fit_match_numpy(target: str) -> None:
    src = """function (U, W, B) -> (O1, O2, O3, O4) {
        O1 = U + 255;
        O2 = W + 18446744073709551615;
        O3 = B + 300;
        O4 = U * 0 - 0;
    }"""
    u = np.array([0, 1, 200], np.uint8)
    w = np.array([0, 1, 7], np.uint64)
    b = np.array([True, False, True])
    got = stripeml.compile(src, target=target)(u, w, b)
    for g, want in zip(got, (u + 255, w + U64_MAX, b + 300, u * 0 - 0)):
        assert g.dtype == want.dtype
        np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("target", TARGETS)
def test_comparisons_with_constants_outside_the_dtype_are_exact(target: str) -> None:
    """``uint8 < 300`` is true everywhere in NumPy 2, not ``uint8 < 44``."""
    src = """function (U, I, B) -> (O1, O2, O3, O4, O5, O6, O7, O8) {
        O1 = U < 300;
        O2 = U == 300;
        O3 = U > -1;
        O4 = 300 >= U;
        O5 = I != 4294967296;
        O6 = (U <= 300) && (I < 3);
        O7 = B < 18446744073709551615;
        O8 = B == -1;
    }"""
    u = np.array([0, 100, 255], np.uint8)
    i = np.array([-5, 3, 4], np.int32)
    b = np.array([True, False, True])
    wants = (
        u < 300,
        u == 300,
        u > -1,
        300 >= u,
        i != 4294967296,
        (u <= 300) & (i < 3),
        b.astype(object) < U64_MAX,  # exact (NumPy's bool arrays refuse ints past int64)
        b == -1,
    )
    got = stripeml.compile(src, target=target)(u, i, b)
    for g, want in zip(got, wants):
        np.testing.assert_array_equal(g, want.astype(bool))


@pytest.mark.parametrize("target", TARGETS)
def test_casts_of_constants_convert_as_numpy(target: str) -> None:
    """A cast of a constant converts like ``astype`` (integers wrap, floats
    round, past the range to inf), as a cast of a tensor holding it would."""
    src = """function (A) -> (O1, O2, O3, O4, O5) {
        O1 = A + as_int(300, 8);
        O2 = A + as_uint(-1, 16);
        O3 = as_float(1e39, 32) + as_float(A, 32);
        O4 = A + as_int(18446744073709551615, 64);
        O5 = A + as_uint(256, 8);
    }"""
    a = np.array([1, 2], np.int64)
    wants = (
        a + np.array(300).astype(np.int8),
        a + np.array(-1).astype(np.uint16),
        np.float32(np.inf) + a.astype(np.float32),
        a + np.array(U64_MAX).astype(np.int64),
        a + np.array(256).astype(np.uint8),
    )
    with np.errstate(over="ignore"):
        got = stripeml.compile(src, target=target)(a)
    for g, want in zip(got, wants):
        assert g.dtype == np.asarray(want).dtype
        np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("target", TARGETS)
def test_folded_float_functions_give_numpys_values(target: str) -> None:
    """Constant folding computes as the interpreter does on float64: an overflow
    is inf, a domain error nan (never a Python exception)."""
    src = """function (A) -> (O1, O2, O3, O4, O5, O6) {
        O1 = A + pow(10.0, 400);
        O2 = A + sin(1.0 / 0.0);
        O3 = A + floor(0.0 / 0.0);
        O4 = A + pow(-8.0, 0.5);
        O5 = A * 1e400;
        O6 = A + exp(1000);
    }"""
    a = np.ones(2, np.float64)
    inf, nan = np.inf, np.nan
    wants = (a + inf, a + nan, a + nan, a + nan, a * inf, a + inf)
    got = stripeml.compile(src, target=target)(a)
    for g, want in zip(got, wants):
        np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("target", TARGETS)
def test_float_constant_past_float32_is_inf_as_in_numpy(target: str) -> None:
    a = np.ones(3, np.float32)
    with np.errstate(over="ignore"):
        want = a * 1e39
    got = stripeml.compile("function (A) -> (O) { O = A * 1e39; }", target=target)(a)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
