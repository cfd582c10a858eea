"""Transposing copies in register tiles (``codegen/llvm_transpose.py``): a copy
whose source and destination run in unit stride along different indices moves
``L x L`` tiles by vector loads, shuffles and vector stores.  Results are
checked against NumPy's transposes, for several element types, shapes (tiles of
16, 8 and 4 lanes, and shapes no tile divides), vector widths and threads."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_helpers import program, run

from stripeml.codegen.llvm import generate

T2 = "function (X[M, N]) -> (Y) { Y[n, m : N, M] = =(X[m, n]); }"
T3 = "function (X[A, B, C]) -> (Y) { Y[a, c, b : A, C, B] = =(X[a, b, c]); }"
# nest's key panels: keys in panels of 32 along the last dimension.
PANELS = "function (X[B, S, H]) -> (Y) { Y[p, b, h, c : P, B, H, 32] = =(X[b, 32 * p + c, h]); }"


def _array(shape, dtype) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype == np.bool_:
        return (np.arange(n) % 3 == 0).reshape(shape)
    return (np.arange(n) % 251 - 100).astype(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int8, np.bool_])
@pytest.mark.parametrize("shape", [(16, 16), (32, 48), (64, 8), (12, 20), (5, 7)])
@pytest.mark.parametrize("width", [4, 8, 16])
def test_transpose_matches_numpy(dtype, shape, width):
    x = _array(shape, dtype)
    for threads in (1, 2):
        y = run(T2, x, vector_width=width, threads=threads, min_chunk_work=1)["Y"]
        np.testing.assert_array_equal(y, x.T)


@pytest.mark.parametrize("shape", [(3, 32, 48), (2, 24, 40), (1, 768, 64)])
def test_inner_transpose_of_three_dimensions(shape):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    y = run(T3, x, vector_width=16, threads=2, min_chunk_work=1)["Y"]
    np.testing.assert_array_equal(y, x.transpose(0, 2, 1))


@pytest.mark.parametrize(("s", "h"), [(512, 768), (64, 64), (96, 40)])
@pytest.mark.parametrize("width", [8, 16])
def test_key_panels_match_numpy(s, h, width):
    x = np.random.default_rng(s).standard_normal((1, s, h)).astype(np.float32)
    x[0, 3, 5] = np.nan  # copied as it is
    p = s // 32
    src = PANELS.replace("P, B, H, 32", f"{p}, 1, {h}, 32")
    want = x.reshape(1, p, 32, h).transpose(1, 0, 3, 2)
    for threads in (1, 2):
        y = run(src, x, vector_width=width, threads=threads, min_chunk_work=1)["Y"]
        np.testing.assert_array_equal(y, want)


def test_transpose_moves_tiles_by_shuffles():
    """A 32 x 48 transpose at 16 lanes: tiles of 16 x 16, each transposed by
    16 * log2(16) = 64 two-source shuffles (before: one element at a time, no
    shuffle)."""
    p = program(T2, np.zeros((32, 48), np.float32))
    (text,) = [b.llvm_ir for b in generate(p, vector_width=16).bodies if b.llvm_ir]
    assert text.count("shufflevector") == 64
    assert "load <16 x float>" in text and "store <16 x float>" in text


def test_no_tile_where_no_side_divides():
    p = program(T2, np.zeros((5, 7), np.float32))
    (text,) = [b.llvm_ir for b in generate(p, vector_width=16).bodies if b.llvm_ir]
    assert "shufflevector" not in text
