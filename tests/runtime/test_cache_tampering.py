"""Planted disk-cache entries (issue 12, item 8): a fresh process must not trust them.

Each test compiles ``C = A * B`` on the CPU in a child process (a cold start
that fills the cache), lets an attacker who can write to the cache folder but
does not hold its key plant an entry, and starts the victim again: it must
compute ``A * B`` (checked against NumPy) and warn about the planted file.

The attacker's forgeries are written against the file layout alone, so the
same tests show the attacks succeeding on the cache before its entries were
authenticated (a program text behind a plain sha256 line; a kernel behind a
header whose 32-byte field was a plain sha256 of the payload).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

from stripeml.runtime.kernel_cache import decode, encode

SRC = "function (A[N], B[N]) -> (C) {{\n    C = A {op} B;\n}}\n"
A = np.arange(1, 9, dtype=np.float32)
B = np.full(8, 3, dtype=np.float32)

_CHILD = """
import json, sys, warnings
import numpy as np
import stripeml
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    f = stripeml.compile(sys.argv[1], target="cpu")
    c = f(np.arange(1, 9, dtype=np.float32), np.full(8, 3, dtype=np.float32))
print(json.dumps({"c": c.tolist(), "warnings": [str(w.message) for w in caught]}))
"""

_HEADER = struct.Struct("<8sIQ32s")  # magic, version, payload length, 32-byte digest/tag


def _run(op: str, cache: Path) -> dict:
    """Compile and run ``C = A op B`` in a fresh process with ``cache`` as the cache root."""
    env = dict(os.environ, STRIPEML_CACHE_DIR=str(cache))
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, SRC.format(op=op)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _files(cache: Path, folder: str) -> set[Path]:
    return {p for p in (cache / folder).iterdir() if not p.name.startswith(".")}


def _fix_up(data: bytes) -> bytes:
    """Recompute every checksum a program entry carries that needs no secret."""
    if data[:8] == b"STRPMLP\0":  # header + text: put a sha256 of the text in the tag field
        magic, version, _, _ = _HEADER.unpack_from(data)
        text = data[_HEADER.size :]
        return _HEADER.pack(magic, version, len(text), hashlib.sha256(text).digest()) + text
    # the layout before authentication: the sha256 of the text in hex, a newline, the text
    _, _, text = data.partition(b"\n")
    return hashlib.sha256(text).hexdigest().encode() + b"\n" + text


def _assert_refused(report: dict, planted: Path) -> None:
    np.testing.assert_array_equal(np.array(report["c"], np.float32), A * B)
    assert any(str(planted) in m and "forged" in m for m in report["warnings"]), report


def test_planted_program_text_with_a_recomputed_checksum_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cold = _run("*", cache)
    np.testing.assert_array_equal(np.array(cold["c"], np.float32), A * B)
    [planted] = _files(cache, "programs")
    data = planted.read_bytes()
    assert data.count(b"= mul(") == 1
    planted.write_bytes(_fix_up(data.replace(b"= mul(", b"= sub(")))
    _assert_refused(_run("*", cache), planted)


def test_planted_kernel_reencoded_with_the_caches_encoder_is_refused(tmp_path):
    victim, attacker = tmp_path / "victim", tmp_path / "attacker"
    _run("*", victim)
    sub = _run("-", attacker)  # the attacker compiles A - B in a cache of its own
    np.testing.assert_array_equal(np.array(sub["c"], np.float32), A - B)
    [planted] = _files(victim, "cpu")
    [theirs] = _files(attacker, "cpu")
    planted.write_bytes(encode(decode(theirs.read_bytes())))
    _assert_refused(_run("*", victim), planted)


def test_a_valid_entry_of_another_program_is_refused_under_this_name(tmp_path):
    """Entries are bound to their key: the victim's own ``A - B`` entries, copied
    over the names of ``A * B``'s entries, are refused (program text, then kernel)."""
    cache = tmp_path / "cache"
    _run("*", cache)
    mul = {f: _files(cache, f) for f in ("programs", "cpu")}
    _run("-", cache)
    for folder in ("programs", "cpu"):
        [ours] = mul[folder]
        [other] = _files(cache, folder) - mul[folder]
        shutil.copyfile(other, ours)
        _assert_refused(_run("*", cache), ours)
