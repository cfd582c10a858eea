"""``kept_layouts.in_background(..., after_compiles=True)``: the cache entries a
compile makes are written once no compile has run for a moment (a program's
first call counts as part of its compile, ``gc_pause``), or at once when
something waits for them (``Writer.finish``, ``wait_writes``), even inside a
compile (the next program's lookup of the entries)."""

from __future__ import annotations

import threading
import time

from stripeml import gc_pause
from stripeml.runtime import kept_layouts


def test_a_write_waits_for_the_compiles_to_end() -> None:
    done = threading.Event()
    with gc_pause.paused():
        writer = kept_layouts.in_background(done.set, after_compiles=True)
        assert not done.wait(3 * kept_layouts.SETTLE_S)  # a compile runs: not yet
    assert done.wait(5.0)  # it ended: the write ran
    writer.join()


def test_a_write_waits_for_the_compiles_to_stay_ended(monkeypatch) -> None:
    """A compile and its program's first call are two paused spans a moment
    apart: the write does not slip in between."""
    monkeypatch.setattr(kept_layouts, "SETTLE_S", 0.5)  # (a margin on a busy machine)
    done = threading.Event()
    with gc_pause.paused():
        writer = kept_layouts.in_background(done.set, after_compiles=True)
    time.sleep(0.02)  # the writer sees no compile running
    with gc_pause.paused():
        assert not done.wait(0.7)
    writer.finish()
    assert done.is_set()


def test_finishing_a_write_starts_it_inside_a_compile() -> None:
    done = threading.Event()
    with gc_pause.paused():
        writer = kept_layouts.in_background(done.set, after_compiles=True)
        start = time.perf_counter()
        writer.finish()  # the next program's lookup, inside its compile: no deadlock
        assert done.is_set() and time.perf_counter() - start < 1.0
    with gc_pause.paused():
        other = kept_layouts.in_background(lambda: None, after_compiles=True)
        kept_layouts.wait_writes()
        assert not other.is_alive()


def test_a_plain_write_starts_at_once() -> None:
    done = threading.Event()
    with gc_pause.paused():
        kept_layouts.in_background(done.set)
        assert done.wait(5.0)


def test_the_tuner_times_nothing_beside_a_pending_write() -> None:
    """``tuning.measure.time_interleaved`` finishes the writes a compile left
    (here one held back by a compile that goes on in another thread) before its
    first timed call."""
    from stripeml.tuning.measure import time_interleaved

    done = threading.Event()
    release = threading.Event()
    entered = threading.Event()

    def compiling() -> None:
        with gc_pause.paused():
            entered.set()
            release.wait(10.0)

    other = threading.Thread(target=compiling)
    other.start()
    entered.wait(5.0)
    try:
        kept_layouts.in_background(done.set, after_compiles=True)
        seen: list[bool] = []
        time_interleaved([lambda: seen.append(done.is_set())], rounds=3, pause_s=0.0)
        assert not seen[0]  # the warm-up call: the compile still runs, nothing written
        assert all(seen[1:]) and len(seen) > 1  # every call after: written first
    finally:
        release.set()
        other.join()


def test_a_write_started_on_a_daemon_thread_finishes_before_the_exit(tmp_path) -> None:
    """The ONNX reader starts the weights' copy from a daemon thread of its own;
    the write must not inherit that flag, or the interpreter's exit cuts it off
    (a partial temporary file, no copy).  A fresh process starts a slow write
    from a daemon thread and returns at once: the file is there, whole."""
    import subprocess
    import sys
    import textwrap

    out = tmp_path / "written"
    script = textwrap.dedent(
        f"""
        import threading, time
        from stripeml.runtime import kept_layouts

        def write():
            time.sleep(0.5)
            with open({str(out)!r}, "w") as f:
                f.write("whole")

        started = []
        t = threading.Thread(
            target=lambda: started.append(kept_layouts.in_background(write)), daemon=True
        )
        t.start()
        t.join()
        assert started[0].daemon is False
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "whole"
