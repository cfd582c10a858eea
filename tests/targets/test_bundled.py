"""The bundled target files, backends made from targets, and the program suite on
the example accelerators (interpreter only) against NumPy."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import stripeml
from stripeml.errors import StripeError
from stripeml.ir import format as format_ir
from stripeml.passes import Dce, Fuse
from stripeml.passes.manager import run_pipeline
from stripeml.runtime import cpu
from stripeml.runtime.backend import InterpBackend, backend_for
from stripeml.runtime.gpu import GpuOptions
from stripeml.runtime.interp import run_with_report
from stripeml.targets import BACKENDS, INTERP, TARGETS_DIR, bundled_targets, load_target, resolve

from .helpers import HEADER, cpuinfo_vector_width, write

try:
    from programs import CASES, Case
except ImportError:  # tests/ imported as a package
    from tests.programs import CASES, Case

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

EXAMPLE_TARGETS = [
    "targets/examples/npu.toml",  # a relative path, found among the bundled files
    str(TARGETS_DIR / "examples" / "two_level_cpu.toml"),  # an absolute path
]


# -- the files ----------------------------------------------------------------------


def test_bundled_names() -> None:
    assert set(bundled_targets()) == {
        "cpu",
        "opencl",
        "opencl_pocl",
        "cuda",
        "examples/npu",
        "examples/two_level_cpu",
    }


@pytest.mark.parametrize("name", sorted(bundled_targets()))
def test_every_bundled_target_loads(name: str) -> None:
    t = load_target(name)
    assert t.backend in BACKENDS
    assert t.memories[0].name == "DRAM"  # where the IR puts buffers by default
    assert [p.name for p in t.passes] == [s.name for s in t.pipeline]
    if name != "cpu":  # explicit sizes run from the largest to the smallest
        sizes = [m.size_bytes for m in t.memories]
        assert sizes == sorted(sizes, reverse=True)


def test_cpu_target_is_the_host() -> None:
    t = load_target("cpu")
    assert t.backend == "cpu"
    assert t.memory_names == ("DRAM", "L3", "L2", "L1")
    assert t.threads == len(os.sched_getaffinity(0))
    if cpuinfo_vector_width() is not None:
        assert t.vector_width == cpuinfo_vector_width()
    assert [s.name for s in t.pipeline][:4] == [
        "alias_reshape",
        "alias_view",
        "divide_late",
        "fuse",
    ]


def test_gpu_targets() -> None:
    cuda = load_target("cuda")
    assert (cuda.compute_units, cuda.subgroup_size, cuda.max_threads_per_group) == (132, 32, 1024)
    assert cuda.shared_memory_bytes == 48 * KiB == cuda.memory("SHARED").size_bytes
    opencl = load_target("opencl")
    assert opencl.backend == "opencl" and opencl.memory("SHARED").size_bytes == 32 * KiB


def test_example_accelerators() -> None:
    npu = load_target("examples/npu")
    assert npu.backend == "interp" and npu.memory_names == ("DRAM", "SRAM")
    assert npu.memory("SRAM").size_bytes == 256 * KiB
    two = load_target("examples/two_level_cpu")
    assert two.backend == "interp"
    assert [(m.name, m.size_bytes) for m in two.memories] == [
        ("DRAM", 8 * GiB),
        ("L2", 1 * MiB),
        ("L1", 32 * KiB),
    ]


# -- backends -----------------------------------------------------------------------


def test_cpu_backend_comes_from_cpu_toml() -> None:
    target = load_target("cpu")
    backend = backend_for(resolve("cpu"))
    assert isinstance(backend, cpu.CpuBackend) and backend is backend_for(resolve("cpu"))
    assert backend.options == cpu.CpuOptions.from_target(target)
    assert (backend.options.threads, backend.options.vector_width) == (
        target.threads,
        target.vector_width,
    )
    assert resolve("cpu").passes == target.passes


def test_interp_and_example_files() -> None:
    assert resolve("interp") is INTERP and INTERP.passes == () and INTERP.source == ""
    assert isinstance(backend_for(INTERP), InterpBackend)
    npu = resolve("targets/examples/npu.toml")
    backend = backend_for(npu)
    assert isinstance(backend, InterpBackend) and backend.name == "interp"
    assert npu.passes == load_target("examples/npu").passes
    assert resolve("examples/npu") is npu  # loaded once per file


def test_targets_are_cached_per_path_and_mtime(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + '[[pipeline]]\npass = "dce"\n')
    first = resolve(str(path))
    assert resolve(str(path)) is first and first.passes == (Dce(),)
    path.write_text(HEADER + '[[pipeline]]\npass = "fuse"\n')
    stamp = path.stat().st_mtime_ns + 10**9
    os.utime(path, ns=(stamp, stamp))
    second = resolve(str(path))
    assert second is not first and second.passes == (Fuse(),)


def test_cpu_target_file_sets_threads_and_vector_width(tmp_path: Path) -> None:
    text = 'backend = "cpu"\nthreads = 3\nvector_width = 4\n' + HEADER.split("\n", 1)[1]
    target = resolve(write(tmp_path, text))
    backend = backend_for(target)
    assert isinstance(backend, cpu.CpuBackend)
    assert (backend.options.threads, backend.options.vector_width, target.passes) == (3, 4, ())


@pytest.mark.parametrize("name", ["opencl", "cuda"])
def test_gpu_backends_come_from_their_files(name: str) -> None:
    target = load_target(name)
    backend = backend_for(resolve(name))
    assert backend.name == name and backend.options == GpuOptions.from_target(target)
    assert backend.options.max_group_size == target.max_threads_per_group
    assert resolve(name).passes == target.passes


def test_unknown_targets() -> None:
    with pytest.raises(StripeError, match="unknown target 'tpu'"):
        resolve("tpu")
    with pytest.raises(StripeError, match="must be a string"):
        resolve(3)  # type: ignore[arg-type]


def test_a_target_object_is_its_own_resolution() -> None:
    t = load_target("examples/two_level_cpu")
    assert resolve(t) is t
    assert isinstance(backend_for(t), InterpBackend)
    assert stripeml.compile("function (A) -> (B) { B = A; }", target=t).target is t


def test_cpu_options_default_to_this_host(tmp_path: Path) -> None:
    assert cpu.CpuBackend().options.threads == len(os.sched_getaffinity(0))
    b = cpu.CpuBackend(cpu.CpuOptions(threads=2, vector_width=4, cache_dir=tmp_path))
    assert (b.options.threads, b.options.vector_width, b.cache_dir) == (2, 4, tmp_path)
    given = cpu.CpuBackend(cpu.CpuOptions(vector_width=4))
    assert hash(given) == hash(cpu.CpuBackend(cpu.CpuOptions(vector_width=4)))


def test_kernel_cache_key_follows_the_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel cache keys on the final Stripe text: a pipeline that changes the
    program gets its own entry; one that does not shares it."""
    keys: list[tuple[str, str]] = []

    def spy(text: str, options: str) -> str:
        keys.append((text, options))
        raise _Stop

    monkeypatch.setattr(cpu, "cache_key", spy)
    f = stripeml.compile("function (X[N, M]) -> (Y) { T = X * 2.0; Y = exp(T); }", target="interp")
    program = f.lower(np.ones((3, 4), np.float32)).program
    for passes in ([], [Fuse(), Dce()], [Dce()]):
        final = run_pipeline(program, passes).program
        with pytest.raises(_Stop):
            cpu.CpuBackend(cpu.CpuOptions(vector_width=4)).compile(final)
        assert keys[-1][0] == format_ir(final)
    (t0, _), (t1, _), (t2, _) = keys
    assert t0 != t1 and t0 == t2  # fuse changed the program; dce alone did not


class _Stop(Exception):
    pass


# -- the program suite on the example accelerators ------------------------------------

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"


def test_npu_pipeline_stages_tiles_through_sram(tmp_path: Path) -> None:
    """With an SRAM too small for the whole matmul, the NPU's pipeline tiles it and
    copies the tiles into SRAM: DRAM reads drop, SRAM carries the compute's loads."""
    text = (TARGETS_DIR / "examples" / "npu.toml").read_text()
    assert 'size = "256 KiB"' in text
    path = write(tmp_path, text.replace('size = "256 KiB"', 'size = "2 KiB"'), "tiny_npu.toml")
    rng = np.random.default_rng(0)
    a = rng.random((32, 48)).astype(np.float32)
    b = rng.random((48, 40)).astype(np.float32)
    exe = stripeml.compile(MATMUL, target=str(path)).lower(a, b)
    assert "#tiled" in exe.ir and "@SRAM" in exe.ir
    out, traffic = run_with_report(exe.program, {"A": a, "B": b})
    np.testing.assert_allclose(out["C"], a @ b, rtol=1e-5)
    plain = stripeml.compile(MATMUL, target="interp").lower(a, b).program
    _, untiled = run_with_report(plain, {"A": a, "B": b})
    assert set(untiled.reads) == {"DRAM"}
    assert traffic.reads["SRAM"] > 0 and traffic.writes["SRAM"] > 0
    assert traffic.reads["DRAM"] < untiled.reads["DRAM"]


def _check(case: Case, names, got, expected) -> None:
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for name, g, e in zip(names, got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, name
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol, err_msg=name)
        else:
            np.testing.assert_array_equal(g, e, err_msg=name)


@pytest.mark.parametrize("target", EXAMPLE_TARGETS, ids=["npu", "two_level_cpu"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_program_on_example_target(case: Case, target: str) -> None:
    inputs = case.make_inputs()
    expected = case.reference({k: v.copy() for k, v in inputs.items()})
    f = stripeml.compile(case.source, target=target)
    exe = f.lower(**inputs)
    assert [name for name, _ in exe.timings] == [s.name for s in load_target(target).pipeline]
    assert exe.code == ""
    _check(case, f.outputs, f(**inputs), expected)
