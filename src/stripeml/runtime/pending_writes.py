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


def put_later(writes: Sequence[tuple[Store, Any, Any]]) -> None:
    """``cache.put(key, entry)`` for each of ``writes``, on one thread, once no
    compile runs; until each is written :func:`unwritten` finds it."""
    from .kept_layouts import in_background

    if not writes:
        return
    files = [(os.fspath(cache.path(key)), cache, key, entry) for cache, key, entry in writes]
    with _LOCK:
        for path, _, _, entry in files:
            _UNWRITTEN[path] = entry

    def write() -> None:
        for path, cache, key, entry in files:
            try:
                cache.put(key, entry)
            finally:
                with _LOCK:
                    if _UNWRITTEN.get(path) is entry:
                        del _UNWRITTEN[path]

    in_background(write, after_compiles=True)


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
