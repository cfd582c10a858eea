"""stripeml.edsl: Python programs -> the Tile text they should produce, their
results against NumPy (interp and cpu), and errors that name the user's line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import stripeml
from stripeml import edsl as E
from stripeml.errors import EdslError, ShapeError, StripeError, TileTypeError

TARGETS = ["interp", "cpu"]
RNG = np.random.default_rng(0)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def line_of(marker: str) -> int:
    """The line of this file holding ``marker`` (in a comment)."""
    lines = inspect.getsource(inspect.getmodule(line_of)).splitlines()  # type: ignore[arg-type]
    (n,) = [i + 1 for i, ln in enumerate(lines) if marker in ln and "line_of(" not in ln]
    return n


# --------------------------------------------------------------------------- programs
def matmul(A, B):
    M, K, N = E.dims(3)
    m, k, n = E.indexes(3)
    A.bind_dims(M, K)
    B.bind_dims(K, N)
    C = E.output(M, N)
    C[m, n] += A[m, k] * B[k, n]
    return C


def conv2d(I, K):  # noqa: E741 - the Tile name
    N, X, Y, CI, KX, KY, CO = E.dims(7)
    n, x, y, kx, ky, ci, co = E.indexes(7)
    I.bind_dims(N, X, Y, CI)
    K.bind_dims(KX, KY, CI, CO)
    O = E.output(N, X, Y, CO)  # noqa: E741
    O[n, x, y, co] += I[n, x + kx - KX // 2, y + ky - KY // 2, ci] * K[kx, ky, ci, co]
    return O


def maxpool(I):  # noqa: E741
    X, Y = E.dims(2)
    x, y, i, j = E.indexes(4)
    I.bind_dims(X, Y)
    O = E.output(X // 2, Y // 2)  # noqa: E741
    O[x, y] >= I[2 * x + i, 2 * y + j]  # noqa: B015 - the contraction is the side effect
    O.add_constraint(i < 2)
    O.add_constraint(j < 2)
    return O


def softmax(X):
    N, K = E.dims(2)
    n, k = E.indexes(2)
    X.bind_dims(N, K)
    M = E.output(N, 1)
    M[n, 0] >= X[n, k]  # noqa: B015
    e = E.exp(X - M)
    S = E.output(N, 1)
    S[n, 0] += e[n, k]
    y = e / S
    return y


def cumsum(I):  # noqa: E741
    (N,) = E.dims(1)
    i, k = E.indexes(2)
    I.bind_dims(N)
    O = E.output(N)  # noqa: E741
    O[i] += I[k]
    E.constraint(i - k < N)
    return O


def transpose(I):  # noqa: E741
    M, N = E.dims(2)
    m, n = E.indexes(2)
    I.bind_dims(M, N)
    O = E.output(N, M)  # noqa: E741
    O[n, m] = I[m, n]
    return O


def every_other(I, D):  # noqa: E741
    N, M = E.dims(2)
    (i,) = E.indexes(1)
    I.bind_dims(N)
    D.bind_dims(M)
    O = E.output(2 * N, default=D)  # noqa: E741
    O[2 * i] = I[i]
    return O


def one_hot(L, J, V):
    N, K = E.dims(2)
    i, k = E.indexes(2)
    L.bind_dims(N)
    J.bind_dims(K)
    V.bind_dims(K)
    O = E.output(N)  # noqa: E741
    O[i] += E.cond(L[i] == J[k], V[k])
    return O


def multi(A, B):
    M, N = E.dims(2)
    m, n = E.indexes(2)
    A.bind_dims(M, N)
    B.bind_dims(M, N)
    S = E.output(M)
    S[m] += A[m, n] + B[m, n]
    return A + B, S, E.relu(A) * 0.5


GOLDEN = {
    matmul: """function (A[M, K], B[K, N]) -> (C) {
    C[m, n : M, N] = +(A[m, k] * B[k, n]);
}
""",
    conv2d: """function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co : N, X, Y, CO] = +(I[n, x + kx - KX / 2, y + ky - KY / 2, ci] * K[kx, ky, ci, co]);
}
""",
    maxpool: """function (I[X, Y]) -> (O) {
    O[x, y : X / 2, Y / 2] = >(I[2 * x + i, 2 * y + j]), i < 2, j < 2;
}
""",
    softmax: """function (X[N, K]) -> (Y) {
    M[n, 0 : N, 1] = >(X[n, k]);
    E = exp(X - M);
    S[n, 0 : N, 1] = +(E[n, k]);
    Y = E / S;
}
""",
    cumsum: """function (I[N]) -> (O) {
    O[i : N] = +(I[k]), i - k < N;
}
""",
    transpose: """function (I[M, N]) -> (O) {
    O[n, m : N, M] = =(I[m, n]);
}
""",
    every_other: """function (I[N], D[M]) -> (O) {
    O[2 * i : 2 * N] = =(I[i]), default D;
}
""",
    one_hot: """function (L[N], J[K], V[K]) -> (O) {
    O[i : N] = +(L[i] == J[k] ? (V[k]));
}
""",
}


@pytest.mark.parametrize("fn", list(GOLDEN), ids=lambda f: f.__name__)
def test_source_is_the_expected_tile(fn) -> None:
    assert E.function(fn, target="interp").source == GOLDEN[fn]


def test_intermediates_get_fresh_names_and_one_statement_per_line() -> None:
    @E.function(target="interp")
    def f(A, B):
        t = A * 2 + B
        u = E.tanh(t) - E.tanh(t)
        return u * t, E.select(A > B, A, B)

    assert f.source == (
        "function (A, B) -> (T1, T2) {\n"
        "    T = A * 2 + B;\n"
        "    U = tanh(T) - tanh(T);\n"
        "    T1 = U * T;\n"
        "    T2 = A > B ? A : B;\n"
        "}\n"
    )
    a, b = rand(3), rand(3)
    t = a * 2 + b
    np.testing.assert_allclose(f(a, b)[0], (np.tanh(t) - np.tanh(t)) * t, rtol=1e-6)


# --------------------------------------------------------------------------- against NumPy
@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest) -> str:
    return request.param


def test_matmul(target: str) -> None:
    f = E.function(matmul, target=target)
    a, b = rand(5, 7), rand(7, 3)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-6)
    assert "C" in f.lower(a, b).ir and f.outputs == ("C",) and f.params == ("A", "B")


def test_conv2d_zero_padding(target: str) -> None:
    f = E.function(conv2d, target=target)
    i, k = rand(2, 6, 5, 3), rand(3, 3, 3, 4)
    pad = np.pad(i, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((2, 6, 5, 4), np.float32)
    for kx in range(3):
        for ky in range(3):
            want += pad[:, kx : kx + 6, ky : ky + 5, :] @ k[kx, ky]
    np.testing.assert_allclose(f(i, k), want, rtol=1e-4, atol=1e-5)


def test_maxpool(target: str) -> None:
    x = rand(6, 9)
    want = x[:6, :8].reshape(3, 2, 4, 2).max(axis=(1, 3))
    np.testing.assert_array_equal(E.function(maxpool, target=target)(x), want)


def test_softmax(target: str) -> None:
    x = rand(4, 7)
    e = np.exp(x - x.max(1, keepdims=True))
    want = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(E.function(softmax, target=target)(x), want, rtol=1e-5)


def test_cumsum(target: str) -> None:
    x = rand(11)
    np.testing.assert_allclose(E.function(cumsum, target=target)(x), np.cumsum(x), rtol=1e-5)


def test_transpose(target: str) -> None:
    x = rand(3, 5)
    np.testing.assert_array_equal(E.function(transpose, target=target)(x), x.T)


def test_default(target: str) -> None:
    x, d = rand(4), rand(8)
    want = d.copy()
    want[::2] = x
    np.testing.assert_array_equal(E.function(every_other, target=target)(x, d), want)


def test_default_by_set_default(target: str) -> None:
    @E.function(target=target)
    def f(I, D):  # noqa: E741
        (N,) = E.dims(1)
        (i,) = E.indexes(1)
        I.bind_dims(N)
        O = E.output(N + 2)  # noqa: E741
        O[i + 1] = I[i]
        O.set_default(D)
        return O

    assert "default D;" in f.source
    x, d = rand(3), rand(5)
    np.testing.assert_array_equal(f(x, d), np.concatenate([d[:1], x, d[4:]]))


def test_conditional_combination(target: str) -> None:
    lab, j, v = np.array([2, 0, 1, 2], np.int32), np.arange(3, dtype=np.int32), rand(3)
    np.testing.assert_allclose(E.function(one_hot, target=target)(lab, j, v), v[lab])


def test_product_and_min_aggregations(target: str) -> None:
    @E.function(target=target)
    def f(A):
        M, N = E.dims(2)
        m, n = E.indexes(2)
        A.bind_dims(M, N)
        P = E.output(M)
        P[m] *= A[m, n]
        Q = E.output(M)
        Q[m] <= A[m, n]  # noqa: B015
        return P, Q

    a = rand(3, 4)
    p, q = f(a)
    np.testing.assert_allclose(p, a.prod(1), rtol=1e-5)
    np.testing.assert_array_equal(q, a.min(1))


def test_multiple_outputs(target: str) -> None:
    f = E.function(multi, target=target)
    a, b = rand(3, 4), rand(3, 4)
    s, t, r = f(a, b)
    np.testing.assert_allclose(s, a + b)
    np.testing.assert_allclose(t, (a + b).sum(1), rtol=1e-5)
    np.testing.assert_allclose(r, np.maximum(a, 0) * 0.5)
    assert f.outputs == ("T1", "S", "T2")


def test_casts(target: str) -> None:
    @E.function(target=target)
    def f(X):
        return (
            E.cast(X, "f16"),
            E.cast(X, "int32"),
            E.cast(X * 10, np.uint8),
            E.cast(X, "bool"),
            E.cast(X, "f64"),
            E.bitcast(X, "i32"),
        )

    assert "as_float(X, 16)" in f.source and "as_bool(X)" in f.source
    x = np.array([0.0, 1.5, -2.25, 3.0], np.float32)
    h, i, u, b, d, bits = f(x)
    assert h.dtype == np.float16 and i.dtype == np.int32 and u.dtype == np.uint8
    np.testing.assert_array_equal(h, x.astype(np.float16))
    np.testing.assert_array_equal(i, x.astype(np.int32))
    np.testing.assert_array_equal(u[x >= 0], (x * 10)[x >= 0].astype(np.uint8))
    np.testing.assert_array_equal(b, x != 0)
    assert d.dtype == np.float64
    np.testing.assert_array_equal(bits, x.view(np.int32))


def test_output_dtype_accumulates_in_it(target: str) -> None:
    @E.function(target=target)
    def f(A):
        (N,) = E.dims(1)
        (i,) = E.indexes(1)
        A.bind_dims(N)
        S = E.output(dtype="int32")
        S[()] += A[i]
        return S

    a = np.full(300, 100, np.int8)
    got = f(a)
    assert got.dtype == np.int32 and got == 30000


def test_every_elementwise_operator(target: str) -> None:
    @E.function(target=target)
    def f(A, B):
        return (
            A + B,
            A - B,
            A * B,
            A / B,
            A % B,
            A < B,
            A > B,
            A <= B,
            A >= B,
            A == B,
            A != B,
            -A,
            1.5 - A,
            2 / B,
            E.select(A > 0, A, B),
            E.logical_and(A > 0, B > 0),
            E.logical_or(A > 0, B > 0),
            E.logical_not(A > 0),
        )

    a = np.array([1.0, -2.0, 3.5, 0.25], np.float32)
    b = np.array([2.0, -2.0, -1.0, 4.0], np.float32)
    want = [
        a + b,
        a - b,
        a * b,
        a / b,
        np.mod(a, b),
        a < b,
        a > b,
        a <= b,
        a >= b,
        a == b,
        a != b,
        -a,
        1.5 - a,
        2 / b,
        np.where(a > 0, a, b),
        (a > 0) & (b > 0),
        (a > 0) | (b > 0),
        ~(a > 0),
    ]
    got = f(a, b)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_bitwise_operators(target: str) -> None:
    @E.function(target=target)
    def f(P, Q):
        return P & Q, P | Q, P ^ Q, ~P, P << 2, P >> 1, 255 & P

    p = np.array([1, 6, 255, -8], np.int32)
    q = np.array([3, 5, 15, 7], np.int32)
    for g, w in zip(f(p, q), [p & q, p | q, p ^ q, ~p, p << 2, p >> 1, 255 & p]):
        np.testing.assert_array_equal(g, w)


def test_every_function(target: str) -> None:
    names = "exp log sqrt tanh sigmoid sin cos tan abs erf floor ceil round relu".split()

    @E.function(target=target)
    def f(X, Y):
        return (
            *(getattr(E, n)(X) for n in names),
            E.pow(X, Y),
            E.max(X, Y),
            E.min(X, 0.5),
            E.as_bool(X),
        )

    x = np.array([0.5, 1.25, 2.0, 3.5], np.float32)
    y = np.array([2.0, 0.5, -1.0, 1.0], np.float32)
    import math

    ref = {
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "erf": np.vectorize(math.erf),
        "relu": lambda v: np.maximum(v, 0),
        "abs": np.abs,
        "round": np.round,
    }
    got = f(x, y)
    for n, g in zip(names, got):
        w = ref.get(n, getattr(np, n, None))(x)
        np.testing.assert_allclose(g, w, rtol=1e-5, err_msg=n)
    np.testing.assert_allclose(got[-4], x**y, rtol=1e-5)
    np.testing.assert_array_equal(got[-3], np.maximum(x, y))
    np.testing.assert_array_equal(got[-2], np.minimum(x, 0.5))
    np.testing.assert_array_equal(got[-1], x != 0)


def test_dims_in_elementwise_and_index_and_builtins(target: str) -> None:
    @E.function(target=target)
    def f(X, I):  # noqa: E741
        N, K = E.dims(2)
        X.bind_dims(N, K)
        pos = E.index(X, 1) * N
        R = E.reshape(X, K, N)
        G = E.gather(X, I, 0)
        return pos, R, G

    x = rand(2, 3)
    idx = np.array([1, 0, 1], np.int64)
    pos, r, g = f(x, idx)
    np.testing.assert_array_equal(pos, np.indices(x.shape)[1] * 2)
    np.testing.assert_array_equal(r, x.reshape(3, 2))
    np.testing.assert_array_equal(g, x[idx])


def test_weak_scalars_keep_the_dtype() -> None:
    @E.function(target="interp")
    def f(X):
        return X * 0.5 + 1 - -2 + float("-inf") * (X - float("nan")) + (X > True)

    assert f.source.splitlines()[1] == (
        "    T1 = X * 0.5 + 1 - -2 + -1e400 * (X - 0.0 / 0.0) + (X > as_bool(1));"
    )
    got = f(np.ones(2, np.float32))
    assert got.dtype == np.float32 and np.isnan(got).all()


def test_a_function_is_a_stripeml_function() -> None:
    f = E.function(matmul, target="interp", name="mm")
    assert isinstance(f, stripeml.api.Function) and f.name == "mm"
    assert stripeml.edsl is E
    a = rand(2, 2)
    np.testing.assert_allclose(f(A=a, B=a), a @ a, rtol=1e-6)


def test_explicit_names() -> None:
    @E.function(target="interp")
    def f(x):
        d = E.dims(1, names="Len")
        (j,) = E.indexes(1, names=["jj"])
        x.bind_dims(*d)
        out = E.output(d[0])
        out[j] = x[d[0] - 1 - j]
        return out

    assert f.source == "function (X[Len]) -> (Out) {\n    Out[jj : Len] = =(X[Len - 1 - jj]);\n}\n"
    np.testing.assert_array_equal(f(np.arange(4.0)), np.arange(4.0)[::-1])


# --------------------------------------------------------------------------- errors
def test_a_tile_type_error_names_the_python_line() -> None:
    with pytest.raises(TileTypeError) as info:

        @E.function(target="interp")
        def f(A, B):
            M, K, N = E.dims(3)
            m, k, n = E.indexes(3)
            A.bind_dims(M, K)
            B.bind_dims(K, N)
            C = E.output(M, N)
            C[m, n] += A[m, k] * B[k * n, n]  # @bad-poly
            return C

    msg = str(info.value)
    assert msg.startswith(f"{__file__}:{line_of('@bad-poly')}: ")
    assert "multiplies two indices" in msg
    assert "C[m, n : M, N] = +(A[m, k] * B[k * n, n]);" in msg
    assert info.value.python_line == line_of("@bad-poly")  # type: ignore[attr-defined]


def test_an_elementwise_error_names_its_line() -> None:
    with pytest.raises(StripeError, match=rf"{__file__}:{line_of('@idx-elt')}: .*index"):

        @E.function(target="interp")
        def f(A):
            (i,) = E.indexes(1)
            return A + i  # @idx-elt


def test_a_shape_error_at_call_names_the_bind_dims_line() -> None:
    @E.function(target="interp")
    def f(A, B):
        (N,) = E.dims(1)
        A.bind_dims(N)
        B.bind_dims(N)  # @bind-b
        return A + B

    with pytest.raises(ShapeError) as info:
        f(np.ones(2), np.ones(3))
    assert str(info.value).startswith(f"{__file__}:{line_of('@bind-b')}: ")
    assert "dimension N" in str(info.value)


def test_a_default_of_another_dtype_names_the_contraction_line() -> None:
    f = E.function(every_other, target="interp")
    with pytest.raises(TileTypeError, match=rf"test_edsl.py:{line_of('O[2 * i] = I[i]')}: "):
        f(np.ones(2, np.float32), np.ones(4, np.float64))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("C[i] = A[1.5]", "is indexed with 1.5"),
        ("C[i] = A[B]", "is indexed with"),
        ("C[i] = A[i] * A[i] * A[i]", "at most two accesses"),
        ("C[i] = A[i] - A[i]", "not a contraction combination"),
        ("C[i] = A + 1", "must be an access"),
        ("A[i] += A[i]", "only an E.output tensor takes a contraction"),
        ("C[i] += A[i]; C[i] += A[i]", "is already written by the contraction at"),
        ("A.bind_dims(N); A.bind_dims(N, N)", "now to [N, N]"),
        ("A.bind_dims(1.5)", "is not a dimension"),
        ("C.add_constraint(i < N)", "which no contraction has written yet"),
        ("C[i] += A[i]; C.add_constraint(i <= N)", "use '<'"),
        ("D = A + C", "is used before a contraction writes it"),
        ("if A > 0: pass", "no truth value"),
    ],
)
def test_misuse_is_an_edsl_error_at_the_line(body: str, message: str, tmp_path) -> None:
    path = tmp_path / "prog.py"
    path.write_text(
        "from stripeml import edsl as E\n"
        "def f(A, B):\n"
        "    (N,) = E.dims(1)\n"
        "    (i,) = E.indexes(1)\n"
        "    C = E.output(N)\n"
        f"    {body}\n"
        "    return C\n"
    )
    ns: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    with pytest.raises(EdslError) as info:
        E.function(ns["f"], target="interp")
    assert str(info.value).startswith(f"{path}:6: "), str(info.value)
    assert message in str(info.value)
    assert info.value.python_line == 6


def test_returning_a_non_tensor_names_the_return_line() -> None:
    with pytest.raises(EdslError, match=rf":{line_of('@ret')}: .*not a tensor"):

        @E.function(target="interp")
        def f(A):
            (N,) = E.dims(1)
            return N  # @ret


def test_returning_an_unwritten_output() -> None:
    with pytest.raises(EdslError, match="no contraction writes it"):

        @E.function(target="interp")
        def f(A):
            return E.output(3)


def test_outside_a_trace() -> None:
    with pytest.raises(EdslError, match="outside a function traced by E.function"):
        E.dims(2)


def test_returning_an_input_copies_it() -> None:
    f = E.function(lambda A: (A, A), target="interp")
    a = rand(3)
    x, y = f(a)
    np.testing.assert_array_equal(x, a)
    np.testing.assert_array_equal(y, a)
