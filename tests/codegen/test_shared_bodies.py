"""Kernels equal up to names share one compiled body (analysis/canonical.py), across
layers of one program and, through the disk cache's ``bodies/`` folder, across programs.

Results are checked against NumPy; the body counts come from the generated module.
"""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.analysis.canonical import canonical_kernel
from stripeml.codegen.llvm import generate
from stripeml.ir.nodes import Block
from stripeml.runtime import jit, kept_layouts
from stripeml.runtime.cpu import BODY_FOLDER, CpuBackend, CpuOptions, _body_key

# Two layers with the same shapes: the same kernels on other buffers.
TWO_LAYERS = """function (X[M, K], W1[K, K], W2[K, K]) -> (Y) {
    A[m, n : M, K] = +(X[m, k] * W1[k, n]);
    B = relu(A);
    C[m, n : M, K] = +(B[m, k] * W2[k, n]);
    Y = relu(C);
}"""
# The second layer is wider: its kernels have other shapes.
WIDER = """function (X[M, K], W1[K, K], W2[K, N]) -> (Y) {
    A[m, n : M, K] = +(X[m, k] * W1[k, n]);
    B = relu(A);
    C[m, n : M, N] = +(B[m, k] * W2[k, n]);
    Y = relu(C);
}"""


def _arrays(m: int, k: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(m * 100 + n)
    return [rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, k), (k, n))]


def _want(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    return np.maximum(np.maximum(x @ w1, 0) @ w2, 0)


def _program(source: str, arrays: list[np.ndarray]):
    return stripeml.compile(source, target="cpu").lower(*arrays).program


def _kernels(program) -> list[Block]:
    return [s for s in program.root.stmts if isinstance(s, Block)]


def test_equal_kernels_have_one_canonical_text_and_others_do_not() -> None:
    p = _program(TWO_LAYERS, _arrays(8, 16, 16))
    texts = [canonical_kernel(p.root, k).text for k in _kernels(p)]
    assert len(texts) >= 2 and len(set(texts)) == len(texts) // 2  # layer 2 repeats layer 1
    first = canonical_kernel(p.root, _kernels(p)[0])
    assert "X" not in first.text.split("{", 1)[1] and first.buffers[0] == "X"
    wide = _program(WIDER, _arrays(8, 16, 24))
    wide_texts = [canonical_kernel(wide.root, k).text for k in _kernels(wide)]
    assert len(set(wide_texts)) == len(wide_texts)  # the second layer's shapes differ


def test_one_body_per_distinct_kernel_and_results_match_numpy(tmp_path) -> None:
    arrays = _arrays(8, 16, 16)
    p = _program(TWO_LAYERS, arrays)
    module = generate(p, vector_width=8)
    steps = [s.kernel for s in module.steps if s.kernel is not None]
    assert len(module.bodies) * 2 == len(steps)
    assert module.llvm_ir == ""  # no code of the steps' own
    # each step calls its body with its own buffers: the two layers' steps differ in gather
    assert len({s.symbol for s in steps}) == len(module.bodies)
    assert len({(s.symbol, s.gather) for s in steps}) == len(steps)
    compiled = CpuBackend(CpuOptions(threads=2, cache_dir=tmp_path)).compile(p)
    got = compiled.run(dict(zip(("X", "W1", "W2"), arrays)))["Y"]
    np.testing.assert_allclose(got, _want(*arrays), rtol=1e-5, atol=1e-5)
    assert compiled.code.count('define void @"sk_') == len(module.bodies)


def test_a_second_program_reuses_the_bodies_it_shares(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STRIPEML_COMPILE_WORKERS", "0")  # every compile counted here
    backend = CpuBackend(CpuOptions(threads=1, cache_dir=tmp_path))
    backend.compile(_program(TWO_LAYERS, _arrays(8, 16, 16)))
    kept_layouts.wait_writes()  # the bodies' entries are written on a thread of their own
    stored = {p.name.split(".")[0] for p in (tmp_path / BODY_FOLDER).iterdir()}
    # WIDER's first layer is TWO_LAYERS' first layer: those bodies come from the cache
    wide = _arrays(8, 16, 24)
    p = _program(WIDER, wide)
    bodies = generate(p, vector_width=backend.options.vector_width).bodies
    keys = {_body_key(b.symbol, backend.describe()) for b in bodies}
    shared = keys & stored
    assert shared and keys - stored
    before = jit.STATS["optimize"]
    compiled = backend.compile(p)
    # only the bodies not in the cache were compiled
    assert jit.STATS["optimize"] - before == len(keys - stored)
    got = compiled.run(dict(zip(("X", "W1", "W2"), wide)))["Y"]
    np.testing.assert_allclose(got, _want(*wide), rtol=1e-5, atol=1e-5)


def test_a_second_program_finds_bodies_still_being_written(tmp_path, monkeypatch) -> None:
    """The bodies' entries are written on a thread of their own
    (``runtime/pending_writes.put_later``), slowed down here: a program compiled meanwhile finds
    them in memory rather than compiling the bodies it shares again."""
    import time

    from stripeml.runtime.kernel_cache import KernelCache

    monkeypatch.setenv("STRIPEML_COMPILE_WORKERS", "0")  # every compile counted here
    put = KernelCache.put

    def slow(self, key, entry) -> bool:
        time.sleep(0.05)
        return put(self, key, entry)

    monkeypatch.setattr(KernelCache, "put", slow)
    backend = CpuBackend(CpuOptions(threads=1, cache_dir=tmp_path))
    described = backend.describe()
    width = backend.options.vector_width
    narrow = _program(TWO_LAYERS, _arrays(8, 16, 16))
    first = {_body_key(b.symbol, described) for b in generate(narrow, vector_width=width).bodies}
    backend.compile(narrow)
    wide = _arrays(8, 16, 24)
    p = _program(WIDER, wide)
    keys = {_body_key(b.symbol, described) for b in generate(p, vector_width=width).bodies}
    assert keys & first and keys - first
    before = jit.STATS["optimize"]
    compiled = backend.compile(p)
    assert jit.STATS["optimize"] - before == len(keys - first)
    got = compiled.run(dict(zip(("X", "W1", "W2"), wide)))["Y"]
    np.testing.assert_allclose(got, _want(*wide), rtol=1e-5, atol=1e-5)


def test_a_missing_body_is_compiled_again(tmp_path) -> None:
    arrays = _arrays(8, 16, 16)
    p = _program(TWO_LAYERS, arrays)
    CpuBackend(CpuOptions(threads=1, cache_dir=tmp_path)).compile(p)
    kept_layouts.wait_writes()  # the bodies' entries are written on a thread of their own
    victim = next((tmp_path / BODY_FOLDER).iterdir())
    victim.unlink()
    compiled = CpuBackend(CpuOptions(threads=1, cache_dir=tmp_path)).compile(p)
    got = compiled.run(dict(zip(("X", "W1", "W2"), arrays)))["Y"]
    np.testing.assert_allclose(got, _want(*arrays), rtol=1e-5, atol=1e-5)
    kept_layouts.wait_writes()
    assert victim.exists()  # stored again


@pytest.mark.parametrize("n", [3, 5])
def test_repeated_layers_of_a_deep_chain(n: int, tmp_path) -> None:
    """n equal layers: one body per distinct kernel whatever n is."""
    params = ", ".join(f"W{i}[K, K]" for i in range(n))
    lines = ["    H0 = X;"]
    for i in range(n):
        lines.append(f"    P{i}[m, j : M, K] = +(H{i}[m, k] * W{i}[k, j]);")
        lines.append(f"    H{i + 1} = tanh(P{i});")
    source = f"function (X[M, K], {params}) -> (H{n}) {{\n" + "\n".join(lines) + "\n}"
    rng = np.random.default_rng(n)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    ws = [rng.standard_normal((8, 8)).astype(np.float32) * 0.3 for _ in range(n)]
    f = stripeml.compile(source, target="cpu")
    got = f(x, *ws)
    want = x
    for w in ws:
        want = np.tanh(want @ w)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    module = generate(f.lower(x, *ws).program, vector_width=8)
    kernels = sum(1 for s in module.steps if s.kernel is not None)
    assert kernels >= n and len(module.bodies) <= kernels // n + 2


def test_generated_modules_leave_no_cyclic_garbage() -> None:
    """llvmlite's IR objects point at their parents; ``release`` unlinks each module
    once printed, so a compile's IR is freed by reference counting instead of lying
    in wait for the cycle collector (ResNet-50: 139 k objects, 48 ms of one
    collection).  The module's text is printed before, so it is whole."""
    import gc

    p = _program(TWO_LAYERS, _arrays(8, 16, 16))
    gc.collect()
    was_enabled, flags = gc.isenabled(), gc.get_debug()
    gc.disable()
    try:
        module = generate(p, vector_width=8)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        leftover = [o for o in gc.garbage if type(o).__module__.startswith("llvmlite.ir")]
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
    assert leftover == []
    assert module.bodies and all("ret void" in b.llvm_ir for b in module.bodies if b.llvm_ir)
    steps = [s.kernel for s in module.steps if s.kernel is not None]
    assert len(steps) == len(_kernels(p)) and all(s.gather for s in steps)
    # what the text is made of still compiles and computes the right thing
    arrays = _arrays(8, 16, 16)
    got = stripeml.compile(TWO_LAYERS, target="cpu")(*arrays)
    np.testing.assert_allclose(got, _want(*arrays), rtol=1e-5, atol=1e-5)


def test_a_program_prints_each_distinct_kernel_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # the canonical text of a repeated layer's kernel is the first layer's, printed
    # once per program (the code generator asks for every kernel's text)
    from stripeml.analysis import canonical

    p = _program(TWO_LAYERS, _arrays(8, 16, 16))
    printed = []
    real = canonical.format_block

    def counted(block):  # noqa: ANN001, ANN202 - the function it stands in for
        printed.append(block)
        return real(block)

    monkeypatch.setattr(canonical, "format_block", counted)
    monkeypatch.setattr(canonical, "_TEXTS", None, raising=False)
    texts = [canonical_kernel(p.root, k).text for k in _kernels(p)]
    assert len(printed) == len(set(texts)) == len(texts) // 2
    assert texts[: len(texts) // 2] == texts[len(texts) // 2 :]
    assert texts == [real(canonical_kernel(p.root, k).program.root) + "\n" for k in _kernels(p)]
