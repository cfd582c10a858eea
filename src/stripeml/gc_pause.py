"""Python's cyclic garbage collector paused while stripeml compiles.

A compile allocates a few hundred thousand objects that live on (the IR of
every pass, the compiled programs, the importer's values), and almost none of
them are cyclic garbage.  With the collector running, each young collection
walks those survivors again, and the full collections that their growth
triggers walk everything the process holds: 0.11-0.28 s of a BERT-base
compile (``gc.callbacks``, 2026-12-02), more at each later input shape as the
cached programs grow.  :func:`paused` turns the collector off for the
compile and back on when the last compile of the process ends, only if it was
on when the first began (a process that turned it off keeps it off).  Reference
counting still frees everything that is not in a cycle; the cycles a compile
leaves (llvmlite's IR objects point at their parents) are collected at the
first collection after it.  Nothing computed depends on it.

``STRIPEML_GC=on`` leaves the collector alone (to compare, or for a program
that must never have it off).
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused"]

_lock = threading.Lock()
_depth = 0  # compiles running in the process (any thread), nested ones counted
_restore = False  # whether the collector was on when the outermost one began


@contextmanager
def paused() -> Iterator[None]:
    """The collector off while the block runs (module docstring)."""
    global _depth, _restore
    if os.environ.get("STRIPEML_GC") == "on":
        yield
        return
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore:
                gc.enable()
