"""The on-disk kernel cache: format, keys, corruption, concurrency, warm starts."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from stripeml.codegen.cpu_abi import CpuModule, Step
from stripeml.ir.nodes import Special
from stripeml.runtime import cpu, jit
from stripeml.runtime.kernel_cache import (
    Entry,
    KernelCache,
    cache_key,
    decode,
    default_cache_dir,
    encode,
)

from .cpu_samples import add_generator, add_kernel, add_program, sample_entry

SAMPLES = Path(__file__).with_name("cpu_samples.py")


def _quiet_get(cache: KernelCache, key: str) -> tuple[Entry | None, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = cache.get(key)
    return got, [str(w.message) for w in caught]


# -- format and keys --------------------------------------------------------------


def test_encode_decode_round_trip():
    entry = sample_entry()
    assert decode(encode(entry)) == entry


def test_nan_params_round_trip():
    entry = Entry(b"", CpuModule("", (), (Step(special=Special("x", (), (), (("v", math.nan),))),)))
    back = decode(encode(entry)).module.steps[0].special
    assert math.isnan(back.params[0][1])


def test_key_depends_on_every_part():
    base = cache_key("program", "options")
    assert base == cache_key("program", "options")
    assert len({base, cache_key("program2", "options"), cache_key("program", "options2")}) == 3
    assert cache_key("ab", "c") != cache_key("a", "bc")  # parts are delimited


def test_default_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("STRIPEML_CACHE_DIR")
    assert default_cache_dir() == tmp_path / "xdg" / "stripeml"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "stripeml"


def test_get_put(tmp_path):
    cache = KernelCache(tmp_path)
    assert cache.get("k" * 64) is None
    assert cache.put("k" * 64, sample_entry())
    assert cache.get("k" * 64) == sample_entry()
    assert [p.name for p in (tmp_path / "cpu").iterdir()] == ["k" * 64 + ".kernel"]


# -- corruption -------------------------------------------------------------------


def _truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _flip_payload(data: bytes) -> bytes:
    b = bytearray(data)
    b[-3] ^= 0x40
    return bytes(b)


def _flip_magic(data: bytes) -> bytes:
    return b"X" + data[1:]


def _flip_length(data: bytes) -> bytes:
    b = bytearray(data)
    b[12] ^= 0x01  # low byte of the payload length
    return bytes(b)


@pytest.mark.parametrize(
    "damage", [_truncate, _flip_payload, _flip_magic, _flip_length, lambda d: b""]
)
def test_corrupt_entry_is_detected_and_removed(tmp_path, damage):
    cache = KernelCache(tmp_path)
    key = "c" * 64
    cache.put(key, sample_entry())
    path = cache.path(key)
    path.write_bytes(damage(path.read_bytes()))
    got, messages = _quiet_get(cache, key)
    assert got is None
    assert any("corrupt" in m for m in messages)
    assert not path.exists()


@pytest.mark.parametrize("damage", [_truncate, _flip_payload])
def test_corrupt_entry_is_rebuilt_by_the_backend(tmp_path, monkeypatch, damage):
    n = 256
    gen = add_generator(n)
    monkeypatch.setattr(cpu, "generate_module", gen)
    backend = cpu.CpuBackend(cpu.CpuOptions(threads=1, cache_dir=tmp_path))
    backend.compile(add_program(n))
    [path] = (tmp_path / "cpu").iterdir()
    path.write_bytes(damage(path.read_bytes()))
    with pytest.warns(RuntimeWarning, match="corrupt"):
        compiled = backend.compile(add_program(n))
    assert gen.calls == 2  # rebuilt
    a = np.arange(n, dtype=np.float32)
    np.testing.assert_array_equal(compiled.run({"A": a, "B": a})["C"], 2 * a)
    assert decode(path.read_bytes()).module.llvm_ir == gen.ir  # and stored again


# -- unwritable and concurrent ---------------------------------------------------------


def test_unwritable_cache_dir_compiles_without_caching(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    n = 64
    gen = add_generator(n)
    monkeypatch.setattr(cpu, "generate_module", gen)
    backend = cpu.CpuBackend(cpu.CpuOptions(threads=1, cache_dir=blocker / "cache"))
    with pytest.warns(RuntimeWarning, match="without a disk cache"):
        compiled = backend.compile(add_program(n))
    a = np.ones(n, np.float32)
    np.testing.assert_array_equal(compiled.run({"A": a, "B": a})["C"], 2 * a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reported once per folder: no second warning
        assert KernelCache(blocker / "cache").put("k", sample_entry()) is False
        assert KernelCache(blocker / "cache").get("k") is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores folder permissions")
def test_read_only_cache_dir(tmp_path):
    folder = tmp_path / "ro"
    (folder / "cpu").mkdir(parents=True)
    (folder / "cpu").chmod(0o500)
    try:
        cache = KernelCache(folder)
        with pytest.warns(RuntimeWarning):
            assert cache.put("k" * 64, sample_entry()) is False
        assert cache.get("k" * 64) is None
    finally:
        (folder / "cpu").chmod(0o700)


_WRITER = """
import sys
sys.path.insert(0, {samples!r})
from stripeml.runtime.kernel_cache import KernelCache
from cpu_samples import sample_entry
cache = KernelCache({folder!r})
entry = sample_entry(bytes([{k}]) * 200_000)
for _ in range(30):
    assert cache.put({key!r}, entry)
"""


def test_concurrent_writers_leave_a_validsample_entry(tmp_path):
    key = "w" * 64
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WRITER.format(samples=str(SAMPLES.parent), folder=str(tmp_path), key=key, k=k),
            ]
        )
        for k in range(6)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 6
    entry = KernelCache(tmp_path).get(key)
    assert entry is not None
    assert len(set(entry.object_code)) == 1 and len(entry.object_code) == 200_000
    assert [p.name for p in (tmp_path / "cpu").iterdir()] == [key + ".kernel"]  # no temp files


# -- warm start in a fresh process ---------------------------------------------------------


def _child(n: int) -> dict:
    out = subprocess.run(
        [sys.executable, str(SAMPLES), str(n)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_skips_the_generator_and_llvm(tmp_path, monkeypatch):
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    cold = _child(1000)
    assert cold["generate_calls"] == 1
    assert cold["stats"].get("optimize") == 1 and cold["stats"].get("emit") == 1
    warm = _child(1000)
    assert warm["generate_calls"] == 0
    assert warm["stats"].get("parse", 0) == 0 and warm["stats"].get("optimize", 0) == 0
    assert warm["stats"]["load"] == 1
    assert cold["correct"] and warm["correct"] and warm["code_ok"]
    # A different program is a different key: a miss again.
    other = _child(1001)
    assert other["generate_calls"] == 1


def test_in_process_hit_skips_generation(tmp_path, monkeypatch):
    n = 32
    gen = add_generator(n)
    monkeypatch.setattr(cpu, "generate_module", gen)
    before = jit.STATS["optimize"]
    for _ in range(2):
        compiled = cpu.CpuBackend(
            cpu.CpuOptions(threads=1, vector_width=8, cache_dir=tmp_path)
        ).compile(add_program(n))
    assert gen.calls == 1 and jit.STATS["optimize"] == before + 1
    # Other codegen options are other keys.
    for width in (4, 16):
        options = cpu.CpuOptions(threads=1, vector_width=width, cache_dir=tmp_path)
        cpu.CpuBackend(options).compile(add_program(n))
    assert gen.calls == 3
    assert compiled.code == add_kernel("add_f32", 0, 1, 2)
