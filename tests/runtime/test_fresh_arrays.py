"""Large fresh host arrays (a model's weights, their layouts, the constant layouts
a program keeps) are advised against transparent huge pages before anything
touches them (``runtime.host.fresh_array``): on Linux the kernel then marks
their mapping ``nh`` (``VM_NOHUGEPAGE``) in ``/proc/self/smaps``."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from stripeml.runtime import host, native_layout

from .helpers import vm_flags


def test_fresh_arrays_are_what_numpy_makes() -> None:
    z = host.fresh_array((3, 1 << 20), np.float32, zeroed=True)  # 12 MiB
    assert z.shape == (3, 1 << 20) and z.dtype == np.float32 and z.flags.c_contiguous
    assert not z.any()
    e = host.fresh_array((5,), np.int64)
    assert e.shape == (5,) and e.dtype == np.int64


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's smaps")
def test_large_fresh_arrays_get_no_huge_pages() -> None:
    big = host.fresh_array((host.LARGE_BYTES * 2,), np.uint8)
    assert "nh" in vm_flags(big.ctypes.data + host.LARGE_BYTES)
    big[:] = 1  # usable as any array
    assert int(big.sum()) == big.size
    rng = np.random.default_rng(3)
    w = rng.standard_normal((512, 256, 9)).astype(np.float32)  # 4.5 MiB, two threads
    out = native_layout.reversed_axes(w)
    assert "nh" in vm_flags(out.ctypes.data + out.nbytes // 2)
    np.testing.assert_array_equal(out, w.transpose(2, 1, 0))
