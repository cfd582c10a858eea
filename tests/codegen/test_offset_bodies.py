"""Kernels that differ only in which row of a buffer they read or write share one
compiled body (analysis/canonical.py takes the constant offset out; the step's
wrapper adds it to the buffer's address), and nothing computed from one row is
taken for another's (runtime/shared_constants.py keys on the offsets too).

Results are checked against NumPy; body counts come from the generated module.
"""

from __future__ import annotations

import numpy as np

import stripeml
from stripeml.analysis.canonical import canonical_kernel
from stripeml.codegen.llvm import generate
from stripeml.ir.nodes import Block
from stripeml.runtime.cpu import CpuBackend, CpuOptions

# Three steps, each a product of one row of X: an unrolled loop's shape.
ROWS = """function (X[S, M, K], W[K, N]) -> (Y1, Y2, Y3) {
    Y1[i, j : M, N] = +(X[1, i, k] * W[k, j]);
    Y2[i, j : M, N] = +(X[2, i, k] * W[k, j]);
    Y3[i, j : M, N] = +(X[3, i, k] * W[k, j]);
}"""


def _rows_args() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [
        rng.standard_normal((4, 8, 32)).astype(np.float32),
        rng.standard_normal((32, 48)).astype(np.float32),
    ]


def test_rows_of_one_buffer_share_a_body_and_results_match_numpy(tmp_path) -> None:
    x, w = _rows_args()
    program = stripeml.compile(ROWS, target="cpu").lower(x, w).program
    kernels = [s for s in program.root.stmts if isinstance(s, Block)]
    products = [k for k in kernels if any(r.from_ == "X" for r in k.refs)]
    assert len(products) == 3
    canon = [canonical_kernel(program.root, k) for k in products]
    assert len({c.text for c in canon}) == 1  # one body for the three steps
    row_bytes = 8 * 32 * 4
    got = sorted(c.offsets[c.buffers.index("X")] for c in canon)
    assert got == [row_bytes, 2 * row_bytes, 3 * row_bytes]
    module = generate(program, vector_width=8)
    steps = [s.kernel for s in module.steps if s.kernel is not None]
    assert len(module.bodies) < len(steps)
    compiled = CpuBackend(CpuOptions(threads=2, cache_dir=tmp_path)).compile(program)
    out = compiled.run({"X": x, "W": w})
    for name, row in (("Y1", 1), ("Y2", 2), ("Y3", 3)):
        np.testing.assert_allclose(out[name], x[row] @ w, rtol=1e-4, atol=1e-4)


# Each exp reads its own row of the constant W (a view after ``alias_view``):
# two constant kernels equal up to that row's offset, whose results are kept.
# A second input shape reuses kept results by how they were computed, and must
# not take one row's for the other's.
TWO_ROWS = """function (A[M, K], W[2, K, N]) -> (C1, C2) {
    R1[k, n : K, N] = =(W[0, k, n]);
    R2[k, n : K, N] = =(W[1, k, n]);
    E1 = exp(R1);
    E2 = exp(R2);
    C1[m, n : M, N] = +(A[m, k] * E1[k, n]);
    C2[m, n : M, N] = +(A[m, k] * E2[k, n]);
}"""


def test_results_of_two_rows_of_a_constant_stay_apart() -> None:
    rng = np.random.default_rng(6)
    w = rng.standard_normal((2, 64, 192)).astype(np.float32)
    f = stripeml.compile(TWO_ROWS, target="cpu", constants={"W": w})
    for m in (32, 64):  # two input shapes: the second may reuse the first's results
        a = rng.standard_normal((m, 64)).astype(np.float32)
        c1, c2 = f(a)
        np.testing.assert_allclose(c1, a @ np.exp(w[0]), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(c2, a @ np.exp(w[1]), rtol=1e-4, atol=1e-3)
