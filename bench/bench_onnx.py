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
* ``set`` (only with ``--set``, instead of the cases above): every model of
  the benchmark set in ``bench/models.py`` (or those named), one line each.
  Each is checked first: the largest ``|stripeml - onnxruntime|`` over the
  largest ``|onnxruntime|``, per output, must stay under 1e-3, else the model
  is not timed and the exit status is 1.  Then both run with 2 threads (``--threads N``: N),
  interleaved in blocks of a few calls with a 0.05 s pause before each block
  (so the other library's spinning threads go idle); medians of every call.
  Extra fields: ``model``, ``family``, ``compile_s`` (import + compile + first
  run, in this process, with the disk kernel cache as it is), ``max_err``,
  ``ratio`` (stripeml seconds / onnxruntime seconds: above 1, stripeml is
  slower; issue 13's target is at most 1), ``load_avg_1m`` (the load average as the model starts: other work
  on the cores slows both, threaded code most), ``env_unset`` (the OpenBLAS
  overrides this process removed, below), ``ok``.  ``skipped`` (with
  ``stripeml_s`` null) says why a model did not run: an unsupported operator,
  an import error (a ``StripeError``), or no torch/transformers to export it
  with; ``error`` is an unexpected exception (a bug: ``ok`` false, exit 1).
  Neither stops the run.  Each round of blocks (one of each runtime) is
  sampled before and after by ``bench/quiet.py`` (the share of the FMA peak
  both threads get and the hand-over latency between them: the host takes a
  vCPU away, or places the two under different L3 caches, for seconds at a
  time, which the load average does not show): ``quiet_rounds``,
  ``cpu_share_min``, ``cpu_share_median``, ``handoff_ns_median``,
  ``handoff_ns_max``, and with a quiet round or more ``stripeml_s_quiet``,
  ``onnxruntime_s_quiet`` and ``ratio_quiet``, over the quiet rounds' calls
  only.  Progress (each model, its compile seconds) goes to stderr.
* ``set_summary`` (with ``--set`` and ``--passes N``, N > 1): the set timed in N
  passes, each in a fresh process, the passes' ``set`` lines passed through with a
  ``pass`` field, then one line per model with every pass's ratio and their median
  (``bench/set_passes.py``; ``ratios_quiet`` and ``ratio_quiet`` the same of the
  passes' quiet figures): a slow period of a shared machine, tens of seconds
  long, then moves one pass of a model, not the model's figure.

``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` are removed from this process's
environment before NumPy loads (they slow a current NumPy); the shell's is
left as it is.

    python bench/bench_onnx.py [--model resnet50] [--repeats 20] [--no-compile]
    python bench/bench_onnx.py --set [NAME,NAME] [--blocks 5] [--passes 3]
    python bench/models.py             # the set's names (exports what is not cached)
    python bench/bench_onnx.py --kernels [--model resnet50] [--json]   # bench/kernels.py
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

_BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
ENV_UNSET: dict[str, str] = {}
if __name__ == "__main__":  # the benchmark process only, before NumPy loads
    ENV_UNSET = {k: os.environ.pop(k) for k in _BLAS_ENV if k in os.environ}

import models  # noqa: E402  (bench/models.py, beside this script)
import numpy as np  # noqa: E402
from quiet import CpuShare, Rounds  # noqa: E402

LIGHT_NAMES = models.LIGHT_NAMES
feeds_for = models.feeds_for


def load(name: str):
    return models.load_light(name)[0]


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


def ort_session(model: Any, threads: int = 2) -> Any:
    """onnxruntime on the CPU provider with ``threads`` intra-op threads and 1 inter-op thread."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def relative_error(got: Any, want: list[np.ndarray]) -> float:
    """Over the outputs, the largest ``max|got - want| / max|want|``."""
    got = list(got) if isinstance(got, tuple) else [got]
    if len(got) != len(want):
        raise AssertionError(f"{len(got)} outputs, onnxruntime gives {len(want)}")
    worst = 0.0
    for g, w in zip(got, want):
        g, w = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
        if g.shape != w.shape:
            raise AssertionError(f"output shape {g.shape}, onnxruntime gives {w.shape}")
        scale = max(1e-30, float(np.max(np.abs(w)))) if w.size else 1.0
        worst = max(worst, float(np.max(np.abs(g - w), initial=0.0)) / scale)
    return worst


def interleaved(
    fns: dict[str, Callable[[], Any]], blocks: int, share: Any = None
) -> tuple[dict[str, float], int, dict[str, Any]]:
    """Median seconds of each of ``fns``, timed in alternating blocks of consecutive
    calls with a 0.05 s pause before each block; returns the medians, the calls
    each is over, and with ``share`` (a ``quiet.CpuShare``, sampled before and
    after each round of blocks) the quiet rounds' fields: how many, the least and
    median share, and each one's median over the quiet rounds' calls
    (``quiet_s``).  A block is about 0.2 s of the slower contender (1 to 10
    calls)."""
    from stripeml.runtime.kept_layouts import wait_writes

    once = {}
    for name, fn in fns.items():  # warm-up, and a first estimate
        fn()
        t = time.perf_counter()
        fn()
        once[name] = time.perf_counter() - t
    wait_writes()  # stripeml's cache files, written after the first calls: not while timed
    per_block = max(1, min(10, round(0.2 / max(1e-6, max(once.values())))))
    times: dict[str, list[list[float]]] = {name: [] for name in fns}
    log = Rounds(share)
    for _ in range(blocks):
        with log.round():
            for name, fn in fns.items():
                time.sleep(0.05)
                run = []
                for _ in range(per_block):
                    t = time.perf_counter()
                    fn()
                    run.append(time.perf_counter() - t)
                times[name].append(run)
    medians = {
        name: statistics.median(t for run in runs for t in run) for name, runs in times.items()
    }
    extra = log.summary()
    if any(log.flags):
        extra["quiet_s"] = {
            name: statistics.median(t for run in log.quiet_only(runs) for t in run)
            for name, runs in times.items()
        }
    return medians, blocks * per_block, extra


def _load_avg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def set_case(
    name: str,
    blocks: int,
    tolerance: float | None = None,
    share: Any = None,
    threads: int = 2,
) -> bool:
    """Check, then time, the model ``name`` of the set; print its JSON line.  False when
    stripeml's outputs are off by more than ``tolerance`` (default: the entry's) (a
    skipped model is not a failure).  ``share``: a ``quiet.CpuShare`` that samples
    each round of blocks (the line then has the quiet rounds' figures too).  Both
    runtimes get ``threads`` threads."""
    import stripeml.onnx
    from stripeml.errors import StripeError

    entry = models.REGISTRY[name]
    if tolerance is None:
        tolerance = getattr(entry, "tolerance", 1e-3)
    record: dict[str, Any] = {"bench": "onnx", "case": "set", "model": name,
                              "family": entry.family, "threads": threads, "target": "cpu",
                              "load_avg_1m": _load_avg(), "env_unset": ENV_UNSET,
                              "sizes": {"model": name}}  # fmt: skip
    t = time.perf_counter()
    try:
        model, feeds = entry.build()
    except ImportError as exc:  # torch or transformers missing: nothing to export with
        skipped = f"cannot be exported here ({exc}): make bench-deps installs what it needs"
        print(f"{name}: skipped: {skipped}", file=sys.stderr)
        emit_record(record, repeats=0, stripeml_s=None, baselines={}, skipped=skipped)
        return True
    print(f"{name}: {entry.about}; loaded in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    record["sizes"] = {"model": name, **{k: list(v.shape) for k, v in feeds.items()}}
    missing = models.unsupported_ops(model)
    skipped = f"unsupported operators: {', '.join(missing)}" if missing else None
    if skipped is None:
        t = time.perf_counter()
        try:
            fn = stripeml.onnx.compile(model, target="cpu", threads=threads)
            got = fn(**feeds)
        except StripeError as exc:  # the importer's errors name the node and the operator
            skipped = f"{type(exc).__name__}: {exc}".splitlines()[0]
        except Exception as exc:  # a bug in stripeml: said, and the run goes on (exit 1)
            error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            print(f"{name}: FAIL: {error}", file=sys.stderr)
            emit_record(record, repeats=0, stripeml_s=None, baselines={}, error=error, ok=False)
            return False
        record["compile_s"] = time.perf_counter() - t
    if skipped is not None:
        print(f"{name}: skipped: {skipped}", file=sys.stderr)
        emit_record(record, repeats=0, stripeml_s=None, baselines={}, skipped=skipped)
        return True
    print(f"{name}: compiled and ran in {record['compile_s']:.1f} s", file=sys.stderr)
    session = ort_session(model, threads)
    err = relative_error(got, session.run(None, feeds))
    if not err <= tolerance:
        print(f"{name}: FAIL: max error {err:.2e} > {tolerance:g}, not timed", file=sys.stderr)
        emit_record(record, repeats=0, stripeml_s=None, baselines={}, max_err=err, ok=False)
        return False
    medians, repeats, calm = interleaved(
        {"stripeml": lambda: fn(**feeds), "onnxruntime": lambda: session.run(None, feeds)},
        blocks,
        share,
    )
    ours, theirs = medians["stripeml"], medians["onnxruntime"]
    quiet_s = calm.pop("quiet_s", None)
    if quiet_s is not None:
        calm.update(
            stripeml_s_quiet=quiet_s["stripeml"],
            onnxruntime_s_quiet=quiet_s["onnxruntime"],
            ratio_quiet=quiet_s["stripeml"] / quiet_s["onnxruntime"],
        )
    print(
        f"{name}: max error {err:.1e}; stripeml {ours * 1e3:.2f} ms, "
        f"onnxruntime {theirs * 1e3:.2f} ms (ratio {ours / theirs:.2f})",
        file=sys.stderr,
    )
    emit_record(record, repeats=repeats, stripeml_s=ours, baselines={"onnxruntime": theirs},
                ratio=ours / theirs, max_err=err, ok=True, **calm)  # fmt: skip
    return True


def run_set(names: list[str], blocks: int, threads: int = 2) -> int:
    """The ``set`` case for each of ``names``; the exit status (1 when a model disagrees)."""
    failed = []
    share = CpuShare(threads)
    for name in names:
        if not set_case(name, blocks, share=share, threads=threads):
            failed.append(name)
        gc.collect()  # the last model's weights, before the next is loaded
    if failed:
        print(f"stripeml disagrees with onnxruntime on: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def emit_record(record: dict[str, Any], **fields: Any) -> None:
    print(json.dumps({**record, **fields}), flush=True)


def set_names(p: argparse.ArgumentParser, arg: str) -> list[str]:
    """The models ``--set`` names: ``all``, or names separated by commas."""
    if arg == "all":
        return list(models.REGISTRY)
    names = [n for n in arg.split(",") if n]
    unknown = [n for n in names if n not in models.REGISTRY]
    if unknown or not names:
        p.error(f"--set: unknown model {', '.join(unknown)}; the set: {', '.join(models.REGISTRY)}")
    return names


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument(
        "--model",
        default="resnet50",
        choices=[*LIGHT_NAMES, *models.REGISTRY],
        help="a light zoo model, or (with --kernels) any model of the set",
    )
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument(
        "--set",
        nargs="?",
        const="all",
        metavar="NAME,NAME",
        help="the benchmark set of bench/models.py (all, or the models named) instead",
    )
    p.add_argument("--blocks", type=int, default=5, help="with --set: blocks per contender")
    p.add_argument(
        "--passes",
        type=int,
        default=1,
        help="with --set: time the set this many times, each in a fresh process, "
        "and add a per-model summary (the median of the passes' ratios)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=2,
        help="with --set: the threads of both runtimes (stripeml's target, "
        "onnxruntime's intra-op threads)",
    )
    p.add_argument("--compile-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--kernels", action="store_true", help="per-kernel roofline vs onnxruntime")
    p.add_argument("--json", action="store_true", help="with --kernels: JSON lines")
    args = p.parse_args()
    if args.passes < 1:
        p.error("--passes: at least 1")
    if args.threads < 1:
        p.error("--threads: at least 1")
    if args.set is not None:
        if args.passes > 1:
            import set_passes  # bench/set_passes.py, next to this script

            child = functools.partial(set_passes._child, threads=args.threads)
            return set_passes.run_passes(
                set_names(p, args.set), args.blocks, args.passes, child=child
            )
        return run_set(set_names(p, args.set), args.blocks, args.threads)
    if args.compile_child:
        compile_once(args.model)
        return 0
    if args.kernels:
        import kernels  # bench/kernels.py, next to this script

        if args.model in LIGHT_NAMES:
            kernels.report(args.model, load, feeds_for, as_json=args.json, runs=args.repeats)
        else:  # a model of the set: its own inputs (tokens and masks too)
            built = models.build(args.model)
            kernels.report(
                args.model,
                lambda _: built[0],
                lambda _: built[1],
                as_json=args.json,
                runs=args.repeats,
            )
        return 0
    if args.model not in LIGHT_NAMES:
        p.error(
            f"--model {args.model}: without --kernels, a light zoo model; use --set for the set"
        )
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
    session = ort_session(model)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
