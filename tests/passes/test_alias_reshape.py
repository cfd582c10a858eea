"""``alias_reshape`` on whole programs: results against NumPy on every CPU-side
target, and which reshapes are left as copies."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.ir.reshape import refinement_groups

RNG = np.random.default_rng(21)


def _heads(a, w):  # attention's head split and merge around a projection
    b = a @ w
    t = b.reshape(8, 1, 3, 16)
    q = t[:, 0, 1].reshape(8, 4, 4).transpose(1, 0, 2)
    return (np.exp(q).transpose(1, 0, 2).reshape(8, 16),)


CASES = {
    # name: (Tile source, input shapes, NumPy reference, reshape copies left)
    "heads": (
        """function (A[8, 12], W[12, 48]) -> (Y) {
          B[i, j : 8, 48] = +(A[i, k] * W[k, j]);
          T = reshape(B, 8, 1, 3, 16);
          Q[i, c : 8, 16] = =(T[i, 0, 1, c]);
          R = reshape(Q, 8, 4, 4);
          H[h, i, d : 4, 8, 4] = =(R[i, h, d]);
          E = exp(H);
          F[i, h, d : 8, 4, 4] = =(E[h, i, d]);
          Y = reshape(F, 8, 16);
        }""",
        [(8, 12), (12, 48)],
        _heads,
        0,
    ),
    "input_split": (  # the source is a parameter: the readers read it
        "function (A[6, 8]) -> (Y) { T = reshape(A, 6, 2, 4); Y[j, i, k : 2, 6, 4] = =(T[i, j, k]); }",
        [(6, 8)],
        lambda a: (a.reshape(6, 2, 4).transpose(1, 0, 2),),
        0,
    ),
    "flatten_to_result": (
        "function (A[2, 3, 4, 1]) -> (Y) { B = tanh(A); Y = reshape(B, 2, 12); }",
        [(2, 3, 4, 1)],
        lambda a: (np.tanh(a).reshape(2, 12),),
        0,
    ),
    "neither": (
        "function (A[6, 4]) -> (Y) { B = A * 3.0; T = reshape(B, 4, 6); Y = T - 1.0; }",
        [(6, 4)],
        lambda a: ((a * 3).reshape(4, 6) - 1,),
        1,
    ),
    "read_twice": (  # the source is read again after the split: both views
        "function (A[4, 6]) -> (Y, Z) { B = A + 1.0; T = reshape(B, 4, 3, 2); "
        "Y[i, k, j : 4, 2, 3] = =(T[i, j, k]); Z = B * 2.0; }",
        [(4, 6)],
        lambda a: ((a + 1).reshape(4, 3, 2).transpose(0, 2, 1), (a + 1) * 2),
        0,
    ),
    "split_result_kept": (  # the fine buffer is the program's result
        "function (A[4, 6]) -> (Y, Z) { B = A * 2.0; Y = reshape(B, 4, 2, 3); Z = B + 1.0; }",
        [(4, 6)],
        lambda a: ((2 * a).reshape(4, 2, 3), 2 * a + 1),
        1,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("target", ["cpu", "opencl"])
def test_results_and_copies_left(name: str, target: str) -> None:
    src, shapes, ref, copies = CASES[name]
    if target == "opencl":
        pytest.importorskip("pyopencl", reason="the opencl extra is not installed")
    args = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    fn = stripeml.compile(src, target=target)
    exe = fn.lower(*args)
    got = exe(*args)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, ref(*[a.astype(np.float64) for a in args])):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert exe.ir.count("special reshape") == copies


@pytest.mark.parametrize(
    ("coarse", "fine", "groups"),
    [
        ((128, 768), (128, 1, 3, 256), [[0, 1], [2, 3]]),
        ((1, 128, 256), (128, 4, 64), [[], [0], [1, 2]]),
        ((6, 4), (4, 6), None),
        ((12,), (3, 4, 1), [[0, 1, 2]]),
        ((4, 1), (4,), [[0], []]),  # a coarse size-1 dimension merges nothing (access 0)
        ((0, 3), (0, 3), None),
    ],
)
def test_refinement_groups(coarse, fine, groups):
    assert refinement_groups(coarse, fine) == groups
