"""Tile's bitwise operators ``& | ^ ~ << >>`` and bit casts: dtypes (NumPy
promotion, weak literals), constant folding, and the type errors, located at
the offending operand.  Their values on every backend: ``tests/test_bitwise.py``."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.errors import TileTypeError

rng = np.random.default_rng(3)


def run(body: str, *args: np.ndarray, params: str = "A, B"):
    params = ", ".join(params.split(", ")[: len(args)])
    f = stripeml.compile(f"function ({params}) -> (O) {{\n    O = {body};\n}}", target="interp")
    return f(*args)


def type_error(body: str, *args: np.ndarray) -> TileTypeError:
    with pytest.raises(TileTypeError) as info:
        run(body, *args)
    return info.value


def at(body: str, needle: str) -> tuple[int, int]:
    """Line and column of ``needle`` in the program :func:`run` builds."""
    return 2, 9 + body.index(needle)


I8 = np.array([-128, -1, 0, 1, 127], np.int8)
U8 = np.array([0, 1, 7, 128, 255], np.uint8)
I32 = np.array([-(2**31), -5, 0, 5, 2**31 - 1], np.int32)
U64 = np.array([0, 1, 2**63, 2**64 - 1, 5], np.uint64)
I64 = np.array([-1, 0, 1, 2, 3], np.int64)
F32 = np.array([1.5, 2.0, -0.0, 3.0, 4.0], np.float32)
BOOL = np.array([True, False, True, False, True])


@pytest.mark.parametrize(
    "body, args, want",
    [
        ("A & B", (I8, I32), I8.astype(np.int32) & I32),  # NumPy promotion
        ("A << B", (I8, I32), np.left_shift(I8.astype(np.int32), I32)),
        ("A << 3", (U8,), U8 << 3),  # a literal never widens: still uint8
        ("A >> 7", (I8,), I8 >> 7),
        ("A ^ 255", (U8,), U8 ^ 255),
        ("~A", (U8,), ~U8),
        ("A & 1 == 0", (I8,), I8 & np.int8(1 == 0)),  # C: & below ==
        ("(A & 1) == 0", (I8,), (I8 & 1) == 0),
        ("A << 1 + 1", (U8,), U8 << 2),  # shifts below +
        ("A & B", (BOOL, BOOL[::-1].copy()), BOOL & BOOL[::-1]),  # logical on bools
        ("~A", (BOOL,), ~BOOL),
        ("A | 2", (BOOL,), BOOL.astype(np.int64) | 2),  # bool with an int: NumPy's int64
        ("A >> B", (U64, U64), U64 >> U64),
        ("A & (5 << 2) + (~0 ^ -4)", (I64,), I64 & 23),  # constants fold exactly
        ("A + (-7 >> 1) + (1 >> -1) + (-1 >> -3)", (I64,), I64 - 5),  # negative amounts
        ("A + (1 << 62)", (I64,), I64 + 2**62),
        ("bitcast_int(A, 32)", (F32,), F32.view(np.int32)),
        ("bitcast_float(bitcast_uint(A, 32), 32)", (F32,), F32),
        ("bitcast_uint(A, 8)", (BOOL,), BOOL.view(np.uint8)),
        ("bitcast_int(1.0, 64) + A", (I64,), I64 + 4607182418800017408),
    ],
)
def test_values_and_dtypes(body: str, args: tuple[np.ndarray, ...], want: np.ndarray) -> None:
    got = run(body, *args)
    assert got.dtype == want.dtype, (body, got.dtype, want.dtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "body, args, needle, fragment",
    [
        ("A & 1", (F32,), "A", "'&' takes integer (or bool) operands, but 'A' is f32"),
        ("~A", (F32,), "A", "'~' takes integer (or bool) operands, but 'A' is f32"),
        ("A | B", (I8, F32), "B", "'|' takes integer (or bool) operands, but 'B' is f32"),
        ("A << 1.5", (I8,), "1.5", "'<<' takes integer operands, but the constant 1.5 is a float"),
        ("A ^ 2.0 * 3", (I8,), "2.0", "the constant '2.0 * 3' (= 6.0) is a float"),
        ("A >> 1", (BOOL,), "A", "'>>' shifts integers only, but 'A' is bool"),
        ("A << (A < 1)", (I8,), "A < 1", "'A < 1' is bool"),
        ("A & B", (U64, I64), "A", "'&' on u64 and i64: they have no common integer dtype"),
        ("A & -1", (U8,), "-1", "the constant -1 does not fit u8"),
        ("A << 256", (U8,), "256", "the constant 256 does not fit u8"),
        ("A + (1 << 64)", (I64,), "1 << 64", "'1 << 64' is 18446744073709551616"),
        ("A + (3 << 10000000000)", (I64,), "3 <<", "more than 2**128 in magnitude"),
        ("bitcast_int(A, 64)", (F32,), "bitcast_int", "reinterprets 64 bits, but 'A' is f32"),
        ("bitcast_float(1, 32)", (I64,), "bitcast_float", "is a constant, read as i64"),
    ],
)
def test_type_errors_name_the_operand(body, args, needle, fragment) -> None:
    err = type_error(body, *args)
    assert fragment in str(err), str(err)
    assert (err.line, err.column) == at(body, needle)
    assert "^" in str(err).splitlines()[-1]  # the caret under the source line


def test_bit_widths_are_checked_statically() -> None:
    with pytest.raises(TileTypeError, match="'bitcast_int' supports 8, 16, 32, 64 bits, got 24"):
        stripeml.compile("function (A) -> (O) { O = bitcast_int(A, 24); }")
    with pytest.raises(TileTypeError, match="'bitcast_float' takes 2 arguments, got 1"):
        stripeml.compile("function (A) -> (O) { O = bitcast_float(A); }")


def test_shifts_are_not_index_polynomials() -> None:
    with pytest.raises(TileTypeError, match="'i << 1' is not allowed in the index list of 'A'"):
        stripeml.compile("function (A[N]) -> (O) { O[i : N] = +(A[i << 1]); }")


def test_lowered_intrinsics() -> None:
    """Each operator is one intrinsic in the operands' dtype (weak literals included)."""
    f = stripeml.compile("function (A, B) -> (O) { O = ~(A << 3) & (B >> A) ^ (A | 1); }")
    ir = f.lower(U8, U8).ir
    for line in ("shl(", "shr(", "bit_and(", "bit_xor(", "bit_or(", "bit_not("):
        assert line in ir, ir
    assert "cast" not in ir and "u64" not in ir, ir
    want = ~(U8 << 3) & (U8 >> U8) ^ (U8 | 1)
    np.testing.assert_array_equal(f(U8, U8), want)
