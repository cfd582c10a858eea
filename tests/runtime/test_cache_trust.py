"""Who the disk cache trusts: private folders and files, refused roots, the key, the tags."""

from __future__ import annotations

import os
import secrets
import stat
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from stripeml.runtime import cache_root, cpu
from stripeml.runtime.cache_root import KEY_FILE, untrusted_reason
from stripeml.runtime.cache_store import authentic, seal
from stripeml.runtime.kernel_cache import KernelCache, ProgramCache, encode

from .cpu_samples import add_generator, add_program, sample_entry

KEY = "k" * 64
posix_only = pytest.mark.skipif(os.name == "nt", reason="owners and modes are POSIX")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _caught(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [str(w.message) for w in caught]


def _compile_twice(root: Path, monkeypatch) -> tuple[int, list[str]]:
    """Compile ``C = A + B`` twice with the cache at ``root`` (results checked
    against NumPy); the generator's call count and the warnings."""
    n = 64
    gen = add_generator(n)
    monkeypatch.setattr(cpu, "generate_module", gen)
    messages: list[str] = []
    a = np.arange(n, dtype=np.float32)
    for _ in range(2):
        backend = cpu.CpuBackend(cpu.CpuOptions(threads=1, cache_dir=root))
        compiled, caught = _caught(partial(backend.compile, add_program(n)))
        messages += caught
        np.testing.assert_array_equal(compiled.run({"A": a, "B": a})["C"], a + a)
    return gen.calls, messages


# -- private -------------------------------------------------------------------


@posix_only
@pytest.mark.parametrize("umask", [0o000, 0o002, 0o022])
def test_folders_and_files_are_private_whatever_the_umask(tmp_path, umask):
    root = tmp_path / "made" / "root"  # its parent is created too
    old = os.umask(umask)
    try:
        assert KernelCache(root).put(KEY, sample_entry())
        assert ProgramCache(root).put(KEY, "block [] #program () {\n}\n")
    finally:
        os.umask(old)
    for folder in (tmp_path / "made", root, root / "cpu", root / "programs"):
        assert _mode(folder) == 0o700, folder
    for file in (
        root / KEY_FILE,
        root / "cpu" / f"{KEY}.kernel",
        root / "programs" / f"{KEY}.stripe",
    ):
        assert _mode(file) == 0o600, file
    assert len((root / KEY_FILE).read_bytes()) == 32
    assert KernelCache(root).get(KEY) == sample_entry()


# -- refused roots -------------------------------------------------------------------


@posix_only
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o703])
def test_a_root_others_may_write_to_is_refused(tmp_path, monkeypatch, mode):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(mode)
    calls, messages = _compile_twice(root, monkeypatch)
    assert calls == 2  # no disk cache: both compiles generate
    [message] = messages  # warned once, not at every compile
    assert str(root) in message and f"{mode:04o}" in message
    assert "without a disk cache" in message
    assert list(root.iterdir()) == []  # nothing written into it


@posix_only
@pytest.mark.parametrize("mode", [0o755, 0o750, 0o700])
def test_a_root_others_may_only_read_is_used(tmp_path, monkeypatch, mode):
    root = tmp_path / "mine"
    root.mkdir()
    root.chmod(mode)
    calls, messages = _compile_twice(root, monkeypatch)
    assert (calls, messages) == (1, [])


@posix_only
def test_an_entry_folder_others_may_write_to_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "cpu").mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    (root / "cpu").chmod(0o777)
    calls, messages = _compile_twice(root, monkeypatch)
    assert calls == 2
    assert len(messages) == 1 and "cpu/" in messages[0] and "0777" in messages[0]


@posix_only
def test_a_root_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "theirs"
    root.mkdir(mode=0o700)
    me = os.geteuid()
    # the check itself, on a status that says another user owns the folder
    theirs = os.stat_result((stat.S_IFDIR | 0o700, 1, 1, 2, me + 1, 0, 4096, 0, 0, 0))
    assert "owned by uid" in (untrusted_reason(theirs) or "")
    assert untrusted_reason(os.stat(root)) is None
    # and the cache, run as another user: the tests run as root in CI
    monkeypatch.setattr(cache_root, "_uid", lambda: me + 1)
    calls, messages = _compile_twice(root, monkeypatch)
    assert calls == 2
    assert len(messages) == 1 and f"owned by uid {me}, not by you (uid {me + 1})" in messages[0]
    assert list(root.iterdir()) == []


# -- the key -------------------------------------------------------------------------


def _with_key(root: Path) -> Path:
    assert KernelCache(root).put(KEY, sample_entry())
    return root / KEY_FILE


@posix_only
@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda p: p.chmod(0o644), "0644"),
        (lambda p: p.chmod(0o660), "0660"),
        (lambda p: p.write_bytes(b"short"), "5 bytes"),
        (lambda p: (p.unlink(), p.mkdir()), "not a regular file"),
        (lambda p: (p.unlink(), os.mkfifo(p)), "not a regular file"),  # and no hang
    ],
)
def test_an_unusable_key_file_is_refused(tmp_path, damage, says):
    root = tmp_path / "root"
    key_file = _with_key(root)
    damage(key_file)
    got, messages = _caught(lambda: KernelCache(root).get(KEY))
    assert got is None
    assert len(messages) == 1 and str(key_file) in messages[0] and says in messages[0]
    assert "without a disk cache" in messages[0]
    stored, _ = _caught(lambda: KernelCache(root).put(KEY, sample_entry()))
    assert stored is False  # and it is not replaced behind the user's back


@posix_only
def test_a_linked_key_file_is_refused(tmp_path):
    root = tmp_path / "root"
    key_file = _with_key(root)
    elsewhere = tmp_path / "elsewhere"
    key_file.rename(elsewhere)
    key_file.symlink_to(elsewhere)
    got, messages = _caught(lambda: KernelCache(root).get(KEY))
    assert got is None and len(messages) == 1
    assert f"{key_file}: it is a symbolic link" in messages[0]


def test_each_root_has_its_own_random_key(tmp_path):
    keys = {_with_key(tmp_path / name).read_bytes() for name in "abc"}
    assert len(keys) == 3


# -- tags ----------------------------------------------------------------------------


def test_an_entry_signed_with_another_key_is_refused(tmp_path):
    cache = KernelCache(tmp_path)
    assert cache.put(KEY, sample_entry())
    forged = seal(secrets.token_bytes(32), KEY, encode(sample_entry(b"\xcc" * 64)))
    cache.path(KEY).write_bytes(forged)
    got, messages = _caught(lambda: KernelCache(tmp_path).get(KEY))
    assert got is None and any("forged" in m for m in messages)
    assert not cache.path(KEY).exists()  # removed: the next compile stores a good one


def test_an_entry_is_bound_to_its_key(tmp_path):
    cache = KernelCache(tmp_path)
    other = "o" * 64
    assert cache.put(KEY, sample_entry()) and cache.put(other, sample_entry(b"\xcc"))
    cache.path(KEY).write_bytes(cache.path(other).read_bytes())
    got, messages = _caught(lambda: KernelCache(tmp_path).get(KEY))
    assert got is None and any("forged" in m for m in messages)
    assert KernelCache(tmp_path).get(other) == sample_entry(b"\xcc")


def test_a_program_text_signed_with_another_key_is_refused(tmp_path):
    programs = ProgramCache(tmp_path)
    assert programs.put(KEY, "the text")
    path = programs.entries.path(KEY)
    data = path.read_bytes()
    path.write_bytes(seal(secrets.token_bytes(32), KEY, data.replace(b"the", b"bad")))
    got, messages = _caught(lambda: ProgramCache(tmp_path).get(KEY))
    assert got is None and any(str(path) in m and "forged" in m for m in messages)
    assert ProgramCache(tmp_path).put(KEY, "the text")
    assert ProgramCache(tmp_path).get(KEY) == "the text"


def test_every_byte_of_an_entry_is_covered_by_its_tag(tmp_path):
    cache = KernelCache(tmp_path)
    assert cache.put(KEY, sample_entry())
    data = cache.path(KEY).read_bytes()
    key = (tmp_path / KEY_FILE).read_bytes()
    assert authentic(key, KEY, data)
    for at in range(len(data)):  # header (magic, version, length), tag and payload
        flipped = bytearray(data)
        flipped[at] ^= 0x01
        assert not authentic(key, KEY, bytes(flipped)), at


def test_a_program_comes_back_with_its_text(tmp_path):
    import stripeml

    exe = stripeml.compile("function (A[N]) -> (B) { B = exp(A) + 1; }", target="interp").lower(
        np.zeros(5, np.float32)
    )
    assert ProgramCache(tmp_path).put(KEY, exe.ir, exe.program)
    text, program = ProgramCache(tmp_path).get_program(KEY)
    assert text == exe.ir and program == exe.program
    assert ProgramCache(tmp_path).get(KEY) == exe.ir
    assert ProgramCache(tmp_path).put(KEY, "text only")
    assert ProgramCache(tmp_path).get_program(KEY) == ("text only", None)


class _Touch:
    """What a pickle must never do from a cache entry: call anything (here: create
    the file ``path``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


@pytest.mark.parametrize("where", ["summary", "program"])
@pytest.mark.parametrize("kind", ["call", "not a program"])
def test_an_authentic_entry_unpickles_ir_nodes_only(tmp_path, kind, where):
    """Even an entry with a good tag (written by a broken or hostile stripeml with the
    key) cannot make the program cache run or return anything but a program (nor
    a summary of one)."""
    import pickle
    import struct

    from stripeml.runtime.cache_store import pack
    from stripeml.runtime.kernel_cache import PROGRAM_FORMAT_VERSION, PROGRAM_MAGIC

    marker = tmp_path / "ran"
    payload = _Touch(marker) if kind == "call" else {"not": "a program"}
    programs = ProgramCache(tmp_path)
    text = b"block [] #program () {\n}\n"
    summary = pickle.dumps(payload if where == "summary" else ((), [], [], []))
    program = pickle.dumps(payload if where == "program" else None)
    data = struct.pack("<Q", len(text)) + text + struct.pack("<Q", len(summary)) + summary + program
    assert programs.entries.store(KEY, pack(PROGRAM_MAGIC, PROGRAM_FORMAT_VERSION, data))
    got, messages = _caught(lambda: ProgramCache(tmp_path).get_program(KEY))
    assert got is None and any("is not an IR node" in m or "not a program" in m for m in messages)
    assert not programs.entries.path(KEY).exists()  # removed: the next compile rewrites it
    assert not marker.exists()  # nothing was called
