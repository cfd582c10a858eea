"""PyTorch timed in a process of its own, in blocks the parent interleaves.

``bench_cpu.py --torch-process`` does not import torch at all: a worker
process (``bench_cpu.py --torch-worker CASE``) builds the case's PyTorch
contender and answers one request per line on its standard input:

``warm``
    calls the contender until its threads have settled (as ``_warm_up``);
    replies ``{"s": seconds of the last call}``;
``block N W``
    (``W``: 1 to warm up first) times ``N`` consecutive calls; replies
    ``{"times": [...]}``;
``result PATH``
    saves one result as float32 ``.npy`` at ``PATH`` for the parent to check;
``quit``.

The worker computes the case's NumPy reference once before it builds the
contender, as the parent does.  That is not for the check: a large temporary
freed raises glibc's dynamic mmap and trim thresholds, after which a
contender that returns a fresh tensor per call (``F.conv2d``) reuses heap pages
instead of faulting in new ones.  Measured on the 3x3 convolution
56x56x64: 2.0-2.7 ms per call in a fresh process, 1.2-1.3 ms after the
reference (or with ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_``
raised); so PyTorch in its own process starts from the state it has in the
parent, the faster one.

Every reply is one JSON line; a failure replies ``{"error": ...}``.  While the
worker runs a block the parent waits on the pipe (no thread of its own
spins), after the same pause before each block as every other contender.  So
PyTorch's thread pool and OpenMP runtime never share a process with NumPy's
OpenBLAS or stripeml's pool, and the blocks still alternate with theirs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import numpy as np


class TorchProcess:
    """The parent's handle on a worker: ``warm_up()``, ``block(n, warm)``, ``result()``."""

    def __init__(self, script: str, case: str, threads: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, script, "--torch-worker", case, "--threads", str(threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self._read()
        if "error" in ready:
            self.close()
            raise RuntimeError(ready["error"])
        self.version: str | None = ready.get("torch")
        self.out: bool | None = ready.get("out")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            return {"error": f"the torch worker exited ({self.proc.wait()})"}
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _ask(self, request: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(request + "\n")
        self.proc.stdin.flush()
        answer = self._read()
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def warm_up(self) -> float:
        return float(self._ask("warm")["s"])

    def block(self, n: int, warm: bool) -> list[float]:
        return [float(t) for t in self._ask(f"block {n} {int(warm)}")["times"]]

    def result(self) -> np.ndarray:
        with tempfile.TemporaryDirectory(prefix="stripeml-torch-") as tmp:
            path = Path(tmp) / "result.npy"
            self._ask(f"result {path}")
            return np.load(path)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()


def serve(
    build: Callable[[Any], Any],
    warm_up: Callable[[Callable[[], Any]], float],
    threads: int,
    stdin: TextIO = sys.stdin,
    stdout: TextIO = sys.stdout,
) -> int:
    """The worker's loop: ``build(torch)`` returns the contender (an ``Impl``)."""
    import time

    def reply(obj: dict[str, Any]) -> None:
        stdout.write(json.dumps(obj) + "\n")
        stdout.flush()

    try:
        import torch
    except ImportError as exc:
        reply({"error": f"no torch here: {exc}"})
        return 0
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            impl = build(torch)
    except Exception as exc:  # noqa: BLE001 - the parent records it
        reply({"error": f"{type(exc).__name__}: {exc}"})
        return 0
    reply({"torch": torch.__version__, "pid": os.getpid(), "out": bool(impl.out)})
    with torch.inference_mode():
        for line in stdin:
            cmd, *args = line.split()
            try:
                if cmd == "quit":
                    break
                if cmd == "warm":
                    reply({"s": warm_up(impl.fn)})
                elif cmd == "block":
                    if args[1] == "1":
                        warm_up(impl.fn)
                    times = []
                    for _ in range(int(args[0])):
                        start = time.perf_counter()
                        impl.fn()
                        times.append(time.perf_counter() - start)
                    reply({"times": times})
                elif cmd == "result":
                    np.save(args[0], np.asarray(impl.post(impl.fn()), dtype=np.float32))
                    reply({})
                else:
                    reply({"error": f"unknown request {cmd!r}"})
            except Exception as exc:  # noqa: BLE001
                reply({"error": f"{type(exc).__name__}: {exc}"})
    return 0
