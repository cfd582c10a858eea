"""Where a constant's values came from, so the disk cache can name them cheaply.

The constant layouts a program keeps (:mod:`.kept_layouts`) depend on the
program and on the values of its constant parameters: a model's weights,
94 MB for ResNet-50.  Hashing those at every warm start (SHA-256: 0.05 s
here) would cost what laying them out again costs.  So the frontends say
where the arrays they make come from, and a constant is named by that
instead of by its bytes:

* an array read from a file (:func:`note_file`): the file's identity (device,
  inode, size, modification and status-change times, ``os.fstat`` after the
  read, the same as before it) and the byte range.  A file changed in place
  gets a new status-change time (``st_ctime``, which no user process can set
  back), one replaced gets a new inode: either names new values.
* an array computed by a known function from such arrays
  (:func:`note_derived`): the function's name and its inputs' names (an input
  with no origin of its own, a batch normalisation's factors, by the SHA-256
  of its bytes).

An origin is used only while the array and every array it views are
read-only (:func:`.host.immutable`: as ``stripeml.compile`` binds constants,
and as :mod:`.shared_constants` already relies on), and is found through
views (a reshape or a slice names its place in the noted array).  Every
other array is named by the SHA-256 of its bytes (:func:`fingerprint`).
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from collections.abc import Iterable, Mapping

import numpy as np

from .host import immutable

__all__ = ["describe", "file_identity", "fingerprint", "note_derived", "note_file"]

#: id(array) -> (weak reference to it, its origin)
_NOTED: dict[int, tuple[weakref.ref, tuple]] = {}
_LOCK = threading.Lock()
#: An input of a derived array with no origin of its own is hashed up to this size;
#: a larger one leaves the result without an origin (hashed itself, if ever named).
HASHED_INPUT_BYTES = 1 << 20


def file_identity(st: os.stat_result) -> tuple[int, ...]:
    """What names a file's contents (device, inode, size, modification and
    status-change times), from its ``os.stat_result``."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _note(arr: np.ndarray, origin: tuple) -> None:
    key = id(arr)

    def gone(_: weakref.ref, key: int = key) -> None:
        with _LOCK:
            found = _NOTED.get(key)
            if found is not None and found[0]() is None:
                del _NOTED[key]

    with _LOCK:
        _NOTED[key] = (weakref.ref(arr, gone), origin)


def note_file(fd: int, before: os.stat_result, arrays: Iterable[tuple[np.ndarray, int]]) -> bool:
    """``arrays``, each ``(array, offset)``, hold the bytes of the open file ``fd``
    from ``offset`` on, read since ``os.fstat(fd)`` gave ``before``; noted only
    when the file's identity is still the same (not changed while read: then
    True)."""
    try:
        after = os.fstat(fd)
    except OSError:
        return False
    ident = file_identity(after)
    if ident != file_identity(before):
        return False
    for arr, offset in arrays:
        if isinstance(arr, np.ndarray) and arr.flags.c_contiguous:
            _note(arr, ("file", ident, int(offset), int(arr.nbytes)))
    return True


def note_derived(out: np.ndarray, how: str, *inputs: np.ndarray | None) -> None:
    """``out`` was computed by ``how`` (a function's name and version: the same
    name must always compute the same values from the same inputs) from
    ``inputs``; noted when every input is named (:func:`describe`, or its bytes
    when small)."""
    parts: list[object] = []
    for x in inputs:
        if x is None:
            parts.append(None)
            continue
        named = describe(x)
        if named is None:
            if not isinstance(x, np.ndarray) or x.nbytes > HASHED_INPUT_BYTES:
                return
            named = _hashed(x)
        parts.append(named)
    _note(out, ("derived", how, tuple(parts)))


def describe(arr: object) -> tuple | None:
    """``arr``'s origin and where it lies in the noted array it views (its offset,
    dtype, shape and strides), or None: not noted, or writable."""
    if not isinstance(arr, np.ndarray) or not immutable(arr):
        return None
    node: object = arr
    while isinstance(node, np.ndarray):
        base: np.ndarray = node
        with _LOCK:
            found = _NOTED.get(id(base))
        if found is not None and found[0]() is base:
            start = base.__array_interface__["data"][0]  # (no ctypes: 1-2 us each)
            at = arr.__array_interface__["data"][0] - start
            return (found[1], at, arr.dtype.str, arr.shape, arr.strides)
        node = base.base
    return None


def _hashed(arr: np.ndarray) -> tuple:
    data = np.ascontiguousarray(arr)
    digest = hashlib.sha256(data.reshape(-1).view(np.uint8).data).hexdigest() if data.size else ""
    return ("sha256", digest, arr.dtype.str, arr.shape)


def fingerprint(arrays: Mapping[str, object], most: int | None = None) -> str | None:
    """A SHA-256 naming the values of ``arrays`` (by name): their origins where
    known, else their bytes.  None when one is not a NumPy array, or when more
    than ``most`` bytes would be hashed (SHA-256 reads about 2 GB/s here)."""
    named_by: list[tuple[str, tuple | None, np.ndarray]] = []
    hashed = 0
    for name in sorted(arrays):
        value = arrays[name]
        if not isinstance(value, np.ndarray) or value.dtype.hasobject:
            return None
        named = describe(value)
        if named is None:
            hashed += value.nbytes
        named_by.append((name, named, value))
    if most is not None and hashed > most:
        return None
    h = hashlib.sha256()
    for name, named, value in named_by:
        h.update(repr((name, named if named is not None else _hashed(value))).encode() + b"\0")
    return h.hexdigest()
