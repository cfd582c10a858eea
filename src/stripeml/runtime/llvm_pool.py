"""Compile many LLVM modules on every core: this process and helper processes.

llvmlite holds one lock around every call into LLVM, so the only way to
compile two modules at once is a second process.  :func:`compile_modules`
hands a program's modules (its kernels' bodies, its wrappers) out one at a
time, the costliest first, to this thread and to each helper (:mod:`.llvm_worker`,
a script that imports only llvmlite), and returns the objects in the order
given.  Both sides make an object with the same functions and target machine
settings, so the bytes do not depend on who compiled a module; a test checks
it.  Whoever is free takes the pending module that will take LLVM longest
(:func:`cost`), so the costliest body is not left queued behind small ones
while the others finish and wait for it.

Helpers: ``$STRIPEML_COMPILE_WORKERS`` of them (default: one less than the
CPUs this process may use, at most 7; ``0`` compiles everything here).  They
start the first time a program has at least :data:`MIN_PARALLEL` modules to
compile (about 50 ms, while the code generator runs: :class:`Stream`), live
as long as the process and exit when it does (their input closes).  A helper
that fails to start, dies or answers nonsense is dropped with one warning and
its modules are compiled here; bad IR is an :class:`InternalError` either way.
"""

from __future__ import annotations

import atexit
import heapq
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import InternalError
from ..phases import phase
from . import jit, llvm_worker

__all__ = [
    "MIN_PARALLEL",
    "WORKERS_VARIABLE",
    "Stream",
    "compile_modules",
    "cost",
    "worker_count",
]

#: The environment variable that sets the number of helper processes.
WORKERS_VARIABLE = "STRIPEML_COMPILE_WORKERS"
#: Fewer modules than this are compiled here, without helpers.
MIN_PARALLEL = 4
_MAX_WORKERS = 7


def worker_count() -> int:
    """How many helpers to use (``$STRIPEML_COMPILE_WORKERS``, else CPUs - 1)."""
    text = os.environ.get(WORKERS_VARIABLE, "").strip()
    if text:
        try:
            return max(0, min(int(text), 64))
        except ValueError:
            warnings.warn(
                f"{WORKERS_VARIABLE}={text!r} is not a number: compiling without helpers",
                RuntimeWarning,
                stacklevel=3,
            )
            return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(0, min(cpus - 1, _MAX_WORKERS))


def cost(text: str, opt: int) -> float:
    """A guess at the seconds LLVM takes for the module ``text`` at level ``opt``
    (fitted on 300 modules of seven models: per module, per character and, at
    O2-O3, per loop, which the unrollers and vectorisers work on; the loops are
    counted by the code generator's ``.head.`` labels).  Only the order
    matters: a transformer's attention nest (0.17 s at O3) and its matmul with
    a GELU epilogue (0.04 s) have the same length of text, not the same cost."""
    if opt <= 0:
        return 0.005 + 0.20e-6 * len(text)
    if opt == 1:
        return 0.008 + 0.27e-6 * len(text)
    return 0.002 + 0.24e-6 * len(text) + 0.0012 * text.count(".head.")


class _Helper:
    """One helper process and the pipes to it."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(llvm_worker.__file__))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.inp, self.out = self.proc.stdin, self.proc.stdout
        self.busy = threading.Lock()  # one caller at a time: a program compiling
        llvm_worker._write(self.inp, jit.machine_settings())

    def compile(self, text: str, opt: int) -> tuple[bool, Any]:
        llvm_worker._write(self.inp, (text, opt))
        reply = llvm_worker._read(self.out)
        if not (isinstance(reply, tuple) and len(reply) == 2):
            raise OSError(f"the helper answered {type(reply).__name__}")
        return reply

    def close(self) -> None:
        """Close its input (it exits) and reap it."""
        for stream in (self.inp, self.out):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@atexit.register
def _close_all() -> None:
    with _STARTED:
        helpers = list(_HELPERS)
        _HELPERS.clear()
    for helper in helpers:
        helper.close()


_HELPERS: list[_Helper] = []
_STARTED = threading.Lock()
_WARNED = False


def _helpers() -> list[_Helper]:
    with _STARTED:
        want = worker_count() if sys.executable else 0
        while len(_HELPERS) < want:
            try:
                _HELPERS.append(_Helper())
            except OSError as exc:
                _drop(None, f"cannot start a helper process ({exc})")
                break
        return list(_HELPERS)


def _drop(helper: _Helper | None, why: str) -> None:
    global _WARNED
    if helper is not None:
        helper.close()
        with _STARTED:
            if helper in _HELPERS:
                _HELPERS.remove(helper)
    if not _WARNED:
        _WARNED = True
        warnings.warn(f"LLVM compiles in this process only: {why}", RuntimeWarning, stacklevel=4)


class Stream:
    """Modules compiled as they are made: :meth:`submit` hands each to the helpers
    at once (they compile while the caller generates the next; each takes the
    costliest module pending, :func:`cost`), :meth:`finish` compiles here what
    no helper took (once every module is in, the costliest first) and returns
    every object in submission order.  Use it as a context manager, so an error on the way stops the
    helpers' threads and frees them for the next program."""

    def __init__(self, expected: int) -> None:
        self._modules: list[tuple[str, int, bool]] = []
        self._costs: list[float] = []
        self._results: list[bytes | None] = []
        self._pending: list[tuple[float, int]] = []  # a heap of (-cost, position)
        self._errors: list[str] = []
        self._closed = False
        self._cond = threading.Condition()
        helpers = _helpers() if expected >= MIN_PARALLEL else []
        self._helpers = [h for h in helpers if h.busy.acquire(blocking=False)]  # others: busy
        self._threads = [
            threading.Thread(target=self._feed, args=(h,), daemon=True) for h in self._helpers
        ]
        for t in self._threads:
            t.start()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        if kind is not None:  # the caller failed: stop handing out modules
            with self._cond:
                self._errors.append("abandoned")
        self._close()

    def submit(self, text: str, opt: int, count: bool = True) -> int:
        """Queue a module; its position in :meth:`finish`'s list.  ``count=False``:
        the runtime's own code, left out of :data:`.jit.STATS` when compiled here."""
        with self._cond:
            k = len(self._modules)
            self._modules.append((text, opt, count))
            self._costs.append(cost(text, opt))
            self._results.append(None)
            heapq.heappush(self._pending, (-self._costs[k], k))
            self._cond.notify()
            return k

    def _take(self, wait: bool) -> int | None:
        with self._cond:
            while True:
                if self._errors:
                    return None
                if self._pending:  # the costliest first
                    return heapq.heappop(self._pending)[1]
                if self._closed or not wait:
                    return None
                self._cond.wait()

    def _feed(self, helper: _Helper) -> None:
        while (k := self._take(wait=True)) is not None:
            text, opt, _ = self._modules[k]
            try:
                ok, value = helper.compile(text, opt)
            except (OSError, EOFError, ValueError, TypeError) as exc:
                with self._cond:
                    # another thread compiles it instead
                    heapq.heappush(self._pending, (-self._costs[k], k))
                    self._cond.notify_all()
                _drop(helper, f"a helper process failed ({exc})")
                return
            if ok and isinstance(value, bytes):
                self._results[k] = value
            else:
                with self._cond:
                    self._errors.append(str(value))

    def _here(self) -> None:
        while (k := self._take(wait=False)) is not None:
            text, opt, count = self._modules[k]
            try:
                self._results[k] = jit.compile_ir(text, count, opt)
            except InternalError as exc:
                with self._cond:
                    self._errors.append(str(exc).removeprefix("the generated LLVM IR is invalid: "))

    def _close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True  # every module is in (each take is the costliest left)
            self._cond.notify_all()
        try:
            self._here()
        finally:
            with phase("llvm (waiting for helpers)"):
                for t in self._threads:
                    t.join()
            for h in self._helpers:
                h.busy.release()
        self._here()  # what a helper gave back after this thread had finished

    def finish(self) -> list[bytes]:
        """Every submitted module's object, in submission order."""
        self._close()
        if self._errors:
            raise InternalError(f"the generated LLVM IR is invalid: {self._errors[0]}")
        assert all(r is not None for r in self._results)
        return [r for r in self._results if r is not None]


def compile_modules(modules: Sequence[tuple[str, int]]) -> list[bytes]:
    """The object code of each ``(LLVM IR text, opt level)``, in order (handed out
    costliest first)."""
    order = sorted(range(len(modules)), key=lambda k: -cost(*modules[k]))
    with Stream(len(modules)) as stream:
        at = {k: stream.submit(*modules[k]) for k in order}
        objects = stream.finish()
    return [objects[at[k]] for k in range(len(modules))]
