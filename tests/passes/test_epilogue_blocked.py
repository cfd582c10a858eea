"""epilogue with an elementwise kernel that reads the tile's result at other
points than its own (an LSTM step's gates: four columns of one block of the
product per hidden unit): run on each finished tile when every element it
reads is in that tile, else left as its own kernel; NumPy decides the numbers."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _step_source(blocks: int, unit: int, col: str) -> str:
    """One LSTM step with the product's columns blocked by hidden unit: block
    ``b`` holds gates i, o, f, c of units ``b * unit + u`` at ``col`` (Tile text
    with ``k`` the gate and ``u`` the unit)."""
    w = 4 * unit
    hidden = blocks * unit

    def gate(k: int) -> str:
        at = col.replace("k", str(k))
        return f"G{k}[n, b, u : 1, {blocks}, {unit}] = =(T[n, b, {at}]);"

    return f"""
function (H[1, {hidden}], R[{blocks}, {hidden}, {w}], Q[1, {blocks}, {w}], C0[1, {blocks}, {unit}]) -> (Hn, Cn) {{
    T[n, b, c : 1, {blocks}, {w}] = +(H[n, j] * R[b, j, c]);
    {gate(0)}
    {gate(1)}
    {gate(2)}
    {gate(3)}
    Cn = sigmoid(G2) * C0 + sigmoid(G0) * tanh(G3);
    Hn = sigmoid(G1) * tanh(Cn);
}}
"""


def _inputs(blocks: int, unit: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    hidden, w = blocks * unit, 4 * unit
    return [
        rng.standard_normal((1, hidden)).astype(np.float32),
        (rng.standard_normal((blocks, hidden, w)) * 0.2).astype(np.float32),
        rng.standard_normal((1, blocks, w)).astype(np.float32),
        rng.standard_normal((1, blocks, unit)).astype(np.float32),
    ]


def _want(args: list[np.ndarray], cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    h, r, _, c0 = (a.astype(np.float64) for a in args)
    t = np.einsum("nj,bjc->nbc", h, r)
    g = [t[:, :, c] for c in cols]
    c = _sigmoid(g[2]) * c0 + _sigmoid(g[0]) * np.tanh(g[3])
    return _sigmoid(g[1]) * np.tanh(c), c


@pytest.mark.parametrize("threads", [1, 2])
def test_gates_of_a_block_run_on_its_tile(threads):
    """Two blocks of 64 units, gates at ``64 * k + u`` of their block: one root
    kernel (the product, the gate math its epilogue), split by blocks with 2
    threads; the results match NumPy.  (Before, the gate math was a kernel of
    its own: its views of T were not T's identity.)"""
    args = _inputs(2, 64)
    target = stripeml.targets.resolve("cpu", threads=threads)
    f = stripeml.compile(_step_source(2, 64, "64 * k + u"), target=target)
    hn, cn = f(*args)
    want_h, want_c = _want(args, [np.arange(64) + 64 * k for k in range(4)])
    np.testing.assert_allclose(hn, want_h, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cn, want_c, rtol=1e-5, atol=1e-5)
    lines = f.lower(*args).ir.splitlines()
    kernels = [line for line in lines if line.startswith("  block ")]
    assert len(kernels) == 1, kernels
    assert sum("#epilogue" in line for line in lines) == 1
    assert "sigmoid" in next(line for line in lines if "#epilogue" in line)
    if threads == 2:
        assert "#thread" in kernels[0] and "[b:2" in kernels[0]


def test_reads_past_the_tile_stay_a_kernel():
    """Gate ``k`` of unit ``u`` at column ``u + 64 * k`` of the next block
    for the last gate (``(64 * k + u + 64) % 256`` written as a second block's
    read): the elements are not all in one tile, so the gate math stays its own
    kernel, and the numbers still match."""
    src = """
function (H[1, 128], R[2, 128, 256], Q[1, 2, 256], C0[1, 2, 64]) -> (Hn, Cn) {
    T[n, b, c : 1, 2, 256] = +(H[n, j] * R[b, j, c]);
    G0[n, b, u : 1, 2, 64] = =(T[n, b, u]);
    G1[n, b, u : 1, 2, 64] = =(T[n, b, 64 + u]);
    G2[n, b, u : 1, 2, 64] = =(T[n, b, 128 + u]);
    G3[n, b, u : 1, 1, 64] = =(T[n, b + 1, u]);
    Cn = sigmoid(G2) * C0 + sigmoid(G0) * tanh(G3);
    Hn = sigmoid(G1) * tanh(Cn);
}
"""
    args = _inputs(2, 64)
    f = stripeml.compile(src, target="cpu")
    hn, cn = f(*args)
    h, r, _, c0 = (a.astype(np.float64) for a in args)
    t = np.einsum("nj,bjc->nbc", h, r)
    g3 = np.broadcast_to(t[:, 1:2, :64], (1, 2, 64))
    c = _sigmoid(t[:, :, 128:192]) * c0 + _sigmoid(t[:, :, :64]) * np.tanh(g3)
    np.testing.assert_allclose(cn, c, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hn, _sigmoid(t[:, :, 64:128]) * np.tanh(c), rtol=1e-5, atol=1e-5)
    lines = f.lower(*args).ir.splitlines()
    assert not any("#epilogue" in line and "sigmoid" in line for line in lines)


PER_TILE_WRITES = """
function (H[1, 128], R[2, 128, 256]) -> (Y) {
    H2 = H * 2.0;
    T[n, b, c : 1, 2, 256] = +(H2[n, j] * R[b, j, c]);
    G0[n, b, u : 1, 2, 64] = =(T[n, b, u]);
    G1[n, b, u : 1, 2, 64] = =(T[n, b, 64 + u]);
    S = sigmoid(G0) * tanh(G1);
    Y = reshape(S, 1, 128);
}
"""


def test_writing_what_the_product_reads_stays_a_kernel():
    """The program before ``epilogue`` (after ``unroll``), then the same with the
    gate math writing ``H2``, the product's input, instead of ``Y`` (as a step
    writing its state over the previous one would): run on each tile it would
    change what the next tile reads, so only the first takes the epilogue."""
    from stripeml.ir import parse
    from stripeml.ir.nodes import Block
    from stripeml.passes.epilogue import Epilogue

    h = np.ones((1, 128), np.float32)
    r = np.ones((2, 128, 256), np.float32)
    text = dict(stripeml.compile(PER_TILE_WRITES, target="cpu").lower(h, r).stages)["unroll"]
    out = "out S = Y[i0, 64*i1 + i2]"
    assert text.count(out) == 1

    def kernels(source: str) -> int:
        program = Epilogue().run(parse(source))
        return sum(isinstance(s, Block) for s in program.root.stmts)

    assert kernels(text) == 2  # H2, then the product with the gates
    assert kernels(text.replace(out, "out S = H2[i0, 64*i1 + i2]")) == 3
