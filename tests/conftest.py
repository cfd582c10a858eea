"""Session-wide test setup: keep the kernel cache out of the user's home, measure
no roofline ceilings (tests that want them give them, or ask), and verify the
whole program after every pass (``STRIPEML_VERIFY=all``; users get the
incremental default, which tests/passes/test_verify_modes.py checks).

Tests that run OpenCL programs (a ``target`` parameter naming an OpenCL target,
or the ``opencl_device`` mark) are skipped, with the driver's reason, on a
machine whose OpenCL driver builds no kernel at all
(:func:`stripeml.runtime.opencl.device_problem`: PoCL 3.0 refuses CPUs its LLVM
does not know).  Without pyopencl the tests' own skips apply."""

from __future__ import annotations

import functools
import importlib.util

import pytest


@pytest.fixture(autouse=True, scope="session")
def _kernel_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """Point ``STRIPEML_CACHE_DIR`` (inherited by child processes) at a session temp
    dir, set ``STRIPEML_MEASURE_PEAKS=0`` (a profile measures nothing) and
    ``STRIPEML_VERIFY=all``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STRIPEML_VERIFY", "all")
        mp.setenv("STRIPEML_CACHE_DIR", str(tmp_path_factory.mktemp("stripeml-cache")))
        mp.setenv("STRIPEML_MEASURE_PEAKS", "0")
        yield


@functools.cache
def _opencl_problem() -> str | None:
    if importlib.util.find_spec("pyopencl") is None:
        return None  # each OpenCL test skips itself: "the opencl extra is not installed"
    from stripeml.runtime.opencl import device_problem

    return device_problem()


def _runs_opencl(item: pytest.Item) -> bool:
    if item.get_closest_marker("opencl_device") is not None:
        return True
    spec = getattr(item, "callspec", None)
    return spec is not None and any(
        isinstance(v, str) and v.startswith("opencl") for v in spec.params.values()
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chosen = [item for item in items if _runs_opencl(item)]
    problem = _opencl_problem() if chosen else None
    if problem is not None:
        mark = pytest.mark.skip(reason=f"OpenCL cannot run on this machine: {problem}")
        for item in chosen:
            item.add_marker(mark)
