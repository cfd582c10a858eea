"""The CPU runtime (JIT, steps, thread pool) with hand-written ABI-conforming LLVM IR."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from stripeml.codegen.cpu_abi import KernelInfo, Step
from stripeml.errors import InternalError, ShapeError
from stripeml.ir.nodes import Special
from stripeml.runtime import cpu, jit
from stripeml.runtime.backend import backend_for
from stripeml.targets import resolve

from .cpu_samples import (
    SPIN_LIMIT,
    FakeGenerator,
    add_copy_program,
    add_generator,
    add_kernel,
    add_program,
    flags_program,
    incr_kernel,
    incr_program,
    kernel_step,
    spin_kernel,
    strided_add_program,
)


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    """Each test gets its own cache: the fake generators differ for equal program texts."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "cache"))


def _compile(monkeypatch, gen: FakeGenerator, program, **options) -> cpu.CpuCompiled:
    monkeypatch.setattr(cpu, "generate_module", gen)
    return cpu.CpuBackend(cpu.CpuOptions(**options)).compile(program)


# -- jit plumbing ----------------------------------------------------------------


def test_host_description_and_vector_width():
    h = jit.host()
    assert h.cpu and h.triple and h.llvm_version.startswith(str(jit.llvm.llvm_version_info[0]))
    assert cpu.detect_vector_width() in (4, 8, 16)
    if h.has("avx512f"):
        assert cpu.detect_vector_width() == 16
    elif h.has("avx2"):
        assert cpu.detect_vector_width() == 8
    assert h.cpu in jit.target_description()


def test_optimize_vectorises_the_add_loop():
    module = jit.optimize(add_kernel("add_f32", 0, 1, 2))
    text = str(module)
    assert "x float>" in text  # the loop vectoriser produced vector code
    obj = jit.emit_object(module)
    assert obj[:4] == b"\x7fELF"


def test_invalid_ir_raises_internal_error_with_llvm_message():
    with pytest.raises(InternalError, match="expected type"):
        jit.optimize("define void @f( {")


def test_missing_symbol_raises_internal_error():
    loaded = jit.load_object(jit.compile_ir(add_kernel("add_f32", 0, 1, 2)))
    assert loaded.address("add_f32")
    with pytest.raises(InternalError, match="nope"):
        loaded.address("nope")


def test_cpu_backend_is_cached_and_configured():
    backend = backend_for(resolve("cpu"))
    assert backend is backend_for(resolve("cpu"))
    assert isinstance(backend, cpu.CpuBackend) and backend.name == "cpu"
    assert backend.options.threads >= 1 and backend.options.vector_width in (4, 8, 16)
    assert isinstance(resolve("cpu").passes, tuple)


def test_cpu_options_come_from_the_target(tmp_path):
    path = tmp_path / "four.toml"
    path.write_text(
        'backend = "cpu"\nthreads = 3\nvector_width = 4\nfma = true\n'
        '[[memory]]\nname = "DRAM"\nsize = "1 GiB"\n'
    )
    backend = backend_for(resolve(path))
    assert backend.options == cpu.CpuOptions(threads=3, vector_width=4, fma=True)


# -- running -----------------------------------------------------------------------


def test_add_runs_and_code_is_the_generated_ir(monkeypatch):
    gen = add_generator(1000)
    compiled = _compile(monkeypatch, gen, add_program(1000))
    a = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    b = np.arange(1000, dtype=np.float32)
    out = compiled.run({"A": a, "B": b})
    assert list(out) == ["C"]
    np.testing.assert_array_equal(out["C"], a + b)
    assert compiled.code == gen.ir


def test_inputs_are_checked_like_the_interpreter(monkeypatch):
    compiled = _compile(monkeypatch, add_generator(8), add_program(8))
    a = np.zeros(8, np.float32)
    with pytest.raises(ShapeError, match="dtype"):
        compiled.run({"A": a, "B": a.astype(np.float64)})
    with pytest.raises(ShapeError, match="shape"):
        compiled.run({"A": a, "B": np.zeros(9, np.float32)})
    with pytest.raises(ShapeError, match="missing input 'B'"):
        compiled.run({"A": a})
    with pytest.raises(ShapeError, match="unknown input 'Z'"):
        compiled.run({"A": a, "B": a, "Z": a})
    with pytest.raises(ShapeError, match="unknown output 'A'"):
        compiled.run({"A": a, "B": a}, outputs={"A": a})


def test_non_contiguous_inputs_and_preallocated_outputs(monkeypatch):
    compiled = _compile(monkeypatch, add_generator(8), add_program(8))
    a = np.arange(16, dtype=np.float32)[::2]  # strided view
    b = np.ones(8, np.float32)
    out = np.full(8, -1, np.float32)
    got = compiled.run({"A": a, "B": b}, outputs={"C": out})
    assert got["C"] is out
    np.testing.assert_array_equal(out, a + 1)
    # A non-contiguous output target is written through a temporary.
    target = np.zeros(16, np.float32)[::2]
    got = compiled.run({"A": a, "B": b}, outputs={"C": target})
    assert got["C"] is target
    np.testing.assert_array_equal(target, a + 1)


def test_strided_root_buffers_are_copied_in_and_out(monkeypatch):
    gen = FakeGenerator(add_kernel("add_f32", 0, 1, 2), (kernel_step("add_f32", 12),))
    compiled = _compile(monkeypatch, gen, strided_add_program(3, 4))
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = 10 * a
    out = compiled.run({"A": a, "B": b})["C"]
    assert out.shape == (3, 4) and out.flags.c_contiguous
    np.testing.assert_array_equal(out, a + b)


def test_temporary_and_special_steps(monkeypatch):
    n = 64
    gen = FakeGenerator(
        add_kernel("add_to_t", 0, 1, 3),
        (kernel_step("add_to_t", n), Step(special=Special("copy", ("T",), ("D",)))),
    )
    compiled = _compile(monkeypatch, gen, add_copy_program(n))
    a = np.arange(n, dtype=np.float32)
    for scale in (1, 2, 3):  # the temporary is reused across calls
        out = compiled.run({"A": a, "B": scale * a})
        np.testing.assert_array_equal(out["D"], (1 + scale) * a)


def test_concurrent_runs_of_one_compiled_program(monkeypatch):
    n = 1 << 16
    gen = FakeGenerator(
        add_kernel("add_to_t", 0, 1, 3),
        (kernel_step("add_to_t", n), Step(special=Special("copy", ("T",), ("D",)))),
    )
    compiled = _compile(monkeypatch, gen, add_copy_program(n), threads=2)
    a = np.arange(n, dtype=np.float32)
    errors: list[str] = []

    def worker(k: int) -> None:
        for _ in range(20):
            out = compiled.run({"A": a, "B": np.full(n, k, np.float32)})["D"]
            if not np.array_equal(out, a + k):
                errors.append(f"thread {k}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# -- threading ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extent", "splittable", "work", "threads", "chunks"),
    [
        (1000, True, 4 * cpu.MIN_WORK_PER_CHUNK, 4, 4),
        (3, True, 8 * cpu.MIN_WORK_PER_CHUNK, 8, 3),  # never more chunks than iterations
        (1000, True, cpu.MIN_WORK_PER_CHUNK // 32, 4, 1),  # too little work to pay
        (1000, True, 3 * cpu.MIN_WORK_PER_CHUNK, 8, 3),
        (1000, False, 4 * cpu.MIN_WORK_PER_CHUNK, 4, 1),
        (1000, True, 4 * cpu.MIN_WORK_PER_CHUNK, 1, 1),
        (1, True, 4 * cpu.MIN_WORK_PER_CHUNK, 4, 1),
    ],
)
def test_chunk_bounds(extent, splittable, work, threads, chunks):
    info = KernelInfo("k", "k", extent, splittable, work)
    bounds = cpu.chunk_bounds(info, threads)
    assert len(bounds) == chunks + 1
    assert bounds[0] == 0 and bounds[-1] == extent
    assert all(lo < hi for lo, hi in zip(bounds, bounds[1:]))


@pytest.mark.parametrize(
    ("extent", "work", "threads", "per_thread", "chunks"),
    [
        (1000, 64 * cpu.MIN_WORK_PER_CHUNK, 2, 4, 8),
        (6, 64 * cpu.MIN_WORK_PER_CHUNK, 2, 4, 6),  # never more chunks than iterations
        (1000, 64 * cpu.LONG_CHUNK_WORK, 2, 16, 32),
        # more than FEW_CHUNKS per thread only as long as each gets LONG_CHUNK_WORK
        (1000, 12 * cpu.LONG_CHUNK_WORK, 2, 16, 12),
        (1000, 4 * cpu.LONG_CHUNK_WORK, 2, 16, 2 * cpu.FEW_CHUNKS),
        (1000, 3 * cpu.MIN_WORK_PER_CHUNK, 4, 4, 12),  # 3 threads' worth of work
        (1000, cpu.MIN_WORK_PER_CHUNK, 2, 4, 1),  # one thread's worth: no split at all
    ],
)
def test_chunks_per_thread(extent, work, threads, per_thread, chunks):
    info = KernelInfo("k", "k", extent, True, work)
    bounds = cpu.chunk_bounds(info, threads, per_thread=per_thread)
    assert len(bounds) == chunks + 1
    assert bounds[0] == 0 and bounds[-1] == extent
    assert all(lo < hi for lo, hi in zip(bounds, bounds[1:]))


@pytest.mark.parametrize(
    ("extent", "grain", "per_thread", "want"),
    [
        (32, 16, 4, [0, 16, 32]),  # two vectors: one each, never 4-lane chunks
        (40, 16, 4, [0, 16, 32, 40]),  # the short last grain is a chunk of its own
        (16, 16, 4, [0, 16]),  # one vector: no split
        (100, 4, 1, [0, 48, 100]),
    ],
)
def test_chunk_bounds_are_whole_grains(extent, grain, per_thread, want):
    info = KernelInfo("k", "k", extent, True, 64 * cpu.MIN_WORK_PER_CHUNK, grain)
    assert cpu.chunk_bounds(info, 2, per_thread=per_thread) == want


def test_a_fused_reduction_split_by_channels_runs_in_whole_vectors():
    """SiLU fused with a pooled sum (EfficientNet's squeeze-excite): the only
    race-free index is the channel, which is also the vector index; the kernel
    runs it innermost in lanes and the chunks are whole vectors."""
    import stripeml

    src = (
        "function (A[1, 24, 20, 32], B[32]) -> (C, R) { T = A + B; C = T * sigmoid(T); "
        "R[n, 0, 0, c : 1, 1, 1, 32] = +(C[n, y, x, c]); }"
    )
    rng = np.random.default_rng(5)
    a = rng.standard_normal((1, 24, 20, 32)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    t = (a + b).astype(np.float64)
    want_c = t / (1 + np.exp(-t))
    fn = stripeml.compile(src, target=stripeml.targets.resolve("cpu", threads=2))
    exe = fn.lower(a, b)
    width = exe.function.target.vector_width
    if width < 8:
        pytest.skip("needs 8 or more f32 lanes")
    assert f"<{width} x float>" in exe.code
    (info,) = [s.kernel for s in exe._compiled.module.steps if s.kernel is not None]
    assert info.grain == width
    c, r = exe(a, b)
    np.testing.assert_allclose(c, want_c, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(r, want_c.sum(axis=(1, 2), keepdims=True), rtol=2e-5, atol=1e-4)


def test_packed_register_tiles_start_from_the_identity_in_registers():
    """A register-tiled matmul whose panels are packed (the kernel's statements: the
    copy into the panel, then the row tiles) leaves each output element's
    aggregation to its one register tile, which starts at the identity and stores
    once: no separate pass writes -0.0 over the result first (with K = 64 that
    pass and the reload doubled the kernel's time)."""
    import stripeml

    src = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
    rng = np.random.default_rng(7)
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal((64, 512)).astype(np.float32)  # rows 2 KiB apart: packed
    exe = stripeml.compile(src, target="cpu").lower(a, b)
    if exe.function.target.vector_width < 8:
        pytest.skip("needs 8 or more f32 lanes")
    assert "#cache_in" in exe.ir and "#register_tile" in exe.ir
    assert "store float 0x8000000000000000" not in exe.code  # the identity of +, -0.0
    np.testing.assert_allclose(exe(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_min_chunk_work_option_lowers_the_threshold():
    info = KernelInfo("k", "k", 1000, True, 1 << 12)
    assert len(cpu.chunk_bounds(info, 4)) == 2  # one chunk by default
    assert len(cpu.chunk_bounds(info, 4, min_work=1 << 10)) == 5


@pytest.mark.parametrize("splittable", [True, False])
def test_split_covers_every_iteration_exactly_once(monkeypatch, splittable):
    n = 1 << 16
    # work enough for CHUNKS_PER_THREAD chunks per thread (each LONG_CHUNK_WORK)
    work = 4 * cpu.CHUNKS_PER_THREAD * cpu.LONG_CHUNK_WORK
    steps = (kernel_step("incr", n, splittable=splittable, work=work),)
    gen = FakeGenerator(incr_kernel("incr"), steps)
    results = {}
    for threads in (1, 4):
        compiled = _compile(monkeypatch, gen, incr_program(n), threads=threads)
        c = np.zeros(n, np.float32)
        d = np.full(n, -1, np.int64)
        compiled.run({}, outputs={"C": c, "D": d})
        np.testing.assert_array_equal(c, np.ones(n, np.float32))  # once, not twice
        results[threads] = np.unique(d)
    assert results[1].tolist() == [0]
    if splittable:  # one call per chunk, each starting where its chunk starts
        per = cpu.CHUNKS_PER_THREAD
        assert results[4].tolist() == [n * i // (4 * per) for i in range(4 * per)]
    else:
        assert results[4].tolist() == [0]


def test_results_equal_with_one_and_many_threads(monkeypatch):
    n = 1 << 18
    gen = FakeGenerator(add_kernel("add_f32", 0, 1, 2), (kernel_step("add_f32", n, work=n * 4),))
    a = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    outs = [
        _compile(monkeypatch, gen, add_program(n), threads=t).run({"A": a, "B": a})["C"]
        for t in (1, 2, 3)
    ]
    for out in outs:
        np.testing.assert_array_equal(out, a + a)


def test_kernel_calls_release_the_gil(monkeypatch):
    """The spin kernel waits for the main thread to set a flag: only possible without the GIL."""
    gen = FakeGenerator(spin_kernel("spin"), (kernel_step("spin", 1, splittable=False),))
    compiled = _compile(monkeypatch, gen, flags_program(), threads=1)
    flags = np.zeros(3, np.int64)
    runner = threading.Thread(target=compiled.run, args=({},), kwargs={"outputs": {"F": flags}})
    runner.start()
    deadline = time.monotonic() + 30
    while flags[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    flags[1] = 1
    runner.join()
    assert flags[0] == 1
    assert 0 < flags[2] < SPIN_LIMIT  # released by us, not by the kernel's own time-out


def test_engine_lives_as_long_as_the_compiled_program(monkeypatch):
    import gc
    import weakref

    compiled = _compile(monkeypatch, add_generator(8), add_program(8))
    engine = weakref.ref(compiled._loaded)
    a = np.ones(8, np.float32)
    run = compiled.run
    del compiled
    gc.collect()
    assert engine() is not None  # a bound method still holds the program
    np.testing.assert_array_equal(run({"A": a, "B": a})["C"], 2 * a)
    del run
    gc.collect()
    assert engine() is None  # and the machine code goes with it


def test_end_to_end_with_the_code_generator():
    pytest.importorskip("stripeml.codegen.llvm")
    import stripeml

    src = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
    rng = np.random.default_rng(2)
    a = rng.standard_normal((33, 17)).astype(np.float32)
    b = rng.standard_normal((17, 9)).astype(np.float32)
    f = stripeml.compile(src, target="cpu")
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-5)
    assert "define" in f.lower(a, b).code


def test_inputs_seen_before_take_the_fast_path_only_while_they_are_the_same():
    """The runtime remembers the last C-contiguous array of each input (a
    model's weights); every way that array or its successor can differ still
    gives NumPy's answer, or the shape error; so does the runtime called
    directly, past the executable's own checks."""
    import stripeml

    src = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
    rng = np.random.default_rng(4)
    a = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal((6, 5)).astype(np.float32)
    exe = stripeml.compile(src, target="cpu").lower(a, b)
    np.testing.assert_allclose(exe(a, b), a @ b, rtol=1e-5, atol=1e-5)
    b[...] = rng.standard_normal((6, 5))  # the same array, new values
    np.testing.assert_allclose(exe(a, b), a @ b, rtol=1e-5, atol=1e-5)
    b2 = rng.standard_normal((6, 5)).astype(np.float32)  # another array
    np.testing.assert_allclose(exe(a, b2), a @ b2, rtol=1e-5, atol=1e-5)
    bt = np.asfortranarray(b2)  # same shape, other strides
    np.testing.assert_allclose(exe(a, bt), a @ b2, rtol=1e-5, atol=1e-5)
    flat = b2.reshape(-1)  # a view: the base keeps its pointer
    np.testing.assert_allclose(exe(a, b2), a @ b2, rtol=1e-5, atol=1e-5)
    assert flat.base is b2
    b2.shape = (5, 6)  # the same object, another shape
    with pytest.raises(ShapeError, match="built for"):
        exe(a, b2)
    b2.shape = (6, 5)
    with pytest.raises(ShapeError, match="built for"):
        exe(a, b2.view(np.int32))  # same memory, another dtype
    c = b2.copy()
    del b2, flat, bt
    np.testing.assert_allclose(exe(a, c), a @ c, rtol=1e-5, atol=1e-5)
    run = exe._compiled.run
    np.testing.assert_allclose(run({"A": a, "B": c})["C"], a @ c, rtol=1e-5, atol=1e-5)
    c.shape = (5, 6)
    with pytest.raises(ShapeError, match="shape"):
        run({"A": a, "B": c})
    c.shape = (6, 5)
    with pytest.raises(ShapeError, match="dtype"):
        run({"A": a, "B": c.view(np.int32)})
    np.testing.assert_allclose(run({"A": a, "B": c})["C"], a @ c, rtol=1e-5, atol=1e-5)
    # Held after two calls: NumPy refuses to move its data (resize), so the
    # remembered pointer stays true.
    np.testing.assert_allclose(run({"A": a, "B": c})["C"], a @ c, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="resize"):
        c.resize((60, 50))
    # An array passed once is not kept alive.
    import gc
    import weakref

    once = rng.standard_normal((6, 5)).astype(np.float32)
    np.testing.assert_allclose(run({"A": a, "B": once})["C"], a @ once, rtol=1e-5, atol=1e-5)
    gone = weakref.ref(once)
    del once
    gc.collect()
    assert gone() is None
