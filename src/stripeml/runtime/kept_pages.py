"""The constant layouts a program keeps (its weights laid out for the register
tiles), written whole by its first call and read at every call after.

They are made on 4 KiB pages mapped in one call (:func:`kept_array`), not the
huge pages NumPy asks for from 4 MiB on: a fresh huge page's first touch is at
times far slower than 4 KiB pages' (here, a virtual machine: 138 MB of NumPy
zeros took 0.02 s in some processes and 0.34-1.2 s of mostly system time in
others, with no compaction stall counted in ``/proc/vmstat``; populated 4 KiB
pages 0.06-0.085 s every time), and a warm ResNet-50's first call waited there
in one process out of two or three.  Once that call's result is ready,
:func:`promote_huge` gives them huge pages in a thread of their own, for the
calls after (the steady run reads them at every call: 4 KiB pages cost U-Net
3.5% there).  The temporaries' arena of a call is made the same way
(``cpu_run``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import gc_pause
from .host import _MADV_COLLAPSE, _MADV_HUGEPAGE, LARGE_BYTES, POPULATE_BYTES, _advise, _madvise

__all__ = ["kept_array", "promote_huge"]

_HUGE = 2 << 20  # a huge page (x86-64, and arm64 with 4 KiB pages)
# Collapsed this much at a time (2-3 ms a MB here), waiting between pieces while
# a compile runs (gc_pause.wait_no_compile): beside one, a collapse made it up to
# 0.5 s slower (taking the process's memory map lock for each huge page).
_PIECE = 16 << 20


def kept_array(extent: int, dtype: Any) -> np.ndarray:
    """``extent`` zeros on 4 KiB pages, those of a large one mapped in one call
    (:func:`.host._advise`: no huge pages, populated; see the module docstring)."""
    arr = np.zeros(extent, dtype)
    if arr.nbytes >= POPULATE_BYTES:
        _advise(arr.ctypes.data, arr.nbytes, arr.nbytes >= LARGE_BYTES, True)
    return arr


def promote_huge(arrays: Sequence[np.ndarray]) -> threading.Thread | None:
    """Give the :func:`kept_array` arrays of :data:`LARGE_BYTES` or more huge pages,
    in a thread of its own (returned; ``None`` when there is nothing to do): each
    whole huge page's range is advised ``MADV_HUGEPAGE`` (the kernel's
    ``khugepaged`` collapses such ranges in the background, in time) and then
    collapsed at once (``MADV_COLLAPSE``, Linux 6.1; older kernels refuse it and
    leave it to ``khugepaged``), 16 MB at a time, each piece once no compile
    runs in the process (:func:`..gc_pause.wait_no_compile`).  The contents are
    unchanged; the thread holds the arrays until it is done, so their memory
    cannot be given back meanwhile.  Elsewhere than Linux, nothing."""
    big = [a for a in arrays if a.nbytes >= LARGE_BYTES]
    madvise = _madvise()
    if not big or madvise is None:
        return None

    def collapse() -> None:
        for a in big:
            address = a.ctypes.data
            start = -(-address // _HUGE) * _HUGE
            end = (address + a.nbytes) // _HUGE * _HUGE
            if end > start:  # errors leave the pages as they are
                madvise(start, end - start, _MADV_HUGEPAGE)
                for lo in range(start, end, _PIECE):
                    gc_pause.wait_no_compile()
                    madvise(lo, min(_PIECE, end - lo), _MADV_COLLAPSE)

    thread = threading.Thread(target=collapse, name="stripeml-huge-pages", daemon=True)
    thread.start()
    return thread
