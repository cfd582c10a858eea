"""An ONNX transformer of six identical layers at two sequence lengths: the
pass manager runs the layer-local passes over three of its layers and copies
the middle one (``passes/_replicate.py``).  Each length's program is byte for
byte the one the pipeline writes over every layer (``STRIPEML_REPEATS=0``),
and computes what NumPy does (float64, from the model's description)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import stripeml.onnx  # noqa: E402
from stripeml.ir.printer import format as format_ir  # noqa: E402

from .test_second_length_reuse import HIDDEN, _model, _numpy  # noqa: E402

LAYERS = 6


def _weights() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(16)
    return [
        {n: (rng.standard_normal((HIDDEN, HIDDEN)) / 4).astype(np.float32) for n in "qkvo"}
        for _ in range(LAYERS)
    ]


def test_six_layers_at_two_lengths(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    weights = _weights()
    model = _model(weights)
    monkeypatch.setenv("STRIPEML_REPEATS", "0")
    every = stripeml.onnx.compile(model, target="cpu")
    monkeypatch.setenv("STRIPEML_REPEATS", "1")
    once = stripeml.onnx.compile(model, target="cpu")
    rng = np.random.default_rng(4)
    for seq in (31, 9):
        x = rng.standard_normal((1, seq, HIDDEN)).astype(np.float32)
        monkeypatch.setenv("STRIPEML_REPEATS", "0")
        whole = every.lower(X=x)
        monkeypatch.setenv("STRIPEML_REPEATS", "1")
        copied = once.lower(X=x)
        steps = [name for name, _ in copied.timings]
        assert "repeats set aside" in steps and "repeats copied" in steps
        assert "repeats set aside" not in [name for name, _ in whole.timings]
        assert format_ir(copied.program) == format_ir(whole.program)
        want = _numpy(weights, x)
        np.testing.assert_allclose(once(X=x), want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(every(X=x), want, rtol=1e-4, atol=1e-5)
