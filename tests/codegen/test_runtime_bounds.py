"""Bodies compiled at O1 take the ranges of their kernel's own indices at run time
(codegen/llvm.py, ``runtime_bounds``), so kernels that differ only in those ranges
(a matmul's row tiles at another row count: a second sequence length) generate
the same code and share one compiled body (``_same_code``).

Results are checked against NumPy; what was compiled is counted with
``jit.STATS`` (every module compiled in this process: no helper processes).
"""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.codegen.llvm import body_opt_level, generate, runtime_bounds
from stripeml.ir.nodes import Block
from stripeml.runtime import jit
from stripeml.runtime.cpu import CpuBackend, CpuOptions

MATMUL = """function (X[M, K], W[K, N]) -> (Y) {
    Y[m, n : M, N] = +(X[m, k] * W[k, n]);
}"""
# two matmuls of the same weights over inputs with different row counts (the same
# index names: a loop's name is in its code)
TWO_ROW_COUNTS = """function (X[M, K], Z[P, K], W[K, N]) -> (Y, V) {
    Y[m, n : M, N] = +(X[m, k] * W[k, n]);
    V[m, n : P, N] = +(Z[m, k] * W[k, n]);
}"""
K, N = 256, 64


def _inputs(*rows: int) -> list[np.ndarray]:
    rng = np.random.default_rng(sum(rows))
    xs = [rng.standard_normal((m, K)).astype(np.float32) for m in rows]
    return [*xs, rng.standard_normal((K, N)).astype(np.float32)]


def _program(source: str, arrays: list[np.ndarray]):
    return stripeml.compile(source, target="cpu").lower(*arrays).program


def _kernels(program) -> list[Block]:
    return [s for s in program.root.stmts if isinstance(s, Block)]


@pytest.fixture
def here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIPEML_COMPILE_WORKERS", "0")  # every compile counted here


def test_o1_bodies_take_their_row_tiles_at_run_time() -> None:
    p = _program(MATMUL, _inputs(64))
    (kernel,) = _kernels(p)
    assert body_opt_level(kernel, 16) == 1  # a register-tiled matmul
    bounds = runtime_bounds(kernel, 1)
    assert bounds and all(kernel.idx(n).range >= 2 for n in bounds)
    assert runtime_bounds(kernel, 3) == ()  # O3 bodies keep their constants
    module = generate(p, vector_width=16)
    assert module.llvm_ir == ""  # no code of the step's own: it gathers
    (step,) = [s.kernel for s in module.steps if s.kernel is not None]
    # the step's gather passes the ranges after the buffers' (slot, offset) pairs
    ranges = [kernel.idx(n).range for n in bounds]
    tail = step.gather[-2 * len(bounds) :]
    assert list(tail[0::2]) == [-1] * len(bounds) and list(tail[1::2]) == ranges
    (body,) = module.bodies
    assert body.llvm_ir is not None and step.symbol == body.symbol
    entry = next(
        line
        for line in body.llvm_ir.splitlines()
        if line.startswith(f'define void @"{body.symbol}"')
    )
    assert entry.count("i64") == 2  # start, end: the bounds are in its argument array


def test_a_second_row_count_reuses_the_body(tmp_path, here) -> None:
    """32 rows, then 64: the second program compiles nothing, and its body,
    compiled for 8 row tiles, runs 16 (a constant bound would leave half of Y
    unwritten)."""
    backend = CpuBackend(CpuOptions(threads=2, cache_dir=tmp_path))
    for rows, compiled_modules in ((32, None), (64, 0)):
        arrays = _inputs(rows)
        p = _program(MATMUL, arrays)
        before = jit.STATS["optimize"]
        compiled = backend.compile(p)
        if compiled_modules is not None:
            assert jit.STATS["optimize"] - before == compiled_modules
        got = compiled.run({"X": arrays[0], "W": arrays[1]})["Y"]
        np.testing.assert_allclose(got, arrays[0] @ arrays[1], rtol=1e-4, atol=1e-4)


def test_one_program_links_one_body_for_both_row_counts(tmp_path, here) -> None:
    arrays = _inputs(32, 64)
    p = _program(TWO_ROW_COUNTS, arrays)
    kernels = _kernels(p)
    assert len(kernels) == 2 and kernels[0].idxs != kernels[1].idxs
    module = generate(p, vector_width=CpuOptions(threads=2).vector_width)
    assert len(module.bodies) == 1 and module.bodies[0].llvm_ir is not None
    steps = [s.kernel for s in module.steps if s.kernel is not None]
    assert {s.symbol for s in steps} == {module.bodies[0].symbol}
    assert steps[0].gather != steps[1].gather  # each step gathers its own bounds
    extents = [s.kernel.parallel_extent for s in module.steps if s.kernel is not None]
    assert extents[0] != extents[1]  # each step is split by its own kernel's extent
    compiled = CpuBackend(CpuOptions(threads=2, cache_dir=tmp_path)).compile(p)
    out = compiled.run({"X": arrays[0], "Z": arrays[1], "W": arrays[2]})
    np.testing.assert_allclose(out["Y"], arrays[0] @ arrays[2], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["V"], arrays[1] @ arrays[2], rtol=1e-4, atol=1e-4)


def test_a_body_missing_from_this_cache_is_compiled(tmp_path, here) -> None:
    """The code memo names a body another cache holds: this backend's cache does
    not have it, so it is compiled here."""
    first = CpuBackend(CpuOptions(threads=2, cache_dir=tmp_path / "a"))
    first.compile(_program(MATMUL, _inputs(32)))
    arrays = _inputs(64)
    p = _program(MATMUL, arrays)
    before = jit.STATS["optimize"]
    compiled = CpuBackend(CpuOptions(threads=2, cache_dir=tmp_path / "b")).compile(p)
    assert jit.STATS["optimize"] - before == 1  # the body
    got = compiled.run({"X": arrays[0], "W": arrays[1]})["Y"]
    np.testing.assert_allclose(got, arrays[0] @ arrays[1], rtol=1e-4, atol=1e-4)


def test_results_equal_the_interpreter_at_both_row_counts(tmp_path, monkeypatch) -> None:
    """Through ``stripeml.compile``: one Function, two shapes, the second reusing
    the first's body; bit for bit what the interpreter computes up to float
    rounding, and the same at each shape as a fresh compile of that shape alone."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "one"))
    f = stripeml.compile(MATMUL, target="cpu")
    ref = stripeml.compile(MATMUL, target="interp")
    for rows in (32, 64):
        arrays = _inputs(rows)
        got = f(*arrays)
        np.testing.assert_allclose(got, ref(*arrays), rtol=1e-4, atol=1e-4)
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "alone"))
    alone = stripeml.compile(MATMUL, target="cpu")(*_inputs(64))
    np.testing.assert_array_equal(got, alone)


def test_the_code_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from collections import OrderedDict

    from stripeml.codegen import llvm

    monkeypatch.setattr(llvm, "_BY_CODE", OrderedDict())
    monkeypatch.setattr(llvm, "SAME_CODE_ENTRIES", 2)
    for rows in (16, 32, 64):  # three programs, three bodies of other code
        generate(_program(TWO_ROW_COUNTS, _inputs(rows, rows)), vector_width=8)
        generate(_program(MATMUL, _inputs(rows + 8)), vector_width=8)
    assert len(llvm._BY_CODE) == 2


EXP = """function (X[M, N]) -> (E) {
    E = exp(X);
}"""


@pytest.mark.parametrize("rows, level", [(4, 1), (64, 3)])
def test_tiny_kernels_are_compiled_at_o1(rows: int, level: int, tmp_path) -> None:
    """A kernel of at most ``TINY_WORK`` scalar operations gets O1 (and so runtime
    bounds); a larger element-wise kernel keeps O3.  Both compute NumPy's values."""
    from stripeml.codegen.llvm import TINY_WORK
    from stripeml.ir.nodes import work_estimate

    x = np.random.default_rng(rows).standard_normal((rows, 96)).astype(np.float32)
    p = _program(EXP, [x])
    (kernel,) = _kernels(p)
    assert (work_estimate(kernel) <= TINY_WORK) == (level == 1)
    assert body_opt_level(kernel, 16) == level
    (body,) = generate(p, vector_width=16).bodies
    assert body.opt == level
    got = CpuBackend(CpuOptions(threads=2, cache_dir=tmp_path)).compile(p).run({"X": x})["E"]
    np.testing.assert_allclose(got, np.exp(x), rtol=1e-6)
