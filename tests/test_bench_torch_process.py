"""bench/torch_process.py (``bench_cpu.py --torch-process``): PyTorch timed in a
worker process of its own, its result checked against NumPy.  Nothing here
asserts a speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"

pytest.importorskip("torch", reason="PyTorch is not installed")


def _process():
    sys.path.insert(0, str(BENCH))
    try:
        from torch_process import TorchProcess
    finally:
        sys.path.remove(str(BENCH))
    return TorchProcess


def test_the_worker_times_blocks_and_returns_its_result() -> None:
    """The worker builds the case from the same seed: its product is NumPy's."""
    worker = _process()(str(BENCH / "bench_cpu.py"), "matmul_256", 1)
    try:
        assert worker.proc.pid != os.getpid() and worker.version
        assert worker.warm_up() > 0
        times = worker.block(3, warm=True)
        assert len(times) == 3 and all(t > 0 for t in times)
        rng = np.random.default_rng(0)
        a = rng.standard_normal((256, 256), dtype=np.float32)
        b = rng.standard_normal((256, 256), dtype=np.float32)
        np.testing.assert_allclose(worker.result(), a @ b, rtol=1e-4, atol=1e-3)
    finally:
        worker.close()
    assert worker.proc.returncode == 0


def test_an_unknown_case_is_an_error_not_a_hang() -> None:
    with pytest.raises(RuntimeError, match="unknown case 'no_such_case'"):
        _process()(str(BENCH / "bench_cpu.py"), "no_such_case", 1)


def test_bench_cpu_reports_torch_from_its_own_process() -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent / "src")}
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_cpu.py"), "--cases", "matmul_256", "--quick",
         "--target", "interp", "--budget", "0.2", "--torch-process"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert record["torch_process"] is True and record["ok"]["torch"] is True
    assert record["baselines"]["torch"] > 0 and record["ratio_vs_torch"] > 0
