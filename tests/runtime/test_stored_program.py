"""A warm start (the optimised program in the disk cache) runs from the program's
summary and the compiled code, without unpickling the program itself
(``runtime/kernel_cache.py``: ``ProgramSummary``, ``StoredProgram``); the program
is loaded when something asks for it (``exe.program``, profiling, another
program sharing its constant layouts).  Every result is checked against NumPy."""

from __future__ import annotations

import gc
import pickle
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

import stripeml
from stripeml.ir import parse
from stripeml.runtime import kept_layouts, shared_constants
from stripeml.runtime.cache_store import pack
from stripeml.runtime.kernel_cache import (
    PROGRAM_FORMAT_VERSION,
    PROGRAM_MAGIC,
    ProgramCache,
    ProgramSummary,
)

MATMUL = "function (A[M, K], W[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * W[k, n]); }"
W = np.random.default_rng(0).standard_normal((64, 192)).astype(np.float32)
THREADS = 2


def _a(m: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((m, 64)).astype(np.float32)


def _idle() -> None:
    """No program of earlier tests left registered or deferred (a warm process's
    one program shares its layouts with nothing)."""
    kept_layouts.wait_writes()  # (a pending write holds the layouts it writes)
    gc.collect()
    shared_constants.flush()
    gc.collect()
    assert shared_constants.idle()


def _cold(cache: Path, monkeypatch: pytest.MonkeyPatch, rows: tuple[int, ...] = (32,)) -> None:
    """Compile and run MATMUL (W constant) at each of ``rows``, twice each, into ``cache``."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(cache))
    f = stripeml.compile(MATMUL, target="cpu", constants={"W": W}, threads=THREADS)
    for m in rows:
        for _ in range(2):  # the second call stores the runtime's facts
            np.testing.assert_allclose(f(_a(m)), _a(m) @ W, rtol=1e-4, atol=1e-4)
    del f
    kept_layouts.wait_writes()  # the cache's entries, written on threads of their own
    _idle()


def _program_entry(cache: Path) -> Path:
    (entry,) = (cache / "programs").iterdir()
    return entry


def test_a_warm_start_runs_without_loading_the_program(tmp_path, monkeypatch) -> None:
    _cold(tmp_path, monkeypatch)
    f = stripeml.compile(MATMUL, target="cpu", constants={"W": W}, threads=THREADS)
    for seed in (1, 2, 3):  # the first call (constant layouts), reuses after
        np.testing.assert_allclose(f(_a(32, seed)), _a(32, seed) @ W, rtol=1e-4, atol=1e-4)
    exe = f.lower(_a(32))
    assert exe._stored is not None, "read from the disk cache"
    assert exe._compiled._kept, "W is laid out once, kept"
    assert not exe._stored.loaded, "nothing asked for the program"
    assert exe.signature == (((32, 64), "float32"),)
    assert [n for n, _, _ in exe.output_specs] == ["C"]
    # asked for, it is the program whose text the cache holds
    assert exe.program == parse(exe.ir) and exe._stored.loaded
    assert exe.program is exe.program
    assert exe.peak_bytes == dict(ProgramSummary.of(exe.program).peak)


def test_a_second_program_shares_a_warm_programs_layouts(tmp_path, monkeypatch) -> None:
    """The second shape plans to share the first's constant layouts: the first
    (warm, its layouts made without value ids) loads its program then."""
    _cold(tmp_path, monkeypatch, rows=(32, 64))
    f = stripeml.compile(MATMUL, target="cpu", constants={"W": W}, threads=THREADS)
    np.testing.assert_allclose(f(_a(32)), _a(32) @ W, rtol=1e-4, atol=1e-4)
    first = f.lower(_a(32))
    assert first._stored is not None and not first._stored.loaded
    np.testing.assert_allclose(f(_a(64)), _a(64) @ W, rtol=1e-4, atol=1e-4)
    second = f.lower(_a(64))
    assert first._stored.loaded, "its value ids need the program"
    kept = {
        first._compiled._buffers[k].info.name: a for k, a in first._compiled._kept_storage.items()
    }
    again = second._compiled._kept_storage
    assert any(again[k] is kept.get(b.info.name) for k, b in second._compiled._kept.items())
    assert second._compiled._reuse.skip  # its constant statements were not run again
    np.testing.assert_allclose(f(_a(32, 5)), _a(32, 5) @ W, rtol=1e-4, atol=1e-4)


class _Touch:
    """What a pickle must never do from a cache entry: call anything."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def _rewrite(entry: Path, key: str, summary: bytes | None, program: bytes | None) -> None:
    """Replace the summary or the program pickle of the authentic program entry
    ``entry`` (re-signed with the cache's key: a broken stripeml's entry)."""
    cache = ProgramCache(entry.parent.parent)
    found = cache._read(key)
    assert found is not None
    text, old_summary, old_program = found
    assert old_summary is not None and old_program is not None
    summary = summary if summary is not None else pickle.dumps(old_summary._state())
    raw = text.encode()
    data = struct.pack("<Q", len(raw)) + raw + struct.pack("<Q", len(summary)) + summary
    data += program if program is not None else old_program
    assert cache.entries.store(key, pack(PROGRAM_MAGIC, PROGRAM_FORMAT_VERSION, data))


def test_a_program_that_does_not_unpickle_is_parsed_from_its_text(tmp_path, monkeypatch) -> None:
    _cold(tmp_path, monkeypatch)
    entry = _program_entry(tmp_path)
    marker = tmp_path / "ran"
    _rewrite(entry, entry.name.split(".")[0], None, pickle.dumps(_Touch(marker)))
    f = stripeml.compile(MATMUL, target="cpu", constants={"W": W}, threads=THREADS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warm start itself reads the summary only
        np.testing.assert_allclose(f(_a(32)), _a(32) @ W, rtol=1e-4, atol=1e-4)
    exe = f.lower(_a(32))
    assert exe._stored is not None and not exe._stored.loaded
    with pytest.warns(RuntimeWarning, match="corrupt or forged entry .*is not an IR node"):
        program = exe.program
    assert program == parse(exe.ir)
    assert not entry.exists() and not marker.exists()  # removed, nothing called
    np.testing.assert_allclose(f(_a(32, 4)), _a(32, 4) @ W, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["call", "not a summary"])
def test_a_summary_that_does_not_unpickle_is_a_miss(tmp_path, monkeypatch, kind) -> None:
    _cold(tmp_path, monkeypatch)
    entry = _program_entry(tmp_path)
    marker = tmp_path / "ran"
    bad = _Touch(marker) if kind == "call" else ("refs", [0], ["T"], [("DRAM", 1)])
    _rewrite(entry, entry.name.split(".")[0], pickle.dumps(bad), None)
    f = stripeml.compile(MATMUL, target="cpu", constants={"W": W}, threads=THREADS)
    with pytest.warns(RuntimeWarning, match="corrupt or forged entry"):
        np.testing.assert_allclose(f(_a(32)), _a(32) @ W, rtol=1e-4, atol=1e-4)
    assert not marker.exists()
    exe = f.lower(_a(32))
    assert exe._stored is None, "compiled again"
    kept_layouts.wait_writes()
    assert entry.exists(), "and stored again"
    assert ProgramCache(tmp_path).get_program(entry.name.split(".")[0]) is not None


def test_a_program_entry_still_being_written_is_found(tmp_path, monkeypatch) -> None:
    """The program cache's entry is written on a thread of its own
    (``ProgramCache.put_later``), slowed down here: a function compiled meanwhile in the same
    process waits for it and loads it rather than compiling again."""
    import time

    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    put = ProgramCache.put

    def slow(self, *args, **kwargs) -> bool:
        time.sleep(0.3)
        return put(self, *args, **kwargs)

    monkeypatch.setattr(ProgramCache, "put", slow)
    first = stripeml.compile(MATMUL, target="cpu", constants={"W": W}, threads=THREADS)
    np.testing.assert_allclose(first(_a(16)), _a(16) @ W, rtol=1e-4, atol=1e-4)
    again = stripeml.compile(MATMUL, target="cpu", constants={"W": W}, threads=THREADS)
    exe = again.lower(_a(16))
    assert exe._stored is not None, "read from the disk cache"
    np.testing.assert_allclose(exe(_a(16, 2)), _a(16, 2) @ W, rtol=1e-4, atol=1e-4)
