"""What the CPU runtime learns of a program at its second call (which reused
temporaries to zero again, which fresh outputs need no zeroing) is kept in the
disk cache, so a later process reads it instead of analysing the program with
isl (``runtime/program_facts.py``).  Every call is checked against NumPy: a
wrong fact would leave a reused sum's temporary holding the last call's
values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import stripeml
from stripeml.analysis import liveness
from stripeml.runtime import program_facts
from stripeml.runtime.cache_root import CacheRoot
from stripeml.runtime.cache_store import EntryFolder, pack

# S is a temporary summed into (its zeros are read), so a reused S must be zeroed
# again before each call; Y is written all over.
SRC = """function (A[M, K], B[M]) -> (Y) {
    S[m : M] = +(A[m, k]);
    Y = S * B;
}"""


def _calls(seed: int, count: int = 3) -> None:
    """``count`` calls of a fresh compile of SRC, each against NumPy."""
    f = stripeml.compile(SRC, target="cpu")
    rng = np.random.default_rng(seed)
    for _ in range(count):
        a = rng.standard_normal((64, 48)).astype(np.float32)
        b = rng.standard_normal(64).astype(np.float32)
        np.testing.assert_allclose(f(a, b), a.sum(axis=1) * b, rtol=1e-5, atol=1e-5)


def _facts(cache: Path) -> list[Path]:
    return sorted((cache / "facts").glob("*.facts"))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    return tmp_path


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    asked: list[str] = []
    for name in ("initial_reads", "written_outputs"):
        real = getattr(liveness, name)

        def counted(program, _real=real, _name=name):  # noqa: ANN001, ANN202
            asked.append(_name)
            return _real(program)

        monkeypatch.setattr(liveness, name, counted)
    return asked


def test_a_later_compile_reads_the_second_calls_analysis(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _counted(monkeypatch)
    _calls(0)
    assert sorted(asked) == ["initial_reads", "written_outputs"] and len(_facts(cache)) == 1
    asked.clear()
    _calls(1)  # its program entry and its facts come from the cache
    assert asked == []


def test_a_fact_naming_other_buffers_is_computed_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _calls(0)
    (entry,) = _facts(cache)
    # signed with the cache's own key, but naming buffers the program lacks
    folder = EntryFolder(
        CacheRoot(cache), "facts", program_facts.MAGIC, program_facts.VERSION, "facts"
    )
    bad = b'{"initial_reads": ["nope"], "written_outputs": []}'
    assert folder.store(entry.stem, pack(program_facts.MAGIC, program_facts.VERSION, bad))
    asked = _counted(monkeypatch)
    _calls(2)
    assert sorted(asked) == ["initial_reads", "written_outputs"]


def test_a_changed_fact_file_is_refused(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _calls(0)
    (entry,) = _facts(cache)
    data = bytearray(entry.read_bytes())
    data[-3:] = b"[]}"  # no longer matches its HMAC
    entry.write_bytes(bytes(data))
    asked = _counted(monkeypatch)
    with pytest.warns(RuntimeWarning, match="HMAC"):
        _calls(3)
    assert sorted(asked) == ["initial_reads", "written_outputs"]
