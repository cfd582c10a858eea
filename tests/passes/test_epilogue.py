"""epilogue on kernels it does not apply to: the same program back, no crash."""

from __future__ import annotations

import numpy as np

import stripeml
from stripeml.passes.epilogue import Epilogue

MATMUL_RELU = """
function (A[M, K], B[K, N]) -> (Y) {
    T[i, j : M, N] = +(A[i, k] * B[k, j]);
    Y = T > 0.0 ? T : 0.0;
}
"""


def test_selected_kernel_without_register_tile_is_left_alone():
    """A selected kernel whose last statement is a scalar statement (not a block)
    has no register tile to attach to: the pass returns the same object."""
    a = np.ones((4, 3), np.float32)
    b = np.ones((3, 5), np.float32)
    program = stripeml.compile(MATMUL_RELU, target="interp").lower(a, b).program
    assert "contraction" in program.root.stmts[0].tags
    assert Epilogue(select="contraction").run(program) is program


MATMUL_RESHAPE_GELU = """
function (A[M, K], B[K, N], C[N]) -> (Y) {
    T[i, j : M, N] = +(A[i, k] * B[k, j]);
    U = T + C;
    R = reshape(U, 1, M, N);
    Y = 0.5 * R * (1.0 + tanh(0.8 * (R + 0.04 * R * R * R)));
}
"""


def test_eltwise_after_a_reshape_to_a_leading_one_runs_as_the_epilogue():
    """A transformer's GELU reads the GEMM's result through a reshape to
    ``[1, M, N]`` (``alias_reshape`` makes it an access with a one-point index):
    ``fuse`` joins it to the bias, and both run on each register tile, one root
    kernel in all; the results match NumPy."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((12, 24)).astype(np.float32)
    b = rng.standard_normal((24, 48)).astype(np.float32)
    c = rng.standard_normal(48).astype(np.float32)
    u = (a.astype(np.float64) @ b + c)[None]
    want = 0.5 * u * (1.0 + np.tanh(0.8 * (u + 0.04 * u**3)))
    for threads in (1, 2):
        exe = stripeml.compile(MATMUL_RESHAPE_GELU, target="cpu").lower(a, b, c)
        if threads == 2:
            target = stripeml.targets.resolve("cpu", threads=2)
            exe = stripeml.compile(MATMUL_RESHAPE_GELU, target=target).lower(a, b, c)
        np.testing.assert_allclose(exe(a, b, c), want, rtol=1e-4, atol=1e-4)
        lines = exe.ir.splitlines()
        kernels = [line for line in lines if line.startswith("  block ")]
        (epilogue,) = [line for line in lines if "#epilogue" in line]
        assert len(kernels) == 1 and "U = T + C" in epilogue and "tanh" in epilogue
