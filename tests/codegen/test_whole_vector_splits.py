"""A kernel split over threads along its vector index, whose range is whole vectors,
has no scalar tail (codegen/llvm_builder.py, ``loops``): the runtime cuts such an
index only at multiples of its grain (``KernelInfo.grain``, ``runtime.chunking``),
so every chunk is whole vectors and a tail would never run.  A range that is not
whole vectors keeps its tail.  Results are checked against NumPy, split into many
chunks on two threads.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import stripeml
from stripeml.codegen.llvm import generate
from stripeml.runtime.chunking import chunk_bounds
from stripeml.runtime.cpu import CpuBackend, CpuOptions

SOURCE = """function (X[N], B[N]) -> (Y) {
    Y = X * 2.0 + B;
}"""
LANES = 8


def _program(n: int):
    rng = np.random.default_rng(n)
    x, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    return stripeml.compile(SOURCE, target="cpu").lower(x, b).program, x, b


def _loops_over_i(text: str) -> int:
    return len(re.findall(r"^\w+\.head\.\d+:", text, re.M))


@pytest.mark.parametrize(("n", "tail"), [(96, False), (256, False), (100, True), (20, True)])
def test_a_tail_only_where_a_chunk_can_end_inside_a_vector(n: int, tail: bool) -> None:
    program, x, b = _program(n)
    module = generate(program, vector_width=LANES)
    (step,) = [s for s in module.steps if s.kernel is not None]
    assert step.kernel.grain == LANES  # split in whole vectors
    (body,) = module.bodies
    assert body.llvm_ir is not None
    assert _loops_over_i(body.llvm_ir) == (2 if tail else 1)
    # the cuts the runtime makes: whole vectors, the last at the range
    cuts = chunk_bounds(step.kernel, threads=2, min_work=1, per_thread=16)
    assert len(cuts) > 2 and all(c % LANES == 0 or c == n for c in cuts)
    compiled = CpuBackend(
        CpuOptions(threads=2, vector_width=LANES, min_chunk_work=1, chunks_per_thread=16)
    ).compile(program)
    got = compiled.run({"X": x, "B": b})["Y"]
    np.testing.assert_allclose(got, x * 2.0 + b, rtol=1e-6)
