"""The Ray executor against a local Ray instance (``ray.init(num_cpus=2)``)."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.runtime.tuning_db import TuningDB

from .helpers import compile_matmul, matmul_inputs

try:
    import ray
except ImportError:  # pragma: no cover - the dev extra installs it
    ray = None
    print("tests/tune/test_ray.py: skipped: Ray is not installed (pip install 'stripeml[tune]')")


@pytest.mark.skipif(ray is None, reason="Ray is not installed (pip install 'stripeml[tune]')")
def test_ray_executor_tunes_and_merges_into_the_database(cache):
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        f = compile_matmul()
        report = stripeml.tune(
            f, *matmul_inputs(), budget_s=30, executor="ray", pause_s=0.0, measure_program=False
        )
    finally:
        ray.shutdown()
    (k,) = report.kernels
    assert k.error is None and k.timed >= 1 and k.compiled >= 2
    (row,) = TuningDB().rows()
    assert row.kernel == k.key
    a, b = matmul_inputs()
    np.testing.assert_allclose(compile_matmul()(a, b), a @ b, rtol=1e-4, atol=1e-4)
