"""Where the disk cache lives and whether to trust it: the root folder, its
private creation, its owner and mode checks, and its secret key.

The root is ``$STRIPEML_CACHE_DIR``, else ``$XDG_CACHE_HOME/stripeml``, else
``~/.cache/stripeml`` (:func:`default_cache_dir`; the environment is read here,
in the runtime, never in passes).  It and its entry folders are created with
mode ``0700`` whatever the umask; a root or entry folder that is not owned by
the user or that others may write to, or a key file that is not the user's own
``0600`` regular file of 32 bytes, is refused with one warning per process and
stripeml runs without the disk cache.  The key (``ROOT/key``, 32 random bytes
from :mod:`secrets`) authenticates every entry (:mod:`.cache_store`).  The
threat model is in ``docs/cpu-backend.md`` ("Who the cache trusts").
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import tempfile
import warnings
from pathlib import Path

KEY_FILE = "key"
KEY_BYTES = 32
#: The entry folders under the root and the suffix of their entry files (runtime/:
#: the native thread pool's own object code; pipelines/: target pipelines that
#: validated, so a warm start need not build the passes; models/: ONNX models
#: that validated, so a warm start need not check them again; folds/: what
#: constant programs computed on the interpreter, so a warm start need not fold
#: a model's constants again; lengths/: which sizes of a model with symbolic
#: dimensions its first program masks, so a warm start need not import it at a
#: probe length, :mod:`stripeml.onnx.lengths`; facts/: what the CPU runtime learned of a
#: compiled program at its second call, so a later process need not analyse
#: it again; layouts/: the constant layouts a program keeps, mapped at a warm
#: start, :mod:`.kept_layouts`; weights/: copies of model files' weights, mapped
#: at a warm start instead of read, :mod:`.weight_copies`).
FOLDERS = {
    "cpu": ".kernel",
    "bodies": ".body",
    "programs": ".stripe",
    "runtime": ".kernel",
    "pipelines": ".pipeline",
    "models": ".model",
    "folds": ".fold",
    "lengths": ".lengths",
    "facts": ".facts",
    "layouts": ".layout",
    "weights": ".weights",
}
_WARNED: set[tuple[str, str]] = set()  # (root, what) already reported by this process


def default_cache_dir() -> Path:
    """``$STRIPEML_CACHE_DIR``, else ``$XDG_CACHE_HOME/stripeml``, else ``~/.cache/stripeml``."""
    explicit = os.environ.get("STRIPEML_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "stripeml"


def warn_once(about: str, what: str, message: str) -> None:
    """``warnings.warn(message)`` the first time this process reports ``what`` about ``about``."""
    if (about, what) in _WARNED:
        return
    _WARNED.add((about, what))
    warnings.warn(f"stripeml disk cache: {message}", RuntimeWarning, stacklevel=4)


# -- trust -------------------------------------------------------------------


def _uid() -> int:
    """The user the cache must belong to (tests replace this to play another user)."""
    return os.geteuid()


def untrusted_reason(st: os.stat_result, *, secret: bool = False) -> str | None:
    """Why a folder (or, with ``secret``, the key file) with status ``st`` must
    not be trusted, or None.  POSIX only: on Windows modes and owners are not
    what ``os.stat`` reports, and the check is skipped (see docs/cpu-backend.md)."""
    if os.name == "nt":
        return None
    uid = _uid()
    if st.st_uid != uid:
        return f"it is owned by uid {st.st_uid}, not by you (uid {uid})"
    mode = stat.S_IMODE(st.st_mode)
    if secret:
        if not stat.S_ISREG(st.st_mode):
            return "it is not a regular file"
        if mode & 0o077:
            return f"its mode is {mode:04o}: others may read or change the key (it must be 0600)"
    else:
        if not stat.S_ISDIR(st.st_mode):
            return "it is not a folder"
        if mode & 0o022:
            return f"its mode is {mode:04o}: others may write to it (`chmod go-w` fixes that)"
    return None


def folder_problem(root: Path) -> str | None:
    """Why the root folder or one of its entry folders is not trusted, or None
    (also when the root does not exist yet: it will be created private)."""
    for path in (root, *(root / f for f in FOLDERS)):
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            return f"cannot inspect {path}: {exc}"
        reason = untrusted_reason(st)
        if reason is not None:
            return reason if path == root else f"its {path.name}/ folder: {reason}"
    return None


class BadKey(Exception):
    """The key file exists but cannot be used (the message says why)."""


def read_key(root: Path) -> bytes | None:
    """The root's secret key; None when there is none yet; :class:`BadKey` when
    the file is unusable (not ours, readable by others, a link, the wrong size)."""
    path = root / KEY_FILE
    try:
        # O_NOFOLLOW: a link in place of the key is refused, not followed;
        # O_NONBLOCK: a FIFO there does not hang the open (fstat then refuses it).
        flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadKey(f"the key file {path}: it is a symbolic link") from None
        raise BadKey(f"cannot open the key file {path}: {exc}") from None
    try:
        reason = untrusted_reason(os.fstat(fd), secret=True)
        if reason is not None:
            raise BadKey(f"the key file {path}: {reason}")
        data = os.read(fd, KEY_BYTES + 1)
    except OSError as exc:
        raise BadKey(f"cannot read the key file {path}: {exc}") from None
    finally:
        os.close(fd)
    if len(data) != KEY_BYTES:
        raise BadKey(f"the key file {path} holds {len(data)} bytes, not {KEY_BYTES}")
    return data


def make_private_dirs(path: Path) -> None:
    """Create ``path`` and any missing parents with mode 0700 (whatever the umask)."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for p in reversed(missing):
        try:
            os.mkdir(p, 0o700)
        except FileExistsError:
            continue  # made by a concurrent process: the trust check looks at it
        os.chmod(p, 0o700)  # mkdir's mode is masked by the umask


def _create_key(root: Path) -> None:
    """Write a fresh key unless another process got there first: the key is
    written whole to a temporary file, then hard-linked into place, so no
    reader ever sees part of a key and a key in place is never replaced."""
    fd, tmp = tempfile.mkstemp(prefix=".key.", suffix=".tmp", dir=root)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, root / KEY_FILE)
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: create-if-absent instead
            try:
                out = os.open(root / KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return
            with os.fdopen(out, "wb") as f:
                f.write(Path(tmp).read_bytes())
    finally:
        remove(Path(tmp))


def remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


class CacheRoot:
    """One cache root as one cache object uses it: checked at the first use (a
    refusal warns once per process), the key read once and created on the
    first write."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(directory) if directory is not None else default_cache_dir()
        self._key: bytes | None = None
        self._usable: bool | None = None  # None: not checked yet

    def usable(self) -> bool:
        """Whether the root is trusted (and not turned off by a failed write)."""
        if self._usable is None:
            problem = folder_problem(self.path)
            if problem is None:
                try:
                    self._key = read_key(self.path)
                except BadKey as exc:
                    problem = str(exc)
            if problem is None:
                self._usable = True
            else:
                self.refuse(problem)
        return bool(self._usable)

    def key(self, create: bool = False) -> bytes | None:
        """The secret key; with ``create``, the root and a key are made if missing.
        None when the root is not usable (or, without ``create``, has no key yet)."""
        if not self.usable():
            return None
        if self._key is None and create:
            try:
                make_private_dirs(self.path)
                problem = folder_problem(self.path)  # someone else may have made it first
                if problem is not None:
                    self.refuse(problem)
                    return None
                _create_key(self.path)
                self._key = read_key(self.path)
            except BadKey as exc:
                self.refuse(str(exc))
                return None
            except OSError as exc:
                self.unwritable(exc)
                return None
        return self._key

    def refuse(self, problem: str) -> None:
        """Stop using the root because it is not trusted (one warning per root and process)."""
        self._usable = False
        warn_once(
            str(self.path),
            problem,
            f"not using the cache folder {self.path}: {problem}; continuing without a disk "
            "cache (`stripeml cache --info` shows its state)",
        )

    def unwritable(self, exc: OSError) -> None:
        """Stop using the root because it cannot be written (one warning per root and process)."""
        self._usable = False
        warn_once(
            str(self.path),
            "unwritable",
            f"cannot write to {self.path} ({exc}); continuing without a disk cache",
        )
