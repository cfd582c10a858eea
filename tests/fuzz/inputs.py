"""Input values for generated programs.

Mostly small values, with exact ties (``-1, -0.5, 0, -0.0, 0.5, 1, 2``) so
comparisons and ``==`` meet equal operands; with ``hazards`` a quarter of the
integers are ``INT_MIN``, ``INT_MAX``, ``-1`` or ``0`` (the known class
``int_div_overflow``).  ``gather`` indices come from their declared range.
"""

from __future__ import annotations

import numpy as np


def random_values(
    rng: np.random.Generator, dtype: str, shape, hazards: bool, values=None
) -> np.ndarray:
    """Inputs: mostly small values, with exact ties (-1, 0, 0.5, ...) so ``==`` and
    comparisons meet equal operands; with ``hazards``, integers include INT_MIN/MAX."""
    return np.asarray(_values(rng, np.dtype(dtype), shape, hazards, values))


def _values(rng: np.random.Generator, dt: np.dtype, shape, hazards: bool, values) -> np.ndarray:
    if values is not None:
        return rng.integers(values[0], values[1] + 1, shape).astype(dt)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        a = rng.integers(-5, 6, shape).astype(dt)
        if hazards:
            info = np.iinfo(dt)
            special = np.array([info.min, info.min, info.max, -1, 0], dtype=dt)
            a = np.where(rng.random(shape) < 0.25, rng.choice(special, shape), a)
        return a
    a = rng.uniform(-2, 2, shape)
    ties = rng.choice([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, -0.0], shape)
    return np.where(rng.random(shape) < 0.3, ties, a).astype(dt)
