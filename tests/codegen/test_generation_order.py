"""The code generator generates the bodies that cost LLVM most first (codegen/llvm.py,
``generate``): an O3 kernel with nested blocks (a transformer's attention nest,
its matmul with a GELU epilogue) is generated, and handed to the runtime's
helper process (``on_body``), as soon as its kernel comes, while O1 bodies and
O3 leaves wait until every kernel has its canonical form.  The module's
bodies and its glue keep the statements' order.

Results are checked against NumPy in float64 (``math.erf``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stripeml.analysis.canonical import canonical_kernel
from stripeml.codegen.llvm import body_opt_level, body_symbol, generate
from stripeml.ir.nodes import Block

onnx = pytest.importorskip("onnx")

from codegen_helpers import gelu_matmul_model  # noqa: E402

import stripeml.onnx  # noqa: E402

K, N = 768, 3072  # BERT-base's feed-forward: the shape its tiling has


def test_the_nested_o3_body_is_generated_first() -> None:
    model, w, c = gelu_matmul_model(K, N, 11, sin=True)
    f = stripeml.onnx.compile(model, target="cpu")
    x = np.random.default_rng(3).standard_normal((1, 16, K)).astype(np.float32)
    program = f.lower(x).program
    root = program.root
    kernels = [s for s in root.stmts if isinstance(s, Block)]
    symbols = [body_symbol(canonical_kernel(root, k).text) for k in kernels]
    nested = [s for k, s in zip(kernels, symbols) if body_opt_level(k, 16) == 3 and k.sub_blocks]
    assert len(nested) == 1 and symbols[0] != nested[0]  # not first in statement order
    handed: list[str] = []
    module = generate(program, vector_width=16, on_body=lambda b: handed.append(b.symbol))
    assert handed[0] == nested[0]
    assert sorted(handed) == sorted(set(symbols))  # every body, once
    # the module keeps the statements' order: its bodies, and a step per kernel
    assert [b.symbol for b in module.bodies] == list(dict.fromkeys(symbols))
    assert [s.kernel.block_name for s in module.steps if s.kernel] == [k.name for k in kernels]

    a = np.sin(x.astype(np.float64)) @ w.astype(np.float64) + c
    expected = 0.5 * a * (1.0 + np.vectorize(math.erf)(a / math.sqrt(2.0)))
    np.testing.assert_allclose(f(x), expected, rtol=2e-4, atol=2e-4)
