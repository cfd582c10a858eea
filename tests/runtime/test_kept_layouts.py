"""The constant layouts a program keeps are stored in the disk cache's
``layouts/`` folder by the first process that computes them and mapped by a
later one (``runtime/kept_layouts.py``), keyed by the program and its
constants' values (``runtime/provenance.py``: an array read from a model file
by the file's identity, any other by its bytes).  A damaged, truncated, forged
or foreign file is reported, computed again and rewritten.  Every result is
checked against NumPy or onnxruntime."""

from __future__ import annotations

import gc
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

import stripeml
from stripeml.runtime import kept_layouts, provenance, shared_constants
from stripeml.runtime.cache_store import cache_info

MATMUL = "function (A[M, K], W[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * W[k, n]); }"
RNG = np.random.default_rng(7)
W = RNG.standard_normal((64, 192)).astype(np.float32)
A = RNG.standard_normal((32, 64)).astype(np.float32)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache root, where layouts of any size are stored."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kept_layouts, "MIN_BYTES", 0)
    _idle()
    return tmp_path


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per layout lookup of this test: whether the layouts came from a file."""
    found: list[bool] = []
    load = kept_layouts.LayoutStore.load

    def recorded(self, constants):
        got = load(self, constants)
        found.append(got is not None)
        return got

    monkeypatch.setattr(kept_layouts.LayoutStore, "load", recorded)
    return found


def _idle() -> None:
    """No program of earlier tests registered or deferred: the next one is a
    process's first (the one that maps or stores layouts)."""
    kept_layouts.wait_writes()  # (a pending write holds the layouts it writes)
    gc.collect()
    shared_constants.flush()
    gc.collect()
    assert shared_constants.idle()


def _start(w: np.ndarray = W, a: np.ndarray = A) -> None:
    """A start of a process: compile MATMUL with ``w`` constant, check two calls."""
    _idle()
    f = stripeml.compile(MATMUL, target="cpu", constants={"W": w})
    for _ in range(2):
        np.testing.assert_allclose(f(a), a @ w, rtol=1e-4, atol=1e-4)
    del f
    kept_layouts.wait_writes()  # the layout file is written on a thread of its own
    _idle()


def _files(cache: Path) -> list[Path]:
    return sorted((cache / "layouts").glob("*.layout"))


def test_a_warm_start_maps_the_layouts_the_cold_one_stored(cache, loads) -> None:
    _start()
    assert loads == [False]
    (path,) = _files(cache)
    assert os.stat(path).st_mode & 0o777 == 0o600
    _start()
    assert loads == [False, True], "mapped from the file"
    assert _files(cache) == [path], "nothing written again"
    assert cache_info(cache).entries["layouts"] == (1, path.stat().st_size)


def test_the_first_call_does_not_wait_for_the_layout_file(cache, loads, monkeypatch) -> None:
    import threading

    events: list[str] = []
    release = threading.Event()
    store = kept_layouts.LayoutStore.store

    def slow(self, arrays):
        release.wait(timeout=5)  # (a synchronous write would hold the call this long)
        events.append("stored")
        return store(self, arrays)

    monkeypatch.setattr(kept_layouts.LayoutStore, "store", slow)
    _idle()
    f = stripeml.compile(MATMUL, target="cpu", constants={"W": W})
    np.testing.assert_allclose(f(A), A @ W, rtol=1e-4, atol=1e-4)
    events.append("returned")
    release.set()
    kept_layouts.wait_writes()
    assert events == ["returned", "stored"]
    assert len(_files(cache)) == 1
    del f
    _idle()


def test_mapped_layouts_skip_the_constant_steps(cache, monkeypatch) -> None:
    _start()
    from stripeml.runtime import cpu_run

    constant_runs: list[bool] = []
    run_steps = cpu_run.CpuCompiled._run_steps

    def counted(self, pointers, storages, constant=False):
        constant_runs.append(constant)
        return run_steps(self, pointers, storages, constant)

    monkeypatch.setattr(cpu_run.CpuCompiled, "_run_steps", counted)
    _start()
    assert constant_runs and not any(constant_runs)


def test_other_constants_have_layouts_of_their_own(cache, loads) -> None:
    _start()
    w2 = W + 1.0  # the same program, other weights: never the first's layouts
    _start(w2)
    assert loads == [False, False]
    assert len(_files(cache)) == 2
    _start(w2)
    _start()
    assert loads == [False, False, True, True]


def test_small_layouts_are_computed_every_time(cache, loads, monkeypatch) -> None:
    monkeypatch.setattr(kept_layouts, "MIN_BYTES", 1 << 20)  # the default: W is 48 KiB
    _start()
    _start()
    assert loads == [False, False] and _files(cache) == []


def test_a_layout_over_a_quarter_of_the_limit_is_not_stored(cache, loads, monkeypatch) -> None:
    monkeypatch.setenv("STRIPEML_CACHE_LIMIT", "64K")  # W's layout: 48 KiB and a head
    _start()
    _start()
    assert loads == [False, False] and _files(cache) == []


def _flip_data(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x40  # a bit of the last weight page
    path.write_bytes(bytes(data))


def _zero_page(path: Path) -> None:
    with open(path, "r+b") as f:
        f.seek(kept_layouts.PAGE)
        f.write(bytes(kept_layouts.PAGE))


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size - kept_layouts.PAGE)


def _truncate_head(path: Path) -> None:
    os.truncate(path, 20)


def _edit_head(path: Path) -> None:
    data = path.read_bytes()
    at = data.index(b'"sum":"') + 7
    path.write_bytes(data[:at] + (b"0" if data[at : at + 1] != b"0" else b"1") + data[at + 1 :])


def _readable_by_others(path: Path) -> None:
    os.chmod(path, 0o644)


def _a_link(path: Path) -> None:
    target = path.with_name("elsewhere")
    os.replace(path, target)
    os.symlink(target, path)


DAMAGE = {
    "a flipped bit": _flip_data,
    "a zeroed page": _zero_page,
    "a truncated file": _truncate,
    "a truncated head": _truncate_head,
    "an edited head": _edit_head,
    "readable by others": _readable_by_others,
    "a link": _a_link,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_layout_file_is_computed_again(cache, loads, damage) -> None:
    _start()
    (path,) = _files(cache)
    DAMAGE[damage](path)
    with pytest.warns(RuntimeWarning, match="ignoring corrupt or forged entry .*layout"):
        _start()
    assert loads == [False, False]
    (again,) = _files(cache)  # rewritten whole
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _start()
    assert loads == [False, False, True]
    assert again.stat().st_mode & 0o777 == 0o600


@pytest.mark.skipif(os.name == "nt" or os.geteuid() != 0, reason="needs chown (root)")
def test_a_file_of_another_user_is_refused(cache, loads) -> None:
    _start()
    (path,) = _files(cache)
    os.chown(path, 12345, 12345)
    with pytest.warns(RuntimeWarning, match="owned by uid 12345"):
        _start()
    assert loads == [False, False]


def test_a_valid_file_under_another_name_is_refused(cache, loads) -> None:
    _start()
    _start(W + 1.0)
    assert loads == [False, False]
    names = {provenance.fingerprint({"W": w}) for w in (W, W + 1.0)}
    assert len(names) == 2
    first, second = _files(cache)
    os.replace(first, second)  # a good file, moved to the other key
    with pytest.warns(RuntimeWarning, match="HMAC"):
        _start()
        _start(W + 1.0)
    assert loads[2:] == [False, False]
    assert len(_files(cache)) == 2


# -- provenance ----------------------------------------------------------------


def _read_from(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Two arrays read from ``path`` as a frontend reads weights (noted)."""
    with open(path, "rb") as f:
        before = os.fstat(f.fileno())
        a = np.frombuffer(f.read(4096), np.float32).copy()
        b = np.frombuffer(f.read(4096), np.float32).copy()
        a.setflags(write=False)
        b.setflags(write=False)
        provenance.note_file(f.fileno(), before, [(a, 0), (b, 4096)])
    return a, b


def test_arrays_read_from_a_file_are_named_by_it(tmp_path, monkeypatch) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(np.arange(2048, dtype=np.float32).tobytes())
    a, b = _read_from(path)
    assert provenance.describe(a)[0][0] == "file"
    assert provenance.describe(a.reshape(32, 32)[1:]) is not None, "views are named too"

    def no_hashing(arr):
        raise AssertionError("hashed a noted array")

    monkeypatch.setattr(provenance, "_hashed", no_hashing)
    first = provenance.fingerprint({"a": a, "b": b})
    assert provenance.fingerprint({"a": a, "b": b}) == first
    assert provenance.fingerprint({"a": b, "b": a}) != first
    monkeypatch.undo()
    # the same bytes read again: the same name; the file changed in place: another
    a2, b2 = _read_from(path)
    assert provenance.fingerprint({"a": a2, "b": b2}) == first
    with open(path, "r+b") as f:
        f.write(np.float32(-1.0).tobytes())
    a3, b3 = _read_from(path)
    assert provenance.fingerprint({"a": a3, "b": b3}) != first


def test_writable_arrays_are_named_by_their_bytes(tmp_path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(np.arange(2048, dtype=np.float32).tobytes())
    a, _ = _read_from(path)
    a.setflags(write=True)  # it owns its memory: writable again
    assert provenance.describe(a) is None
    named = provenance.fingerprint({"a": a})
    a[0] = 5.0
    assert provenance.fingerprint({"a": a}) != named


def test_a_derived_array_is_named_by_its_inputs(tmp_path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(np.arange(2048, dtype=np.float32).tobytes())
    a, _ = _read_from(path)
    out = stripeml.api.reversed_axes(a.reshape(8, 16, 8))
    np.testing.assert_array_equal(out, a.reshape(8, 16, 8).transpose(2, 1, 0))
    assert provenance.describe(out)[0][0] == "derived"
    scale = np.arange(8, dtype=np.float32)
    scaled = stripeml.api.reversed_axes(a.reshape(8, 16, 8), scale)
    other = stripeml.api.reversed_axes(a.reshape(8, 16, 8), scale + 1)
    names = {provenance.fingerprint({"w": x}) for x in (out, scaled, other)}
    assert len(names) == 3


def test_large_constants_of_no_known_origin_are_not_hashed(cache, loads, monkeypatch) -> None:
    monkeypatch.setattr(kept_layouts, "HASHED_FREELY", 1024)  # W: 48 KiB, its layout as much
    _start()
    _start()
    assert loads == [False, False] and _files(cache) == []
    monkeypatch.setattr(kept_layouts, "HASHED_SHARE", 1)
    _start()
    _start()
    assert loads == [False, False, False, True]
