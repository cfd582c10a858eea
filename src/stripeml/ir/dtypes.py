"""Element types of Stripe buffers and scalars, and their NumPy counterparts."""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike

# Stripe name -> NumPy dtype.  The order is the printing/parsing vocabulary.
DTYPES: dict[str, np.dtype] = {
    "bool": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}

_FROM_NUMPY = {v: k for k, v in DTYPES.items()}


def to_numpy(name: str) -> np.dtype:
    return DTYPES[name]


def from_numpy(dtype: DTypeLike) -> str | None:
    """Stripe name of a NumPy dtype, or ``None`` when it has no counterpart."""
    try:
        return _FROM_NUMPY.get(np.dtype(dtype))
    except TypeError:
        return None


def is_float(name: str) -> bool:
    return name.startswith("f")


def is_int(name: str) -> bool:
    return name[0] in "iu"


def is_signed(name: str) -> bool:
    return name.startswith("i") or name.startswith("f")


def bits(name: str) -> int:
    return 8 if name == "bool" else int(name[1:])


def itemsize(name: str) -> int:
    return DTYPES[name].itemsize


def float_to_int(x: object, name: str) -> np.ndarray:
    """Float -> integer dtype ``name`` as the IR's ``cast`` defines it, on every backend.

    In range, truncation toward zero.  Out of range (and NaN), the value x86-64's
    ``cvtt*`` instructions give, the minimum of the conversion's width: narrow
    targets (8, 16 bits, ``i32``) convert through 32 bits, ``i64`` and ``u32``
    through 64 bits, then wrap to the target's bits; ``u64`` converts values in
    ``[2**63, 2**64)`` exactly, larger ones (and +inf) to ``2**64 - 1``, the rest
    through 64 bits.  NumPy's ``astype`` gives these values on some builds and
    others on others (C leaves them undefined), so they are written out here."""
    v = np.asarray(x, dtype=np.float64)  # float16/32 widen exactly
    dt = to_numpy(name)
    bits = 8 * dt.itemsize
    wide = 64 if bits == 64 or name == "u32" else 32
    lim = float(2 ** (wide - 1))
    ok = (v >= -lim) & (v < lim)  # NaN compares false
    with np.errstate(all="ignore"):
        t = np.where(ok, np.trunc(np.where(ok, v, 0.0)), 0.0).astype(np.int64)
    t = np.where(ok, t, np.int64(-(2 ** (wide - 1))))
    if name == "u64":
        big = v >= 2.0**63
        with np.errstate(all="ignore"):
            upper = np.where(big & (v < 2.0**64), np.trunc(np.where(big, v, 2.0**63)), 0.0)
        high = (upper - 2.0**63).astype(np.int64).astype(np.uint64) + np.uint64(2**63)
        high = np.where(v < 2.0**64, high, np.uint64(2**64 - 1))
        return np.where(big, high, t.astype(np.uint64))
    return t.astype(dt)  # int64 -> narrower: wraps
