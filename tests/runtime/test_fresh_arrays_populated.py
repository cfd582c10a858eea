"""Fresh host arrays that the caller writes whole at once (a model's weights read
from its file, their layouts: ``runtime.host.fresh_array`` without ``zeroed``)
are mapped by the kernel in one call (``MADV_POPULATE_WRITE``), not one page
fault per 4 KiB page at the first write: their pages are resident before
anything touches them.  Zeroed ones are left to fault in as they are used."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from stripeml.runtime import host

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux")
    or tuple(map(int, os.uname().release.split(".")[:2])) < (5, 14),
    reason="Linux 5.14's MADV_POPULATE_WRITE and /proc/self/smaps",
)


def _mapping(address: int) -> tuple[int, int]:
    """``(Size, Rss)`` in bytes of the mapping holding ``address`` (an advised
    array's whole pages are a mapping of their own)."""
    current, size = False, 0
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            lo, hi = (int(x, 16) for x in head.split("-"))
            current = lo <= address < hi
        elif current and line.startswith("Size:"):
            size = int(line.split()[1]) * 1024
        elif current and line.startswith("Rss:"):
            return size, int(line.split()[1]) * 1024
    raise AssertionError(f"no mapping holds {address:#x}")


def test_a_fresh_array_is_resident_before_its_first_write() -> None:
    # over glibc's largest mmap threshold (32 MiB): a mapping of its own, never
    # memory of the heap that something else touched before
    n = 40 << 20
    arr = host.fresh_array((n,), np.uint8)
    size, rss = _mapping(arr.ctypes.data + n // 2)
    assert size >= n - 2 * 4096 and rss == size
    arr[:] = 7  # an ordinary array
    assert int(arr[::4096].sum()) == 7 * len(arr[::4096])


def test_a_zeroed_fresh_array_is_zeros() -> None:
    n = 40 << 20
    arr = host.fresh_array((n,), np.uint8, zeroed=True)
    assert not arr[::4096].any()
