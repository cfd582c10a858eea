"""ONNX models through stripeml against onnxruntime, measured in one process.

Cases (one JSON line each, see bench/run.py):

* ``latency``: a light model (default resnet50) with random weights, batch 1,
  on ``cpu`` with 2 threads, against onnxruntime (CPU provider, 2 intra-op
  threads); medians of interleaved blocks.
* ``compile_cold`` / ``compile_warm``: import + compile + first run in a fresh
  process with an empty, then a filled kernel cache (``--no-compile`` skips).
* ``memory``: peak bytes of the program's temporaries as placed (the constant
  ones, laid out once and kept, included), against the sum of every per-call
  temporary; the bytes of the kept constant temporaries and of the constant
  parameters (the weights) apart (``sizes`` holds them; nothing is timed).

    python bench/bench_onnx.py [--model resnet50] [--repeats 20] [--no-compile]
    python bench/bench_onnx.py --kernels [--model resnet50] [--json]   # bench/kernels.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

LIGHT_NAMES = ("resnet50", "squeezenet", "bvlc_alexnet", "densenet121", "inception_v1",
               "inception_v2", "shufflenet", "vgg19", "zfnet512")  # fmt: skip


def load(name: str):
    import onnx

    from stripeml.onnx.testing import randomize_weights, strip_softmax

    path = os.path.join(
        os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx"
    )
    return strip_softmax(randomize_weights(onnx.load(path), seed=1))


def feeds_for(model) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(2)
    out = {}
    for x in model.graph.input:
        if x.name not in inits:
            shape = tuple(d.dim_value or 1 for d in x.type.tensor_type.shape.dim)
            out[x.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def emit(case: str, sizes: dict, stripeml_s: float | None, baselines: dict, repeats: int) -> None:
    print(
        json.dumps(
            {
                "bench": "onnx",
                "case": case,
                "sizes": sizes,
                "threads": 2,
                "target": "cpu",
                "repeats": repeats,
                "stripeml_s": stripeml_s,
                "baselines": baselines,
            }
        ),
        flush=True,
    )


def compile_once(name: str) -> None:
    """Child process: import + compile + first run; prints seconds."""
    import stripeml.onnx

    model = load(name)
    feeds = feeds_for(model)
    start = time.perf_counter()
    stripeml.onnx.compile(model, target="cpu")(**feeds)
    print(time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet50", choices=LIGHT_NAMES)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--compile-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--kernels", action="store_true", help="per-kernel roofline vs onnxruntime")
    p.add_argument("--json", action="store_true", help="with --kernels: JSON lines")
    args = p.parse_args()
    if args.compile_child:
        compile_once(args.model)
        return
    if args.kernels:
        import kernels  # bench/kernels.py, next to this script

        kernels.report(args.model, load, feeds_for, as_json=args.json, runs=args.repeats)
        return
    import onnxruntime as ort

    import stripeml.onnx

    model = load(args.model)
    feeds = feeds_for(model)
    sizes = {"model": args.model, **{k: list(v.shape) for k, v in feeds.items()}}
    if not args.no_compile:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, STRIPEML_CACHE_DIR=cache)
            cmd = [sys.executable, __file__, "--compile-child", "--model", args.model]
            for case in ("compile_cold", "compile_warm"):
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                emit(case, sizes, float(out.stdout.strip().splitlines()[-1]), {}, 1)
    fn = stripeml.onnx.compile(model, target="cpu")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    got = fn(**feeds)
    want = session.run(None, feeds)[0]
    err = float(np.max(np.abs(got - want)) / max(1e-30, float(np.max(np.abs(want)))))
    print(f"max error relative to the largest logit: {err:.2e}", file=sys.stderr)
    ours, theirs = [], []
    for _ in range(args.repeats):  # interleaved, so load changes hit both
        t = time.perf_counter()
        fn(**feeds)
        ours.append(time.perf_counter() - t)
        time.sleep(0.05)
        t = time.perf_counter()
        session.run(None, feeds)
        theirs.append(time.perf_counter() - t)
        time.sleep(0.05)
    emit(
        "latency",
        sizes,
        statistics.median(ours),
        {"onnxruntime": statistics.median(theirs)},
        args.repeats,
    )
    exe = fn.lower(**feeds)
    from stripeml.analysis.constness import constness
    from stripeml.analysis.memory import allocation_bytes

    kept = constness(exe.program).temporaries  # computed once, kept across calls
    refs = exe.program.root.refs
    # every intermediate tensor of a call with its own buffer
    total = sum(allocation_bytes(r) for r in refs if r.dir == "none" and r.into not in kept)
    memory = {
        "peak_bytes": exe.peak_bytes,  # everything, the kept constants included
        "sum_of_temporaries": total,
        "constant_temporaries_bytes": sum(allocation_bytes(r) for r in refs if r.into in kept),
        "constant_parameters_bytes": sum(allocation_bytes(r) for r in refs if r.const),
    }
    emit("memory", {**sizes, **memory}, None, {}, 0)


if __name__ == "__main__":
    main()
