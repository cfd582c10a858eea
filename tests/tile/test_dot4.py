"""Tile's ``dot4`` (the elementwise function and the contraction combination)
and the byte views ``view_int/uint/float``, against NumPy computed here.

The references never call stripeml: ``dot4`` is the int32 words viewed as
little-endian bytes with NumPy (``uint8`` for the first operand, ``int8`` for
the second), multiplied and summed in int64; the views are NumPy's ``view``.
Each runs on the interpreter and on the ``cpu`` target; the ``cpu`` target's
pass pipeline is also checked stage by stage on the interpreter (so a pass that
mishandles the ``dot4`` intrinsic fails here even without the CPU code
generator).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import stripeml
from stripeml.errors import ShapeError, TileSyntaxError, TileTypeError
from stripeml.ir import format, parse, verify
from stripeml.passes.manager import run_pipeline
from stripeml.runtime.interp import run

try:
    from pipelines import cpu_passes  # tests/pipelines.py
except ImportError:  # tests/ imported as a package
    from tests.pipelines import cpu_passes

TARGETS = ["interp", "cpu"]
RNG = np.random.default_rng(20240611)


def words(*shape: int) -> np.ndarray:
    """Random int32 words: every byte pattern, the extremes included."""
    w = RNG.integers(-(2**31), 2**31, size=shape, dtype=np.int64).astype(np.int32)
    flat = w.reshape(-1)
    edges = np.array([0, -1, 2**31 - 1, -(2**31), 0x7F7F7F7F, -0x7F7F7F80, 0x80808080 - 2**32])
    flat[: min(flat.size, edges.size)] = edges[: flat.size].astype(np.int32)
    return w


def bytes_of(w: np.ndarray, dtype: type) -> np.ndarray:
    """The four little-endian bytes of each int32 of ``w`` as ``dtype``, in int64."""
    b = np.ascontiguousarray(w, dtype="<i4").view(dtype).reshape(*w.shape, 4)
    return b.astype(np.int64)


def dot4_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """uint8 bytes of ``a`` times int8 bytes of ``b``, summed (int64; exact)."""
    a, b = np.broadcast_arrays(a, b)
    return (bytes_of(a, np.uint8) * bytes_of(b, np.int8)).sum(-1)


def gemm_inputs(m: int, k4: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """uint8 activations X[M, 4 K4], int8 weights W[4 K4, N], and W packed as
    int32 words W4[K4, N] (W4[k, n] holds W[4k + t, n] in byte t)."""
    x = RNG.integers(0, 256, size=(m, 4 * k4), dtype=np.uint8)
    w = RNG.integers(-128, 128, size=(4 * k4, n), dtype=np.int8)
    w4 = np.ascontiguousarray(w.reshape(k4, 4, n).transpose(0, 2, 1)).view(np.int32)[..., 0]
    return x, w, w4


GEMM = """function (X[M, K], W4[K4, N]) -> (C) {
    X4 = view_int(X, 32);
    C[m, n : M, N] = +(dot4(X4[m, k], W4[k, n]));
}"""


# -- the elementwise function ----------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_dot4_function_broadcasts(target: str) -> None:
    f = stripeml.compile("function (A, B) -> (O) { O = dot4(A, B); }", target=target)
    for sa, sb in [((7,), (7,)), ((3, 5), (5,)), ((4, 1), (1, 6)), ((), (2, 3)), ((33,), ())]:
        a, b = words(*sa), words(*sb)
        got = f(a, b)
        assert got.dtype == np.int32 and got.shape == np.broadcast_shapes(sa, sb)
        np.testing.assert_array_equal(got, dot4_ref(a, b))


@pytest.mark.parametrize("target", TARGETS)
def test_dot4_function_in_an_expression_with_constants(target: str) -> None:
    # 0x01020304: bytes 4, 3, 2, 1 (little-endian); as the second operand they are int8
    f = stripeml.compile(
        "function (A[N]) -> (O, P) { O = dot4(A, 16909060) + 1; P = dot4(-1, A); }",
        target=target,
    )
    a = words(40)
    o, p = f(a)
    np.testing.assert_array_equal(o, dot4_ref(a, np.int32(0x01020304)) + 1)
    np.testing.assert_array_equal(p, dot4_ref(np.int32(-1), a))  # 255 * each signed byte


def test_dot4_extremes_are_exact() -> None:
    # all 0xff (uint8 255) against all 0x80 (int8 -128): 4 * 255 * -128
    f = stripeml.compile("function (A, B) -> (O) { O = dot4(A, B); }", target="interp")
    a = np.array([-1, -1, 0x7F7F7F7F], np.int32)
    b = np.array([0x80808080 - 2**32, 0x7F7F7F7F, 0x7F7F7F7F], np.int32)
    np.testing.assert_array_equal(f(a, b), [4 * 255 * -128, 4 * 255 * 127, 4 * 127 * 127])


# -- the contraction combination -------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m,k4,n", [(5, 3, 7), (1, 1, 1), (64, 64, 64), (17, 9, 33)])
def test_dot4_gemm(target: str, m: int, k4: int, n: int) -> None:
    x, w, w4 = gemm_inputs(m, k4, n)
    got = stripeml.compile(GEMM, target=target)(x, w4)
    want = x.astype(np.int64) @ w.astype(np.int64)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_dot4_gemm_with_a_requantising_epilogue(target: str) -> None:
    src = """function (X[M, K], W4[K4, N], S[N], Z[N]) -> (Y) {
        X4 = view_int(X, 32);
        C[m, n : M, N] = +(dot4(X4[m, k], W4[k, n]));
        Y = as_float(C + Z, 32) * S;
    }"""
    x, w, w4 = gemm_inputs(9, 8, 12)
    s = RNG.uniform(0.001, 0.01, size=12).astype(np.float32)
    z = RNG.integers(-1000, 1000, size=12).astype(np.int32)
    got = stripeml.compile(src, target=target)(x, w4, s, z)
    acc = (x.astype(np.int64) @ w.astype(np.int64) + z).astype(np.float32)
    np.testing.assert_array_equal(got, acc * s)


CONV = """function (I[N, X, C], K4[T, C4, CO]) -> (O) {
    I4 = view_int(I, 32);
    O[n, x, co : N, X, CO] = +(dot4(I4[n, x + t - T / 2, c], K4[t, c, co])), t < T;
}"""


def conv_ref(i: np.ndarray, k: np.ndarray) -> np.ndarray:
    """1-D 'same' convolution, channels last, zero padding, in int64."""
    n, x, _ = i.shape
    t = k.shape[0]
    pad = np.zeros((n, x + t - 1, i.shape[2]), np.int64)
    pad[:, t // 2 : t // 2 + x] = i
    out = np.zeros((n, x, k.shape[2]), np.int64)
    for tap in range(t):
        out += np.einsum("nxc,cd->nxd", pad[:, tap : tap + x], k[tap].astype(np.int64))
    return out


@pytest.mark.parametrize("target", TARGETS)
def test_dot4_convolution_with_a_constraint(target: str) -> None:
    n, x, c, co, t = 2, 11, 12, 5, 3
    i = RNG.integers(0, 256, size=(n, x, c), dtype=np.uint8)
    k = RNG.integers(-128, 128, size=(t, c, co), dtype=np.int8)
    k4 = np.ascontiguousarray(k.reshape(t, c // 4, 4, co).transpose(0, 1, 3, 2))
    k4 = k4.view(np.int32)[..., 0]
    got = stripeml.compile(CONV, target=target)(i, k4)
    np.testing.assert_array_equal(got, conv_ref(i.astype(np.int64), k))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("agg,reduce", [(">", np.max), ("<", np.min)])
def test_dot4_max_and_min_aggregations(target: str, agg: str, reduce) -> None:
    src = f"function (A[M, K], B[K]) -> (O) {{ O[m : M] = {agg}(dot4(A[m, k], B[k])); }}"
    a, b = words(6, 5), words(5)
    got = stripeml.compile(src, target=target)(a, b)
    np.testing.assert_array_equal(got, reduce(dot4_ref(a, b), axis=1))


@pytest.mark.parametrize("target", TARGETS)
def test_dot4_product_aggregation_wraps_and_default(target: str) -> None:
    # a product of int32 values wraps modulo 2**32, as NumPy's int32 product does
    src = """function (A[M, K], B[K], D[M2]) -> (P, Q) {
        P[m : M] = *(dot4(A[m, k], B[k]));
        Q[2 * m : M2] = +(dot4(A[m, k], B[k])), default D;
    }"""
    a, b = words(4, 3), words(3)
    d = RNG.integers(-100, 100, size=9).astype(np.int32)
    p, q = stripeml.compile(src, target=target)(a, b, d)
    terms = dot4_ref(a, b)
    want_p = np.ones(4, np.int64)
    for k in range(3):
        want_p = (want_p * terms[:, k]) % (1 << 32)
    np.testing.assert_array_equal(p.astype(np.int64) % (1 << 32), want_p)
    want_q = d.astype(np.int64)
    want_q[0:8:2] = terms.sum(1)
    np.testing.assert_array_equal(q, want_q)


@pytest.mark.parametrize("target", TARGETS)
def test_dot4_assign_aggregation(target: str) -> None:
    src = "function (A[M, K], B[M, K]) -> (O) { O[m, k : M, K] = =(dot4(A[m, k], B[m, k])); }"
    a, b = words(3, 4), words(3, 4)
    np.testing.assert_array_equal(stripeml.compile(src, target=target)(a, b), dot4_ref(a, b))


@pytest.mark.parametrize("vector_width", [4, 8, 16])
@pytest.mark.parametrize(
    "case", ["gemm_5x3x7", "gemm_64", "conv", "max", "epilogue"], ids=lambda c: c
)
def test_cpu_pipeline_keeps_dot4_results(case: str, vector_width: int) -> None:
    """Every pass of the ``cpu`` pipeline keeps the interpreter's result (checked
    after each pass that changes the program), and the final program equals NumPy."""
    if case.startswith("gemm"):
        m, k4, n = (5, 3, 7) if case == "gemm_5x3x7" else (64, 64, 64)
        x, w, w4 = gemm_inputs(m, k4, n)
        src, inputs = GEMM, {"X": x, "W4": w4}
        want = {"C": x.astype(np.int64) @ w.astype(np.int64)}
    elif case == "conv":
        i = RNG.integers(0, 256, size=(2, 16, 8), dtype=np.uint8)
        k = RNG.integers(-128, 128, size=(3, 8, 16), dtype=np.int8)
        k4 = np.ascontiguousarray(k.reshape(3, 2, 4, 16).transpose(0, 1, 3, 2))
        src, inputs = CONV, {"I": i, "K4": k4.view(np.int32)[..., 0]}
        want = {"O": conv_ref(i.astype(np.int64), k)}
    elif case == "max":
        a, b = words(32, 24), words(24)
        src = "function (A[M, K], B[K]) -> (O) { O[m : M] = >(dot4(A[m, k], B[k])); }"
        inputs, want = {"A": a, "B": b}, {"O": dot4_ref(a, b).max(1)}
    else:
        a, b = words(16, 32), words(32, 24)
        src = """function (A[M, K], B[K, N], S[N]) -> (Y) {
            C[m, n : M, N] = +(dot4(A[m, k], B[k, n]));
            Y = max(C, 0) * S + 3;
        }"""
        s = RNG.integers(-3, 4, size=24).astype(np.int32)
        c = dot4_ref(a[:, :, None], b[None]).sum(1)
        inputs, want = {"A": a, "B": b, "S": s}, {"Y": np.maximum(c, 0) * s + 3}
    program = stripeml.compile(src, target="interp").lower(*inputs.values()).program

    def check(stage: str, p) -> None:
        got = run(p, inputs)
        for name, value in want.items():
            np.testing.assert_array_equal(got[name], value, err_msg=f"after {stage}")

    check("lower", program)
    result = run_pipeline(program, cpu_passes(vector_width=vector_width), check=check)
    verify(result.program)
    assert "dot4(" in format(result.program)


# -- the byte views --------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "func,bits,src_dtype,shape",
    [
        ("view_int", 32, np.uint8, (3, 8)),
        ("view_int", 8, np.int32, (2, 3)),
        ("view_uint", 16, np.float32, (5,)),
        ("view_float", 64, np.int16, (2, 2, 8)),
        ("view_float", 32, np.uint32, (4, 3)),
        ("view_int", 64, np.float64, ()),
        ("view_uint", 8, np.float16, (3, 0)),
    ],
)
def test_views_match_numpy(target: str, func: str, bits: int, src_dtype, shape) -> None:
    kind = {"view_int": "i", "view_uint": "u", "view_float": "f"}[func]
    want_dtype = np.dtype(f"{kind}{bits // 8}")
    raw = RNG.integers(0, 256, size=int(np.prod(shape)) * np.dtype(src_dtype).itemsize)
    x = raw.astype(np.uint8).view(src_dtype).reshape(shape)
    f = stripeml.compile(f"function (X) -> (O) {{ O = {func}(X, {bits}); }}", target=target)
    got = f(x)
    want = x.view(want_dtype)
    assert got.dtype == want_dtype and got.shape == want.shape
    # bit for bit (NaN payloads too)
    np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8))


@pytest.mark.parametrize("target", TARGETS)
def test_view_round_trip_through_kernels(target: str) -> None:
    src = """function (X[N, K]) -> (Y, B) {
        W = view_int(X, 32);
        V = W + 0;
        B = view_uint(V, 8);
        F = view_float(V, 64);
        Y = view_int(F, 16);
    }"""
    x = RNG.integers(0, 256, size=(3, 16), dtype=np.uint8)
    y, b = stripeml.compile(src, target=target)(x)
    np.testing.assert_array_equal(b, x)
    np.testing.assert_array_equal(y, x.view(np.int16))


def test_view_lowers_to_bitview_and_round_trips_as_text() -> None:
    src = """function (X[M, K], W4[K4, N]) -> (C, D) {
        X4 = view_int(X, 32);
        C[m, n : M, N] = +(dot4(X4[m, k], W4[k, n]));
        D = dot4(X4, 7) + 1;
    }"""
    x, _, w4 = gemm_inputs(2, 3, 4)
    program = stripeml.compile(src, target="interp").lower(x, w4).program
    text = format(program)
    assert "special bitview(X) -> (X4)" in text
    assert len(re.findall(r"\$\d+ = dot4\(\$X4, \$\w+\): i32", text)) == 2
    again = parse(text)
    verify(again)
    assert format(again) == text
    assert again == program


# -- errors ----------------------------------------------------------------------------


def _error(cls: type[Exception], src: str, *args: np.ndarray) -> Exception:
    with pytest.raises(cls) as info:
        stripeml.compile(src, target="interp")(*args)
    return info.value


def test_dot4_function_needs_int32() -> None:
    src = "function (A, B) -> (O) {\n    O = A + dot4(A, B);\n}"
    err = _error(TileTypeError, src, np.zeros(3, np.float32), np.zeros(3, np.int32))
    assert (err.line, err.column) == (2, 13)
    assert "dot4(a, b) takes two int32 operands" in str(err) and "'A' is f32" in str(err)
    assert "^" in str(err)
    err = _error(TileTypeError, src, np.zeros(3, np.int32), np.zeros(3, np.uint32))
    assert "'B' is u32" in str(err) and "'A'" not in str(err).split("but")[1]
    err = _error(TileTypeError, "function (A) -> (O) { O = dot4(A, 0.5); }", np.zeros(3, np.int32))
    assert "'0.5' is a float constant" in str(err)
    err = _error(
        TileTypeError, "function (A) -> (O) { O = dot4(A, 1 << 40); }", np.zeros(2, np.int32)
    )
    assert "does not fit i32" in str(err)


def test_dot4_function_arity() -> None:
    with pytest.raises(TileTypeError, match="'dot4' takes 2 arguments, got 1"):
        stripeml.compile("function (A) -> (O) { O = dot4(A); }")


def test_dot4_combination_needs_int32_operands() -> None:
    src = "function (A[M, K], B[K, N]) -> (C) {\n  C[m, n : M, N] = +(dot4(A[m, k], B[k, n]));\n}"
    err = _error(TileTypeError, src, np.zeros((2, 3), np.int32), np.zeros((3, 4), np.int8))
    assert (err.line, err.column) == (2, 36)
    assert "'B' has dtype i8" in str(err) and "view_int(B, 32)" in str(err)
    assert "in 'C[m, n : M, N] = +(dot4(A[m, k], B[k, n]))'" in str(err)
    err = _error(TileTypeError, src, np.zeros((2, 3), np.float32), np.zeros((3, 4), np.int32))
    assert (err.line, err.column) == (2, 27) and "'A' has dtype f32" in str(err)


@pytest.mark.parametrize(
    "combo,message",
    [
        ("dot4(A[i]))", "expected ',' between the two operands of 'dot4'"),
        ("dot4(A[i], B[i], A[i]))", "expected ')' to close 'dot4(...)'"),
        ("dot4(A[i], B[i])", "expected ')' to close the aggregation of 'O'"),
        ("dot4(A[i], 3))", "a tensor access like 'A[i]' as the second operand of 'dot4'"),
    ],
)
def test_dot4_combination_syntax_errors(combo: str, message: str) -> None:
    with pytest.raises(TileSyntaxError, match=re.escape(message)):
        stripeml.compile(f"function (A[N], B[N]) -> (O) {{ O[i : N] = +({combo}; }}")


def test_dot4_combination_operand_must_be_a_tensor() -> None:
    with pytest.raises(stripeml.errors.TileNameError, match="'N' is a dimension"):
        stripeml.compile("function (A[N]) -> (O) { O[i : N] = +(dot4(A[i], N[i])); }")


def test_view_errors() -> None:
    err = _error(
        ShapeError, "function (X) -> (O) {\n O = view_int(X, 32);\n}", np.zeros((2, 6), np.uint8)
    )
    assert str(err).startswith("2:2: in 'O = view_int(X, 32)'")
    assert "holds 6 bytes, not a whole number of i32 elements" in str(err)
    err = _error(ShapeError, "function (X) -> (O) { O = view_uint(X, 8); }", np.zeros((), np.int32))
    assert "rank-0" in str(err)
    err = _error(TileTypeError, "function (X) -> (O) {\n O = view_int(X, 8);\n}", np.zeros(4, bool))
    assert (err.line, err.column) == (2, 15) and "'X' is bool" in str(err)
    with pytest.raises(TileTypeError, match="'view_float' supports 16, 32, 64 bits, got 8") as info:
        stripeml.compile("function (X) -> (O) { O = view_float(X, 8); }")
    assert (info.value.line, info.value.column) == (1, 41)
    with pytest.raises(TileTypeError, match="must be an integer literal, got 'N'"):
        stripeml.compile("function (X[N]) -> (O) { O = view_int(X, N); }")
    with pytest.raises(TileTypeError, match="must be a tensor name, got 'X \\+ 1'"):
        stripeml.compile("function (X) -> (O) { O = view_int(X + 1, 8); }")
    with pytest.raises(TileTypeError, match="'view_int' takes 2 arguments"):
        stripeml.compile("function (X) -> (O) { O = view_int(X); }")
    with pytest.raises(TileTypeError, match="cannot be used inside an expression"):
        stripeml.compile("function (X) -> (O) { O = view_int(X, 8) + 1; }")


def test_view_rank_is_known_to_the_checks() -> None:
    with pytest.raises(TileTypeError, match="has rank 2 but is indexed with 1 index"):
        stripeml.compile("function (X[M, K]) -> (O) { V = view_int(X, 32); O[i : M] = +(V[i]); }")


def test_roofline_counts_a_dot4_as_four_multiply_accumulates() -> None:
    """With the ``add`` of its store, one ``dot4`` point is 8 operations: 2 per
    byte product, as a float GEMM counts 2 per multiply-accumulate."""
    x, _, w4 = gemm_inputs(5, 3, 7)
    exe = stripeml.compile(GEMM, target="interp").lower(x, w4)
    assert sum(w.flops for w in exe.work.values()) == 8 * 5 * 3 * 7
