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

A call that compiles a new signature (:class:`stripeml.api.Function`, the ONNX
frontend's function) holds one pause from its import to the end of its first
call.  Held step by step, each step's end let the collector walk what the step
made (a BERT-base's next sequence length: a young collection of 5-12 ms at
each of two ends) and let background work start a piece between the steps.

``STRIPEML_GC=on`` leaves the collector alone (to compare, or for a program
that must never have it off).

The same count tells background work when no compile runs
(:func:`wait_no_compile`, counted whatever ``STRIPEML_GC`` says; the CPU
runtime counts a compiled program's first call as part of its compile,
``runtime.cpu_run``): the runtime's huge-page promotion of a model's weights
(``runtime.kept_pages``) waits for it between pieces.  Collapsing
BERT-base's 440 MB took 1.0-1.3 s of kernel time in one thread; running
beside the compile of the next input shape, it made that compile 0.85-0.98 s
or 1.2-1.4 s by turns (0.57-0.89 s when it was done first).
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused", "wait_no_compile"]

_lock = threading.Lock()
_depth = 0  # compiles running in the process (any thread), nested ones counted
# whether the outermost compile turned the collector off (it was on, and
# STRIPEML_GC did not say to leave it alone)
_restore = False
_none_running = threading.Event()  # set while _depth is 0
_none_running.set()


@contextmanager
def paused(active: bool = True) -> Iterator[None]:
    """The collector off while the block runs, and the block counted as a compile
    (module docstring); nothing when ``active`` is false (a caller that compiles
    only on a cache miss: its import, compile and first call then count as one
    compile, with no gap between them for a collection or background work)."""
    global _depth, _restore
    if not active:
        yield
        return
    leave_alone = os.environ.get("STRIPEML_GC") == "on"
    with _lock:
        if _depth == 0:
            _restore = not leave_alone and gc.isenabled()
            if _restore:
                gc.disable()
            _none_running.clear()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                if _restore:
                    gc.enable()
                _none_running.set()


def wait_no_compile(timeout: float | None = None) -> bool:
    """Return once no compile runs in the process (at once when none does);
    ``False`` when ``timeout`` seconds passed first."""
    return _none_running.wait(timeout)
