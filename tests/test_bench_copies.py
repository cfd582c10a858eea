"""bench/copies.py: which root kernels count as copies.  Nothing here is timed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import stripeml

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def copies():
    sys.path.insert(0, str(BENCH))  # copies.py imports models.py beside it
    try:
        spec = importlib.util.spec_from_file_location("bench_copies", BENCH / "copies.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize(
    ("src", "moves"),
    [
        ("function (A[3, 4]) -> (T) { T[j, i : 4, 3] = =(A[i, j]); }", True),  # a transpose
        ("function (A[3, 4]) -> (S) { S[i : 3] = +(A[i, j]); }", False),  # a sum
        ("function (A[3, 4]) -> (E) { E = exp(A); }", False),
        ("function (A[3, 4]) -> (M) { M[i : 3] = >(A[i, j]); }", False),  # a max: not a copy
    ],
)
def test_only_moves(copies, src, moves):
    import numpy as np

    program = stripeml.compile(src, target="interp").lower(np.zeros((3, 4), np.float32)).program
    (kernel,) = program.root.stmts
    assert copies.only_moves(kernel) is moves
