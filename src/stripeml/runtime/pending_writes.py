"""Cache entries a compile made, written on a thread of their own once the
compile and the program's first call are done (:func:`.kept_layouts.in_background`,
``after_compiles``), and what a read of them meanwhile finds.

Creating a file cost 0.8-0.9 ms of system time here: the light ResNet-50's
74 bodies and its pickled program were 0.06-0.10 s of its cold compile's main
thread, and written beside its first call they made that call 0.20-0.22 ->
0.27-0.34 s.  A kernel entry not yet written is found in memory
(:func:`unwritten`, :meth:`.kernel_cache.KernelCache.get`: the next input
shape's compile finds the bodies it shares without waiting); a read of a
program entry still being written starts its write and waits for it
(:func:`finish`, :class:`.kernel_cache.ProgramCache`).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .kept_layouts import Writer


class Store(Protocol):
    """What :func:`put_later` writes to: a kernel cache (bodies), or
    :class:`.cache_store.Remembered` (facts such as folded constants)."""

    def path(self, key: Any) -> Path: ...

    def put(self, key: Any, value: Any) -> object: ...


__all__ = ["finish", "put_later", "unwritten", "write_later"]

_LOCK = threading.Lock()
_UNWRITTEN: dict[str, Any] = {}  # entries put_later has yet to write, by file
_WRITING: dict[str, Writer] = {}  # the threads of write_later, by file
# What put_later was given and no thread has taken yet, and whether a thread
# (waiting for the compiles to end, or writing) will take it.
_QUEUE: list[tuple[str, Store, Any, Any]] = []
_DRAINING = False


def put_later(writes: Sequence[tuple[Store, Any, Any]]) -> None:
    """``cache.put(key, entry)`` for each of ``writes``, on a thread of its own,
    once no compile runs; until each is written :func:`unwritten` finds it.

    One thread at a time writes every entry put meanwhile: a new input shape
    of BERT-base folds a dozen nodes, each of whose results is put here, and
    a thread was started for each (19 writer threads alive after its first
    call, 3 now; the next shape's compile, coming at once, took as long
    either way within the noise)."""
    global _DRAINING
    from .kept_layouts import in_background

    if not writes:
        return
    files = [(os.fspath(cache.path(key)), cache, key, entry) for cache, key, entry in writes]
    with _LOCK:
        for path, _, _, entry in files:
            _UNWRITTEN[path] = entry
        _QUEUE.extend(files)
        start, _DRAINING = not _DRAINING, True
    if start:
        in_background(_drain, after_compiles=True)


def _forked() -> None:
    """In a forked child: the parent's writer is not there (nor any thread that
    held the lock), and the parent writes what it queued."""
    global _DRAINING, _LOCK
    _LOCK = threading.Lock()
    _QUEUE.clear()
    _DRAINING = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _drain() -> None:
    """Write what :func:`put_later` queued until the queue is empty."""
    global _DRAINING
    while True:
        with _LOCK:
            if not _QUEUE:
                _DRAINING = False
                return
            batch = list(_QUEUE)
            _QUEUE.clear()
        for path, cache, key, entry in batch:
            try:
                cache.put(key, entry)
            except Exception as exc:  # noqa: BLE001 - never a call's error; the others still written
                warnings.warn(
                    f"stripeml cache: a background write failed ({exc})",
                    RuntimeWarning,
                    stacklevel=2,
                )
            finally:
                with _LOCK:
                    if _UNWRITTEN.get(path) is entry:
                        del _UNWRITTEN[path]


def unwritten(path: str | os.PathLike[str]) -> Any:
    """The entry :func:`put_later` has yet to write to ``path``, or None."""
    with _LOCK:
        return _UNWRITTEN.get(os.fspath(path))


def write_later(path: str | os.PathLike[str], fn: Callable[..., object], *args: object) -> None:
    """``fn(*args)``, which writes ``path``, on a thread of its own once no compile
    runs; :func:`finish` of ``path`` meanwhile starts it and waits."""
    from .kept_layouts import in_background

    with _LOCK:
        for done in [p for p, w in _WRITING.items() if not w.is_alive()]:
            del _WRITING[done]
        _WRITING[os.fspath(path)] = in_background(fn, *args, after_compiles=True)


def finish(path: str | os.PathLike[str]) -> None:
    """Return once a :func:`write_later` of ``path`` is done (started now if it waits)."""
    with _LOCK:
        writing = _WRITING.get(os.fspath(path))
    if writing is not None:
        writing.finish()
