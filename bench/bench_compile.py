"""How long the front of the compiler takes on a 10-statement Tile program.

Cases (JSON lines, fields as documented in ``bench/run.py``):

``compile``
    ``stripeml.compile(source)``: parse and check, before any shape is bound.
``lower``
    ``f.lower(*inputs)`` on a fresh ``Function`` each repetition: bind the
    shapes, lower to Stripe, run the target's passes (an on-disk kernel cache,
    where the target has one, may answer part of this).
``lower_cached``
    ``f.lower(*inputs)`` again on the same ``Function``: the in-memory cache.

There is no baseline: NumPy has nothing to compile.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

import stripeml

SOURCE = """\
function (X[M, K], W[K, N], B[N], G[N]) -> (Y) {
    Z[m, n : M, N] = +(X[m, k] * W[k, n]);
    A = Z + B;
    R = relu(A);
    Mx[m, 0 : M, 1] = >(R[m, n]);
    E = exp(R - Mx);
    S[m, 0 : M, 1] = +(E[m, n]);
    P = E / S;
    Q = P * G;
    T[n, m : N, M] = =(Q[m, n]);
    Y[n, 0 : N, 1] = +(T[n, m]);
}
"""
SIZES = {"M": 64, "K": 32, "N": 48}
REPEATS = 20
TARGET = "interp"


def median_seconds(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    """Median wall time of ``repeats`` calls of ``fn``, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def record(case: str, seconds: float, target: str | None) -> str:
    return json.dumps(
        {
            "bench": "compile",
            "case": case,
            "sizes": SIZES,
            "threads": 1,
            "target": target,
            "repeats": REPEATS,
            "statements": 10,
            "stripeml_s": seconds,
            "baselines": {},
        }
    )


def main() -> int:
    rng = np.random.default_rng(0)
    m, k, n = SIZES["M"], SIZES["K"], SIZES["N"]
    inputs = [
        rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (k, n), (n,), (n,))
    ]

    print(record("compile", median_seconds(lambda: stripeml.compile(SOURCE, target=TARGET)), None))

    def lower_fresh() -> object:
        f = stripeml.compile(SOURCE, target=TARGET)
        start = time.perf_counter()
        f.lower(*inputs)
        return time.perf_counter() - start

    lower_fresh()  # warm-up: imports, target loading
    fresh = statistics.median(lower_fresh() for _ in range(REPEATS))
    print(record("lower", fresh, TARGET))

    f = stripeml.compile(SOURCE, target=TARGET)
    print(record("lower_cached", median_seconds(lambda: f.lower(*inputs)), TARGET))
    return 0


if __name__ == "__main__":
    sys.exit(main())
