"""Pages for a cold compile's constant layouts, mapped on a thread of their own
while its passes run.

A program's first call writes the temporaries it keeps (its weights laid out
for the register tiles, :mod:`.kept_pages`) on 4 KiB pages mapped at once:
BERT-base's 340 MB took 0.10-0.14 s of that call here, the light ResNet-50's
148 MB 0.06 s.  Before that, a compile that missed the disk cache runs its
passes on one core for 0.2-0.35 s while the other is idle.  So the CPU
backend's :meth:`~.cpu.CpuBackend.prepare`, asked when the passes begin
(``stripeml.api.Function._executable``, on a miss of the disk cache), starts
a :class:`Reserve`: 1.5 times the bytes of the program's constant parameters
(its layouts are 0.7-1.5x those on the benchmark set's models, 4x for
SqueezeNet's Winograd weights), zeroed and left untouched, whose 4 KiB pages
a thread has the kernel map, 4 MB at a time, until the backend's compile of
that program in the same thread takes it (:func:`claim`): code generation
keeps both cores busy, so the mapping stops there, and what was not mapped
costs address space only.  The program's first call carves its kept
temporaries from the reserve, each aligned to 64 bytes, while they fit (the
others get pages of their own, as before), maps in one call what it took
beyond what the thread mapped, and gives the mapped pages it did not take
back to the system (:meth:`Reserve.close`).

Nothing is reserved with fewer than two CPUs or threads (the thread would
take the passes' core), under :data:`MIN_BYTES`, or while another program's
layouts may be shared (:func:`.shared_constants.idle`: a second input shape
of a model computes none of its own).  A reserve its compile never claimed
maps no more once no compile runs in the process (``gc_pause``) and lets
its pages go; the next :meth:`~.cpu.CpuBackend.prepare` of the thread drops it.
Zeroed pages are what the layouts had before; no value changes.
"""

from __future__ import annotations

import threading

import numpy as np

from .. import gc_pause
from .host import _advise, _madvise

__all__ = ["MIN_BYTES", "Reserve", "claim", "start"]

#: Constant parameters under this many bytes reserve nothing.
MIN_BYTES = 16 << 20
_ALIGN = 64
_PAGE = 4096
_MADV_DONTNEED = 4  # Linux
_PIECE = 4 << 20

_local = threading.local()  # the reserve of the compile running in this thread


class Reserve:
    """``nbytes`` zeroed bytes, mapped on a thread of their own from the moment
    it is made until :meth:`stop`; :meth:`take` carves them, :meth:`close` maps
    what was taken and not yet mapped and gives back the rest."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self._array: np.ndarray | None = None
        self._mapped = 0  # bytes from the start the thread has mapped
        self._used = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._map, name="stripeml-kept-reserve")
        self._thread.daemon = True
        self._thread.start()

    def _map(self) -> None:
        try:
            arr = np.zeros(self.nbytes, np.uint8)  # calloc'd: no page is touched
        except MemoryError:  # the layouts get their own pages, as without a reserve
            return
        # 4 KiB pages, as kept_pages.kept_array's (all of them: a fresh huge page's
        # first touch may stall), mapped a piece at a time: one call for all held
        # the process's memory map from the compile's own allocations
        _advise(arr.ctypes.data, arr.nbytes, True, False)
        self._array = arr
        while not self._stop.is_set():
            if gc_pause.wait_no_compile(0):  # the compile ended unclaimed (it failed)
                self._array = None
                return
            if self._mapped < arr.nbytes:
                n = min(_PIECE, arr.nbytes - self._mapped)
                _advise(arr.ctypes.data + self._mapped, n, False, True)
                self._mapped += n
            else:
                self._stop.wait(0.05)

    def stop(self) -> None:
        """Map no more (the compile's code generation begins: both cores are busy)."""
        self._stop.set()

    def take(self, nbytes: int, dtype: np.dtype) -> np.ndarray | None:
        """``nbytes`` zeroed bytes as a flat ``dtype`` array, or None when they do
        not fit (the mapping thread is stopped and waited for first)."""
        self.stop()
        self._thread.join()
        if self._array is None:
            return None
        base = self._array.ctypes.data
        start = -(-(base + self._used) // _ALIGN) * _ALIGN - base  # an aligned address
        if start + nbytes > self._array.nbytes:
            return None
        self._used = start + nbytes
        return self._array[start : start + nbytes].view(dtype)

    def used(self) -> np.ndarray | None:
        """The bytes :meth:`take` gave out, one array (their huge pages, later)."""
        return None if self._array is None or not self._used else self._array[: self._used]

    def close(self) -> None:
        """Map what :meth:`take` gave out beyond what the thread mapped (in one
        call, as :func:`.kept_pages.kept_array` would); give the mapped pages it
        did not give out back to the system."""
        self.stop()
        self._thread.join()
        arr, self._array = self._array, None
        madvise = _madvise()
        if arr is None or madvise is None:
            return
        base = arr.ctypes.data
        if self._used > self._mapped:
            _advise(base + self._mapped, self._used - self._mapped, False, True)
        start = -(-(base + self._used) // _PAGE) * _PAGE
        end = (base + self._mapped) // _PAGE * _PAGE
        if end > start:
            madvise(start, end - start, _MADV_DONTNEED)  # read again, they would be zeros


def start(nbytes: int) -> None:
    """Begin mapping ``nbytes`` for the compile running in this thread (replacing
    any reserve an earlier compile of the thread did not claim)."""
    _local.reserve = Reserve(nbytes)


def claim() -> Reserve | None:
    """The reserve :func:`start` began in this thread, now the caller's and no
    longer mapped (:meth:`Reserve.stop`); None if none."""
    reserve = getattr(_local, "reserve", None)
    _local.reserve = None
    if reserve is not None:
        reserve.stop()
    return reserve
