"""``STRIPEML_PERF_MAP=1``: the functions of the code the runtime loads, listed in
``/tmp/perf-<pid>.map`` for Linux ``perf`` (``runtime.perf_map``).  The listed
ranges are checked against the process's executable mappings (the kernel's
``/proc/self/maps``), and the program's results against NumPy."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

import stripeml
from stripeml.runtime import perf_map

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux perf maps")

SOURCE = (
    "function (A[M, K], W[K, N]) -> (C) { T[m, n : M, N] = +(A[m, k] * W[k, n]); C = relu(T); }"
)


@pytest.fixture
def map_file():
    """This process's map file, removed after the test if the test made it."""
    path = Path(perf_map.path())
    existed = path.exists()
    yield path
    if not existed:
        path.unlink(missing_ok=True)


def _entries(path: Path, skip: int = 0) -> list[tuple[int, int, str]]:
    out = []
    for line in path.read_text().splitlines()[skip:]:
        start, size, name = line.split(" ", 2)
        out.append((int(start, 16), int(size, 16), name))
    return out


def _executable_ranges() -> list[tuple[int, int]]:
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, perms = line.split()[:2]
        if "x" in perms:
            lo, hi = (int(x, 16) for x in span.split("-"))
            ranges.append((lo, hi))
    return ranges


def _case(seed: int):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((40, 72)).astype(np.float32)
    w = rng.standard_normal((72, 56)).astype(np.float32)
    return a, w, np.maximum(a.astype(np.float64) @ w, 0)


def test_the_loaded_kernels_are_listed_in_executable_memory(
    map_file, monkeypatch, tmp_path
) -> None:
    monkeypatch.setenv("STRIPEML_PERF_MAP", "1")
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))  # compiled here, not found
    before = len(map_file.read_text().splitlines()) if map_file.exists() else 0
    a, w, want = _case(1)
    f = stripeml.compile(SOURCE, target="cpu")
    np.testing.assert_allclose(f(a, w), want, rtol=1e-4, atol=1e-4)
    entries = _entries(map_file, before)
    names = [n for _, _, n in entries]
    module = f.lower(a, w)._compiled.module
    blocks = {s.kernel.symbol: s.kernel.block_name for s in module.steps if s.kernel}
    assert blocks, "the program has kernels"
    for symbol, block in blocks.items():
        assert f"{symbol} [{block}]" in names, (symbol, names)
    for body in module.bodies:  # each body is named with a kernel that calls it
        (shown,) = [n for n in names if n.split(" ")[0] == body.symbol]
        assert any(f"[{b}" in shown for b in blocks.values()), shown
    executable = _executable_ranges()
    for start, size, name in entries:
        assert size > 0, name
        assert any(lo <= start and start + size <= hi for lo, hi in executable), name
    spans = sorted((s, s + n) for s, n, _ in entries)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_nothing_is_written_without_the_variable(map_file, monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("STRIPEML_PERF_MAP", raising=False)
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    size = map_file.stat().st_size if map_file.exists() else -1
    a, w, want = _case(2)
    np.testing.assert_allclose(
        stripeml.compile(SOURCE, target="cpu")(a, w), want, rtol=1e-4, atol=1e-4
    )
    assert (map_file.stat().st_size if map_file.exists() else -1) == size


@pytest.mark.parametrize(
    "blob", [b"", b"\x7fELF", b"not an object at all" * 10, b"\x7fELF\x02\x01" + b"\xff" * 100]
)
def test_anything_but_an_elf_object_lists_nothing(blob: bytes) -> None:
    assert list(perf_map.functions(blob)) == []


def test_a_value_other_than_1_true_or_yes_is_off(monkeypatch) -> None:
    for value, on in (("1", True), ("yes", True), ("TRUE", True), ("0", False), ("", False)):
        monkeypatch.setenv("STRIPEML_PERF_MAP", value)
        assert perf_map.enabled() is on, value
    assert perf_map.path() == f"/tmp/perf-{os.getpid()}.map"
