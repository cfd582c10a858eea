"""A program links the kernel bodies another program of the process holds
already instead of loading them again (``runtime/jit.py``, ``LoadedObject``):
a transformer's second sequence length shares most of its bodies with the
first.  The programs compute what NumPy does, a program keeps the engine of
the bodies it links alive, and a body whose engine is gone is loaded again."""

from __future__ import annotations

import gc

import numpy as np

import stripeml
from stripeml.runtime import jit

SOURCE = """function (X[M, K], W[K, N], B[N]) -> (Y) {
    A[m, n : M, N] = +(X[m, k] * W[k, n]);
    Y = relu(A + B);
}"""


def _arrays(m: int) -> list[np.ndarray]:
    rng = np.random.default_rng(m)
    return [rng.standard_normal(s).astype(np.float32) for s in ((m, 96), (96, 80), (80,))]


def _reference(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(x.astype(np.float64) @ w + b, 0)


def _loaded(f, arrays):
    exe = f.lower(*arrays)
    return exe._compiled._loaded


def test_a_second_program_links_the_bodies_the_first_holds(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    a = _arrays(64)
    first = stripeml.compile(SOURCE, target="cpu")
    held = _loaded(first, a)
    loads = jit.STATS["load"]
    # the same program in another Function: its entry and bodies come from the
    # disk cache, and every body is linked from the first engine
    second = stripeml.compile(SOURCE, target="cpu")
    linked = _loaded(second, a)
    assert jit.STATS["load"] == loads + 1
    assert linked is not held and held in linked._uses
    assert linked._objects == []  # every body linked from the first engine
    np.testing.assert_allclose(second(*a), _reference(*a), rtol=1e-4, atol=1e-4)
    # the first program gone, the second still runs its bodies
    del first, held
    gc.collect()
    np.testing.assert_allclose(second(*a), _reference(*a), rtol=1e-4, atol=1e-4)


def test_a_body_whose_engine_is_gone_is_loaded_again(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    a = _arrays(48)
    first = stripeml.compile(SOURCE, target="cpu")
    n = len(_loaded(first, a)._objects)
    assert n >= 1  # at least one body
    del first
    gc.collect()
    again = stripeml.compile(SOURCE, target="cpu")
    loaded = _loaded(again, a)
    assert len(loaded._objects) == n and not loaded._uses
    np.testing.assert_allclose(again(*a), _reference(*a), rtol=1e-4, atol=1e-4)
