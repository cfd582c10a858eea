"""A comparison that the types decide (a bool or small integer against a
constant it can never equal) folds to a constant of its operands' shape, and
what is built on it computes what NumPy computes on the comparison's array.
The fuzzer found ``abs(A != 5)`` on a bool ``A`` crashing the lowering (the
folded function lost the shape)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import stripeml
from stripeml.errors import TileTypeError

_NO_OPENCL = importlib.util.find_spec("pyopencl") is None
TARGETS = [
    "interp",
    "cpu",
    pytest.param("opencl_pocl", marks=pytest.mark.skipif(_NO_OPENCL, reason="no pyopencl")),
]
A = np.array([[True, False, True], [False, False, True]])
I8 = np.array([[-3, 0, 7], [127, -128, 1]], np.int8)

CASES = [
    ("O = abs(A != 5);", A, lambda a: np.abs(a != 5)),
    ("O = relu(A == 5);", A, lambda a: np.maximum(a == 5, False)),
    ("O = pow(abs(A != 5) + 0.5, 0.5);", A, lambda a: np.power(np.abs(a != 5) + 0.5, 0.5)),
    # Functions of bools and integers compute in float64 (docs/tile-language.md).
    ("O = exp(A != 5);", A, lambda a: np.exp((a != 5).astype(np.float64))),
    ("O = sqrt(A > 5) + 1;", A, lambda a: np.sqrt((a > 5).astype(np.float64)) + 1),
    ("O = -(A < 1000) * 1;", I8, None),  # negating a bool is an error, folded or not
    ("O = (A < 1000) + A;", I8, lambda a: (a < 1000) + a),
    ("O = abs(A > 200) * A;", I8, lambda a: np.abs(a > 200) * a),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_folded_comparisons_keep_shape_and_dtype(target: str, case: int) -> None:
    body, a, numpy = CASES[case]
    f = stripeml.compile(f"function (A[N, M]) -> (O) {{ {body} }}", target=target)
    if numpy is None:
        with pytest.raises(TileTypeError, match="cannot negate a bool value"):
            f(a)
        return
    got = f(a)
    want = numpy(a)
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    np.testing.assert_allclose(got, want, rtol=1e-6)
