"""A transpose the code generator runs element by element, into a long unit-stride
run of its destination, is glue compiled at O1 (``codegen.llvm.body_opt_level``,
``_scalar_copy``): at O3 LLVM spent 0.34 s on each body of Inception-v1's 27 x 27 x
192 transposes for no faster a model.  Copies in vector lanes, transposes in tiles of
shuffles and short destination runs (ShuffleNet's channel shuffles, 4% slower at
O1) keep O3.  Every copy's result is NumPy's."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.codegen.llvm import TINY_WORK, body_opt_level
from stripeml.ir.nodes import Block, work_estimate
from stripeml.runtime.cpu import CpuBackend, CpuOptions

# a layout change of a 4-D tensor: T[n, h, w, c] = X[n, c, h, w]
NCHW_TO_NHWC = """function (X[N, C, H, W]) -> (T) {
    T[n, h, w, c : N, H, W, C] = =(X[n, c, h, w]);
}"""
CONTIGUOUS = """function (X[N, C, H, W]) -> (T) {
    T[n, c, h, w : N, C, H, W] = =(X[n, c, h, w]);
}"""


def _copy(source: str, shape: tuple[int, ...]):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    program = stripeml.compile(source, target="cpu").lower(x).program
    kernels = [s for s in program.root.stmts if isinstance(s, Block)]
    assert len(kernels) == 1
    return program, kernels[0], x


@pytest.mark.parametrize(
    ("source", "shape", "level", "why"),
    [
        (NCHW_TO_NHWC, (1, 192, 27, 27), 1, "27 x 27 x 192: no tiles, a 192-long run"),
        (NCHW_TO_NHWC, (1, 48, 9, 11), 1, "a 48-long destination run, odd sides"),
        (NCHW_TO_NHWC, (1, 3, 40, 40), 3, "an image's 3 channels: a short run"),
        (NCHW_TO_NHWC, (1, 32, 16, 16), 3, "sides of 16 and 32: tiles of shuffles"),
        (CONTIGUOUS, (1, 8, 16, 40), 3, "no transpose: the generator's lanes"),
    ],
)
def test_levels_and_results(source, shape, level, why) -> None:
    program, kernel, x = _copy(source, shape)
    assert work_estimate(kernel) > TINY_WORK  # not O1 for being tiny
    assert body_opt_level(kernel, 16) == level, why
    compiled = CpuBackend(CpuOptions(threads=2, vector_width=16, min_chunk_work=1)).compile(program)
    got = compiled.run({"X": x})["T"]
    want = x.transpose(0, 2, 3, 1) if source == NCHW_TO_NHWC else x
    np.testing.assert_array_equal(got, want)
