"""Number facts the oracles share: dtypes, rounding units, integer wrap-around.

Nothing here knows stripeml.  Dtypes are NumPy dtype names (``float32``,
``int8``, ``bool``); :data:`TILE_BITS` maps each to the Tile cast that makes it.
"""

from __future__ import annotations

import numpy as np

FLOATS = ("float16", "float32", "float64")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTS = SIGNED + UNSIGNED

# An error bound this small marks a value as "inexact in its last bit": a zero
# whose sign is not determined (a max of -0.0 and +0.0, a sum of zeros in an
# unknown order) must not have its sign checked.
SIGN_UNSURE = float(np.finfo(np.float64).tiny)


def unit(dtype: str | np.dtype) -> float:
    """The unit roundoff of a float dtype (half an ulp at 1); 0 for exact dtypes."""
    dt = np.dtype(dtype)
    if dt.kind != "f":
        return 0.0
    return float(np.finfo(dt).eps) / 2


def is_float(dtype: str | np.dtype) -> bool:
    return np.dtype(dtype).kind == "f"


def is_int(dtype: str | np.dtype) -> bool:
    return np.dtype(dtype).kind in "iu"


def wrap(value: int, dtype: str | np.dtype) -> int:
    """``value`` reduced to ``dtype``'s range the way two's complement hardware does."""
    dt = np.dtype(dtype)
    bits = dt.itemsize * 8
    value %= 1 << bits
    if dt.kind == "i" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def to_dtype(value: object, dtype: str | np.dtype) -> tuple[object, bool]:
    """``value`` (a Python number) stored as ``dtype``; ``overflowed`` when a finite
    float became infinite by rounding."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return bool(value), False
    if dt.kind in "iu":
        return wrap(int(value), dt), False
    with np.errstate(over="ignore"):
        stored = dt.type(value)
    return stored, bool(np.isinf(stored)) and bool(np.isfinite(float(value)))
