"""Each derivative rule on its own, edges included, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.autodiff import AutodiffError, grad

# (Tile expression of X and Y, torch expression of x and y); Y > 0.
ELEMENTWISE = [
    ("X + Y", "x + y"),
    ("X - Y", "x - y"),
    ("X * Y", "x * y"),
    ("X / Y", "x / y"),
    ("-X", "-x"),
    ("exp(X)", "torch.exp(x)"),
    ("log(Y)", "torch.log(y)"),
    ("sqrt(Y)", "torch.sqrt(y)"),
    ("tanh(X)", "torch.tanh(x)"),
    ("sigmoid(X)", "torch.sigmoid(x)"),
    ("sin(X)", "torch.sin(x)"),
    ("cos(X)", "torch.cos(x)"),
    ("tan(X)", "torch.tan(x)"),
    ("erf(X)", "torch.erf(x)"),
    ("abs(X)", "torch.abs(x)"),
    ("relu(X)", "torch.relu(x)"),
    ("pow(Y, X)", "torch.pow(y, x)"),
    ("pow(X, 3)", "x ** 3"),
    ("max(X, Y)", "torch.maximum(x, y)"),
    ("min(X, Y)", "torch.minimum(x, y)"),
    ("X > Y ? X : Y * 2", "torch.where(x > y, x, y * 2)"),
    ("X % Y", "torch.remainder(x, y)"),
    ("as_float(X, 64) * Y", "x * y"),
    ("floor(X) * Y", "torch.floor(x) * y"),
]


@pytest.mark.parametrize(("tile", "ref"), ELEMENTWISE, ids=[t for t, _ in ELEMENTWISE])
def test_elementwise_rule(tile: str, ref: str) -> None:
    torch = pytest.importorskip("torch")
    f = stripeml.compile(f"function (X[N], Y[N]) -> (O) {{ O = {tile}; }}", target="interp")
    # edges: zeros (abs, relu: gradient 0 there, as torch), ties (max/min split evenly)
    x = np.array([-1.5, -0.3, 0.0, 0.4, 1.2, 0.8])
    y = np.array([0.5, 1.1, 0.7, 2.0, 1.2, 0.9])
    dout = np.array([1.0, -2.0, 0.5, 1.5, 3.0, -1.0])
    dx, dy = grad(f, ("X", "Y"))(x, y, dout)
    tx, ty = (torch.tensor(v, requires_grad=True) for v in (x, y))
    out = eval(ref, {"torch": torch, "x": tx, "y": ty})  # noqa: S307 - fixed strings above
    gx, gy = torch.autograd.grad((out * torch.tensor(dout)).sum(), [tx, ty], allow_unused=True)
    for got, want in ((dx, gx), (dy, gy)):
        want = np.zeros_like(x) if want is None else want.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _g(source: str, wrt, *args):  # noqa: ANN001, ANN202
    return grad(stripeml.compile(source, target="interp"), wrt)(*args)


def test_max_ties_every_tied_element_gets_the_gradient() -> None:
    src = "function (X[N, K]) -> (P) { P[n : N] = >(X[n, k]); }"
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    dx = _g(src, "X", x, np.array([10.0, 1.0]))
    np.testing.assert_array_equal(dx, [[0, 10, 10], [1, 1, 1]])


def test_min_with_constraint_and_default() -> None:
    # running minimum over a window of 2 (constraint), default where no tuple writes
    src = """function (X[N], D[M]) -> (O) {
        O[i : M] = <(X[i + k]), k < 2, default D;
    }"""
    x = np.array([3.0, 1.0, 2.0])
    d = np.array([7.0, 8.0, 9.0, 10.0])
    dx, dd = _g(src, ("X", "D"), x, d, np.array([1.0, 2.0, 4.0, 8.0]))
    # O[0] = min(3, 1) -> x1; O[1] = min(1, 2) -> x1; O[2] = x2; O[3]: default
    np.testing.assert_array_equal(dx, [0, 3, 4])
    np.testing.assert_array_equal(dd, [0, 0, 0, 8])


def test_padding_skips_out_of_bounds() -> None:
    src = "function (I[N], K[T]) -> (O) { O[x : N] = +(I[x + t - 1] * K[t]); }"
    i, k = np.array([1.0, 2.0, 3.0]), np.array([1.0, 10.0, 100.0])
    di, dk = _g(src, ("I", "K"), i, k, np.ones(3))
    # I[j] is read at x = j - t + 1 for the t that keep x in [0, 3)
    np.testing.assert_array_equal(di, [11, 111, 110])
    np.testing.assert_array_equal(dk, [3, 6, 5])


def test_product_with_zeros_is_exact() -> None:
    src = "function (X[N, K]) -> (P) { P[n : N] = *(X[n, k]); }"
    x = np.array([[2.0, 3.0, 4.0], [0.0, 3.0, 4.0], [0.0, 0.0, 5.0]])
    dx = _g(src, "X", x, np.ones(3))
    np.testing.assert_array_equal(dx, [[12, 8, 6], [12, 0, 0], [0, 0, 0]])


def test_assign_scatter_and_default() -> None:
    src = "function (I[N], D[M]) -> (O) { O[2 * i : 2 * N] = =(I[i]), default D; }"
    di, dd = _g(src, ("I", "D"), np.ones(3), np.zeros(6), np.arange(6.0))
    np.testing.assert_array_equal(di, [0, 2, 4])
    np.testing.assert_array_equal(dd, [0, 1, 0, 3, 0, 5])


def test_cond_combination_and_no_gradient_through_comparisons() -> None:
    src = """function (L[N], J[K], V[K]) -> (O) {
        O[i : N] = +(L[i] == J[k] ? (V[k]));
    }"""
    dv = _g(src, "V", np.array([0.0, 1.0, 1.0]), np.array([1.0, 2.0]), np.ones(2), np.ones(3))
    np.testing.assert_array_equal(dv, [2, 0])
    # a parameter reaching the outputs only through comparisons gets zeros
    dl = _g(src, "L", np.array([0.0, 1.0, 1.0]), np.array([1.0, 2.0]), np.ones(2), np.ones(3))
    np.testing.assert_array_equal(dl, [0, 0, 0])


def test_output_also_used_inside_accumulates() -> None:
    src = "function (X[N]) -> (A, B) { A = X * X; B = A * 3; }"
    dx = _g(src, "X", np.array([1.0, 2.0]), np.array([1.0, 1.0]), np.array([1.0, 2.0]))
    # dX = 2x * (dA + 3 dB)
    np.testing.assert_array_equal(dx, [2 * 1 * 4, 2 * 2 * 7])


def test_edsl_function() -> None:
    from stripeml import edsl as E

    @E.function(target="interp")
    def mm(A, B):  # noqa: ANN001, ANN202, N803
        M, K, N = E.dims(3)
        m, k, n = E.indexes(3)
        A.bind_dims(M, K)
        B.bind_dims(K, N)
        C = E.output(M, N)
        C[m, n] += A[m, k] * B[k, n]
        return E.tanh(C)

    rng = np.random.default_rng(3)
    a, b, dc = rng.standard_normal((2, 3)), rng.standard_normal((3, 2)), rng.standard_normal((2, 2))
    da = grad(mm, "A")(a, b, dc)
    np.testing.assert_allclose(da, (dc * (1 - np.tanh(a @ b) ** 2)) @ b.T, rtol=1e-12)


def test_integer_inputs_have_no_gradient() -> None:
    g = grad(stripeml.compile("function (X[N], Y[N]) -> (O) { O = X * Y; }", target="interp"))
    with pytest.raises(AutodiffError, match="'X' has dtype int32.*no gradient"):
        g(np.ones(2, np.int32), np.ones(2), np.ones(2))
    with pytest.raises(stripeml.StripeError, match="bool"):
        g(np.ones(2, bool), np.ones(2), np.ones(2))


def test_unknown_and_repeated_wrt() -> None:
    f = stripeml.compile("function (X[N]) -> (O) { O = exp(X); }", target="interp")
    with pytest.raises(AutodiffError, match="'Q' is not a parameter.*parameters: X"):
        grad(f, ("Q",))
    with pytest.raises(AutodiffError, match="'O' is not a parameter"):
        grad(f, "O")
    with pytest.raises(AutodiffError, match="twice"):
        grad(f, ("X", "X"))
    assert issubclass(AutodiffError, stripeml.StripeError)


def test_unsupported_constructs_are_clear_errors() -> None:
    src = "function (X[N], I[K], U[K]) -> (O) { O = scatter(X, I, U, 0); }"
    with pytest.raises(AutodiffError, match="scatter"):
        grad(stripeml.compile(src, target="interp"), "U")
    src = "function (A[N], B[N]) -> (O) { O[] = >(A[i] * B[i]); }"
    with pytest.raises(AutodiffError, match="single operand"):
        grad(stripeml.compile(src, target="interp"), "A")
    with pytest.raises(AutodiffError, match="shape of 'O' is not known statically"):
        grad(stripeml.compile("function (X, Y[N]) -> (O) { O = X * Y; }", target="interp"), "X")
    with pytest.raises(AutodiffError, match="shape of 'O' is not known"):
        grad(stripeml.compile("function (X[N], S) -> (O) { O = X * S; }", target="interp"), "X")


def test_stripeml_grad_is_exposed() -> None:
    f = stripeml.compile("function (X[N]) -> (O) { O = X * X; }", target="interp")
    g = stripeml.grad(f, wrt=("X",))
    np.testing.assert_array_equal(g(np.array([3.0]), np.array([1.0])), [6.0])
    assert isinstance(g, stripeml.api.Function) and "function (X[N], DO[N]) -> (DX)" in g.source


def test_constants_and_second_derivative() -> None:
    src = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
    f = stripeml.compile(src, target="interp", constants={"B": np.full((3, 2), 2.0)})
    g = grad(f, "A")
    assert g.params == ("A", "DC")
    np.testing.assert_array_equal(g(np.ones((2, 3)), np.ones((2, 2))), np.full((2, 3), 4.0))
    with pytest.raises(AutodiffError, match="constant"):
        grad(f, "B")
    # the gradient is Tile: differentiate it again (d/dx of 3 x^2 dO is 6 x dO)
    cube = grad(stripeml.compile("function (X[N]) -> (O) { O = X * X * X; }", target="interp"))
    second = grad(stripeml.compile(cube.source, target="interp"), "X")
    x = np.array([2.0, -1.0])
    np.testing.assert_allclose(second(x, np.ones(2), np.ones(2)), 6 * x)
