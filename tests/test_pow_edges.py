"""``pow`` is C's (IEEE 754) ``pow`` on every backend and in constant folding,
checked against Python's ``math.pow`` (which is C's) on the edge values.

NumPy's ``power`` differs for an exponent of 0.5 given as one value: it takes
``sqrt``, so ``-0.0 ** 0.5`` is -0.0 and ``-inf ** 0.5`` nan, where ``pow``
gives +0.0 and +inf.  The interpreter used NumPy's and disagreed with the
compiled backends (found by the fuzzer)."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

import stripeml

_NO_OPENCL = importlib.util.find_spec("pyopencl") is None
TARGETS = [
    "interp",
    "cpu",
    pytest.param("opencl_pocl", marks=pytest.mark.skipif(_NO_OPENCL, reason="no pyopencl")),
]
EDGES = [-math.inf, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 4.0, math.inf, math.nan]
EXPONENTS = [0.5, 2.0, -1.0, 1.0, 0.0, 3.0, -0.5]


def c_pow(x: float, y: float) -> float:
    """C's pow through Python's math.pow (which raises where C returns nan/inf)."""
    if x == 0 and y < 0:  # a pole: math.pow raises, C gives an infinity (odd y: signed)
        odd = float(y).is_integer() and int(y) % 2 == 1
        return math.copysign(math.inf, x) if odd else math.inf
    try:
        return math.pow(x, y)
    except ValueError:  # a negative base to a non-integer power
        return math.nan


def _same(got: float, want: float) -> bool:
    """Zeros (with their sign), infinities and NaN exactly; other values to the
    few ulp a math library's pow may be off by."""
    if math.isnan(want):
        return math.isnan(got)
    if want == 0 or math.isinf(want):
        return got == want and math.copysign(1, got) == math.copysign(1, want)
    return abs(got - want) <= 4 * np.finfo(np.float64).eps * abs(want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("exponent", EXPONENTS)
def test_pow_of_edge_values_is_c_pow(target: str, exponent: float) -> None:
    x = np.array(EDGES, np.float64)
    f = stripeml.compile(f"function (A) -> (O) {{ O = pow(A, {exponent!r}); }}", target=target)
    with np.errstate(all="ignore"):
        got = f(x)
    bad = [
        (a, g, c_pow(a, exponent)) for a, g in zip(EDGES, got) if not _same(g, c_pow(a, exponent))
    ]
    assert not bad, f"pow(x, {exponent}): (x, got, C's pow) {bad}"


@pytest.mark.parametrize("target", TARGETS)
def test_folded_pow_is_c_pow(target: str) -> None:
    src = "function (A) -> (O1, O2) { O1 = A + pow(-0.0, 0.5); O2 = A * 0 + pow(-1.0 / 0.0, 0.5); }"
    zero = np.zeros(1, np.float64)
    o1, o2 = stripeml.compile(src, target=target)(zero)
    assert _same(float(o1[0]), c_pow(-0.0, 0.5)) and _same(float(o2[0]), c_pow(-math.inf, 0.5))
