"""``stripeml.grad`` on the CPU: a gradient against twice its forward, in one run.

Run: ``.venv/bin/python bench/bench_grad.py [--repeat N] [--target cpu]``.

Cases: the gradient of a 1024x1024x1024 matmul with respect to both inputs,
and of a 3x3 same-padded convolution 1x56x56x64 -> 64 with respect to the
image and the kernel.  Reverse mode costs about two forward passes here (one
contraction per input, each as large as the forward), so the baseline
``2x_forward`` is twice the median forward time of the same function,
measured in the same run; ``ratio_vs_2x_forward`` above 1 means the gradient
is cheaper than that.  Where PyTorch is installed, ``torch_backward`` is its
``torch.autograd.grad`` of the same forward (backward only, graph kept).

One JSON line per case (fields as in ``bench/run.py``, plus ``forward_s``,
``ratio_vs_2x_forward``, ``ok`` (the gradients against NumPy / PyTorch,
allclose with ``rtol=1e-3``) and ``load_avg_1m``).  Timing: after a warm-up,
blocks of ``--block`` consecutive calls alternate between contenders, with a
50 ms pause before each block; each median is over ``--repeat`` calls.
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
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import stripeml  # noqa: E402

MATMUL = """function (A[M, K], B[K, N]) -> (C) {
    C[m, n : M, N] = +(A[m, k] * B[k, n]);
}"""
CONV = """function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co : N, X, Y, CO] = +(I[n, x + kx - KX / 2, y + ky - KY / 2, ci] * K[kx, ky, ci, co]);
}"""
PAUSE_S = 0.05


def time_blocks(fns: dict[str, Callable[[], Any]], repeat: int, block: int) -> dict[str, float]:
    """Median seconds per call of each function, timed in alternating blocks."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    while min(len(t) for t in times.values()) < repeat:
        for name, fn in fns.items():
            time.sleep(PAUSE_S)
            fn()  # one untimed call: the pool wakes up
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def torch_grads(case: str, x: np.ndarray, w: np.ndarray, g: np.ndarray) -> tuple[Any, Any] | None:
    """``(backward, (dx, dw))`` in PyTorch, or None without it."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    torch.set_num_threads(stripeml_threads())
    if case == "matmul":
        tx, tw, tg = (torch.from_numpy(a).requires_grad_() for a in (x, w, g))
        out = tx @ tw
    else:  # NHWC in our layout, NCHW for torch
        tx = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).requires_grad_()
        tw = torch.from_numpy(w.transpose(3, 2, 0, 1).copy()).requires_grad_()
        tg = torch.from_numpy(g.transpose(0, 3, 1, 2).copy())
        out = F.conv2d(tx, tw, padding=1)

    def backward() -> Any:
        return torch.autograd.grad(out, (tx, tw), tg, retain_graph=True)

    dx, dw = (a.detach().numpy() for a in backward())
    if case == "conv":
        dx, dw = dx.transpose(0, 2, 3, 1), dw.transpose(2, 3, 1, 0)
    return backward, (dx, dw)


def stripeml_threads() -> int:
    return int(os.environ.get("STRIPEML_NUM_THREADS", os.cpu_count() or 1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--target", default="cpu")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    cases = [
        ("matmul", {"M": 1024, "K": 1024, "N": 1024}, MATMUL, ("A", "B"),
         (1024, 1024), (1024, 1024), (1024, 1024)),
        ("conv2d_3x3_56x56x64", {"N": 1, "X": 56, "Y": 56, "CI": 64, "CO": 64, "KX": 3, "KY": 3},
         CONV, ("I", "K"), (1, 56, 56, 64), (3, 3, 64, 64), (1, 56, 56, 64)),
    ]  # fmt: skip
    status = 0
    for case, sizes, source, wrt, xs, ws, gs in cases:
        x, w, g = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws, gs))
        f = stripeml.compile(source, target=args.target)
        grad = stripeml.grad(f, wrt=wrt)
        fns: dict[str, Callable[[], Any]] = {
            "forward": lambda f=f, x=x, w=w: f(x, w),
            "grad": lambda grad=grad, x=x, w=w, g=g: grad(x, w, g),
        }
        got = grad(x, w, g)
        ref = torch_grads("matmul" if case == "matmul" else "conv", x, w, g)
        if case == "matmul":
            want: tuple[np.ndarray, ...] | None = (g @ w.T, x.T @ g)
        else:
            want = ref[1] if ref is not None else None
        if ref is not None:
            fns["torch_backward"] = ref[0]
        ok = None
        if want is not None:
            ok = all(
                np.allclose(a, b, rtol=1e-3, atol=1e-4 * float(np.abs(b).max()))
                for a, b in zip(got, want)
            )
            status |= not ok
        load = os.getloadavg()[0]
        med = time_blocks(fns, args.repeat, args.block)
        baselines = {"2x_forward": 2 * med["forward"]}
        if "torch_backward" in med:
            baselines["torch_backward"] = med["torch_backward"]
        record = {
            "bench": "grad",
            "case": case,
            "sizes": sizes,
            "threads": stripeml_threads(),
            "target": args.target,
            "repeats": args.repeat,
            "stripeml_s": med["grad"],
            "forward_s": med["forward"],
            "baselines": baselines,
            "ratio_vs_2x_forward": baselines["2x_forward"] / med["grad"],
            "ok": ok,
            "load_avg_1m": load,
        }
        print(json.dumps(record), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
