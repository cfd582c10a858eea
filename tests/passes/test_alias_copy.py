"""``alias_copy`` on whole programs through the CPU pipeline: results against
NumPy, and the halo and concatenation copies that are gone."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml

RNG = np.random.default_rng(8)


def _dw3x3(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Depthwise 3x3, padding 1 (NHWC; ``k``: 3, 3, C), in NumPy."""
    p = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    h, w = x.shape[1:3]
    return sum(p[:, a : a + h, b : b + w] * k[a, b] for a in range(3) for b in range(3))


CASES = {
    "pointwise_then_depthwise": (
        """function (A[1, 9, 10, 24], W[24, 32], K[3, 3, 32]) -> (O) {
          P[n, y, x, co : 1, 9, 10, 32] = +(A[n, y, x, ci] * W[ci, co]);
          Q = relu(P);
          O[n, y, x, c : 1, 9, 10, 32] = +(Q[n, y + ky - 1, x + kx - 1, c] * K[ky, kx, c]);
        }""",
        [(1, 9, 10, 24), (24, 32), (3, 3, 32)],
        lambda a, w, k: _dw3x3(np.maximum(a @ w, 0), k),
    ),
    "concat_of_two_branches": (
        """function (A[1, 6, 6, 8], W[8, 16], V[8, 16]) -> (Y) {
          P[n, y, x, co : 1, 6, 6, 16] = +(A[n, y, x, ci] * W[ci, co]);
          Q[n, y, x, co : 1, 6, 6, 16] = +(A[n, y, x, ci] * V[ci, co]);
          C[n, y, x, c : 1, 6, 6, 32] = =(P[n, y, x, c]);
          D[n, y, x, c + 16 : 1, 6, 6, 32] = =(Q[n, y, x, c]), default C;
          Y = tanh(D);
        }""",
        [(1, 6, 6, 8), (8, 16), (8, 16)],
        lambda a, w, v: np.tanh(np.concatenate([a @ w, a @ v], axis=-1)),
    ),
    # Two steps of an unrolled recurrence, each row copied into a higher-rank
    # output after the loop: each step writes its row of Y in place, and the
    # second reads the first's row there (a read of Y outside the region copied).
    "rows_of_an_unrolled_loop": (
        """function (H0[1, 8], W[8, 8]) -> (Y) {
          P1[n, j : 1, 8] = +(H0[n, k] * W[k, j]);
          A1 = tanh(P1);
          P2[n, j : 1, 8] = +(A1[n, k] * W[k, j]);
          A2 = tanh(P2);
          Y1[0, n, j : 2, 1, 8] = =(A1[n, j]);
          Y2[1, n, j : 2, 1, 8] = =(A2[n, j]), default Y1;
          Y = Y2 * 2;
        }""",
        [(1, 8), (8, 8)],
        lambda h, w: 2 * np.stack([np.tanh(h @ w), np.tanh(np.tanh(h @ w) @ w)]),
    ),
    # A read of the copied region before the copy sees what was there first
    # (zeros), so A may not be written there early.
    "a_read_of_the_region_before_the_copy": (
        """function (H0[1, 8]) -> (Y, S) {
          A = tanh(H0);
          Y1[1, n, j : 2, 1, 8] = =(H0[n, j]);
          S[n : 1] = +(Y1[0, n, j]);
          Y2[0, n, j : 2, 1, 8] = =(A[n, j]), default Y1;
          Y = Y2 * 2;
        }""",
        [(1, 8)],
        lambda h: (2 * np.stack([np.tanh(h), h]), np.zeros(1)),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("threads", [1, 2])
def test_results_without_the_copies(name: str, threads: int) -> None:
    src, shapes, ref = CASES[name]
    args = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    target = stripeml.targets.resolve("cpu", threads=threads)
    exe = stripeml.compile(src, target=target).lower(*args)
    got, want = exe(*args), ref(*[a.astype(np.float64) for a in args])
    for g, w in zip(*((got, want) if isinstance(want, tuple) else ((got,), (want,)))):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    # No copy is left but a register tile's packed weight panel (``_pack_``: with
    # 8 lanes the 32 channels are two panels, each packed per tile; with 16 one).
    copies = [line.split()[1] for line in exe.ir.splitlines() if "#copy" in line]
    assert all("_pack_" in name for name in copies), copies
    assert "_halo_copy" not in exe.ir
    if name == "concat_of_two_branches":
        # Both parts write the concatenation in place, its zero fill is gone, so
        # each product's tiles apply the tanh (epilogue) and C never reaches memory.
        assert "none C f32" not in exe.ir and exe.ir.count("#epilogue") == 2
    if name == "rows_of_an_unrolled_loop":
        # Neither row is copied: each tanh writes its row of Y2, and P2 reads A1 there.
        heads = [line for line in exe.ir.splitlines() if line.startswith("  block")]
        assert not [h for h in heads if "= =(A" in h and "#fill" not in h], heads
        assert "none A1 f32" not in exe.ir and "none A2 f32" not in exe.ir
