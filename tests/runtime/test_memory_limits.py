"""Programs whose results cannot fit in memory fail with a :class:`ShapeError`
that says how many bytes they need, before anything big is allocated: never a
``MemoryError``, nor an ``InternalError`` wrapping one."""

from __future__ import annotations

import importlib.util
import re
import resource
import time

import numpy as np
import pytest

import stripeml
from stripeml.errors import ShapeError
from stripeml.runtime import host

_NO_OPENCL = importlib.util.find_spec("pyopencl") is None
TARGETS = [
    "interp",
    "cpu",
    pytest.param("opencl_pocl", marks=pytest.mark.skipif(_NO_OPENCL, reason="no pyopencl")),
]

# O: 1024 * 1024 * 1024**2 float32 elements = 2**40 bytes (4 TiB).
HUGE = "function (A[N]) -> (O) { O[i, j, k : N, N, N * N] = =(A[i]); }"
CHAIN = "function (A) -> (O) { T = A * 2; U = T + 1; O[] = +(U[i]); }"


@pytest.mark.skipif(host.memory_bytes() >= 1 << 42, reason="this machine could hold 4 TiB")
@pytest.mark.parametrize("target", TARGETS)
def test_output_of_2_40_bytes_fails_fast(target: str) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    f = stripeml.compile(HUGE, target=target)
    with pytest.raises(ShapeError) as info:
        f(np.ones(1024, np.float32))
    assert time.perf_counter() - start < 60
    message = str(info.value)
    # 2**40 bytes for O (and, where the backend keeps host copies of inputs, 4 KiB for A)
    assert re.search(r"needs at least 43980465\d{5} bytes \(4\.0 TiB\)", message), message
    assert "'O' f32(1024, 1024, 1048576): 4398046511104 bytes" in message
    assert "an allocation failed" not in message  # found by a check, before allocating
    assert info.value.__cause__ is None and not isinstance(info.value.__context__, MemoryError)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 1 << 20  # nothing near the 4 TiB was touched


@pytest.fixture
def one_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend this machine has 1.5 MiB of memory."""
    monkeypatch.setattr(host, "memory_bytes", lambda: 3 << 19)


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_outputs_count_unless_the_caller_gives_them(one_mib: None, target: str) -> None:
    f = stripeml.compile("function (A) -> (O) { O = A + 1; }", target=target)
    a = np.ones(1 << 19, np.float32)  # 2 MiB in, 2 MiB out
    with pytest.raises(ShapeError, match=r"output 'O' f32\(524288,\): 2097152 bytes"):
        f(a)
    out = np.zeros_like(a)
    assert f(a, out=out) is out  # nothing to allocate for the result
    np.testing.assert_array_equal(out, a + 1)


def test_temporaries_count(one_mib: None) -> None:
    f = stripeml.compile(CHAIN, target="interp")  # no passes: T and U are 1 MiB each
    a = np.ones(1 << 18, np.float32)
    with pytest.raises(ShapeError, match=r"temporaries in DRAM: 2097152 bytes"):
        f(a)


def test_a_failed_allocation_while_running_is_a_shape_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    f = stripeml.compile("function (A) -> (O) { O = A + 1; }", target="cpu")
    exe = f.lower(np.ones(8, np.float32))

    def fail(*args: object) -> None:
        raise MemoryError

    monkeypatch.setattr(exe._compiled, "run", fail)
    with pytest.raises(
        ShapeError, match="running main needs at least 32 bytes .*an allocation failed"
    ):
        exe(np.ones(8, np.float32))


def test_a_failed_allocation_while_compiling_is_a_shape_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    f = stripeml.compile("function (A) -> (O) { O = A + 1; }", target="interp")

    def fail(program: object) -> None:
        raise MemoryError

    monkeypatch.setattr(
        f,
        "backend",
        type("B", (), {"compile": staticmethod(fail), "describe": lambda self: None})(),
    )
    with pytest.raises(ShapeError, match=r"compiling main needs at least 64 bytes .*'O' f32\(8,\)"):
        f(np.ones(8, np.float32))


@pytest.mark.skipif(_NO_OPENCL, reason="no pyopencl")
def test_buffer_larger_than_the_opencl_device_allocates() -> None:
    """Checked against the device's limits before any buffer (host or device) is made."""
    from stripeml.runtime.opencl import device_context

    limit = device_context()[2].max_mem_alloc_size
    n = limit // 4096 + 1  # O: n x 1024 float32, just past the limit
    f = stripeml.compile("function (A[N]) -> (O) { O[i, j : N, 1024] = =(A[i]); }", "opencl_pocl")
    with pytest.raises(ShapeError, match=r"allocates at most \d+ bytes .* at once") as info:
        f(np.ones(n, np.float32))
    assert f"'O' f32({n}, 1024): {n * 4096} bytes" in str(info.value)


@pytest.mark.skipif(host.memory_bytes() >= 1 << 42, reason="this machine could hold 4 TiB")
def test_interpreting_ir_with_a_huge_temporary_fails_fast() -> None:
    # Hand-written IR, which no frontend check has seen: a temporary of 2**40 bytes.
    from stripeml.runtime.interp import run

    text = """block main [] #program (
    in A f32(4):(1)
    out O f32(4):(1)
    none T f32(4):(91625968981)
) {
  block k [i:4] #eltwise (
      in A[i] f32(1):(1)
      out O[i]:assign f32(1):(1)
  ) {
    $a = load(A)
    O = store($a)
  }
}
"""
    program = stripeml.ir.parse(text)
    stripeml.ir.verify(program)
    with pytest.raises(ShapeError, match=r"buffer 'T': .*\(1\.0 TiB\)"):
        run(program, {"A": np.ones(4, np.float32)})


def test_a_nested_allocation_too_big_for_memory_is_a_shape_error() -> None:
    """A block's own allocation (one per point) counts too: 8 TiB of scratch is
    refused before anything is allocated, naming the block and the allocation."""
    from stripeml.runtime.interp import run

    program = stripeml.ir.parse(
        """block t [] #program (
    in A f32(8):(1)
    out C f32(8):(1)
) {
  block k [i:8] #kernel (
      in A[i] f32(1):(1)
      out C[i]:assign f32(1):(1)
      none S f32(4, 2147483648000):(1, 1)
  ) {
    $a = load(A)
    C = store($a)
  }
}"""
    )
    with pytest.raises(ShapeError, match=r"running block k needs .*\(allocation 'S' x \d+ points"):
        run(program, {"A": np.zeros(8, np.float32)})
