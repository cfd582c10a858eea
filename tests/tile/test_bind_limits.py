"""Shape binding in exact integers: sizes past int64, tensors past
``bind.MAX_BYTES``, products that an int64 would wrap, and a ``default`` of
another dtype.  Everything here fails when shapes bind, before anything is
lowered or allocated, with the statement named."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.errors import ShapeError, TileTypeError
from stripeml.tile.bind import MAX_BYTES


def lower_fails(src: str, args: list[np.ndarray], fragment: str, stmt: str) -> str:
    f = stripeml.compile(src, target="cpu")
    with pytest.raises(ShapeError) as info:
        f.lower(*args)
    message = str(info.value)
    assert fragment in message, message
    assert f"in '{stmt}'" in message, message
    return message


N20 = np.zeros(1 << 20, np.int8)  # N = 2**20 from a 1 MiB input
N16 = np.zeros(1 << 16, np.int8)


def test_size_past_int64() -> None:
    src = "function (A[N]) -> (O) { O[i : N * N * N * N] = +(A[i]); }"
    msg = lower_fails(
        src,
        [N20],
        "evaluates to 1208925819614629174706176, more than int64",
        "O[i : N * N * N * N] = +(A[i])",
    )
    assert "output size of 'O'" in msg


def test_element_count_past_int64() -> None:
    """Each size fits int64, their product (2**64 elements) does not."""
    src = "function (A[N]) -> (O) { O[i, j, k : N, N, N * N] = =(A[i]); }"
    lower_fails(
        src, [N16], "would take 18446744073709551616 bytes", "O[i, j, k : N, N, N * N] = =(A[i])"
    )


def test_bytes_past_the_limit() -> None:
    """2**60 float64 elements fit int64; their 2**63 bytes do not fit the limit."""
    src = "function (A[N]) -> (O) { O[i, j, k : N, N, N * N] = =(A[i]); }"
    a = np.zeros(1 << 15, np.float64)
    msg = lower_fails(
        src, [a], "would take 9223372036854775808 bytes", "O[i, j, k : N, N, N * N] = =(A[i])"
    )
    assert f"at most {MAX_BYTES} bytes" in msg


def test_all_tensors_together_past_the_limit() -> None:
    src = "function (A[N]) -> (T, O) { T[i, j, k : N, N, N * N / 2] = =(A[i]); O = T * 2; }"
    a = np.zeros(1 << 15, np.float32)  # T and O: 2**61 bytes each
    lower_fails(src, [a], "the program's tensors take", "O = T * 2")


def test_a_zero_size_does_not_hide_huge_strides() -> None:
    src = "function (A[N]) -> (O) { O[i, j, k : 0 * N, N * N * N, N * N * N] = =(A[i]); }"
    lower_fails(
        src,
        [N16],
        "would take 79228162514264337593543950336 bytes",
        "O[i, j, k : 0 * N, N * N * N, N * N * N] = =(A[i])",
    )


def test_reshape_whose_int64_product_wraps() -> None:
    """2**16 * (2**48 + 1) is 2**16 modulo 2**64: an int64 product equals the
    input's 65536 elements.  The exact one does not."""
    src = "function (X[N]) -> (O) { O = reshape(X, N, N * N * N + 1); }"
    msg = lower_fails(src, [N16], "cannot reshape 'X'", "O = reshape(X, N, N * N * N + 1)")
    assert "(65536 elements) to (65536, 281474976710657) (18446744073709617152 elements)" in msg


@pytest.mark.parametrize(
    ("src", "stmt", "fragment"),
    [
        (
            "function (A[N]) -> (O) { O[i : N] = +(A[i + N * N * N * N]); }",
            "O[i : N] = +(A[i + N * N * N * N])",
            "the index polynomial 'i + N * N * N * N' has the constant 1208925819614629174706176",
        ),
        (
            "function (A[N]) -> (O) { O[i : N] = +(A[N * N * N * N * i]); }",
            "O[i : N] = +(A[N * N * N * N * i])",
            "has the constant 1208925819614629174706176",
        ),
        (
            "function (A[N]) -> (O) { O[i : N] = +(A[i]), i < N * N * N * N; }",
            "O[i : N] = +(A[i]), i < N * N * N * N",
            "the constraint bound 'N * N * N * N' evaluates to 1208925819614629174706176",
        ),
    ],
)
def test_index_constants_past_int64(src: str, stmt: str, fragment: str) -> None:
    lower_fails(src, [N20], fragment, stmt)


def test_sizes_within_int64_still_bind() -> None:
    """A big but valid size: the checks must not reject what fits (nothing is
    allocated by lowering)."""
    src = "function (A[N]) -> (O) { O[i, j : N, N * N] = =(A[i]); }"
    exe = stripeml.compile(src, target="interp").lower(np.zeros(1 << 12, np.float32))
    assert exe.output_specs[0][1] == (1 << 12, 1 << 24)


# -- default of another dtype ------------------------------------------------------------------

DEFAULT = "function (A[N], D[N]) -> (O) {\n  O[i : N] = +(A[i]), default D;\n}"


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_default_of_another_dtype(target: str) -> None:
    f = stripeml.compile(DEFAULT, target=target)
    with pytest.raises(TileTypeError) as info:
        f(np.ones(4, np.float32), np.arange(4, dtype=np.int32))
    err = info.value
    first = str(err).splitlines()[0]
    assert "default 'D' has dtype i32 but 'O' has dtype f32" in first, err
    assert "as_float(D, 32)" in first
    column = DEFAULT.splitlines()[1].index("D;") + 1
    assert (err.line, err.column) == (2, column)
    assert str(err).splitlines()[-1] == "    " + " " * (column - 1) + "^"


def test_default_of_the_same_dtype_after_a_cast() -> None:
    src = """function (A[N], D[M]) -> (O) {
      E = as_float(D, 32);
      O[2 * i : M] = +(A[i]), default E;
    }"""
    a, d = np.ones(3, np.float32), np.arange(6, dtype=np.int32)
    want = d.astype(np.float32)
    want[0::2] = a
    for target in ("interp", "cpu"):
        got = stripeml.compile(src, target=target)(a, d)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
