"""An O3 element-wise leaf kernel whose innermost loop runs over vectors takes
its outer loops' ranges at run time (codegen/llvm_levels.py, ``_outer_loops``):
LLVM then cannot unroll an outer loop of a few trips in full around the inner
loop (DenseNet-121's batch norm and ReLU over 14 x 14 pixels: 14 copies of the
channel loop, 80-90 ms of LLVM a body instead of 11-12).

Results are checked against NumPy; the optimised LLVM IR is LLVM's own output
for the generated body.
"""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.codegen.llvm import body_opt_level, generate, runtime_bounds
from stripeml.codegen.llvm_plan import parallel_index
from stripeml.ir.nodes import Block
from stripeml.runtime import jit

AFFINE_RELU = """function (X[N, H, W, C], S[C], B[C]) -> (Y) {
    Y = relu(X * S + B);
}"""
SUM_ROWS = """function (X[H, W, C]) -> (Y) {
    Y[h, c : H, C] = +(X[h, w, c]);
}"""


def _inputs(side: int, channels: int) -> list[np.ndarray]:
    rng = np.random.default_rng(side * 1000 + channels)
    return [
        rng.standard_normal((1, side, side, channels)).astype(np.float32),
        rng.standard_normal(channels).astype(np.float32),
        rng.standard_normal(channels).astype(np.float32),
    ]


def _kernel(f: stripeml.Function, arrays: list[np.ndarray]) -> tuple[Block, object]:
    program = f.lower(*arrays).program
    (kernel,) = [s for s in program.root.stmts if isinstance(s, Block)]
    return kernel, program


@pytest.mark.parametrize("width", [8, 16])
def test_the_outer_loops_of_an_elementwise_kernel_run_to_runtime_bounds(width: int) -> None:
    f = stripeml.compile(AFFINE_RELU, target="cpu")
    kernel, _ = _kernel(f, _inputs(14, 384))
    assert body_opt_level(kernel, width) == 3
    bounds = runtime_bounds(kernel, 3, width)
    loops = [i.name for i in kernel.idxs if i.range >= 2]
    assert loops[-1] == kernel.idxs[-1].name == "i3"  # the channels, in vector lanes
    assert list(bounds) == loops[:-1]  # both pixel loops; the split one among them
    assert parallel_index(kernel) in bounds


def test_a_short_vector_loop_or_a_reduction_keeps_its_constants() -> None:
    """With one vector of channels the pixel loop is the innermost loop LLVM
    works on; a reduction's loops keep their constants as before."""
    f = stripeml.compile(AFFINE_RELU, target="cpu")
    kernel, _ = _kernel(f, _inputs(14, 16))
    assert runtime_bounds(kernel, 3, 16) in ((), (parallel_index(kernel),))
    s = stripeml.compile(SUM_ROWS, target="cpu")
    x = np.ones((14, 14, 384), np.float32)
    (red,) = [b for b in s.lower(x).program.root.stmts if isinstance(b, Block)]
    assert set(runtime_bounds(red, 3, 16)) <= {parallel_index(red)}


def test_llvm_does_not_copy_the_channel_loop_per_pixel() -> None:
    """The optimised body stores fewer vectors than the pixel loop has trips: the
    outer loop stayed a loop (before: 14 copies of the channel loop unrolled 4
    times, 56 vector stores, and 127 ms of LLVM instead of 14)."""
    f = stripeml.compile(AFFINE_RELU, target="cpu")
    _, program = _kernel(f, _inputs(14, 960))
    module = generate(program, vector_width=16)
    (body,) = [b for b in module.bodies if b.opt == 3 and b.llvm_ir is not None]
    optimised = str(jit.optimize(body.llvm_ir, False, 3))
    stores = optimised.count("store <16 x float>")
    assert 1 <= stores < 14


@pytest.mark.parametrize("side, channels", [(14, 384), (14, 960), (7, 40), (28, 64)])
def test_results_match_numpy(side: int, channels: int) -> None:
    arrays = _inputs(side, channels)
    got = stripeml.compile(AFFINE_RELU, target="cpu")(*arrays)
    x, s, b = (a.astype(np.float64) for a in arrays)
    np.testing.assert_allclose(got, np.maximum(x * s + b, 0.0), rtol=1e-5, atol=1e-5)


def test_two_channel_counts_run_one_compiled_body_each_right(tmp_path, monkeypatch) -> None:
    """Two channel counts in one process (the second may link code the first
    compiled): both as NumPy computes them."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    f = stripeml.compile(AFFINE_RELU, target="cpu")
    for side, channels in ((14, 384), (28, 384), (14, 384)):
        arrays = _inputs(side, channels)
        x, s, b = (a.astype(np.float64) for a in arrays)
        np.testing.assert_allclose(f(*arrays), np.maximum(x * s + b, 0.0), rtol=1e-5, atol=1e-5)
