"""Read-only inputs passed again (a function's constants, a model's weights) are
bound once per frame and then skipped by each call (``SeenInputs.settle``):
the results still follow every array actually passed, checked against NumPy."""

from __future__ import annotations

import numpy as np

import stripeml

SOURCE = "function (X[N], W[N], B[N]) -> (Y) { Y = X * W + B; }"


def _counting(compiled):
    """Count the inputs ``compiled`` looks up in its cache of inputs seen before."""
    seen = compiled._seen
    calls = [0]
    real = seen.get

    class Counting:
        def get(self, slot, value):
            calls[0] += 1
            return real(slot, value)

        def __getattr__(self, name):  # the rest of the cache as it is
            return getattr(seen, name)

    compiled._seen = Counting()
    return calls


def _read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.setflags(write=False)
    return a


def test_constants_are_settled_and_calls_still_follow_their_inputs() -> None:
    rng = np.random.default_rng(0)
    w = _read_only(rng.standard_normal(64).astype(np.float32))
    b = _read_only(rng.standard_normal(64).astype(np.float32))
    f = stripeml.compile(SOURCE, target="cpu", constants={"W": w, "B": b})
    xs = [rng.standard_normal(64).astype(np.float32) for _ in range(5)]
    exe = f.lower(xs[0])
    calls = _counting(exe._compiled)
    for x in xs:
        np.testing.assert_allclose(f(x), x * w + b, rtol=1e-5, atol=1e-6)
    # calls 1-3 look up all three inputs (the cache of inputs seen before holds
    # an array from its second call on, so the third finds W and B and binds
    # them); from the fourth on, only X: 3 + 3 + 3 + 1 + 1
    assert calls[0] == 11


def test_another_read_only_array_unsettles_and_memory_is_not_copied() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(64).astype(np.float32)
    w1 = _read_only(rng.standard_normal(64).astype(np.float32))
    base = rng.standard_normal(64).astype(np.float32)
    w2 = base.view()
    w2.setflags(write=False)  # read-only, over memory its base may change
    b = _read_only(np.zeros(64, np.float32))
    f = stripeml.compile(SOURCE, target="cpu")
    c = f.lower(x, w1, b)._compiled

    def run(w: np.ndarray) -> np.ndarray:
        return c.run({"X": x, "W": w, "B": b})["Y"]

    for w in (w1, w1, w1, w2, w2, w2, w1, w1):
        np.testing.assert_allclose(run(w), x * w, rtol=1e-6)
    base[:] = 3.0  # the settled array's memory changed: the next call reads it
    np.testing.assert_allclose(run(w2), x * 3.0, rtol=1e-6)
    np.testing.assert_allclose(run(w1), x * w1, rtol=1e-6)


def test_a_writable_input_passed_again_is_read_again() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal(64).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)  # writable: never settled
    b = np.zeros(64, np.float32)
    f = stripeml.compile(SOURCE, target="cpu")
    for k in range(4):
        w[:] = k + 1
        np.testing.assert_allclose(f(x, w, b), x * (k + 1), rtol=1e-6)
