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
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import gc_pause
from .host import _MADV_COLLAPSE, _MADV_HUGEPAGE, LARGE_BYTES, POPULATE_BYTES, _advise, _madvise
from .idle_advise import idle_madvise

__all__ = ["kept_array", "promote_huge"]

_HUGE = 2 << 20  # a huge page (x86-64, and arm64 with 4 KiB pages)
# Collapsed one huge page at a time (2-3 ms a MB here), each once no compile runs
# (gc_pause.wait_no_compile: beside one, a collapse made it up to 0.5 s slower,
# taking the process's memory map lock for each huge page) and, for up to
# _MAX_WAIT, once no call has run for _QUIET (calls use every CPU the threads
# have: a collapse beside them made BERT-base's calls at 128 0.17-0.29 s for
# two seconds after its compile, 0.105 s after).  Each piece's madvise runs on
# a native thread in the scheduler's idle class (.idle_advise): calls back to
# back then lose no CPU to it (BERT-base at 512 took about 500 ms a call for
# the 25 s its collapse lasted, 484 ms after).
_PIECE = _HUGE
_QUIET = 0.002
_MAX_WAIT = 0.25
_POLL = 0.001
# While a call runs, a look every 5 ms, not every 1: each look wakes a thread on
# a CPU the call's threads use (1,000 wake-ups a second took 0.6% of the CPU
# time of BERT-base's calls at 512 back to back, in perf's samples).
_BUSY_POLL = 0.005


def kept_array(extent: int, dtype: Any) -> np.ndarray:
    """``extent`` zeros on 4 KiB pages, those of a large one mapped in one call
    (:func:`.host._advise`: no huge pages, populated; see the module docstring)."""
    arr = np.zeros(extent, dtype)
    if arr.nbytes >= POPULATE_BYTES:
        _advise(arr.ctypes.data, arr.nbytes, arr.nbytes >= LARGE_BYTES, True)
    return arr


def wait_quiet(max_wait: float = _MAX_WAIT) -> bool:
    """Return once no compile runs in the process (:func:`..gc_pause.wait_no_compile`,
    however long that takes) and then no call has run on its pools for
    ``_QUIET`` seconds (``True``), or ``max_wait`` seconds after the compiles
    (``False``: calls back to back, with no gap to use; the collapse's next
    piece then runs beside them, on its idle-class thread, so it still ends,
    at one piece per ``max_wait`` at most).  While a call runs it looks every
    ``_BUSY_POLL`` seconds, in a gap every ``_POLL``.  Background work that
    would take a CPU from a compile or a call waits here."""
    from .native_pool import running

    gc_pause.wait_no_compile()
    deadline = time.monotonic() + max_wait
    quiet_since: float | None = None
    while True:
        now = time.monotonic()
        if running():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= _QUIET:
            return True
        if now >= deadline:
            return False
        time.sleep(_POLL if quiet_since is not None else min(_BUSY_POLL, deadline - now))


def promote_huge(arrays: Sequence[np.ndarray]) -> threading.Thread | None:
    """Give the :func:`kept_array` arrays of :data:`LARGE_BYTES` or more huge pages,
    in a thread of its own (returned; ``None`` when there is nothing to do): each
    whole huge page's range is advised ``MADV_HUGEPAGE`` (the kernel's
    ``khugepaged`` collapses such ranges in the background, in time) and then
    collapsed at once (``MADV_COLLAPSE``, Linux 6.1; older kernels refuse it and
    leave it to ``khugepaged``), one huge page at a time, each once no compile
    runs in the process and in a gap between calls where there is one
    (:func:`wait_quiet`), on a thread of the scheduler's idle class
    (:func:`.idle_advise.idle_madvise`, where it can be made: it gets a CPU
    only when no other thread wants one).  The contents are
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
                    wait_quiet(_MAX_WAIT)
                    idle = idle_madvise()  # compiled at the first piece: not beside a compile
                    size = min(_PIECE, end - lo)
                    if idle is None or idle(lo, size, _MADV_COLLAPSE) is None:
                        madvise(lo, size, _MADV_COLLAPSE)

    thread = threading.Thread(target=collapse, name="stripeml-huge-pages", daemon=True)
    thread.start()
    return thread
