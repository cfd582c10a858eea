"""The CUDA backend checks the GPU's free memory before allocating, and gives
back what it allocated when an allocation fails.  A fake driver stands in for
cuda-bindings, so this runs without the extra and without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.codegen.cuda import generate_cuda
from stripeml.errors import ShapeError, StripeError
from stripeml.ir import parse
from stripeml.runtime import cuda


class FakeDriver:
    """The calls ``CudaCompiled._load`` makes, each answering ``(error, value)``."""

    def __init__(self, free: int, total: int, fail_at: int | None = None) -> None:
        self.free, self.total, self.fail_at = free, total, fail_at
        self.allocated: list[int] = []
        self.freed: list[int] = []

    def cuCtxSetCurrent(self, ctx):
        return (0,)

    def cuModuleLoadData(self, ptx):
        return (0, "module")

    def cuMemGetInfo(self):
        return (0, self.free, self.total)

    def cuMemAlloc(self, n: int):
        if self.fail_at is not None and len(self.allocated) == self.fail_at:
            return (2, 0)  # CUDA_ERROR_OUT_OF_MEMORY
        self.allocated.append(n)
        return (0, 1000 + len(self.allocated))

    def cuStreamCreate(self, flags):
        return (0, "stream")

    def cuModuleGetFunction(self, module, name):
        return (0, name)

    def cuMemFree(self, ptr):
        self.freed.append(ptr)
        return (0,)


def _compiled(n: int) -> cuda.CudaCompiled:
    """A CUDA program over two float32 vectors of ``n`` elements (PTX not needed)."""
    x = np.zeros(n, np.float32)
    ir = stripeml.compile("function (X) -> (Y) { Y = X + 1; }", target="interp").lower(x).ir
    return cuda.CudaCompiled(generate_cuda(parse(ir)), ptx="// not loaded")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    def install(driver: FakeDriver) -> FakeDriver:
        monkeypatch.setattr(cuda, "_driver", lambda: driver)
        monkeypatch.setattr(cuda, "gpu_context", lambda: (0, "context", "compute_90"))
        return driver

    return install


def test_buffers_past_the_free_memory_are_a_shape_error_before_allocating(fake) -> None:
    program = _compiled(1 << 20)  # X and Y: 4 MiB each
    driver = fake(FakeDriver(free=6 << 20, total=80 << 30))
    with pytest.raises(ShapeError) as info:
        program._load()
    message = str(info.value)
    assert "8388608 bytes (8.0 MiB)" in message, message
    assert "(6.0 MiB) free of its 85899345920 bytes (80.0 GiB)" in message, message
    assert "'X' f32(1048576,)" in message, message
    assert driver.allocated == []


def test_buffers_that_fit_are_allocated(fake) -> None:
    program = _compiled(1 << 20)
    driver = FakeDriver(free=9 << 20, total=80 << 30, fail_at=None)
    fake(driver)
    monkeypatched_upload = []
    program.upload = lambda k, host: monkeypatched_upload.append(k)  # no device copy
    program._load()
    assert driver.allocated == [4 << 20, 4 << 20]
    assert monkeypatched_upload == [0, 1]


def test_a_failed_allocation_frees_the_earlier_ones(fake) -> None:
    program = _compiled(1024)
    driver = fake(FakeDriver(free=1 << 30, total=1 << 30, fail_at=1))
    with pytest.raises(StripeError, match="cuMemAlloc failed"):
        program._load()
    assert driver.allocated == [4096] and driver.freed == [1001]
