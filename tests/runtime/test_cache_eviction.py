"""The disk cache's size limit: parsing it, least-recently-used eviction, and
eviction while other processes read and write the same cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stripeml.runtime import cache_store
from stripeml.runtime.cache_store import DEFAULT_LIMIT, LIMIT_ENV, cache_limit, parse_size
from stripeml.runtime.kernel_cache import KernelCache, ProgramCache

from .cpu_samples import sample_entry

SAMPLES = Path(__file__).with_name("cpu_samples.py")


def _key(i: int) -> str:
    return f"{i:064x}"


def _entry(i: int):
    return sample_entry(bytes([i % 256]) * 4000)


def _entry_files(root: Path) -> dict[str, int]:
    """name -> size of every entry file (by listing the folders, not through the cache)."""
    return {
        p.name: p.stat().st_size
        for folder in ("cpu", "programs")
        if (root / folder).is_dir()
        for p in (root / folder).iterdir()
        if not p.name.startswith(".")
    }


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1073741824", 1 << 30),
        ("512M", 512 << 20),
        ("2GiB", 2 << 30),
        ("64 kb", 64 << 10),
        ("1t", 1 << 40),
        ("0", 0),
        ("100B", 100),
    ],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "-5", "1.5G", "5X", ""])
def test_parse_size_refuses_what_is_not_a_size(text):
    assert parse_size(text) is None


def test_the_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    assert cache_limit() == DEFAULT_LIMIT == 4 << 30
    monkeypatch.setenv(LIMIT_ENV, "3M")
    assert cache_limit() == 3 << 20
    monkeypatch.setenv(LIMIT_ENV, "three megabytes")
    with pytest.warns(RuntimeWarning, match="three megabytes.*default limit of 4.0 GiB"):
        assert cache_limit() == DEFAULT_LIMIT


def test_least_recently_used_entries_go_first(tmp_path, monkeypatch):
    cache = KernelCache(tmp_path)
    for i in range(3):
        assert cache.put(_key(i), _entry(i))
    size = (tmp_path / "cpu" / f"{_key(0)}.kernel").stat().st_size
    now = time.time()
    for i in range(3):  # written long ago, 0 first (mtime resolution is coarse on some disks)
        os.utime(cache.path(_key(i)), (now - 3000 + i, now - 3000 + i))
    assert cache.get(_key(0)) == _entry(0)  # a use: 0 is now the most recent
    limit = 3 * size + size // 2
    monkeypatch.setenv(LIMIT_ENV, str(limit))
    assert cache.put(_key(3), _entry(3))
    files = _entry_files(tmp_path)
    assert sorted(files) == sorted(f"{_key(i)}.kernel" for i in (0, 2, 3))  # 1 went
    assert sum(files.values()) <= limit
    for i in (0, 2, 3):
        assert KernelCache(tmp_path).get(_key(i)) == _entry(i)


def test_program_texts_count_toward_the_same_limit(tmp_path, monkeypatch):
    programs = ProgramCache(tmp_path)
    text = "x" * 5000
    for i in range(4):
        assert programs.put(_key(i), text)
        os.utime(programs.entries.path(_key(i)), (1000 + i, 1000 + i))
    monkeypatch.setenv(LIMIT_ENV, "12000")
    assert KernelCache(tmp_path).put(_key(9), _entry(9))
    files = _entry_files(tmp_path)
    assert sum(files.values()) <= 12000
    assert f"{_key(9)}.kernel" in files and f"{_key(3)}.stripe" in files
    assert f"{_key(0)}.stripe" not in files and f"{_key(1)}.stripe" not in files


def test_an_entry_over_the_limit_is_not_stored(tmp_path, monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "1000")
    cache = KernelCache(tmp_path)
    assert cache.put(_key(1), sample_entry(b"x" * 100)) is True
    assert cache.put(_key(2), _entry(2)) is False  # 4 kB of code alone is over the limit
    assert sorted(_entry_files(tmp_path)) == [f"{_key(1)}.kernel"]
    monkeypatch.setenv(LIMIT_ENV, "0")  # 0 stores nothing
    assert KernelCache(tmp_path).put(_key(3), sample_entry(b"")) is False
    assert sorted(_entry_files(tmp_path)) == [f"{_key(1)}.kernel"]


def test_temporary_files_left_by_dead_writers_are_removed(tmp_path, monkeypatch):
    cache = KernelCache(tmp_path)
    assert cache.put(_key(0), _entry(0))
    stale, fresh = tmp_path / "cpu" / ".dead.abc.tmp", tmp_path / "cpu" / ".live.abc.tmp"
    stale.write_bytes(b"half an entry")
    fresh.write_bytes(b"being written")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    monkeypatch.setattr(cache_store, "_TALLY", {})  # as in a fresh process: its first write lists
    assert cache.put(_key(1), _entry(1))
    assert not stale.exists() and fresh.exists()  # a live writer's file is left alone


def test_the_folders_are_listed_at_the_first_write_and_then_now_and_then(tmp_path, monkeypatch):
    listings = []
    real = cache_store.evict
    monkeypatch.setattr(cache_store, "evict", lambda *a, **k: listings.append(1) or real(*a, **k))
    cache = KernelCache(tmp_path)
    for i in range(cache_store.RESCAN_WRITES + 2):
        assert cache.put(_key(i), sample_entry(b"x"))
    assert len(listings) == 2  # the first write, then after RESCAN_WRITES more
    size = cache.path(_key(0)).stat().st_size
    monkeypatch.setenv(LIMIT_ENV, str(size * (cache_store.RESCAN_WRITES + 2)))
    assert cache.put(_key(999), sample_entry(b"x"))  # this one would pass the limit
    assert len(listings) == 3
    assert len(_entry_files(tmp_path)) == cache_store.RESCAN_WRITES + 2
    # another process's writes are found by the listing that follows RESCAN_S seconds
    root, (total, writes, when) = tmp_path, cache_store._TALLY[tmp_path]
    cache_store._TALLY[root] = (total, writes, when - cache_store.RESCAN_S)
    assert cache.put(_key(1000), sample_entry(b"x"))
    assert len(listings) == 4


_WORKER = """
import json, random, sys, warnings
sys.path.insert(0, {samples!r})
from stripeml.runtime.kernel_cache import KernelCache
from cpu_samples import sample_entry
me, n = {me}, {n}
def key(i): return f"{{i:064x}}"
def entry(i): return sample_entry(bytes([i % 256]) * 50_000)
random.seed(me)
bad = hits = misses = 0
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for step in range(60):
        i = me * 100 + step % 10
        KernelCache({root!r}).put(key(i), entry(i))
        for j in random.sample([w * 100 + s for w in range(n) for s in range(10)], 5):
            got = KernelCache({root!r}).get(key(j))
            if got is None:
                misses += 1
            elif got == entry(j):
                hits += 1
            else:
                bad += 1
print(json.dumps({{"bad": bad, "hits": hits, "misses": misses,
                   "warnings": [str(w.message) for w in caught]}}))
"""


def test_eviction_never_serves_a_partial_entry_to_another_process(tmp_path, monkeypatch):
    """Four processes write and read 40 keys of ~50 kB in a cache limited to
    about 8 of them: every read is a whole entry or a miss, never a warning."""
    limit = 8 * 52_000
    env = dict(os.environ, STRIPEML_CACHE_LIMIT=str(limit))
    n = 4
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WORKER.format(samples=str(SAMPLES.parent), root=str(tmp_path), me=me, n=n),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for me in range(n)
    ]
    reports = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    assert [p.returncode for p in procs] == [0] * n
    for report in reports:
        assert report["bad"] == 0 and report["warnings"] == [], report
    assert sum(r["hits"] for r in reports) > 0, reports  # the readers did find entries
    monkeypatch.setenv(LIMIT_ENV, str(limit))  # the next write evicts down to the limit
    assert KernelCache(tmp_path).put(_key(999), _entry(999))
    assert sum(_entry_files(tmp_path).values()) <= limit
