"""An O3 body that the code generator tiled itself but for a call of the math
library in its epilogue (a transformer's matmul with its GELU ``erf``) takes its
own block's indices (loops over whole register tiles) at run time, and binds
their one-trip loops to 0 (codegen/llvm.py, ``runtime_bounds``): a second
sequence length then links the first length's body instead of compiling its own.

Results are checked against NumPy in float64 (``math.erf``); what was compiled
is counted with ``jit.STATS`` (every module compiled in this process: no helper
processes).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from stripeml.codegen.llvm import body_opt_level, generate, generator_tiled, runtime_bounds
from stripeml.codegen.llvm_plan import parallel_index
from stripeml.ir.nodes import Block
from stripeml.runtime import jit

onnx = pytest.importorskip("onnx")

from codegen_helpers import gelu_matmul_model  # noqa: E402

import stripeml.onnx  # noqa: E402

K, N = 768, 3072  # BERT-base's feed-forward: the shape its tiling has


def _expected(x: np.ndarray, w: np.ndarray, c: np.ndarray) -> np.ndarray:
    a = x.astype(np.float64) @ w.astype(np.float64) + c
    return 0.5 * a * (1.0 + np.vectorize(math.erf)(a / math.sqrt(2.0)))


def _x(rows: int) -> np.ndarray:
    return np.random.default_rng(rows).standard_normal((1, rows, K)).astype(np.float32)


def _matmul_kernel(program) -> Block:
    (kernel,) = [s for s in program.root.stmts if isinstance(s, Block) and "tiled" in s.tags]
    return kernel


def test_the_gelu_matmul_takes_its_tile_loops_at_run_time() -> None:
    model, _, _ = gelu_matmul_model(K, N, 7)
    f = stripeml.onnx.compile(model, target="cpu")
    kernel = _matmul_kernel(f.lower(_x(64)).program)
    assert body_opt_level(kernel, 16) == 3  # for the erf in its epilogue
    assert generator_tiled(kernel, 16, math=True) and not generator_tiled(kernel, 16)
    bounds = runtime_bounds(kernel, 3, 16)
    own = [i.name for i in kernel.idxs if i.range >= 2]
    assert bounds and list(bounds) == own  # the loops over whole register tiles only
    inner = {i.name for b in kernel.sub_blocks for i in b.idxs}
    assert not inner & set(bounds)


def test_other_o3_bodies_keep_their_constants() -> None:
    """An O3 ``exp`` keeps its vector loop's constant; only its rows, the index
    the threads split, run to a bound given at run time (``_split_rows``,
    tests/codegen/test_runtime_bounds_rows.py)."""
    exp = stripeml.compile("function (X[M, N]) -> (E) { E = exp(X); }", target="cpu")
    x = np.ones((64, 96), np.float32)
    (kernel,) = [s for s in exp.lower(x).program.root.stmts if isinstance(s, Block)]
    assert body_opt_level(kernel, 16) == 3
    lanes = kernel.idxs[-1].name  # N, unit-stride in X and E
    assert runtime_bounds(kernel, 3, 16) == (parallel_index(kernel),)
    assert lanes not in runtime_bounds(kernel, 3, 16)


def test_two_lengths_generate_one_body_text() -> None:
    model, _, _ = gelu_matmul_model(K, N, 7)
    f = stripeml.onnx.compile(model, target="cpu")
    texts = []
    for rows in (128, 64):
        module = generate(f.lower(_x(rows)).program, vector_width=16)
        (body,) = [b for b in module.bodies if b.opt == 3]
        assert body.llvm_ir is not None
        texts.append(body.llvm_ir.replace(body.symbol, "SYMBOL"))
    assert texts[0] == texts[1]  # (before: the batch index times a stride sized by the length)


def test_a_second_length_links_the_first_lengths_body(tmp_path, monkeypatch) -> None:
    """128 rows, then 64: the second compile compiles nothing (its copy of the
    weights' panels and the matmul link 128's bodies, and its steps gather), and
    computes what NumPy does at both lengths."""
    monkeypatch.setenv("STRIPEML_COMPILE_WORKERS", "0")  # every compile counted here
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    model, w, c = gelu_matmul_model(K, N, 7)
    f = stripeml.onnx.compile(model, target="cpu")
    for rows, modules in ((128, None), (64, 0)):
        x = _x(rows)
        before = jit.STATS["optimize"]
        got = f(x)
        if modules is not None:
            assert jit.STATS["optimize"] - before == modules
        np.testing.assert_allclose(got, _expected(x, w, c), rtol=2e-4, atol=2e-4)
