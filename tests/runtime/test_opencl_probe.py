"""``device_problem``: an OpenCL driver that builds no kernel at all is named as the
cause (not the program), and the OpenCL tests skip on such a machine."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import stripeml
from stripeml.errors import StripeError
from stripeml.runtime import opencl


class _Error(Exception):
    pass


class _Device:
    name = " pthread-Some CPU "


@pytest.fixture(autouse=True)
def _fresh_probe():
    """Each test probes its own driver; the real one is probed again afterwards."""
    opencl.device_problem.cache_clear()
    yield
    opencl.device_problem.cache_clear()


def _fake_driver(monkeypatch: pytest.MonkeyPatch, build_error: str | None) -> None:
    class Program:
        def __init__(self, ctx: object, source: str) -> None:
            assert "__kernel" in source

        def build(self) -> None:
            if build_error is not None:
                raise _Error(f"clBuildProgram failed: BUILD_PROGRAM_FAILURE\n\n{build_error}\n")

    class Module:
        Error = _Error

    Module.Program = Program  # type: ignore[attr-defined]
    monkeypatch.setattr(opencl, "_cl", lambda: Module)
    monkeypatch.setattr(opencl, "device_context", lambda: (object(), object(), _Device()))
    opencl.device_problem.cache_clear()


def test_a_driver_that_builds_no_kernel_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_driver(monkeypatch, "Build on <device>:\n\nerror: unknown target CPU 'generic'")
    problem = opencl.device_problem()
    assert problem is not None
    assert "pthread-Some CPU" in problem and "unknown target CPU 'generic'" in problem
    assert opencl.device_problem() == problem  # probed once


def test_a_driver_that_builds_is_no_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_driver(monkeypatch, None)
    assert opencl.device_problem() is None


def test_no_platform_is_the_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    def none() -> object:
        raise StripeError("target 'opencl': no OpenCL device found")

    monkeypatch.setattr(opencl, "device_context", none)
    opencl.device_problem.cache_clear()
    assert opencl.device_problem() == "target 'opencl': no OpenCL device found"


@pytest.mark.skipif(importlib.util.find_spec("pyopencl") is None, reason="no pyopencl")
def test_this_machines_driver_problem_is_the_error() -> None:
    """Where the driver builds nothing (PoCL 3.0 on a CPU its LLVM does not know),
    compiling for ``opencl_pocl`` says so; elsewhere the program runs."""
    f = stripeml.compile("function (A) -> (B) { B = A + 1; }", target="opencl_pocl")
    x = np.arange(4, dtype=np.float32)
    problem = opencl.device_problem()
    if problem is None:
        np.testing.assert_array_equal(f(x), x + 1)
    else:
        with pytest.raises(StripeError, match="builds no kernel|no OpenCL"):
            f(x)
