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


def _first_call(monkeypatch: pytest.MonkeyPatch):
    """A fresh compile of SRC called once, with every first call counted as a
    model's (``LEARN_S`` 0): its facts are to be learnt in the next gap."""
    from stripeml.runtime import cpu_run

    monkeypatch.setattr(cpu_run, "LEARN_S", 0.0)
    f = stripeml.compile(SRC, target="cpu")
    rng = np.random.default_rng(11)
    a = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    np.testing.assert_allclose(f(a, b), a.sum(axis=1) * b, rtol=1e-5, atol=1e-5)
    return f, a, b


def _wait(predicate, seconds: float = 10.0) -> bool:
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_a_models_facts_are_learnt_in_the_gap_after_its_first_call(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second call of a model no longer works out the facts (0.05-0.08 s of
    isl for BERT-base and ResNet-50): a thread does, between the calls."""
    asked = _counted(monkeypatch)
    f, a, b = _first_call(monkeypatch)
    facts = f.lower(a, b)._compiled._facts
    assert _wait(lambda: facts.known)  # no second call yet
    assert sorted(asked) == ["initial_reads", "written_outputs"]
    for k in range(3):  # the calls after: the same answers, not worked out again
        x = a + k
        np.testing.assert_allclose(f(x, b), x.sum(axis=1) * b, rtol=1e-5, atol=1e-5)
    assert len(asked) == 2
    assert _facts(cache)  # stored for the next process, as the second call stores them


def test_calls_back_to_back_leave_the_facts_to_the_second_call(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a call's kernels run (a pool's lock held) there is no gap: after
    ``LEARN_WAIT_S`` the thread leaves the facts, and the second call works them
    out itself, with the right results."""
    from stripeml.runtime import native_pool

    pool = native_pool.pool(1)
    if pool is None:
        pytest.skip(native_pool.unavailable() or "no native pool")
    monkeypatch.setattr(program_facts, "LEARN_WAIT_S", 0.2)
    asked = _counted(monkeypatch)
    assert pool._busy.acquire(blocking=False)
    try:
        f, a, b = _first_call(monkeypatch)
        facts = f.lower(a, b)._compiled._facts
        assert not _wait(lambda: facts.known, 0.6)
    finally:
        pool._busy.release()
    assert asked == []
    np.testing.assert_allclose(f(2 * a, b), (2 * a).sum(axis=1) * b, rtol=1e-5, atol=1e-5)
    assert facts.known and sorted(asked) == ["initial_reads", "written_outputs"]


def test_a_short_first_call_leaves_them_to_the_second(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first call under ``LEARN_S`` (a test's, a small kernel's) starts nothing:
    most such programs are never called again."""
    from stripeml.runtime import cpu_run

    monkeypatch.setattr(cpu_run, "LEARN_S", 60.0)
    asked = _counted(monkeypatch)
    f = stripeml.compile(SRC, target="cpu")
    a = np.ones((64, 48), np.float32)
    b = np.ones(64, np.float32)
    np.testing.assert_allclose(f(a, b), np.full(64, 48.0), rtol=1e-6)
    facts = f.lower(a, b)._compiled._facts
    assert not _wait(lambda: facts.known, 0.3) and asked == []
