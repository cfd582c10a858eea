"""``/`` and ``%`` agree with NumPy on every backend, for every operand pair.

Integers: NumPy's ``floor_divide`` / ``remainder`` for all pairs of edge
operands (the minimum, -1, 0, the maximum, ...), so ``x / 0 == x % 0 == 0``
and ``MIN / -1 == MIN`` (wrapping).  Floats: true division and NumPy's
remainder, whose zero has the divisor's sign (checked with ``np.signbit``).

Each program runs twice per backend: once on inputs padded to a multiple of
64 elements (the cpu's vector loops) and once per operand pair on 1-element
inputs (the scalar code).  The cpu and opencl cases run in a child process
(this file run as a script), so a trap (x86 ``idiv`` raises SIGFPE on
``MIN / -1``) fails the test instead of killing the test run.  The expected
values come from NumPy, computed here in the parent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import stripeml

INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOAT_DTYPES = ("float16", "float32", "float64")
BACKENDS = ("interp", "cpu", "opencl_pocl")
VECTOR_LENGTH = 64  # inputs padded to a multiple of this take the vector loops

ELTWISE = "function (A, B) -> (Q, R) { Q = A / B; R = A % B; }"
# The division fused into a contraction's kernel (K == 1: S is A, its sign of zero included).
FUSED = "function (A[N, K], B[N]) -> (Q, R) { S[i : N] = >(A[i, k]); Q = S / B; R = S % B; }"
INT_LITERALS = (
    "function (A) -> (Q1, R1, Q0, R0) { Q1 = A / -1; R1 = A % -1; Q0 = A / 0; R0 = A % 0; }"
)
UINT_LITERALS = "function (A) -> (Q0, R0) { Q0 = A / 0; R0 = A % 0; }"
FLOAT_LITERALS = "function (A) -> (M, N) { M = A % 0.25; N = A % -0.25; }"


@dataclass(frozen=True)
class Case:
    """A program, its inputs (axis 0 runs over operand pairs) and its NumPy reference."""

    name: str
    source: str
    inputs: tuple[np.ndarray, ...]
    reference: Callable[..., tuple[np.ndarray, ...]]


def edges(dtype: str) -> np.ndarray:
    """The edge operands of an integer or float dtype, plus a few ordinary ones."""
    if np.dtype(dtype).kind == "f":
        vals = [-0.75, 0.75, -0.5, 0.5, -0.0, 0.0, 1.0, -1.0, 3.0, -3.0, 0.25, -0.25]
        vals += [np.inf, -np.inf, np.nan, 1e-3, -7.5]
        return np.array(vals, dtype)
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    vals = {lo, lo + 1, -7, -3, -2, -1, 0, 1, 2, 3, 7, hi - 1, hi}
    return np.array(sorted(v for v in vals if lo <= v <= hi), dtype)


def _divmod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(all="ignore"):
        if a.dtype.kind == "f":
            return np.true_divide(a, b), np.remainder(a, b)
        return np.floor_divide(a, b), np.remainder(a, b)


def _by_literals(a: np.ndarray, *divisors: float) -> tuple[np.ndarray, ...]:
    out: list[np.ndarray] = []
    for d in divisors:
        q, r = _divmod(a, np.array(d, a.dtype))
        out += [r] if a.dtype.kind == "f" else [q, r]
    return tuple(out)


def cases(dtype: str) -> list[Case]:
    """The programs run for ``dtype``, the same in the parent and in the child."""
    e = edges(dtype)
    a, b = (x.ravel() for x in np.meshgrid(e, e, indexing="ij"))
    out = [
        Case("eltwise", ELTWISE, (a, b), _divmod),
        Case("fused", FUSED, (a.reshape(-1, 1), b), lambda x, y: _divmod(x[:, 0], y)),
    ]
    kind = np.dtype(dtype).kind
    if kind == "f":
        out.append(Case("literals", FLOAT_LITERALS, (e,), lambda x: _by_literals(x, 0.25, -0.25)))
    elif kind == "i":
        out.append(Case("literals", INT_LITERALS, (e,), lambda x: _by_literals(x, -1, 0)))
    else:
        out.append(Case("literals", UINT_LITERALS, (e,), lambda x: _by_literals(x, 0)))
    return out


def _vector(x: np.ndarray) -> np.ndarray:
    """``x`` repeated along axis 0 up to a multiple of :data:`VECTOR_LENGTH`."""
    n = -(-len(x) // VECTOR_LENGTH) * VECTOR_LENGTH
    return np.resize(x, (n,) + x.shape[1:])


def _tuple(result: np.ndarray | tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    return result if isinstance(result, tuple) else (result,)


def run(target: str, dtype: str) -> dict[str, np.ndarray]:
    """Every case of ``dtype`` on ``target``: ``{case.mode.output: array}``."""
    got: dict[str, np.ndarray] = {}
    for case in cases(dtype):
        f = stripeml.compile(case.source, target=target)
        for k, y in enumerate(_tuple(f(*map(_vector, case.inputs)))):
            got[f"{case.name}.vector.{k}"] = y
        rows = [_tuple(f(*(x[i : i + 1] for x in case.inputs))) for i in range(len(case.inputs[0]))]
        for k in range(len(rows[0])):
            got[f"{case.name}.scalar.{k}"] = np.concatenate([r[k] for r in rows])
    return got


def expected(dtype: str) -> dict[str, tuple[np.ndarray, tuple[np.ndarray, ...]]]:
    """NumPy's values for :func:`run`'s keys, with the operands that made them."""
    want = {}
    for case in cases(dtype):
        for mode, inputs in (("vector", tuple(map(_vector, case.inputs))), ("scalar", case.inputs)):
            for k, y in enumerate(case.reference(*inputs)):
                want[f"{case.name}.{mode}.{k}"] = (y, inputs)
    return want


def _in_child(target: str, dtype: str, tmp_path: Path) -> dict[str, np.ndarray]:
    """:func:`run` in a child process: a signal that kills it fails the test here."""
    out = tmp_path / f"{target}-{dtype}.npz"
    proc = subprocess.run(
        [sys.executable, __file__, target, dtype, str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ.copy(),
    )
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        pytest.fail(f"{target} {dtype}: the process died of {sig}\n{proc.stderr[-3000:]}")
    assert proc.returncode == 0, f"{target} {dtype}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    with np.load(out) as data:
        return {k: data[k] for k in data.files}


def _compare(key: str, got: np.ndarray, want: np.ndarray, inputs: tuple[np.ndarray, ...]) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (
        f"{key}: {got.dtype}{got.shape}, expected {want.dtype}{want.shape}"
    )
    same = got == want
    if want.dtype.kind == "f":  # NaN matches NaN; a zero (or any value) must match in sign
        nan = np.isnan(want)
        same = np.where(nan, np.isnan(got), same & (np.signbit(got) == np.signbit(want)))
    bad = np.flatnonzero(~same.reshape(len(want), -1).all(axis=1))
    if len(bad):
        rows = [
            f"  operands {tuple(x[i].item() if x.ndim == 1 else x[i, 0].item() for x in inputs)}: "
            f"got {got[i]!r}, expected {want[i]!r}"
            for i in bad[:8]
        ]
        pytest.fail(f"{key}: {len(bad)} of {len(want)} differ from NumPy\n" + "\n".join(rows))


@pytest.mark.parametrize("dtype", INT_DTYPES + FLOAT_DTYPES)
@pytest.mark.parametrize("target", BACKENDS)
def test_division_and_remainder_match_numpy(target: str, dtype: str, tmp_path: Path) -> None:
    if target == "opencl_pocl":
        pytest.importorskip("pyopencl", reason="the opencl extra is not installed")
        if dtype == "float16":
            pytest.skip("float16 is not supported by the OpenCL printer (an error, tested there)")
    got = run(target, dtype) if target == "interp" else _in_child(target, dtype, tmp_path)
    want = expected(dtype)
    assert sorted(got) == sorted(want)
    for key, (w, inputs) in want.items():
        _compare(f"{target} {dtype} {key}", got[key], w, inputs)


if __name__ == "__main__":  # the child of _in_child: python test_int_division.py TARGET DTYPE OUT
    np.savez(sys.argv[3], **run(sys.argv[1], sys.argv[2]))
