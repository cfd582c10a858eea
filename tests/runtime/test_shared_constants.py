"""Constant layouts shared between the programs of one model (runtime/shared_constants.py):
a second input shape reuses the first's weight layouts; other weights never do."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.runtime import kept_layouts, shared_constants

MATMUL = "function (A[M, K], W[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * W[k, n]); }"


def _kept(exe) -> dict:
    compiled = exe._compiled
    return {compiled._buffers[k].info.name: a for k, a in compiled._kept_storage.items()}


def _run(f, m: int, k: int = 64) -> tuple:
    a = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
    return a, f(a), f.lower(a)


def test_a_second_shape_takes_the_first_shapes_layouts() -> None:
    w = np.random.default_rng(0).standard_normal((64, 192)).astype(np.float32)
    f = stripeml.compile(MATMUL, target="cpu", constants={"W": w})
    a1, c1, e1 = _run(f, 32)
    a2, c2, e2 = _run(f, 64)  # the same tile as 32 rows (4 of them), so the same panels
    np.testing.assert_allclose(c1, a1 @ w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(c2, a2 @ w, rtol=1e-4, atol=1e-4)
    first, second = _kept(e1), _kept(e2)
    assert first, "the pipeline lays W out as a constant temporary"
    shared = [n for n in second if n in first and second[n] is first[n]]
    assert shared  # the same array, computed once
    assert e2._compiled._reuse.skip  # and its constant statements were not run again


def test_other_weights_are_never_taken() -> None:
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((64, 192)).astype(np.float32)
    w2 = w1 + 1.0
    f1 = stripeml.compile(MATMUL, target="cpu", constants={"W": w1})
    f2 = stripeml.compile(MATMUL, target="cpu", constants={"W": w2})
    a, c1, e1 = _run(f1, 32)
    _, c2, e2 = _run(f2, 32)
    np.testing.assert_allclose(c1, a @ w1, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(c2, a @ w2, rtol=1e-4, atol=1e-4)
    k1, k2 = _kept(e1), _kept(e2)
    assert k1 and k2, "both lay W out"
    assert not any(k2[n] is k1.get(n) for n in k2)


def test_equal_values_in_another_array_are_computed_again() -> None:
    """Identity, not equality, names a parameter: nothing is hashed, nothing is assumed."""
    w = np.random.default_rng(2).standard_normal((64, 192)).astype(np.float32)
    f1 = stripeml.compile(MATMUL, target="cpu", constants={"W": w})
    f2 = stripeml.compile(MATMUL, target="cpu", constants={"W": w.copy()})
    _, _, e1 = _run(f1, 16)
    a, c2, e2 = _run(f2, 16)
    np.testing.assert_allclose(c2, a @ w, rtol=1e-4, atol=1e-4)
    assert _kept(e1) and _kept(e2), "both lay W out"
    assert not any(v is _kept(e1).get(n) for n, v in _kept(e2).items())


def test_layouts_are_freed_with_their_programs() -> None:
    import gc

    w = np.random.default_rng(3).standard_normal((64, 320)).astype(np.float32)
    kept_layouts.wait_writes()  # (a pending write holds the layouts it writes)
    gc.collect()  # what earlier tests left
    before = len(shared_constants.REGISTRY)
    f = stripeml.compile(MATMUL, target="cpu", constants={"W": w})
    _run(f, 8)
    shared_constants.flush()  # what the next program's plan does (a first one defers)
    assert len(shared_constants.REGISTRY) > before
    del f
    kept_layouts.wait_writes()  # (the layouts' file, written once the first call is done)
    gc.collect()
    assert len(shared_constants.REGISTRY) == before, (len(shared_constants.REGISTRY), before)


@pytest.mark.parametrize("order", [(32, 48), (48, 32)])
def test_results_do_not_depend_on_which_shape_came_first(order) -> None:
    w = np.random.default_rng(4).standard_normal((64, 192)).astype(np.float32)
    f = stripeml.compile(MATMUL, target="cpu", constants={"W": w})
    for m in order:
        a, c, _ = _run(f, m)
        np.testing.assert_allclose(c, a @ w, rtol=1e-4, atol=1e-4)


def _idle() -> None:
    """No program of earlier tests left registered or deferred."""
    import gc

    kept_layouts.wait_writes()  # (a pending write holds the layouts it writes)
    gc.collect()
    shared_constants.flush()
    gc.collect()
    assert shared_constants.idle()


def test_a_first_program_computes_no_value_ids(monkeypatch) -> None:
    """With nothing to share with (a warm start's one program), the first call
    canonicalises no constant statement; the next program still shares."""
    _idle()
    steps: list[int] = []
    real = shared_constants._step
    monkeypatch.setattr(shared_constants, "_step", lambda p, k: steps.append(k) or real(p, k))
    w = np.random.default_rng(5).standard_normal((64, 192)).astype(np.float32)
    f = stripeml.compile(MATMUL, target="cpu", constants={"W": w})
    a1, c1, e1 = _run(f, 32)
    np.testing.assert_allclose(c1, a1 @ w, rtol=1e-4, atol=1e-4)
    assert _kept(e1), "the pipeline lays W out as a constant temporary"
    assert steps == [], "no value ids for the only program"
    a2, c2, e2 = _run(f, 64)  # a second program: the first registers, then it plans
    np.testing.assert_allclose(c2, a2 @ w, rtol=1e-4, atol=1e-4)
    assert steps, "ids worked out once another program asks"
    first, second = _kept(e1), _kept(e2)
    assert any(second[n] is first[n] for n in second if n in first)
    assert e2._compiled._reuse.skip
    np.testing.assert_allclose(f(a1), a1 @ w, rtol=1e-4, atol=1e-4)  # still right


def test_a_deferred_program_that_is_gone_offers_nothing() -> None:
    import gc

    _idle()
    w = np.random.default_rng(6).standard_normal((64, 192)).astype(np.float32)
    f = stripeml.compile(MATMUL, target="cpu", constants={"W": w})
    _run(f, 16)
    del f
    kept_layouts.wait_writes()  # (a pending write holds the layouts it writes)
    gc.collect()
    shared_constants.flush()
    assert len(shared_constants.REGISTRY) == 0 and shared_constants.idle()
    g = stripeml.compile(MATMUL, target="cpu", constants={"W": w + 1.0})
    a, c, _ = _run(g, 16)
    np.testing.assert_allclose(c, a @ (w + 1.0), rtol=1e-4, atol=1e-4)
