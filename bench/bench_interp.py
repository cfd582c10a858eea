"""Benchmark of the NumPy reference interpreter (``target="interp"``).

Run: ``.venv/bin/python bench/bench_interp.py [--repeat N] [--general]``.
Prints one JSON line per case with the median time of the interpreter
(``mode="auto"``: the kernel fast path where it applies) and of a NumPy
baseline measured in the same run; ``--general`` adds the general path's time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from runtime.programs_ir import conv2d, matmul  # noqa: E402
from stripeml.runtime.interp import run  # noqa: E402


def median_time(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def conv_numpy(i: np.ndarray, k: np.ndarray) -> np.ndarray:
    """im2col with sliding windows, then one einsum (padding 1, stride 1)."""
    ip = np.pad(i, ((0, 0), (1, 1), (1, 1), (0, 0)))
    win = np.lib.stride_tricks.sliding_window_view(ip, k.shape[:2], axis=(1, 2))
    return np.einsum("nxycab,abcd->nxyd", win, k, optimize=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--general", action="store_true", help="also time the general path")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 256)).astype(np.float32)
    i = rng.standard_normal((1, 56, 56, 64)).astype(np.float32)
    k = rng.standard_normal((3, 3, 64, 64)).astype(np.float32)
    cases = [
        ("matmul", {"M": 256, "N": 256, "K": 256}, matmul(256, 256, 256), {"A": a, "B": b},
         lambda: a @ b),
        ("conv2d_3x3_pad1", {"N": 1, "X": 56, "Y": 56, "CI": 64, "CO": 64, "KX": 3, "KY": 3},
         conv2d(1, 56, 56, 64, 64), {"I": i, "K": k}, lambda: conv_numpy(i, k)),
    ]  # fmt: skip
    for name, sizes, prog, inputs, baseline in cases:
        got = next(iter(run(prog, inputs).values()))
        np.testing.assert_allclose(got, baseline(), rtol=1e-3, atol=1e-3)
        stripeml_s = median_time(lambda p=prog, x=inputs: run(p, x), args.repeat)
        numpy_s = median_time(baseline, args.repeat)
        row = {
            "bench": "interp",
            "case": name,
            "sizes": sizes,
            "threads": os.cpu_count(),
            "target": "interp",
            "repeats": args.repeat,
            "stripeml_s": stripeml_s,
            "baselines": {"numpy": numpy_s},
            "ratio_vs_numpy": numpy_s / stripeml_s,
        }
        if args.general:
            row["stripeml_interp_general_s"] = median_time(
                lambda p=prog, x=inputs: run(p, x, mode="general"), max(1, args.repeat // 2)
            )
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
