"""The disk cache's entry files: authenticated, size-bounded, evicted least
recently used first.

Entry file layout (integers little-endian), the same for every kind::

    magic    8 bytes  the kind: b"STRPMLK\\0" kernels, b"STRPMLP\\0" program texts,
                      b"STRPMLV\\0" pipelines, b"STRPMLM\\0" models, b"STRPMLF\\0"
                      folds, b"STRPMLL\\0" program facts
    version  u32      the format version
    length   u64      payload length in bytes
    tag      32 bytes HMAC-SHA256(key, b"stripeml\\0" name b"\\0" magic version length payload)
    payload

(The kept layouts, ``layouts/``, and the weights' copies, ``weights/``, too
large to tag whole, have a layout of their own: :mod:`.kept_layouts`,
:mod:`.weight_copies`.)  The tag binds the entry's content to its name (the
cache key) under the root's secret key (:mod:`.cache_root`); it is checked
with :func:`hmac.compare_digest` before the payload is parsed or loaded as
code.  A use touches the entry's
mtime; writes evict the entries, oldest mtime first, down to :func:`cache_limit`
(``$STRIPEML_CACHE_LIMIT``, default 4 GiB): see :func:`account`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
import struct
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from . import pending_writes
from .cache_root import (
    FOLDERS,
    KEY_FILE,
    BadKey,
    CacheRoot,
    default_cache_dir,
    folder_problem,
    make_private_dirs,
    read_key,
    remove,
    warn_once,
)

HEADER = struct.Struct("<8sIQ32s")
_TAG_AT = HEADER.size - 32  # the tag is the header's last field
#: 4 GiB: room for a transformer of BERT-base's or GPT-2's size (its weights'
#: copy and layouts, 435 + 340 MB, each under a quarter of it) beside the
#: compiled code of many models; 1 GiB before 2026-12-07 left such a model
#: without either, its warm start 0.54-0.56 s instead of 0.30-0.33 s
#: (docs/performance.md, "Warm starts of models over 256 MB").
DEFAULT_LIMIT = 4 << 30
LIMIT_ENV = "STRIPEML_CACHE_LIMIT"
#: A temporary file older than this is left over by a writer that died.
STALE_TEMP_S = 3600.0
#: A process lists the folders again after this many writes or seconds (see
#: :func:`account`): listing them at every write costs O(entries) per write,
#: 15 ms per thousand entries here, which a test suite's thousands of compiles
#: into one cache would pay quadratically.
RESCAN_WRITES = 64
RESCAN_S = 30.0
#: root -> (bytes at the last listing plus this process's writes since,
#: writes since, monotonic time of the listing)
_TALLY: dict[Path, tuple[int, int, float]] = {}
_UNITS = "_kmgt"
_SIZE = re.compile(r"([0-9]+)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)


def parse_size(text: str) -> int | None:
    """Bytes of ``1073741824``, ``512M``, ``2GiB``, ``64k`` (binary units); None if not a size."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        return None
    return int(m[1]) * 1024 ** _UNITS.index(m[2].lower() or "_")


def size_from_env(variable: str, default: int) -> int:
    """``$variable`` as a size (:func:`parse_size`), or ``default`` when unset; a value
    that is not a size is warned about (once) and the default."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    limit = parse_size(text)
    if limit is None:
        warn_once(
            variable,
            text,
            f"{variable}={text!r} is not a size (bytes, or a number with K, M, G or T); "
            f"using the default limit of {format_bytes(default)}",
        )
        return default
    return limit


def cache_limit() -> int:
    """The most bytes the entries may take: ``$STRIPEML_CACHE_LIMIT`` or 4 GiB; 0 stores nothing."""
    return size_from_env(LIMIT_ENV, DEFAULT_LIMIT)


def format_bytes(n: int) -> str:
    """``1.0 GiB``, ``3.4 MiB``, ``512 B``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


# -- the envelope ------------------------------------------------------------


def pack(magic: bytes, version: int, payload: bytes) -> bytes:
    """An entry file with a blank tag (:func:`seal` signs it)."""
    return HEADER.pack(magic, version, len(payload), bytes(32)) + payload


def check_envelope(data: bytes, magic: bytes, version: int) -> bytes:
    """The payload of ``data``; ValueError saying what is wrong with its header."""
    if len(data) < HEADER.size:
        raise ValueError(f"truncated header ({len(data)} bytes)")
    got_magic, got_version, length, _ = HEADER.unpack_from(data)
    if got_magic != magic:
        raise ValueError("bad magic")
    if got_version != version:
        raise ValueError(f"format version {got_version}, expected {version}")
    payload = data[HEADER.size :]
    if len(payload) != length:
        raise ValueError(f"payload is {len(payload)} bytes, header says {length}")
    return payload


def _tag(key: bytes, name: str, data: bytes) -> bytes:
    mac = hmac.new(key, b"stripeml\0" + name.encode() + b"\0", hashlib.sha256)
    mac.update(data[:_TAG_AT])
    mac.update(data[HEADER.size :])
    return mac.digest()


def seal(key: bytes, name: str, data: bytes) -> bytes:
    """``data`` (from :func:`pack`) with its tag for entry ``name`` under ``key``."""
    return data[:_TAG_AT] + _tag(key, name, data) + data[HEADER.size :]


def authentic(key: bytes, name: str, data: bytes) -> bool:
    """Whether ``data``'s tag is the one ``key`` gives entry ``name``."""
    return hmac.compare_digest(data[_TAG_AT : HEADER.size], _tag(key, name, data))


def touch(path: Path) -> None:
    """Record a use of an entry (its mtime is what eviction orders by)."""
    try:
        os.utime(path)
    except OSError:
        pass  # evicted meanwhile, or a read-only cache: the use is just not recorded


class EntryFolder:
    """Authenticated entries of one kind (``folder`` under the root), by name."""

    def __init__(
        self, root: CacheRoot, folder: str, magic: bytes, version: int, label: str
    ) -> None:
        self.root = root
        self.directory = root.path / folder
        self.suffix = FOLDERS[folder]
        self.magic = magic
        self.version = version
        self.label = label  # "kernel cache", "program cache": how warnings name us

    def path(self, name: str) -> Path:
        return self.directory / f"{name}{self.suffix}"

    def load(self, name: str) -> bytes | None:
        """The file bytes of entry ``name`` once its tag is checked; None when it
        is absent or the root is refused; a corrupt or unauthentic file is
        reported, removed and None."""
        if not self.root.usable():
            return None
        path = self.path(name)
        try:
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            self.warn(f"cannot read {path}: {exc}")
            return None
        try:
            check_envelope(data, self.magic, self.version)
        except ValueError as exc:
            self.reject(path, str(exc))
            return None
        key = self.root.key()
        if key is None or not authentic(key, name, data):
            self.reject(path, "its HMAC does not match this cache's key: changed on disk or forged")
            return None
        touch(path)
        return data

    def store(self, name: str, data: bytes) -> bool:
        """Sign ``data`` (from :func:`pack`) and publish it atomically, then evict
        down to the limit; False when the root is refused, unwritable or the
        entry alone is over the limit."""
        key = self.root.key(create=True)
        limit = cache_limit()
        if key is None or len(data) > limit:
            return False
        tmp_name = None
        try:
            make_private_dirs(self.directory)
            fd, tmp_name = tempfile.mkstemp(
                prefix=f".{name[:16]}.", suffix=".tmp", dir=self.directory
            )
            with os.fdopen(fd, "wb") as f:
                f.write(seal(key, name, data))
            os.replace(tmp_name, self.path(name))
        except OSError as exc:
            if tmp_name is not None:
                remove(Path(tmp_name))
            self.root.unwritable(exc)
            return False
        account(self.root.path, len(data), limit, self.path(name))
        return True

    def reject(self, path: Path, why: str) -> None:
        self.warn(f"ignoring corrupt or forged entry {path} ({why}); it will be rebuilt")
        remove(path)

    def warn(self, message: str) -> None:
        warnings.warn(f"stripeml {self.label}: {message}", RuntimeWarning, stacklevel=4)


class Remembered:
    """Small facts kept in the cache by key bytes: an entry named by the key's
    SHA-256 in ``folder`` under the default root (read at each use, so
    ``$STRIPEML_CACHE_DIR`` may change), authenticated like every entry, whose
    payload starts with that SHA-256 (compared) and goes on with the fact.  An
    untrusted root remembers nothing.  What the ONNX frontend keeps of the
    models that validated (``stripeml.onnx.validated``)."""

    VERSION = 1

    def __init__(self, folder: str, magic: bytes, label: str, root: Path | None = None) -> None:
        self.folder, self.magic, self.label = folder, magic, label
        self.root = root  # None: the default root, read at each use

    def _entries(self) -> EntryFolder:
        return EntryFolder(CacheRoot(self.root), self.folder, self.magic, self.VERSION, self.label)

    def get(self, key: bytes) -> bytes | None:
        """The fact remembered for ``key``, or None."""
        digest = hashlib.sha256(key).digest()
        entries = self._entries()
        pending = pending_writes.unwritten(entries.path(digest.hex()))
        if pending is not None:
            return pending
        data = entries.load(digest.hex())
        if data is None:
            return None
        try:
            payload = check_envelope(data, self.magic, self.VERSION)
        except ValueError:
            return None
        if bytes(payload[: len(digest)]) != digest:
            return None
        return bytes(payload[len(digest) :])

    def put(self, key: bytes, fact: bytes) -> None:
        """Remember ``fact`` for ``key`` (nothing when the cache cannot be written)."""
        digest = hashlib.sha256(key).digest()
        self._entries().store(digest.hex(), pack(self.magic, self.VERSION, digest + fact))

    def path(self, key: bytes) -> Path:
        """The file of ``key``'s entry under the root in use now."""
        return self._entries().path(hashlib.sha256(key).hexdigest())

    def put_later(self, key: bytes, fact: bytes) -> None:
        """:meth:`put`, on a thread of its own once no compile runs
        (:func:`.pending_writes.put_later`, as the kernel cache's bodies); until
        then :meth:`get` in this process finds it in memory.  A BERT-base's
        second sequence length folds a dozen shape computations again, whose
        writes took 0.012-0.025 s of its compile in line."""
        here = Remembered(self.folder, self.magic, self.label, self.root or default_cache_dir())
        pending_writes.put_later([(here, key, fact)])  # written under today's root


# -- size ----------------------------------------------------------------------


class EntryFile(NamedTuple):
    """An entry file as listed: enough to order it and to notice a later change."""

    folder: str
    path: str  # a string, not a Path: a listing makes thousands (half its time as Paths)
    name: str
    size: int
    mtime_ns: int
    ino: int


def scan(root: Path, clean: bool = True) -> list[EntryFile]:
    """Every entry file under ``root``; with ``clean``, temporary files that a
    writer left behind more than :data:`STALE_TEMP_S` ago are removed."""
    found = []
    stale = time.time() - STALE_TEMP_S
    for folder, suffix in FOLDERS.items():
        try:
            listing = list(os.scandir(root / folder))
        except OSError:
            continue
        for item in listing:
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue  # removed meanwhile
            if item.name.startswith("."):
                if clean and item.name.endswith(".tmp") and st.st_mtime < stale:
                    remove(Path(item.path))
            elif item.name.endswith(suffix) and stat.S_ISREG(st.st_mode):
                found.append(
                    EntryFile(folder, item.path, item.name, st.st_size, st.st_mtime_ns, st.st_ino)
                )
    return found


def account(root: Path, size: int, limit: int, keep: Path) -> None:
    """After this process wrote an entry of ``size`` bytes (``keep``): evict
    down to ``limit`` at its first write to ``root``, and then whenever its
    writes since the last listing would take the total past the limit, or
    :data:`RESCAN_WRITES` writes or :data:`RESCAN_S` seconds have passed
    (what other processes wrote in between is found at the next listing)."""
    now = time.monotonic()
    tally = _TALLY.get(root)
    if tally is not None:
        total, writes, when = tally
        if total + size <= limit and writes < RESCAN_WRITES and now - when < RESCAN_S:
            _TALLY[root] = (total + size, writes + 1, when)
            return
    _TALLY[root] = (evict(root, limit, keep), 0, now)


def evict(root: Path, limit: int, keep: Path | None = None) -> int:
    """Remove the least recently used entries (oldest mtime first) until all
    take at most ``limit`` bytes, never ``keep``; returns the bytes that remain.

    Safe while other processes use the cache: an entry is unlinked whole (a
    reader that opened it still reads all of it; a later one finds no file,
    a miss), and an entry whose mtime or inode changed since the listing (used,
    or republished by a writer) is left alone.
    """
    entries = scan(root)
    total = sum(e.size for e in entries)
    if total <= limit:
        return total
    kept = None if keep is None else os.fspath(keep)
    for e in sorted(entries, key=lambda e: (e.mtime_ns, e.name)):
        if total <= limit:
            break
        if e.path == kept:
            continue
        try:
            st = os.stat(e.path, follow_symlinks=False)
            if (st.st_mtime_ns, st.st_ino) != (e.mtime_ns, e.ino):
                continue
            os.unlink(e.path)
        except OSError:
            continue
        total -= e.size
    return total


# -- what `stripeml cache` shows and does --------------------------------------------


@dataclass(frozen=True)
class CacheInfo:
    """The state of a cache root, as ``stripeml cache --info`` prints it."""

    root: Path
    exists: bool
    mode: int | None  # the root's permission bits; None when there is no root yet
    problem: str | None  # why the root or an entry folder is refused
    key_problem: str | None  # why the key file is refused
    has_key: bool
    entries: dict[str, tuple[int, int]]  # entry folder -> (entries, bytes)
    limit: int

    @property
    def trusted(self) -> bool:
        return self.problem is None and self.key_problem is None

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.entries.values())


def cache_info(directory: str | os.PathLike[str] | None = None) -> CacheInfo:
    """Where the cache is, whether it is trusted, what it holds; creates and removes nothing."""
    root = Path(directory) if directory is not None else default_cache_dir()
    try:
        st = os.stat(root)
        exists, mode = stat.S_ISDIR(st.st_mode), stat.S_IMODE(st.st_mode)
    except OSError:
        exists, mode = False, None
    key_problem = None
    try:
        has_key = read_key(root) is not None
    except BadKey as exc:
        has_key, key_problem = True, str(exc)
    entries = dict.fromkeys(FOLDERS, (0, 0))
    for e in scan(root, clean=False):
        count, size = entries[e.folder]
        entries[e.folder] = (count + 1, size + e.size)
    return CacheInfo(
        root, exists, mode, folder_problem(root), key_problem, has_key, entries, cache_limit()
    )


@dataclass(frozen=True)
class Cleared:
    """What :func:`clear_cache` removed."""

    entries: int
    bytes: int
    bad_key: bool  # an unusable key file was removed (a new key is made at the next write)


def clear_cache(directory: str | os.PathLike[str] | None = None) -> Cleared:
    """Remove every entry (and temporary files left by dead writers); keep a good
    key, so processes running now keep writing entries the next ones accept, and
    remove a key file that is refused (a key others could read is not fixed by a
    chmod: it is replaced).  PermissionError, removing nothing, when the root or
    an entry folder is not trusted: stripeml does not delete in folders not yours."""
    root = Path(directory) if directory is not None else default_cache_dir()
    problem = folder_problem(root)
    if problem is not None:
        raise PermissionError(f"refusing to clear {root}: {problem}")
    entries = freed = 0
    for e in scan(root, clean=True):
        try:
            os.unlink(e.path)
        except FileNotFoundError:
            continue  # evicted or cleared by another process meanwhile
        entries += 1
        freed += e.size
    bad_key = False
    try:
        read_key(root)
    except BadKey:
        os.unlink(root / KEY_FILE)
        bad_key = True
    return Cleared(entries, freed, bad_key)
