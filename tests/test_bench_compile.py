"""bench/bench_compile.py's command line: an unknown model is a usage error, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")
SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "bench_compile.py"


def test_unknown_model_is_a_usage_error():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--no-tile", "--models", "zoo_resnet50,bert_base"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "unknown model bert_base" in proc.stderr
    assert "bert_base_128" in proc.stderr  # the known names are listed
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""  # nothing was measured
