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
