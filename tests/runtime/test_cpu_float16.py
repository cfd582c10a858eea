"""float16 on the cpu target: NumPy's semantics, bit for bit.

Every operation on float16 values gives the float16 rounding of its float32
result (what NumPy computes); casts match ``astype`` (float64 -> float16 rounds
once); reductions round to float16 after every step, as the interpreter's
general mode does.  Each program runs scalar and in 8 vector lanes.
"""

from __future__ import annotations

import numpy as np
import pytest

from stripeml.ir.nodes import Intrinsic, Load, Store
from stripeml.runtime.cpu import CpuBackend, CpuOptions
from stripeml.runtime.interp import run

from .programs_ir import block, contraction, matmul, program, root_ref, view

WIDTHS = (1, 8)
M = 1000
rng = np.random.default_rng(16)


def _halves(n: int) -> np.ndarray:
    """Random float16 values of every magnitude, with the special values."""
    bits = rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
    x = bits.view(np.float16).copy()
    x[np.isnan(x)] = np.nan  # quiet NaNs (C's pow(sNaN, 0) is NaN, not 1)
    x[:12] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 65504, -65504, 6e-8, 1.0, -1.0, 0.5, 2.0]
    return x


def _eltwise(op: str, in_dtypes: list[str], out_dtype: str, n: int = M):
    roots = [root_ref("in", f"X{k}", dt, (n,)) for k, dt in enumerate(in_dtypes)]
    out = root_ref("out", "O", out_dtype, (n,))
    refs = [view("in", r.into, r.shape, "i") for r in roots] + [view("out", "O", out.shape, "i")]
    stmts = [Load(f"$x{k}", r.into) for k, r in enumerate(roots)]
    stmts += [Intrinsic(op, tuple(f"$x{k}" for k in range(len(roots))), "$y", out_dtype),
              Store("O", "$y")]  # fmt: skip
    return program([*roots, out], [block({"i": n}, refs, stmts)])


def _cpu(prog, inputs, width):
    return CpuBackend(CpuOptions(threads=1, vector_width=width)).compile(prog).run(inputs)


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)  # NaN equals NaN; -0.0 == 0.0
    nz = (want == 0) & (got == 0)
    np.testing.assert_array_equal(np.signbit(got[nz]), np.signbit(want[nz]))


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
          "max": np.maximum, "min": np.minimum, "mod": np.mod, "pow": np.power}  # fmt: skip
UNARY = {"neg": np.negative, "abs": np.abs, "sqrt": np.sqrt, "floor": np.floor,
         "ceil": np.ceil, "round": np.rint}  # fmt: skip


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_ops_round_once_to_half(op, width):
    a, b = _halves(M), _halves(M)
    if op == "pow":
        with np.errstate(all="ignore"):
            a, b = np.abs(a), (b % np.float16(8)).astype(np.float16)
    with np.errstate(all="ignore"):
        want = BINARY[op](a, b)
    _same(_cpu(_eltwise(op, ["f16", "f16"], "f16"), {"X0": a, "X1": b}, width)["O"], want)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_exact_unary_ops(op, width):
    x = _halves(M)
    with np.errstate(all="ignore"):
        want = UNARY[op](x)
    _same(_cpu(_eltwise(op, ["f16"], "f16"), {"X0": x}, width)["O"], want)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("op", ["exp", "log", "tanh", "sigmoid", "sin", "cos", "tan", "erf"])
def test_math_functions_match_the_interpreter(op, width):
    x = (rng.standard_normal(M) * 4).astype(np.float16)
    if op == "log":
        x = np.abs(x)
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0]
    prog = _eltwise(op, ["f16"], "f16")
    want = run(prog, {"X0": x})["O"]
    got = _cpu(prog, {"X0": x}, width)["O"]
    assert got.dtype == np.float16
    # The native functions are accurate to a few float32 ulp: at most one float16
    # ulp apart, and only where NumPy's float32 result lies next to a float16 tie.
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=6e-8)
    assert np.mean(got == want) > 0.99


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "src,dst", [("f64", "f16"), ("f32", "f16"), ("f16", "f32"), ("f16", "f64"), ("i32", "f16"),
                ("i64", "f16"), ("u64", "f16"), ("u8", "f16"), ("bool", "f16"), ("f16", "i32"),
                ("f16", "i64"), ("f16", "u8"), ("f16", "i8"), ("f16", "u64"), ("f16", "bool")],
)  # fmt: skip
def test_casts_match_astype(src, dst, width):
    from stripeml.ir.dtypes import to_numpy

    if src == "f16":
        x = _halves(M)
    elif src in ("f32", "f64"):
        x = (rng.standard_normal(M) * 10.0 ** rng.integers(-8, 6, M)).astype(to_numpy(src))
        if src == "f64":
            # Halfway between two halves plus a hair: rounding through float32 first
            # lands on the tie and rounds to even; one rounding does not.
            x[:3] = [1 + 2**-11 + 2**-40, 2049 + 2**-30, -(1 + 2**-11 + 2**-40)]
    elif src == "bool":
        x = rng.integers(0, 2, M).astype(bool)
    else:
        info = np.iinfo(to_numpy(src))
        x = rng.integers(info.min, info.max, M, dtype=to_numpy(src), endpoint=True)
        x[: M // 2] = rng.integers(max(info.min, -70000), min(info.max, 70000), M // 2)
    with np.errstate(all="ignore"), __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore")
        want = x.astype(to_numpy(dst))
    if src == "f16" and dst not in ("f32", "f64", "bool"):
        # Out-of-range and NaN conversions are platform-defined; compare the defined ones.
        info = np.iinfo(to_numpy(dst))
        with np.errstate(all="ignore"):
            ok = np.isfinite(x) & (x >= info.min) & (x <= info.max)
        x = np.where(ok, x, np.float16(0))
        want = x.astype(to_numpy(dst))
    got = _cpu(_eltwise("cast", [src], dst), {"X0": x}, width)["O"]
    _same(got, want)


def test_float64_to_float16_rounds_once():
    x = np.array([1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40)], np.float64)
    got = _cpu(_eltwise("cast", ["f64"], "f16", 2), {"X0": x}, 1)["O"]
    assert got.tolist() == [1 + 2**-10, -(1 + 2**-10)]  # not 1.0 as via float32


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("agg", ["add", "max", "min", "mul"])
def test_reductions_into_float16(agg, width):
    """``S[n] = agg(X[n, k] * Y[n, k])``: a register accumulator of float16 holds
    float and rounds once (as NumPy's float16 sums and the interpreter's fast path);
    max/min are exact, sums and products within the interpreter's tolerance."""
    n, k = 5, 37
    prog = contraction({"X": ("f16", (n, k)), "Y": ("f16", (n, k))}, ("S", "f16", (n,)),
                       {"n": n, "k": k}, {"X": "n,k", "Y": "n,k", "S": "n"}, agg=agg)  # fmt: skip
    scale = 0.3 if agg == "mul" else 1.0
    x = (rng.standard_normal((n, k)) * scale + (1 if agg == "mul" else 0)).astype(np.float16)
    y = (rng.standard_normal((n, k)) * scale + (1 if agg == "mul" else 0)).astype(np.float16)
    inputs = {"X": x, "Y": y}
    want = run(prog, inputs, mode="general")["S"]
    got = _cpu(prog, inputs, width)["S"]
    assert got.dtype == np.float16
    if agg in ("max", "min"):
        _same(got, want)
        return
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=2e-2)
    products = (x * y).astype(np.float32)
    exact = products.sum(1) if agg == "add" else products.prod(1)
    np.testing.assert_allclose(got, exact.astype(np.float16), rtol=1e-3, atol=1e-3)


def test_float16_accumulates_in_float():
    """2048 + 1 + 1 + ... : float16 steps would stay at 2048 (its spacing there is 2)."""
    x = np.ones((1, 65), np.float16)
    x[0, 0] = 2048
    prog = contraction({"X": ("f16", (1, 65))}, ("S", "f16", (1,)), {"n": 1, "k": 65},
                       {"X": "n,k", "S": "n"}, combo=None)  # fmt: skip
    for width in WIDTHS:
        assert _cpu(prog, {"X": x}, width)["S"].tolist() == [2112.0]


@pytest.mark.parametrize("width", WIDTHS)
def test_matmul_float16(width):
    a = rng.standard_normal((12, 20)).astype(np.float16)
    b = rng.standard_normal((20, 33)).astype(np.float16)
    prog = matmul(12, 33, 20, "f16")
    want = run(prog, {"A": a, "B": b}, mode="general")["C"]
    got = _cpu(prog, {"A": a, "B": b}, width)["C"]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=2e-2)
    np.testing.assert_allclose(
        got, a.astype(np.float32) @ b.astype(np.float32), rtol=2e-2, atol=5e-2
    )
