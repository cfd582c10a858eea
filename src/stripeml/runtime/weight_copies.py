"""Copies of a model file's weights in the disk cache (the ``weights/`` folder),
mapped at a warm start instead of read from the model file.

A warm start of a model read from its file used to read every weight into
fresh memory (ResNet-50: 94 MB, 0.045-0.06 s, nearly all of it mapping fresh
pages), yet once its constant layouts come from the cache
(:mod:`.kept_layouts`) the program reads few of them: ResNet-50's constant
steps alone read 93.8 of its 102 MB of constants.  So the first process that
reads a model file's weights keeps a copy of them, and a later process reading
the same file maps that copy: the weights are the page cache's pages, touched
only where something reads them.

The model file itself is not mapped: a user rewriting it in place (an export
to the same path) would change the weights under a running process, or crash
it (a truncated mapped file).  The copy is the cache's own, never written in
place (published whole with ``os.replace``, evicted with ``unlink``).

**Key**: the model file's identity as :mod:`.provenance` names it (device,
inode, size, modification and status-change times, the same after the read
as before it): a file changed in place or replaced is another key.
**Trust**: the layout file's (:mod:`.kept_layouts`): a tagged head naming the
byte ranges and a checksum of the data, the file private and the user's own;
anything else is reported, removed and read from the model file again.
**Disk**: counted in the cache's limit, evicted least recently used first;
models whose weights are under 1 MiB, or over a quarter of the limit, are read
every time.  The mapped arrays are read-only, and so is every view of them
(their parent is sealed, :func:`.host.seal`): ``compile`` binds them without a
copy.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .cache_root import CacheRoot
from .cache_store import touch
from .host import seal
from .kept_layouts import PAGE, map_checked, open_file, reject, write_file
from .provenance import file_identity

__all__ = ["WeightCopy", "open_copy", "store_copy"]

FOLDER = "weights"
MAGIC = b"STRPMLW\0"
VERSION = 1
#: Models with fewer bytes of weights are read from their file every time.
MIN_BYTES = 1 << 20


def _name(st: os.stat_result) -> str:
    ident = file_identity(st)
    return hashlib.sha256(f"weights\0{VERSION}\0{ident}".encode()).hexdigest()


def _path(root: CacheRoot, name: str) -> Path:
    return root.path / FOLDER / f"{name}.weights"


class WeightCopy:
    """The mapped copy of one model file's weights: :meth:`view` of a byte range."""

    def __init__(self, mapped: mmap.mmap, start: int, ranges: dict[int, tuple[int, int]]) -> None:
        self._mapped = mapped  # read-only
        self._start = start  # where the data begins
        self._ranges = ranges  # file offset -> (bytes, offset in the data)

    def view(self, start: int, n: int) -> np.ndarray | None:
        """The model file's bytes ``[start, start + n)`` as a read-only ``uint8``
        array, or None when the copy does not hold exactly that range.  An array
        of its own over the mapping (not a view of another array: NumPy's views
        of it then name it as their base, which :mod:`.provenance` finds), sealed."""
        found = self._ranges.get(start)
        if found is None or found[0] != n:
            return None
        arr = np.frombuffer(self._mapped, np.uint8, n, self._start + found[1])
        seal(arr)
        return arr


def open_copy(st: os.stat_result) -> WeightCopy | None:
    """The copy of the weights of the model file whose ``os.fstat`` is ``st``;
    None when there is none (or it fails a check: reported and removed)."""
    if not hasattr(mmap, "MAP_PRIVATE") or st.st_size < MIN_BYTES:
        return None
    root = CacheRoot(None)
    if not root.usable():
        return None
    name = _name(st)
    path = _path(root, name)
    then = "the weights are read from the model file"
    try:
        fd = open_file(path)
    except OSError as exc:
        reject("weight cache", path, f"cannot open it: {exc}", then)
        return None
    if fd is None:
        return None
    try:
        info, mm, _ = map_checked(fd, root, name, MAGIC, VERSION, writable=False)
        size = int(info["bytes"])
        ranges: dict[int, tuple[int, int]] = {}
        for at, n, off in info["ranges"]:
            if not (off >= 0 and off % PAGE == 0 and n >= 0 and off + n <= size):
                raise ValueError("a range runs past the data")
            ranges[int(at)] = (int(n), int(off))
        found = WeightCopy(mm, int(info["data"]), ranges)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reject("weight cache", path, str(exc), then)
        return None
    finally:
        os.close(fd)
    touch(path)
    return found


def store_copy(st: os.stat_result, arrays: Iterable[tuple[np.ndarray, int]]) -> bool:
    """Keep a copy of ``arrays`` (each ``(array, offset)``: the model file's bytes
    from ``offset`` on, read since its ``os.fstat`` gave ``st``); False when not
    stored (too small or large, the root refused or unwritable)."""
    parts = sorted(((int(at), a) for a, at in arrays), key=lambda p: p[0])
    size = sum(-(-a.nbytes // PAGE) * PAGE for _, a in parts)
    if not hasattr(mmap, "MAP_PRIVATE") or size < MIN_BYTES:
        return False
    ranges, raws, off = [], [], 0
    for at, a in parts:
        raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        ranges.append([at, raw.size, off])
        raws.append(raw)
        off += -(-raw.size // PAGE) * PAGE
    root = CacheRoot(None)
    name = _name(st)
    return write_file(root, _path(root, name), name, MAGIC, VERSION, {"ranges": ranges}, raws)
