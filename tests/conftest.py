"""Session-wide test setup: keep the kernel cache out of the user's home, measure
no roofline ceilings (tests that want them give them, or ask), and verify the
whole program after every pass (``STRIPEML_VERIFY=all``; users get the
incremental default, which tests/passes/test_verify_modes.py checks)."""

from __future__ import annotations

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
