"""``stripeml cache --info`` and ``--clear``: what they print and what they do.

Expected counts and sizes come from listing the folders here, not from the cache code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.runtime.cpu_samples import sample_entry

from stripeml import cli
from stripeml.runtime.kernel_cache import KernelCache, ProgramCache

posix_only = pytest.mark.skipif(os.name == "nt", reason="owners and modes are POSIX")


def _fill(root: Path, kernels: int, programs: int) -> None:
    for i in range(kernels):
        assert KernelCache(root).put(f"{i:064x}", sample_entry(bytes([i]) * (100 + i)))
    for i in range(programs):
        assert ProgramCache(root).put(f"{i:064x}", "x" * (10 + i))


def _listed(root: Path, folder: str) -> tuple[int, int]:
    files = [p for p in (root / folder).iterdir() if not p.name.startswith(".")]
    return len(files), sum(p.stat().st_size for p in files)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(["cache", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_info_shows_where_what_and_the_limit(tmp_path, capsys, monkeypatch):
    root = tmp_path / "root"
    _fill(root, kernels=3, programs=2)
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(root))
    monkeypatch.setenv("STRIPEML_CACHE_LIMIT", "5M")
    status, out, err = _run(capsys)  # --info is the default
    assert (status, err) == (0, "")
    assert _run(capsys, "--info")[1] == out
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert lines["cache"] == str(root)
    assert lines["status"].startswith("trusted: yours, mode 0700, private; key 0600")
    kernels, programs = _listed(root, "cpu"), _listed(root, "programs")
    assert lines["cpu/"].startswith(f"3 entries, {kernels[1]} bytes")
    assert lines["programs/"].startswith(f"2 entries, {programs[1]} bytes")
    total = kernels[1] + programs[1]
    assert lines["total"].startswith(f"5 entries, {total} bytes")
    assert f"limit {5 << 20} bytes (5.0 MiB)" in lines["total"]


def test_clear_removes_the_entries_and_keeps_the_key(tmp_path, capsys):
    root = tmp_path / "root"
    _fill(root, kernels=2, programs=1)
    key = (root / "key").read_bytes()
    size = _listed(root, "cpu")[1] + _listed(root, "programs")[1]
    status, out, err = _run(capsys, "--clear", "--dir", str(root))
    assert (status, err) == (0, "")
    assert f"removed 3 entries, {size} bytes" in out and "kept the key" in out
    assert _listed(root, "cpu") == (0, 0) and _listed(root, "programs") == (0, 0)
    assert (root / "key").read_bytes() == key
    assert KernelCache(root).get(f"{0:064x}") is None
    _fill(root, kernels=1, programs=0)  # the cache works on afterwards
    assert KernelCache(root).get(f"{0:064x}") == sample_entry(bytes([0]) * 100)
    assert "1 entry," in _run(capsys, "--dir", str(root))[1]


def test_a_missing_root_is_reported_and_not_created(tmp_path, capsys):
    root = tmp_path / "none"
    status, out, _ = _run(capsys, "--dir", str(root))
    assert status == 0 and "not created yet" in out
    status, out, _ = _run(capsys, "--clear", "--dir", str(root))
    assert status == 0 and "removed 0 entries" in out
    assert not root.exists()


@posix_only
def test_an_untrusted_root_is_reported_and_not_cleared(tmp_path, capsys):
    root = tmp_path / "root"
    _fill(root, kernels=1, programs=1)
    root.chmod(0o777)
    status, out, _ = _run(capsys, "--dir", str(root))
    assert status == 0
    assert "REFUSED: its mode is 0777" in out and "without the disk cache" in out
    status, out, err = _run(capsys, "--clear", "--dir", str(root))
    assert status == 1 and out == ""
    assert f"refusing to clear {root}" in err and "Traceback" not in err
    assert _listed(root, "cpu")[0] == 1  # nothing removed


@posix_only
def test_clear_replaces_a_key_others_can_read(tmp_path, capsys):
    root = tmp_path / "root"
    _fill(root, kernels=1, programs=0)
    old = (root / "key").read_bytes()
    (root / "key").chmod(0o644)
    status, out, _ = _run(capsys, "--dir", str(root))
    assert status == 0 and "REFUSED: the key file" in out and "0644" in out
    status, out, _ = _run(capsys, "--clear", "--dir", str(root))
    assert status == 0 and "removed the refused key file" in out
    assert not (root / "key").exists()
    _fill(root, kernels=1, programs=0)
    assert (root / "key").read_bytes() != old
    assert (root / "key").stat().st_mode & 0o777 == 0o600


def test_a_bad_limit_is_a_warning_not_a_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STRIPEML_CACHE_LIMIT", "lots")
    status, out, err = _run(capsys, "--dir", str(tmp_path))
    assert status == 0 and f"limit {4 << 30} bytes" in out
    assert err.startswith("stripeml: warning:") and "'lots' is not a size" in err


def test_the_console_command(tmp_path):
    env = dict(os.environ, STRIPEML_CACHE_DIR=str(tmp_path / "c"))
    out = subprocess.run(
        [sys.executable, "-m", "stripeml.cli", "cache", "--info", "--clear"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 2 and "not allowed with argument" in out.stderr  # one or the other
    out = subprocess.run(
        [sys.executable, "-m", "stripeml.cli", "cache"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0 and str(tmp_path / "c") in out.stdout
