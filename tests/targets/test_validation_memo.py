"""Pipelines validated before load without building their passes (warm starts).

``stripeml.api`` gives the target loader the runtime's record of validated
pipelines (``ValidatedPipelines``, authenticated entries in the disk cache):
a pipeline seen before, with the same resolved options and compiler sources,
loads with deferred entries, built at first use.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import stripeml.api  # noqa: F401 - sets the memo, as any compile does
from stripeml.errors import TargetError
from stripeml.passes import make_pass
from stripeml.runtime.kernel_cache import ValidatedPipelines
from stripeml.targets import TARGETS_DIR, loader, target_from_toml

from .helpers import HEADER

CPU = (TARGETS_DIR / "cpu.toml").read_text(encoding="utf-8")


class _Recorder:
    """A memo that has seen what ``seen`` says and records what is added."""

    def __init__(self, seen: bool) -> None:
        self.answer = seen
        self.added: list[str] = []

    def seen(self, description: str) -> bool:
        return self.answer

    def add(self, description: str) -> None:
        self.added.append(description)


@pytest.fixture
def memo():
    """Put back the loader's memo after a test replaced it."""
    before = loader._MEMO
    yield
    loader.set_validation_memo(before)


def test_second_load_defers_and_builds_the_same_passes(tmp_path, monkeypatch, memo) -> None:
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "cache"))
    loader.set_validation_memo(ValidatedPipelines())
    first = target_from_toml(CPU, source="cpu.toml")
    assert all(spec.built is not None for spec in first.pipeline)
    second = target_from_toml(CPU, source="cpu.toml")
    assert second.pipeline and all(spec.built is None for spec in second.pipeline)
    assert second == first and second.fingerprint() == first.fingerprint()
    # built on first use: the objects the options make, the same as at the first load
    assert second.passes == first.passes
    assert [repr(p) for p in second.passes] == [
        repr(make_pass(s.name, **dict(s.options))) for s in first.pipeline
    ]
    assert all(spec.built is not None for spec in second.pipeline)


def test_another_cache_folder_validates_again(tmp_path, monkeypatch, memo) -> None:
    loader.set_validation_memo(ValidatedPipelines())
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "one"))
    target_from_toml(CPU, source="cpu.toml")
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "two"))
    again = target_from_toml(CPU, source="cpu.toml")
    assert all(spec.built is not None for spec in again.pipeline)


def test_a_changed_option_is_validated_at_load(tmp_path, monkeypatch, memo) -> None:
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    loader.set_validation_memo(ValidatedPipelines())
    good = HEADER + '[[pipeline]]\npass = "fuse"\noptions = { eltwise = false }\n'
    target_from_toml(good, source="good.toml")
    target_from_toml(good, source="good.toml")  # remembered now
    bad = HEADER + '[[pipeline]]\npass = "fuse"\noptions = { eltwise = 3 }\n'
    with pytest.raises(TargetError, match=r"bad.toml: pipeline\[0\]\.options\.eltwise"):
        target_from_toml(bad, source="bad.toml")


def test_a_forged_memo_only_defers_the_error(memo) -> None:
    loader.set_validation_memo(_Recorder(seen=True))
    bad = HEADER + '[[pipeline]]\npass = "fuse"\noptions = { no_such_option = 1 }\n'
    target = target_from_toml(bad, source="bad.toml")  # trusted: not built
    with pytest.raises(
        TargetError, match=r"pipeline entry fuse\(no_such_option=1\).*no_such_option"
    ):
        target.passes  # noqa: B018
    unknown = target_from_toml(HEADER + '[[pipeline]]\npass = "nope"\n', source="x.toml")
    with pytest.raises(TargetError, match="unknown pass 'nope'"):
        unknown.passes  # noqa: B018


def test_structure_is_checked_even_when_remembered(memo) -> None:
    loader.set_validation_memo(_Recorder(seen=True))
    with pytest.raises(TargetError, match=r"pipeline\[0\]\.options\.size: unknown reference"):
        target_from_toml(
            HEADER + '[[pipeline]]\npass = "fuse"\noptions = { size = "$nope" }\n', source="t"
        )


def test_registered_passes_are_not_remembered(probe_pass, memo) -> None:
    recorder = _Recorder(seen=False)
    loader.set_validation_memo(recorder)
    target_from_toml(HEADER + '[[pipeline]]\npass = "probe"\n', source="t")
    assert recorder.added == []
    target_from_toml(HEADER + '[[pipeline]]\npass = "dce"\n', source="t")
    assert len(recorder.added) == 1 and "'dce'" in recorder.added[0]


_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import stripeml
    f = stripeml.compile("function (A[N]) -> (B) { B = A * 2 + 1; }", target="cpu")
    a = np.arange(37, dtype=np.float32)
    ok = bool(np.array_equal(f(a), a * 2 + 1))
    print(json.dumps({"ok": ok, "passes": "stripeml.passes" in sys.modules,
                      "islpy": "islpy" in sys.modules}))
    """
)


def test_a_warm_start_imports_no_pass(tmp_path: Path) -> None:
    env_cache = {"STRIPEML_CACHE_DIR": str(tmp_path)}

    def child() -> dict:
        import os

        out = subprocess.run(
            [sys.executable, "-c", _CHILD],
            env={**os.environ, **env_cache},
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    cold = child()
    assert cold == {"ok": True, "passes": True, "islpy": True}
    warm = child()
    assert warm == {"ok": True, "passes": False, "islpy": False}
