"""``fuse`` across a reshape that adds a leading one (``[M, N]`` to ``[1, M, N]``):
``alias_reshape`` makes the consumer read ``U[M * i0 + i1, i2]`` with ``i0``
over one point, which still walks ``U`` one to one."""

from __future__ import annotations

import numpy as np

import stripeml
from stripeml.ir.affine import Affine
from stripeml.ir.nodes import Block, Index
from stripeml.passes._common import pointwise_dims

CHAIN = """
function (A[M, N], B[N]) -> (Y) {
    U = A + B;
    R = reshape(U, 1, M, N);
    Y = tanh(R) * R;
}
"""


def test_a_one_point_index_is_zero_where_another_index_walks_the_dimension() -> None:
    block = Block(idxs=(Index("i1", 12), Index("i0", 1), Index("i2", 48)))
    i0, i1, i2 = (Affine.index(n) for n in ("i0", "i1", "i2"))
    assert pointwise_dims(block, (i0 * 12 + i1, i2), (12, 48)) == ("i1", "i2")
    # Alone in a dimension of size 1 it still names it; with range > 1 it counts.
    assert pointwise_dims(block, (i0, i1, i2), (1, 12, 48)) == ("i0", "i1", "i2")
    wide = Block(idxs=(Index("i1", 12), Index("i0", 2), Index("i2", 48)))
    assert pointwise_dims(wide, (i0 * 12 + i1, i2), (24, 48)) is None


def test_the_chain_is_one_kernel_and_matches_numpy() -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((12, 48)).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    u = (a.astype(np.float64) + b)[None]
    exe = stripeml.compile(CHAIN, target="cpu").lower(a, b)
    kernels = [s for s in exe.program.root.stmts if isinstance(s, Block)]
    assert len(kernels) == 1, [k.name for k in kernels]
    np.testing.assert_allclose(exe(a, b), np.tanh(u) * u, rtol=1e-5, atol=1e-6)
