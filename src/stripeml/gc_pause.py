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
counting still frees everything that is not in a cycle.  Nothing computed
depends on it.

**The survivors skip the young generations.**  When the collector comes back
on, what the compile left (every object the collector tracks at that moment)
is moved to Python's permanent generation (``gc.freeze``) instead of being
walked by the first young collection and again by the full collection its
growth triggers (BERT-base at a second sequence length: 0.07-0.12 s of the
second compile at load 1.2, a young collection at the end of the import and
a full one at the end of the compile).  At the start of the next full collection (a ``gc.callbacks``
hook: the collector's own heuristic, or any ``gc.collect()``) they are put
back into the oldest generation (``gc.unfreeze``) and that collection walks
them: the cycles a compile leaves (llvmlite's IR objects point at their
parents) are collected there, and a tool that calls ``gc.collect()`` before
``gc.get_objects()`` or ``gc.get_referrers()`` sees every object, as before.
Until then, those functions do not list the frozen objects.  The permanent
generation is left alone when anyone else put objects there (a process that
calls ``gc.freeze()`` before forking keeps its own), once more than
:data:`FREEZE_LIMIT` objects are frozen (they are then put back, and the
collector's heuristics run as usual), and on Python 3.14 and later (the
incremental collector).

``STRIPEML_GC=on`` leaves the collector alone (to compare, or for a program
that must never have it off).
"""

from __future__ import annotations

import gc
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FREEZE_LIMIT", "paused"]

_lock = threading.Lock()
_depth = 0  # compiles running in the process (any thread), nested ones counted
_restore = False  # whether the collector was on when the outermost one began

#: At most this many objects are kept frozen between full collections (about
#: 100-200 MB of Python objects); beyond it a compile's survivors go through the
#: young generations as usual.
FREEZE_LIMIT = 2_000_000
_FREEZES = sys.version_info < (3, 14)
_frozen = 0  # gc.get_freeze_count() right after this module froze; 0: none of ours
_hooked = False  # _thaw is in gc.callbacks


def _thaw(phase: str, info: dict[str, int]) -> None:
    """``gc.callbacks``: at the start of a full collection, what this module froze
    goes back into the oldest generation, so that collection walks it.  (No lock:
    a collection may start while this thread holds ``_lock``.)"""
    global _frozen
    if phase != "start" or info.get("generation") != 2 or not _frozen:
        return
    if gc.get_freeze_count() <= _frozen:  # only ours there (some may have died since)
        gc.unfreeze()
    _frozen = 0


def _freeze_survivors() -> None:
    """Move every object the collector tracks into the permanent generation
    (called as the collector comes back on, with ``_lock`` held)."""
    global _frozen, _hooked
    if not _FREEZES:
        return
    count = gc.get_freeze_count()
    if count > _frozen:  # someone else froze objects: leave theirs alone
        _frozen = 0
        return
    if count > FREEZE_LIMIT:
        gc.unfreeze()  # ours only (checked above): the usual heuristics from here
        _frozen = 0
        return
    if not _hooked:
        gc.callbacks.append(_thaw)
        _hooked = True
    gc.freeze()
    _frozen = gc.get_freeze_count()


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
                _freeze_survivors()
                gc.enable()
