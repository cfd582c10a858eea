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
