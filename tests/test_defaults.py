"""The public entry points' defaults (docs/api.md)."""

from __future__ import annotations

import numpy as np


def test_both_compiles_default_to_the_cpu_target() -> None:
    """``stripeml.compile`` and ``stripeml.onnx.compile`` default to the same target,
    ``cpu``: native code for this machine."""
    import inspect

    import stripeml.onnx

    for fn in (stripeml.compile, stripeml.onnx.compile):
        assert inspect.signature(fn).parameters["target"].default == "cpu"
    f = stripeml.compile("function (A) -> (B) { B = A * 2; }")
    assert f.target.backend == "cpu" and f.lower(np.ones(4, np.float32)).code
