"""The GPU backends: the tiling pipeline against tiling disabled, and CUDA against PyTorch.

Run::

    .venv/bin/python bench/bench_gpu.py                 # every case that can run here
    .venv/bin/python bench/bench_gpu.py --quick         # fewer repetitions, smaller sizes
    .venv/bin/python bench/bench_gpu.py --cases pocl_matmul_1024

One JSON line per case:

``pocl_matmul_1024`` (OpenCL, ``target="opencl_pocl"``)
    ``tiled_s``: the median call with the target's pipeline (autotile,
    ``cache`` into local memory, ``place``); ``untiled_s``: the same target
    with those three passes removed (one work-item per output element, no
    local memory); ``speedup`` = untiled / tiled; ``numpy_s`` for scale.
``cuda_matmul_4096``, ``cuda_conv3x3``, ``cuda_softmax_8192`` (``target="cuda"``)
    ``stripeml_s`` and ``torch_s`` (PyTorch on the same GPU, synchronised),
    ``ratio_vs_torch`` = torch / stripeml; only when a CUDA GPU and a CUDA
    build of PyTorch are present, else ``skipped`` says why.

Every result is checked against NumPy (``ok``, ``max_err``: relative to the
largest reference magnitude).  Times include the host<->device copies of the
inputs and outputs (the public call does them).  Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

import numpy as np

import stripeml
from stripeml.targets import load_target

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
CONV = """function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co : N, X, Y, CO] = +(I[n, x + kx - 1, y + ky - 1, ci] * K[kx, ky, ci, co]);
}"""
SOFTMAX = """function (X[N, M]) -> (O) {
    Mx[n, 0 : N, 1] = >(X[n, m]);
    E = exp(X - Mx);
    S[n, 0 : N, 1] = +(E[n, m]);
    O = E / S;
}"""
TILING = ("autotile", "cache", "place")


def median_time(fn, repeats: int) -> float:
    fn()  # warm up (compile, first touch)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    scale = float(np.max(np.abs(want))) or 1.0
    return float(np.max(np.abs(got.astype(np.float64) - want)) / scale)


def pocl_matmul(n: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    want = a.astype(np.float64) @ b
    target = load_target("opencl_pocl")
    untiled = dataclasses.replace(
        target, pipeline=tuple(p for p in target.pipeline if p.name not in TILING)
    )
    row: dict = {"case": f"pocl_matmul_{n}", "sizes": [n, n, n], "target": "opencl_pocl"}
    for label, t in (("tiled", target), ("untiled", untiled)):
        f = stripeml.compile(MATMUL, target=t)
        got = f(a, b)
        row[f"{label}_s"] = median_time(lambda f=f: f(a, b), repeats)
        row[f"{label}_max_err"] = rel_err(got, want)
    row["speedup"] = row["untiled_s"] / row["tiled_s"]
    row["numpy_s"] = median_time(lambda: a @ b, max(repeats, 5))
    row["ok"] = max(row["tiled_max_err"], row["untiled_max_err"]) < 1e-4
    return row


def _cuda_ready() -> str:
    try:
        from stripeml.runtime.cuda import gpu_available
    except ImportError as exc:
        return f"the cuda extra is not installed ({exc})"
    ok, why = gpu_available()
    if not ok:
        return why
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "this PyTorch build has no CUDA"
    return ""


def cuda_case(name: str, quick: bool, repeats: int) -> dict:
    why = _cuda_ready()
    if why:
        return {"case": name, "target": "cuda", "skipped": why}
    import torch

    rng = np.random.default_rng(0)
    if name == "cuda_matmul_4096":
        n = 1024 if quick else 4096
        args = [rng.uniform(-1, 1, (n, n)).astype(np.float32) for _ in range(2)]
        src, sizes = MATMUL, [n, n, n]

        def ref(a, b):
            return a @ b
    elif name == "cuda_conv3x3":
        args = [
            rng.uniform(-1, 1, (8, 56, 56, 64)).astype(np.float32),
            rng.uniform(-1, 1, (3, 3, 64, 64)).astype(np.float32),
        ]
        src, sizes = CONV, [8, 56, 56, 64, 64]

        def ref(i, k):
            x = i.permute(0, 3, 1, 2)
            w = k.permute(3, 2, 0, 1)
            return torch.nn.functional.conv2d(x, w, padding=1).permute(0, 2, 3, 1)
    else:
        n = 2048 if quick else 8192
        args = [rng.uniform(-1, 1, (n, n)).astype(np.float32)]
        src, sizes = SOFTMAX, [n, n]

        def ref(x):
            return torch.softmax(x, dim=1)

    f = stripeml.compile(src, target="cuda")
    got = f(*args)
    dev = [torch.from_numpy(a).cuda() for a in args]
    want = ref(*dev).cpu().numpy().astype(np.float64)

    def run_torch():
        ref(*dev)
        torch.cuda.synchronize()

    return {
        "case": name,
        "target": "cuda",
        "sizes": sizes,
        "stripeml_s": (s := median_time(lambda: f(*args), repeats)),
        "torch_s": (t := median_time(run_torch, repeats)),
        "ratio_vs_torch": t / s,
        "max_err": (e := rel_err(got, want)),
        "ok": e < 1e-3,
        "note": "stripeml times include host<->device copies; torch's do not",
    }


CASES = ["pocl_matmul_1024", "cuda_matmul_4096", "cuda_conv3x3", "cuda_softmax_8192"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, smaller sizes")
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else 5
    status = 0
    for case in args.cases.split(","):
        if case.startswith("pocl_matmul"):
            n = 512 if args.quick else int(case.rsplit("_", 1)[1])
            row = pocl_matmul(n, repeats)
        elif case in CASES:
            row = cuda_case(case, args.quick, repeats)
        else:
            print(f"unknown case {case!r} (known: {', '.join(CASES)})", file=sys.stderr)
            return 2
        row["cpus"] = len(os.sched_getaffinity(0))
        print(json.dumps(row), flush=True)
        if row.get("ok") is False:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
