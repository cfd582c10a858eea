"""The separate check after a tune: an ONNX model compiled without and with the
tuning database's choices, both checked against the interpreter, timed
interleaved with onnxruntime in one process.

::

    STRIPEML_CACHE_DIR=DIR .venv/bin/python bench/tuned_check.py light_shufflenet --rounds 31

``DIR`` is the cache folder the tune wrote (``stripeml tune MODEL`` with the same
``STRIPEML_CACHE_DIR``); the model is a file, or a light model of the ONNX
backend test data by name.  Each round runs the untuned program, the tuned one
(in alternating order) and onnxruntime, each the best of 5 calls after a 0.05 s
pause, and is sampled before and after by ``quiet.py``.  One JSON line: the
median milliseconds of each, ``ratio`` (untuned over tuned), the rounds the
tuned program won, the same over the quiet rounds only (``*_quiet``), the
number of stored choices applied and the 1-minute load average.  The tune's
own whole-program line is measured inside the tune's process; this is the
figure to quote (docs/tuning.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
from quiet import CpuShare, Rounds


def _path(name: str) -> str:
    if os.path.exists(name):
        return name
    import onnx

    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return os.path.join(light, f"{name}.onnx")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="an .onnx file, or light_NAME of the ONNX test data")
    parser.add_argument("--rounds", type=int, default=31)
    args = parser.parse_args()
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(name, None)
    import onnx
    import onnxruntime as ort

    import stripeml.onnx
    from stripeml.passes.manager import run_pipeline
    from stripeml.runtime.backend import backend_for
    from stripeml.runtime.tuning_db import choices_for
    from stripeml.tile.bind import signature_of
    from stripeml.tuning.driver import _function_and_args
    from stripeml.tuning.kernels import check_outputs, kernel_jobs

    path = _path(args.model)
    if not os.path.isfile(path):
        parser.error(f"no model {path}")
    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    x = next(i for i in model.graph.input if i.name not in inits)
    shape = [d.dim_value or 1 for d in x.type.tensor_type.shape.dim]
    arr = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    fn, call = _function_and_args(stripeml.onnx.compile(path), [arr])
    (job, *_), _ = kernel_jobs(
        fn.lowered(signature_of(call)), fn.target, fn.constants, 0, dict(zip(fn.params, call))
    )
    choices = choices_for(fn.target)
    passes = fn.target.passes[job.point :]
    backend = backend_for(fn.target)
    plain = backend.compile(run_pipeline(job.parsed, passes).program)
    tuned = backend.compile(run_pipeline(job.parsed, passes, choices=choices).program)
    for program, label in ((plain, "untuned"), (tuned, "tuned")):
        wrong = check_outputs(program.run(dict(job.inputs)), job.expected)
        if wrong is not None:
            print(f"{label} program differs from the interpreter: {wrong}", file=sys.stderr)
            return 1
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    runs = [
        lambda: plain.run(dict(job.inputs)),
        lambda: tuned.run(dict(job.inputs)),
        lambda: session.run(None, {x.name: arr}),
    ]
    for run in runs:
        for _ in range(5):
            run()
    rounds = Rounds(CpuShare())
    times: list[list[float]] = [[], [], []]
    for k in range(args.rounds):
        with rounds.round():
            for n in [0, 1, 2] if k % 2 == 0 else [1, 0, 2]:
                time.sleep(0.05)
                best = float("inf")
                for _ in range(5):
                    start = time.perf_counter()
                    runs[n]()
                    best = min(best, time.perf_counter() - start)
                times[n].append(best)

    def figures(per: list[list[float]], suffix: str) -> dict:
        if not per[0]:
            return {}
        ms = [statistics.median(v) * 1e3 for v in per]
        won = sum(1 for a, b in zip(per[0], per[1]) if b < a)
        # four significant digits, not three decimals: a small model's 0.014 ms
        # would otherwise say another ratio than the one printed beside it
        return {
            f"untuned_ms{suffix}": float(f"{ms[0]:.4g}"),
            f"tuned_ms{suffix}": float(f"{ms[1]:.4g}"),
            f"onnxruntime_ms{suffix}": float(f"{ms[2]:.4g}"),
            f"ratio{suffix}": round(ms[0] / ms[1], 3),
            f"tuned_won{suffix}": f"{won}/{len(per[0])}",
        }

    quiet = [rounds.quiet_only(v) for v in times]
    line = {"model": args.model, "choices": len(choices), "rounds": args.rounds}
    line |= figures(times, "") | figures(quiet, "_quiet") | rounds.summary()
    line["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
