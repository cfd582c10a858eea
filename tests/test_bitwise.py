"""``& | ^ ~ << >>`` and the bit casts agree with NumPy on every backend.

Every integer dtype, on its edge operands (``test_int_division.edges``: MIN,
-1, 0, 1, MAX, ...) against each shift amount that matters (0, 1, width - 1,
width and beyond, the largest value, and a negative one for signed dtypes):
from the width on every bit is shifted out (0, or -1 for ``>>`` of a negative
value), as NumPy's ``left_shift``/``right_shift`` and ONNX ``BitShift`` give.
As in ``test_int_division.py``, each program runs on inputs padded to a
multiple of 64 elements (the cpu's vector loops) and, but on OpenCL, on
1-element inputs (the cpu's scalar code); OpenCL runs on PoCL (skipped where
it cannot run).  The CUDA
text is compiled by NVRTC in ``tests/codegen/test_cstyle_bitwise.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import stripeml

try:
    from test_int_division import INT_DTYPES, _compare, _vector, edges
except ImportError:  # tests/ imported as a package
    from tests.test_int_division import INT_DTYPES, _compare, _vector, edges

BACKENDS = ("interp", "cpu", "opencl_pocl")

# Literal amounts keep A's dtype (weak literals); 3 and 7 fit every dtype.
TENSORS = """function (A, B) -> (AND, OR, XOR, NOT, SHL, SHR, L, R, M) {
    AND = A & B; OR = A | B; XOR = A ^ B; NOT = ~A; SHL = A << B; SHR = A >> B;
    L = A << 3; R = A >> 7; M = (A & 7) ^ 3;
}"""
# Fused into a contraction's kernel (K == 1: S is A).
FUSED = "function (A[N, K], B[N]) -> (L, R) { S[i : N] = >(A[i, k]); L = S << B; R = S >> B; }"


def shift_amounts(dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    w = 8 * dt.itemsize
    vals = {0, 1, 2, w - 1, w, w + 1, 2 * w, int(np.iinfo(dt).max)}
    if dt.kind == "i":
        vals |= {-1, -w, int(np.iinfo(dt).min)}
    return np.array(sorted(vals), dt)


def _pairs(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.meshgrid(edges(dtype), shift_amounts(dtype), indexing="ij")
    return a.ravel(), b.ravel()


def _tensors_ref(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    return a & b, a | b, a ^ b, ~a, a << b, a >> b, a << 3, a >> 7, (a & 7) ^ 3


def _run(f, inputs: tuple[np.ndarray, ...], scalar: bool) -> dict[str, tuple[np.ndarray, ...]]:
    """``f`` on the vector-padded inputs and (``scalar``) on each 1-element row."""
    out = {"vector": f(*map(_vector, inputs))}
    if scalar:
        rows = [f(*(x[i : i + 1] for x in inputs)) for i in range(len(inputs[0]))]
        out["scalar"] = tuple(np.concatenate([r[k] for r in rows]) for k in range(len(rows[0])))
    return out


def _check(target: str, name: str, source: str, inputs, reference) -> None:
    f = stripeml.compile(source, target=target)
    # The cpu's scalar code differs from its vector loops; a GPU kernel does not.
    for mode, got in _run(f, inputs, scalar=target != "opencl_pocl").items():
        args = tuple(map(_vector, inputs)) if mode == "vector" else inputs
        want = reference(*args)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            _compare(f"{target} {name}.{mode}.{k}", g, w, args)


def _skip_without_opencl(target: str) -> None:
    if target.startswith("opencl"):
        pytest.importorskip("pyopencl", reason="the opencl extra is not installed")


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("target", BACKENDS)
def test_bitwise_and_shifts_match_numpy(target: str, dtype: str) -> None:
    _skip_without_opencl(target)
    a, b = _pairs(dtype)
    _check(target, f"{dtype} tensors", TENSORS, (a, b), _tensors_ref)
    _check(target, f"{dtype} fused", FUSED, (a.reshape(-1, 1), b),
           lambda x, y: (x[:, 0] << y, x[:, 0] >> y))  # fmt: skip


@pytest.mark.parametrize("target", BACKENDS)
def test_bool_operands_are_logical(target: str) -> None:
    _skip_without_opencl(target)
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    source = (
        "function (A, B) -> (AND, OR, XOR, NOT) { AND = A & B; OR = A | B; XOR = A ^ B; NOT = ~A; }"
    )
    _check(target, "bool", source, (a, b), lambda x, y: (x & y, x | y, x ^ y, ~x))


BITCASTS = "function (F, D, I, B) -> (FI, IF, DU, UD, IU, BU) { FI = bitcast_int(F, 32); IF = bitcast_float(FI, 32); DU = bitcast_uint(D, 64); UD = bitcast_float(DU, 64); IU = bitcast_uint(I, 8); BU = bitcast_uint(B, 8); }"  # noqa: E501


def _bits_ref(f, d, i, b):
    return f.view(np.int32), f, d.view(np.uint64), d, i.view(np.uint8), b.view(np.uint8)


@pytest.mark.parametrize("target", BACKENDS)
def test_bitcasts_keep_every_bit(target: str) -> None:
    """NaN payloads, negative zeros, denormals and infinities go through unchanged."""
    _skip_without_opencl(target)
    f = np.array([1.5, -0.0, np.inf, -np.inf, 1e-45, -3.25, 3.4e38, 0.1], np.float32)
    payload = np.array([0x7FC00001, 0xFFA00000], np.uint32).view(np.float32)
    f = np.concatenate([f, payload])
    d = np.array([1.5, -0.0, np.inf, -np.inf, 5e-324, -3.25, 1.7e308, 0.1, 0.0, 0.0])
    d[-2:] = np.array([0x7FF8000000000001, 0xFFF4000000000000], np.uint64).view(np.float64)
    i = np.resize(edges("int8"), len(f))
    b = np.resize(np.array([True, False, False]), len(f))
    inputs = (f, d, i, b)
    f = stripeml.compile(BITCASTS, target=target)
    for mode, got in _run(f, inputs, scalar=target != "opencl_pocl").items():
        args = tuple(map(_vector, inputs)) if mode == "vector" else inputs
        for k, (g, w) in enumerate(zip(got, _bits_ref(*args))):
            assert g.dtype == w.dtype, (mode, k, g.dtype, w.dtype)
            bits = np.dtype(f"u{w.itemsize}")
            np.testing.assert_array_equal(g.view(bits), w.view(bits), err_msg=f"{mode} {k}")
