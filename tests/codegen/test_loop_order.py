"""The loop order of a kernel the ``thread`` pass did not split
(codegen/llvm_plan.py, ``loop_order``).

On one thread no kernel is marked ``#thread``; the code generator still picks
an index the runtime may split (``parallel_index``: a matmul's row blocks),
and it used to move that index outermost.  A matmul tiled as column panels
outside row blocks then streamed every panel once per row block instead of
keeping each panel in L2 while the rows pass over it.  The kernel now keeps the
order the tiling passes gave it, and its split loop runs between the caller's
bounds wherever it stands: results are checked against NumPy on one thread and
with the runtime cutting that inner loop into chunks on two.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import stripeml
from stripeml.codegen.llvm import generate
from stripeml.codegen.llvm_plan import loop_order, parallel_index
from stripeml.ir.nodes import Block
from stripeml.runtime.chunking import chunk_bounds
from stripeml.runtime.cpu import CpuBackend, CpuOptions

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"


def _arrays(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 10_000 + k * 100 + n)
    return (
        rng.standard_normal((m, k)).astype(np.float32),
        rng.standard_normal((k, n)).astype(np.float32),
    )


def _lowered(threads: int, a: np.ndarray, b: np.ndarray):
    f = stripeml.compile(MATMUL, target="cpu", constants={"B": b}, threads=threads)
    return f, f.lower(a).program


def _product(program) -> Block:
    (kernel,) = [
        s
        for s in program.root.stmts
        if isinstance(s, Block) and "contraction" in s.tags and "kernel" in s.tags
    ]
    return kernel


def test_an_unsplit_matmul_keeps_its_panels_outside_its_row_blocks(tmp_path, monkeypatch):
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    a, b = _arrays(128, 256, 512)
    _, program = _lowered(1, a, b)
    kernel = _product(program)
    assert "thread" not in kernel.tags
    loops = [i.name for i in kernel.idxs if i.range > 1]
    par = parallel_index(kernel)
    # the runtime may split the row blocks, the last of the kernel's loops ...
    assert par is not None and par == loops[-1] and len(loops) == 2
    # ... which stay inside the column panels
    order = loop_order(kernel, {}, None, par)
    assert [n for n in order if n in loops] == loops


def test_a_split_kernel_keeps_its_split_index_outermost(tmp_path, monkeypatch):
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    a, b = _arrays(128, 256, 512)
    _, program = _lowered(2, a, b)
    kernel = _product(program)
    assert "thread" in kernel.tags
    par = parallel_index(kernel)
    assert par == kernel.idxs[0].name
    assert loop_order(kernel, {}, None, par)[0] == par


def test_the_generated_body_loops_over_panels_outside_rows(tmp_path, monkeypatch):
    """The matmul body's first two loop headers: the panels', then the rows'."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    a, b = _arrays(128, 256, 512)
    _, program = _lowered(1, a, b)
    kernel = _product(program)
    loops = [i.name for i in kernel.idxs if i.range > 1]
    module = generate(program, vector_width=16)
    (step,) = [
        s for s in module.steps if s.kernel is not None and s.kernel.block_name == kernel.name
    ]
    (body,) = [x for x in module.bodies if x.symbol == step.kernel.symbol]
    assert body.llvm_ir
    heads = re.findall(r"^(\w+)\.head\.\d+:", body.llvm_ir, re.M)
    assert heads[:2] == loops, heads


@pytest.mark.parametrize("shape", [(128, 256, 512), (37, 300, 200), (130, 96, 100)])
def test_one_thread_matches_numpy(tmp_path, monkeypatch, shape):
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    a, b = _arrays(*shape)
    f, _ = _lowered(1, a, b)
    np.testing.assert_allclose(f(a), a @ b, rtol=2e-5, atol=2e-4)


@pytest.mark.parametrize("shape", [(128, 256, 512), (37, 300, 200)])
def test_the_runtime_splits_an_inner_loop_of_an_unsplit_kernel(tmp_path, monkeypatch, shape):
    """The one-thread program on two threads, cut into small chunks: kernels split
    along their ``parallel_index``, an inner loop of the matmul's (37 rows: the
    main kernel's row blocks and the rest's)."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    a, b = _arrays(*shape)
    _, program = _lowered(1, a, b)
    inner = [
        k.name
        for k in program.root.stmts
        if isinstance(k, Block)
        and "contraction" in k.tags
        and "thread" not in k.tags
        and parallel_index(k) not in (None, *[i.name for i in k.idxs if i.range > 1][:1])
    ]
    assert inner
    steps = [
        s
        for s in generate(program, vector_width=16).steps
        if s.kernel is not None and s.kernel.block_name in inner
    ]
    assert any(len(chunk_bounds(s.kernel, threads=2, min_work=1 << 10)) > 2 for s in steps)
    compiled = CpuBackend(CpuOptions(threads=2, min_chunk_work=1 << 10)).compile(program)
    out = compiled.run({"A": a, "B": b})["C"]
    np.testing.assert_allclose(out, a @ b, rtol=2e-5, atol=2e-4)
