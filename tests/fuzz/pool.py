"""Worker processes that survive what they run: crashes, deaths and hangs.

A :class:`Pool` keeps ``size`` spawned workers, each fed one task at a time
over a pipe.  A task names a function of this package (``"runner:check"``)
and a JSON-able payload; the function may report *progress* (``note("cpu")``)
so a death or a hang is pinned to the step that caused it.  When a worker's
pipe closes (a segfault, ``os._exit``, the OOM killer) the task's result is
``{"status": "death", "exitcode": ..., "step": ...}``; when a step runs past
the timeout the worker is killed and the result is ``{"status": "hang", ...}``.
Either way a fresh worker takes its place.  Workers are also replaced after
``recycle`` tasks, so slow leaks (compiled code, caches) stay bounded.

Workers are spawned (not forked: pyopencl and llvmlite state does not survive
a fork) with the parent's ``sys.path`` and environment.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import time
from collections import deque
from collections.abc import Iterable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

_PACKAGE = __package__ or "fuzz"
_note_conn: Connection | None = None


def note(step: str, seconds: float | None = None) -> None:
    """Inside a task: say which step runs now (a death or hang then names it); the
    step gets the pool's timeout afresh, or ``seconds`` (one-time setup)."""
    if _note_conn is not None:
        _note_conn.send(("step", (step, seconds)))


def _worker_main(conn: Connection, package: str, nice: int) -> None:
    global _note_conn
    import warnings

    warnings.simplefilter("ignore")
    if nice:
        os.nice(nice)
    _note_conn = conn
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        func, payload = msg
        mod, name = func.split(":")
        fn = getattr(importlib.import_module(f"{package}.{mod}"), name)
        conn.send(("done", fn(payload)))


class _Worker:
    def __init__(self, ctx, nice: int) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, _PACKAGE, nice), daemon=True)
        self.proc.start()
        child.close()
        self.tasks = 0
        self.job: tuple[Any, float, str] | None = None  # (task id, deadline, step)

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


class Pool:
    """``size`` workers; :meth:`run` yields ``(task id, result)`` as tasks finish."""

    def __init__(self, size: int = 1, timeout: float = 60.0, recycle: int = 200, nice: int = 0):
        self.ctx = mp.get_context("spawn")
        self.size = size
        self.timeout = timeout
        self.recycle = recycle
        self.nice = nice
        self.workers: list[_Worker] = []
        self.deaths = 0
        self.hangs = 0

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for w in self.workers:
            w.stop(kill=w.job is not None)
        self.workers = []

    def run(
        self, tasks: Iterable[tuple[Any, str, Any]], timeout: float | None = None
    ) -> Iterator[tuple[Any, dict]]:
        """Run ``(task id, "module:function", payload)`` tasks; yield results as they come."""
        limit = self.timeout if timeout is None else timeout
        pending = deque(tasks)
        while len(self.workers) < self.size:
            self.workers.append(_Worker(self.ctx, self.nice))
        while pending or any(w.job for w in self.workers):
            for i, w in enumerate(self.workers):
                if w.job is None and pending:
                    if w.tasks >= self.recycle or not w.proc.is_alive():
                        w.stop()
                        w = self.workers[i] = _Worker(self.ctx, self.nice)
                    tid, func, payload = pending.popleft()
                    w.conn.send((func, payload))
                    w.job = (tid, time.monotonic() + limit, "start")
                    w.tasks += 1
            busy = [w for w in self.workers if w.job]
            soonest = min(w.job[1] for w in busy)
            ready = wait([w.conn for w in busy], timeout=max(0.0, soonest - time.monotonic()))
            for i, w in enumerate(self.workers):
                if w.job is None:
                    continue
                tid, deadline, step = w.job
                if w.conn in ready:
                    try:
                        kind, value = w.conn.recv()
                    except (EOFError, OSError):
                        w.proc.join(5)
                        self.deaths += 1
                        yield tid, {"status": "death", "exitcode": w.proc.exitcode, "step": step}
                        w.job = None
                        w.stop(kill=True)
                        self.workers[i] = _Worker(self.ctx, self.nice)
                        continue
                    if kind == "step":
                        step, seconds = value
                        w.job = (tid, time.monotonic() + (seconds or limit), step)
                    else:
                        w.job = None
                        yield tid, value
                elif time.monotonic() > deadline:
                    self.hangs += 1
                    yield tid, {"status": "hang", "seconds": limit, "step": step}
                    w.job = None
                    w.stop(kill=True)
                    self.workers[i] = _Worker(self.ctx, self.nice)
