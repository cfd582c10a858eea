"""The constant layouts a program keeps, stored in the disk cache and mapped
from it at a warm start (the ``layouts/`` folder).

A program's constant steps lay its weights out for the register tiles once, at
its first call (:mod:`.cpu_run`); the temporaries they write are kept.  For a
warm ResNet-50 that was 0.035-0.04 s of constant steps plus 0.045-0.05 s of
system time to give 138 MB of fresh pages to them.  So the first process to
compute them writes them to a file, and a later one maps that file (the page
cache's pages: no zero-filling, no copy; on Linux 6.16 and later ext4 keeps a
large file's pages in large folios, which map as huge pages) and skips the
constant steps.

**Key.**  The file's name hashes the program's cache key (the program, the
code generator, the target: :func:`.kernel_cache.cache_key`) with the values
of the constant parameters, named by their origin where a frontend noted one
(:mod:`.provenance`: a model file's identity and byte range, not its 94 MB),
else by their bytes' SHA-256.  When that would hash more than an eighth of the
layouts' bytes (and over 1 MiB: weights given in memory), nothing is looked
up or stored.  Layouts under 1 MiB are computed at every start.  Only the
first program of a process uses the files (one that finds nothing to share
in memory, :func:`.shared_constants.idle`).

**Trust.**  Authenticating 138 MB with the cache's HMAC would cost what laying
them out again costs (0.06-0.11 s here), so a layout file is checked in two
parts, which together keep the guarantees of every other entry (see
``docs/cpu-backend.md``, "Who the cache trusts"):

* its head (magic, version, lengths, the buffers' names, dtypes, sizes and
  offsets, and a checksum of the data) carries the HMAC-SHA256 tag of every
  entry, under the root's key and bound to the file's name: nobody without the
  key can make a head this cache accepts, nor move one to another name;
* the file must be the user's own regular file, not a link, that no one else
  may read or write (mode ``& 077 == 0``), in the trusted root: another user
  cannot have changed its data.  Accidental damage (a truncated file, a
  flipped or zeroed range) is caught by the data checksum, the SHA-256 of one
  64-bit wrapping sum per 4 KiB page, compared before any of it is used
  (4-5 ms for 138 MB, reading pages that the first call reads anyway).

A file that fails any check is reported (``RuntimeWarning``), removed and
computed again: a miss, never wrong answers.  Code running as the same user
can change the data behind a matching checksum, as it can edit stripeml's
sources (outside the threat model, as for every entry).

**Disk.**  Layout files count towards the cache's limit
(``$STRIPEML_CACHE_LIMIT``) and are evicted with the other entries, least
recently used first (a use touches the file); one larger than a quarter of
the limit is not stored (it would push out the compiled code of several
models).  A process mapping a file that is evicted meanwhile keeps its pages
(an unlinked file lives on while mapped).  Only a file truncated in place
while a process has it mapped (nothing stripeml does) would crash that
process, as a truncated shared library would.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import mmap
import os
import stat
import struct
import tempfile
import threading
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from .. import gc_pause
from . import cache_root
from .cache_root import CacheRoot, make_private_dirs, remove
from .cache_store import account, cache_limit, touch
from .host import RootBuffer, _madvise

__all__ = ["LayoutStore", "in_background", "wait_writes"]

FOLDER = "layouts"
MAGIC = b"STRPMLC\0"
VERSION = 1
#: magic, version, zero, head length (the JSON after this struct), file length, tag
_HEAD = struct.Struct("<8sIIQQ32s")
_TAG_AT = _HEAD.size - 32
PAGE = 4096
_WORDS = PAGE // 8
#: Linux's madvise advice: map the pages now, for reading (5.14 and later).
_MADV_POPULATE_READ = 22
#: A layout file may take at most this fraction of the cache's limit.
SHARE_OF_LIMIT = 4
#: Smaller layouts are computed at every start: opening, checking and mapping a
#: file costs more than laying out a megabyte.
MIN_BYTES = 1 << 20
#: The constants' bytes hashed to name them (those with no origin noted,
#: :mod:`.provenance`) may be at most this fraction of the layouts' bytes, or
#: :data:`HASHED_FREELY`: hashing costs about what laying out does, so a program
#: whose weights came from memory (a ``ModelProto``, NumPy arrays) computes its
#: layouts as before rather than hashing hundreds of megabytes.
HASHED_SHARE = 8
HASHED_FREELY = 1 << 20


def _page_sums(raw: np.ndarray) -> np.ndarray:
    """One wrapping 64-bit sum per 4 KiB page of the bytes ``raw`` (the last page
    padded with zeros)."""
    full = raw.size // PAGE * PAGE
    sums = raw[:full].view(np.uint64).reshape(-1, _WORDS).sum(axis=1, dtype=np.uint64)
    if full < raw.size:
        tail = np.zeros(PAGE, np.uint8)
        tail[: raw.size - full] = raw[full:]
        sums = np.append(sums, tail.view(np.uint64).sum(dtype=np.uint64))
    return sums


def _checksum(sums: list[np.ndarray]) -> str:
    """SHA-256 of the page sums (:func:`_page_sums`) of the data, in order."""
    h = hashlib.sha256()
    for s in sums:
        h.update(s.tobytes())
    return h.hexdigest()


def _tag(key: bytes, name: str, head: bytes, meta: bytes) -> bytes:
    mac = hmac.new(key, b"stripeml\0" + name.encode() + b"\0", hashlib.sha256)
    mac.update(head[:_TAG_AT])
    mac.update(meta)
    return mac.digest()


def open_file(path: Path) -> int | None:
    """``path`` opened for reading, links refused; None when there is none."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None


def map_checked(
    fd: int, root: CacheRoot, name: str, magic: bytes, version: int, writable: bool
) -> tuple[dict, mmap.mmap, np.ndarray]:
    """The file ``fd`` of entry ``name`` checked (the user's own private regular
    file; its head's tag under ``root``'s key; its data's checksum) and mapped:
    ``(its head's JSON, the mapping, its data as bytes)``.  ``writable``: a
    private mapping whose pages a write would copy, else a read-only one.
    ValueError or OSError saying what is wrong."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("it is not a regular file")
    if os.name != "nt":
        if st.st_uid != cache_root._uid():
            raise ValueError(f"it is owned by uid {st.st_uid}, not by you")
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise ValueError(f"its mode is {stat.S_IMODE(st.st_mode):04o}: others may use it")
    if st.st_size < _HEAD.size:
        raise ValueError(f"truncated header ({st.st_size} bytes)")
    head = os.pread(fd, _HEAD.size, 0)
    got_magic, got_version, _, meta_len, length, tag = _HEAD.unpack(head)
    if got_magic != magic:
        raise ValueError("bad magic")
    if got_version != version:
        raise ValueError(f"format version {got_version}, expected {version}")
    if length != st.st_size:
        raise ValueError(f"the file is {st.st_size} bytes, its head says {length}")
    if _HEAD.size + meta_len > length:
        raise ValueError("the head runs past the file")
    meta = os.pread(fd, meta_len, _HEAD.size)
    key = root.key()
    if key is None or not hmac.compare_digest(tag, _tag(key, name, head, meta)):
        raise ValueError("its HMAC does not match this cache's key: changed on disk or forged")
    info = json.loads(meta.decode())
    if not isinstance(info, dict):
        raise ValueError("its head is not an object")
    start, size = int(info["data"]), int(info["bytes"])
    if start % PAGE or size % PAGE or start + size != length or not size:
        raise ValueError("bad data range")
    if writable:
        mm = mmap.mmap(fd, length, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    else:
        mm = mmap.mmap(fd, length, access=mmap.ACCESS_READ)  # read-only: so are its arrays
    data = np.frombuffer(mm, np.uint8, size, start)
    madvise = _madvise()
    if madvise is not None:
        madvise(data.ctypes.data, size, _MADV_POPULATE_READ)  # errors: faulted as read
    if _checksum([_page_sums(data)]) != info["sum"]:
        raise ValueError("its data does not match its checksum: damaged")
    return info, mm, data


def write_file(
    root: CacheRoot,
    path: Path,
    name: str,
    magic: bytes,
    version: int,
    meta: dict,
    raws: list[np.ndarray],
) -> bool:
    """Publish entry ``name`` at ``path``: the head (``meta`` with the data's
    ``bytes``, ``sum`` and ``data`` offset added), then each of ``raws`` (bytes)
    from a page of its own; False when not written (over a quarter of the
    limit, the root refused or unwritable)."""
    size = sum(-(-raw.size // PAGE) * PAGE for raw in raws)
    # the data starts on the page after the head (its longest text: a shorter
    # number for "data" only shortens it; the checksum, a SHA-256 in hex, is
    # always 64 characters), so the file's length is known before the
    # checksum reads every byte: one over the cap costs nothing
    meta = {**meta, "bytes": size, "sum": "0" * 64, "data": 10**12}
    data_start = -(-(_HEAD.size + len(json.dumps(meta, separators=(",", ":")))) // PAGE) * PAGE
    length = data_start + size
    limit = cache_limit()
    if not size or length > limit // SHARE_OF_LIMIT:
        return False
    meta["sum"] = _checksum([_page_sums(r) for r in raws])
    meta["data"] = data_start
    text = json.dumps(meta, separators=(",", ":")).encode()
    key = root.key(create=True)
    if key is None:
        return False
    head = _HEAD.pack(magic, version, 0, len(text), length, bytes(32))
    head = head[:_TAG_AT] + _tag(key, name, head, text)
    tmp = None
    try:
        make_private_dirs(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{name[:16]}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(head + text + bytes(data_start - _HEAD.size - len(text)))
            for raw in raws:
                f.write(raw.data)
                f.write(bytes(-raw.size % PAGE))
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            remove(Path(tmp))
        root.unwritable(exc)
        return False
    account(root.path, length, limit, path)
    return True


class Writer(threading.Thread):
    """A write :func:`in_background` runs; :meth:`finish` has it start at once
    (one waiting for the compiles to end) and waits for it."""

    def __init__(self, run: Callable[[], None]) -> None:
        # Never a daemon, whoever starts it: a thread inherits its creator's
        # daemon flag, and the weights' copy is started by the ONNX reader's
        # daemon thread, so the exit could cut that write off (a partial
        # temporary file left behind and no copy: ConvNeXt-T's 115 MB here).
        super().__init__(target=run, name="stripeml-cache-write", daemon=False)
        self.hurry = threading.Event()

    def finish(self) -> None:
        self.hurry.set()
        self.join()


_writers: list[Writer] = []
_writers_lock = threading.Lock()

#: How long no compile must have run before a write waiting for the compiles
#: starts (a program's compile and its first call, which counts as one, are
#: microseconds apart).
SETTLE_S = 0.05


def in_background(fn: Callable[..., object], *args: object, after_compiles: bool = False) -> Writer:
    """Run ``fn(*args)`` (a layout file's or a weights copy's write) on a thread
    of its own, so that the first result does not wait for it (0.04-0.05 s
    each for ResNet-50's 138 MB of layouts and 94 MB of weights): the data are
    read-only arrays that nothing writes again.  Not a daemon thread: the
    interpreter waits for it at exit, so a file is written whole or not at all
    (written under a temporary name, then renamed).  A failure is a warning,
    never an error of the call that started it.  :func:`wait_writes` waits for
    them all; the thread is returned, to wait for this one (:meth:`Writer.finish`).

    ``after_compiles``: start once no compile has run in the process for
    :data:`SETTLE_S` (:func:`..gc_pause.wait_no_compile`; a program's first
    call counts as part of its compile), or when something finishes it: a
    write that pickles (holding the GIL) or creates many files (0.8-0.9 ms of
    system time each here) would otherwise slow that first call down."""

    def run() -> None:
        if after_compiles:
            _after_compiles(t.hurry)
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - a cache write must never break a call
            warnings.warn(
                f"stripeml cache: a background write failed ({exc})", RuntimeWarning, stacklevel=2
            )

    t = Writer(run)
    with _writers_lock:
        _writers[:] = [w for w in _writers if w.is_alive()]
        _writers.append(t)
    t.start()
    return t


def _after_compiles(hurry: threading.Event) -> None:
    while not hurry.is_set():
        if not gc_pause.wait_no_compile(SETTLE_S):
            continue  # a compile runs (hurry is checked again)
        if hurry.wait(SETTLE_S) or gc_pause.wait_no_compile(0):
            return


def wait_writes() -> None:
    """Return when every write :func:`in_background` started has finished (those
    waiting for the compiles to end start now)."""
    with _writers_lock:
        pending = list(_writers)
    for t in pending:
        t.finish()


def reject(label: str, path: Path, why: str, then: str) -> None:
    """Report a file that failed a check and remove it."""
    warnings.warn(
        f"stripeml {label}: ignoring corrupt or forged entry {path} ({why}); {then}",
        RuntimeWarning,
        stacklevel=4,
    )
    remove(path)


class LayoutStore:
    """The layout file of one compiled program (its cache key ``program_key``
    under the root ``directory``) for the kept temporaries ``kept`` (slot ->
    buffer): :meth:`load` maps them, :meth:`store` writes them."""

    def __init__(
        self,
        program_key: str,
        directory: str | os.PathLike[str] | None,
        kept: Mapping[int, RootBuffer],
    ) -> None:
        self.program_key = program_key
        self.root = CacheRoot(directory)
        self.kept = dict(kept)
        self.name: str | None = None  # set by load(): the file's name for these constants
        self.nbytes = sum(b.nbytes for b in self.kept.values())

    def path(self, name: str) -> Path:
        return self.root.path / FOLDER / f"{name}.layout"

    def _name(self, constants: Mapping[str, object]) -> str | None:
        from .provenance import fingerprint

        values = fingerprint(constants, max(self.nbytes // HASHED_SHARE, HASHED_FREELY))
        if values is None:
            return None
        text = f"layouts\0{VERSION}\0{self.program_key}\0{values}"
        return hashlib.sha256(text.encode()).hexdigest()

    def _layout(self) -> list[tuple[int, str, str, int, int]]:
        """Per kept buffer, in slot order: (slot, name, dtype, elements, offset);
        each starts on a page of its own."""
        out, at = [], 0
        for slot in sorted(self.kept):
            b = self.kept[slot]
            out.append((slot, b.info.name, b.dtype.str, b.extent, at))
            at += -(-b.nbytes // PAGE) * PAGE
        return out

    # -- reading -------------------------------------------------------------

    def load(self, constants: Mapping[str, object]) -> dict[int, np.ndarray] | None:
        """The kept temporaries (slot -> read-only flat array) mapped from the file
        for these constant values, or None (absent, unusable, or the root refused:
        the caller computes them)."""
        self.name = None
        if not hasattr(mmap, "MAP_PRIVATE"):  # Windows: computed at every start
            return None
        if self.nbytes < max(1, MIN_BYTES) or self.nbytes > cache_limit() // SHARE_OF_LIMIT:
            return None  # (computed: cheaper, or never stored)
        if not self.root.usable():
            return None
        name = self._name(constants)
        if name is None:
            return None
        self.name = name
        path = self.path(name)
        try:
            fd = open_file(path)
        except OSError as exc:
            reject("layout cache", path, f"cannot open it: {exc}", "it will be rebuilt")
            return None
        if fd is None:
            return None
        try:
            found = self._map(fd, name)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            reject("layout cache", path, str(exc), "it will be rebuilt")
            return None
        finally:
            os.close(fd)
        touch(path)
        return found

    def _map(self, fd: int, name: str) -> dict[int, np.ndarray]:
        info, mm, _ = map_checked(fd, self.root, name, MAGIC, VERSION, writable=True)
        layout = self._layout()
        if info["buffers"] != [[n, dt, extent, off] for _, n, dt, extent, off in layout]:
            raise ValueError("its buffers are not this program's")
        start = int(info["data"])
        out = {}
        for slot, _, dt, extent, off in layout:
            arr = np.frombuffer(mm, np.dtype(dt), extent, start + off)
            arr.setflags(write=False)
            out[slot] = arr
        return out

    # -- writing -------------------------------------------------------------

    def store(self, arrays: Mapping[int, np.ndarray]) -> bool:
        """Write ``arrays`` (slot -> the kept temporary computed) to the file that
        :meth:`load` looked for; False when not stored (no name, too large for the
        limit, the root refused or unwritable)."""
        name = self.name
        if name is None or set(arrays) != set(self.kept):
            return False
        layout = self._layout()
        raws = []
        for slot, _, dt, extent, _ in layout:
            arr = np.ascontiguousarray(arrays[slot]).reshape(-1)
            if arr.dtype != np.dtype(dt) or arr.size != extent:
                return False
            raws.append(arr.view(np.uint8))
        meta = {"buffers": [[n, dt, extent, off] for _, n, dt, extent, off in layout]}
        return write_file(self.root, self.path(name), name, MAGIC, VERSION, meta, raws)
