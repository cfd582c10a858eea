"""The fast path of a call whose arguments match what was compiled for, shared by
:class:`stripeml.api.Executable` and :class:`stripeml.onnx.OnnxFunction` (no
imports: the ONNX frontend reaches it without loading the API)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["exact_arrays"]


def exact_arrays(args: Sequence[Any], expected: Sequence[tuple[tuple[int, ...], Any]]) -> bool:
    """Whether ``args`` are ndarrays (not subclasses) of exactly ``expected``'s
    ``(shape, dtype)`` each, as many and in order: what the full argument
    checks would accept unchanged, tested without their Python-level work."""
    if len(args) != len(expected):
        return False
    for a, (shape, dtype) in zip(args, expected):
        if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
            return False
    return True
