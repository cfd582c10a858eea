"""Fresh host arrays that the caller writes whole at once (a model's weights read
from its file, their layouts: ``runtime.host.fresh_array`` without ``zeroed``)
are mapped by the kernel in one call (``MADV_POPULATE_WRITE``), not one page
fault per 4 KiB page at the first write: their pages are resident before
anything touches them.  Zeroed ones are left to fault in as they are used.

Residency is read with ``mincore``, page by page, so the check does not depend
on how the kernel splits or merges the mappings around the array; its control
is a fresh anonymous mapping nobody touched.  That a zeroed array is not
populated is checked on what the kernel is asked, not on residency: a 40 MiB
``np.zeros`` was once found resident on CI, by the allocator's doing."""

from __future__ import annotations

import ctypes
import mmap
import sys

import numpy as np
import pytest

from stripeml.runtime import host

PAGE = mmap.PAGESIZE


def _populate_supported() -> bool:
    """Whether this kernel takes ``MADV_POPULATE_WRITE`` (Linux 5.14 and later;
    older ones, and some sandboxes, answer EINVAL)."""
    if not sys.platform.startswith("linux"):
        return False
    region = mmap.mmap(-1, 16 * PAGE)
    try:
        region.madvise(23, 0, 16 * PAGE)
    except OSError:
        return False
    finally:
        region.close()
    return True


pytestmark = pytest.mark.skipif(
    not _populate_supported(), reason="needs Linux's MADV_POPULATE_WRITE (5.14 and later)"
)


def _resident_fraction(arr: np.ndarray) -> float:
    """The fraction of ``arr``'s whole pages the kernel has mapped (``mincore``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.mincore.restype = ctypes.c_int
    start = -(-arr.ctypes.data // PAGE) * PAGE
    end = (arr.ctypes.data + arr.nbytes) // PAGE * PAGE
    pages = (end - start) // PAGE
    vec = (ctypes.c_ubyte * pages)()
    if libc.mincore(start, end - start, vec) != 0:
        pytest.fail(f"mincore failed: errno {ctypes.get_errno()}")
    return sum(b & 1 for b in vec) / pages


def test_a_fresh_array_is_resident_before_its_first_write() -> None:
    # over glibc's largest mmap threshold (32 MiB): fresh pages from the kernel,
    # never memory of the heap that something else touched before
    n = 40 << 20
    arr = host.fresh_array((n,), np.uint8)
    assert _resident_fraction(arr) == 1.0
    arr[:] = 7  # an ordinary array
    assert int(arr[::4096].sum()) == 7 * len(arr[::4096])


def test_a_zeroed_fresh_array_is_left_to_fault_in(monkeypatch: pytest.MonkeyPatch) -> None:
    # only an array the caller writes whole is mapped up front: a zeroed one is
    # advised against huge pages, never populated (what the kernel is asked)
    asked: list[int] = []
    monkeypatch.setattr(host, "_madvise", lambda: lambda a, n, advice: asked.append(advice) or 0)
    n = 40 << 20
    arr = host.fresh_array((n,), np.uint8, zeroed=True)
    assert asked == [host._MADV_NOHUGEPAGE]
    assert not arr[::4096].any()
    asked.clear()
    host.fresh_array((n,), np.uint8)
    assert asked == [host._MADV_NOHUGEPAGE, host._MADV_POPULATE_WRITE]


def test_untouched_pages_read_as_not_resident() -> None:
    # the control of the residency check: fresh anonymous pages nobody touched
    n = 40 << 20
    region = mmap.mmap(-1, n)  # unmapped when collected
    assert _resident_fraction(np.frombuffer(region, np.uint8)) < 0.5
