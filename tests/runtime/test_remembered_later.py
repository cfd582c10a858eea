"""Facts remembered on a thread of their own (``Remembered.put_later``): found in
memory by the process that put them until written, on disk after, and written
only once no compile runs."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from stripeml import api, gc_pause
from stripeml.runtime import cache_store, kept_layouts, pending_writes


def _files(root: Path) -> list[Path]:
    folder = root / "folds"
    return [p for p in folder.iterdir() if not p.name.startswith(".")] if folder.is_dir() else []


def test_a_fact_put_later_is_found_before_and_after_it_is_written(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    store = api.remembered("folds")
    with gc_pause.paused():  # a compile runs: the write waits for it to end
        store.put_later(b"key one", b"fact one")
        store.put_later(b"key two", b"fact two")
        assert store.get(b"key one") == b"fact one"
        assert api.remembered("folds").get(b"key two") == b"fact two"  # any store of the folder
        assert store.get(b"key three") is None
        assert _files(tmp_path) == []
    kept_layouts.wait_writes()
    assert len(_files(tmp_path)) == 2
    assert all(pending_writes.unwritten(store.path(k)) is None for k in (b"key one", b"key two"))
    assert store.get(b"key one") == b"fact one"  # now from its file
    # another root never sees this one's facts, written or pending
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "other"))
    with gc_pause.paused():
        store.put_later(b"key four", b"fact four")
        assert store.get(b"key one") is None
        monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
        assert store.get(b"key four") is None
    kept_layouts.wait_writes()
    assert len(_files(tmp_path / "other")) == 1 and len(_files(tmp_path)) == 2


def test_facts_put_while_a_write_runs_are_written_too(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    store = api.remembered("folds")
    entered, release = threading.Event(), threading.Event()
    real_store = cache_store.EntryFolder.store

    def slow_store(self, name, data):  # the first write waits until more are put
        entered.set()
        release.wait(5)
        return real_store(self, name, data)

    monkeypatch.setattr(cache_store.EntryFolder, "store", slow_store)
    store.put_later(b"first", b"1")
    assert entered.wait(5)
    for k in range(5):
        store.put_later(b"more %d" % k, b"%d" % k)
    release.set()
    kept_layouts.wait_writes()
    assert len(_files(tmp_path)) == 6
    assert all(pending_writes.unwritten(store.path(b"more %d" % k)) is None for k in range(5))
    assert [store.get(b"more %d" % k) for k in range(5)] == [b"%d" % k for k in range(5)]


def test_facts_put_during_a_compile_take_one_writer_thread(tmp_path, monkeypatch) -> None:
    """A new input shape folds a dozen nodes, each remembered here: one thread
    writes them all once the compile is over, not a thread each (thread starts
    and file creations beside the next compile slowed it)."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    kept_layouts.wait_writes()  # nothing of an earlier test still waiting

    def writers() -> int:
        return sum(t.name == "stripeml-cache-write" for t in threading.enumerate())

    store = api.remembered("folds")
    with gc_pause.paused():  # a compile runs: the writes wait for it to end
        for k in range(12):
            store.put_later(b"fold %d" % k, b"value %d" % k)
        assert writers() == 1
        assert [store.get(b"fold %d" % k) for k in range(12)] == [
            b"value %d" % k for k in range(12)
        ]
    kept_layouts.wait_writes()
    assert writers() == 0
    assert len(_files(tmp_path)) == 12
    assert all(pending_writes.unwritten(store.path(b"fold %d" % k)) is None for k in range(12))
    assert [store.get(b"fold %d" % k) for k in range(12)] == [b"value %d" % k for k in range(12)]
    store.put_later(b"after", b"a later one")  # a thread again once the last one ended
    kept_layouts.wait_writes()
    assert store.get(b"after") == b"a later one" and len(_files(tmp_path)) == 13


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_writes_what_it_puts(tmp_path, monkeypatch) -> None:
    """A child forked while the parent's writer waits has no writer of its own
    until it puts something: then one starts (the child's facts are written,
    not kept in its memory only)."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    kept_layouts.wait_writes()
    store = api.remembered("folds")
    with gc_pause.paused():
        store.put_later(b"parent", b"p")  # its writer waits for the compile to end
        pid = os.fork()
        if pid == 0:  # the child: report by exit status, never return into pytest
            ok = False
            try:
                store.put_later(b"child", b"c")
                kept_layouts.wait_writes()
                ok = pending_writes.unwritten(store.path(b"child")) is None and any(
                    p.name.startswith(hashlib.sha256(b"child").hexdigest())
                    for p in _files(tmp_path)
                )
            finally:
                os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    kept_layouts.wait_writes()
    assert store.get(b"parent") == b"p" and store.get(b"child") == b"c"
