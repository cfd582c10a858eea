"""The in-memory caches of compiled signatures, bounded in bytes, least recently
used first out.

A ``stripeml.Function`` keeps one executable per input signature it has seen,
and ``stripeml.onnx`` one specialised program per input shape: a server that
sees many shapes would otherwise keep every one.  :class:`SignatureCache`
holds them under a byte budget (``$STRIPEML_MEMORY_LIMIT``, default 2 GiB;
the same size syntax as ``STRIPEML_CACHE_LIMIT``: ``512M``, ``4GiB``), counting
what each entry's owner reports (an executable: the bytes of its program's
temporaries, an upper bound of its arena and its constant layouts, and of its
results).  A hit moves the entry to the back; an insert evicts from the front
until the rest fits (sizes as reported then), but the newest entry always stays.  An evicted entry is
compiled again when its signature returns (from the disk cache, where there
is one).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from .cache_store import size_from_env

__all__ = ["DEFAULT_MEMORY_LIMIT", "MEMORY_LIMIT_ENV", "SignatureCache", "memory_limit"]

MEMORY_LIMIT_ENV = "STRIPEML_MEMORY_LIMIT"
DEFAULT_MEMORY_LIMIT = 2 << 30

V = TypeVar("V")


def memory_limit() -> int:
    """``$STRIPEML_MEMORY_LIMIT`` in bytes, or the default (2 GiB)."""
    return size_from_env(MEMORY_LIMIT_ENV, DEFAULT_MEMORY_LIMIT)


class SignatureCache(Generic[V]):
    """``get``/``put`` by key with a byte budget (see the module docstring)."""

    def __init__(self, size_of: Callable[[V], int], limit: int | None = None) -> None:
        self._size_of = size_of
        self._limit = limit
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        return memory_limit() if self._limit is None else self._limit

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found

    def put(self, key: Hashable, value: V) -> None:
        """Insert ``value`` (newest), then evict the oldest entries while the sizes
        their owners report now (an entry may grow after its insert: a model's
        program compiles at its first call) pass the limit."""
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = value
            sizes = {k: max(0, int(self._size_of(v))) for k, v in self._entries.items()}
            total = sum(sizes.values())
            limit = self.limit
            while total > limit and len(self._entries) > 1:
                gone, _ = self._entries.popitem(last=False)
                total -= sizes[gone]

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    @property
    def nbytes(self) -> int:
        """The bytes the entries are counted at now."""
        with self._lock:
            return sum(max(0, int(self._size_of(v))) for v in self._entries.values())
