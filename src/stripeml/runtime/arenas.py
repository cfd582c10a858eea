"""Zeroed, aligned host memory for a compiled CPU program's temporaries and
fresh results (:mod:`.cpu_run`)."""

from __future__ import annotations

import numpy as np

from .kept_pages import kept_array

__all__ = ["writable_c", "zeroed_arena", "zeroed_arena_at"]


def zeroed_arena(nbytes: int, align: int = 64, fresh: bool = False) -> np.ndarray:
    """``nbytes`` zeroed bytes starting at a multiple of ``align`` (calloc'd: pages
    are touched only when used); ``fresh``: on 4 KiB pages mapped at once
    (:func:`.kept_pages.kept_array`; the view's ``base`` is the whole array)."""
    if fresh:
        raw = kept_array(nbytes + align, np.uint8)
        start = -raw.ctypes.data % align
        return raw[start : start + nbytes]
    return zeroed_arena_at(nbytes, align)[0]


def zeroed_arena_at(nbytes: int, align: int = 64, zeroed: bool = True) -> tuple[np.ndarray, int]:
    """:func:`zeroed_arena` and its address (``.ctypes.data`` costs over a
    microsecond, at every call for a fresh output); ``zeroed=False``: the bytes
    are left as the allocator gives them."""
    raw = (np.zeros if zeroed else np.empty)(nbytes + align, np.uint8)
    address = raw.ctypes.data
    start = -address % align
    return raw[start : start + nbytes], address + start


def writable_c(arr: np.ndarray) -> bool:
    """Whether the runtime may write a result straight into ``arr``."""
    return arr.flags.c_contiguous and arr.flags.writeable and arr.flags.aligned
