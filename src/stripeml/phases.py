"""A compile profile: wall time per phase (import, fold, lower, each pass, verify,
codegen, LLVM optimise and emit, load ...), recorded only when someone asks.

Code that does a phase of work wraps it in :func:`phase`; nothing is kept
unless a :func:`recording` is open in the same context (thread or task), so
the cost outside a recording is one context-variable read.  Times are
*exclusive*: while a phase runs inside another, the outer one's clock stops,
so the rows of a recording add up to the time the phases covered, and no time
is counted twice.  A phase opened with ``whole=True`` (constant folding, which
compiles and runs small programs on the interpreter) keeps every phase inside
it as its own time.

``stripeml onnx MODEL --timing`` and ``stripeml ir ... --timing`` print a
recording as a table (docs/performance.md, "Compile time").
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["Recording", "phase", "recording"]


@dataclass
class Recording:
    """Seconds and calls per phase, in the order phases first ran."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, seconds: float, calls: int = 1) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + calls

    def merge(self, other: Recording) -> None:
        for name, seconds in other.seconds.items():
            self.add(name, seconds, other.calls[name])

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def rows(self) -> list[tuple[str, float, int]]:
        """``[(phase, seconds, calls)]`` in first-run order."""
        return [(name, s, self.calls[name]) for name, s in self.seconds.items()]

    def table(self, wall: float | None = None) -> str:
        """One line per phase (time, share of the total, calls), then the total;
        given the ``wall`` time the phases ran in, the time outside any phase
        (Python glue) is a row of its own."""
        rows = self.rows()
        if wall is not None and wall > self.total:
            rows.append(("(outside phases)", wall - self.total, 1))
        if not rows:
            return "(nothing was compiled: every phase was skipped or cached)"
        total = sum(s for _, s, _ in rows) or 1.0
        width = max(len("total"), *(len(n) for n, _, _ in rows))
        lines = [
            f"{name:{width}}  {seconds * 1e3:10.1f} ms  {100 * seconds / total:5.1f}%"
            + (f"  ({calls} calls)" if calls > 1 else "")
            for name, seconds, calls in rows
        ]
        lines.append(f"{'total':{width}}  {total * 1e3:10.1f} ms")
        return "\n".join(lines)


@dataclass
class _Frame:
    recording: Recording
    name: str | None  # the phase whose clock runs now (None: none)
    started: float
    whole: bool = False  # inside a whole=True phase: inner phases are its time


_CURRENT: contextvars.ContextVar[_Frame | None] = contextvars.ContextVar(
    "stripeml_phase", default=None
)


@contextmanager
def recording() -> Iterator[Recording]:
    """Record the phases run inside the block (nested recordings also report
    to the one outside them)."""
    outer = _CURRENT.get()
    rec = Recording()
    now = time.perf_counter()
    if outer is not None and outer.name is not None:  # stop the outer phase's clock
        outer.recording.add(outer.name, now - outer.started, 0)
    token = _CURRENT.set(_Frame(rec, None, now))
    try:
        yield rec
    finally:
        frame = _CURRENT.get()
        _CURRENT.reset(token)
        if frame is not None and frame.name is not None:
            rec.add(frame.name, time.perf_counter() - frame.started, 0)
        if outer is not None:
            outer.recording.merge(rec)
            outer.started = time.perf_counter()


@contextmanager
def phase(name: str, whole: bool = False) -> Iterator[None]:
    """Count the block's wall time (less any phase nested in it) as ``name``."""
    frame = _CURRENT.get()
    if frame is None or frame.whole:
        yield
        return
    now = time.perf_counter()
    if frame.name is not None:  # pause the enclosing phase
        frame.recording.add(frame.name, now - frame.started, 0)
    inner = _Frame(frame.recording, name, now, whole)
    token = _CURRENT.set(inner)
    try:
        yield
    finally:
        _CURRENT.reset(token)
        end = time.perf_counter()
        frame.recording.add(name, end - inner.started)
        frame.started = end  # the enclosing phase's clock runs again
