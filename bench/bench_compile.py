"""How long stripeml takes to compile: whole models in fresh processes (cold and
warm disk cache, beside onnxruntime's session creation), and the front of the
compiler on a 10-statement Tile program.

Model cases (each run in a fresh process; ``stripeml_s`` is the compile and the
first run, after Python imported stripeml and onnx, the median of ``--repeats``
fresh processes (default 3; ``times`` has each, and onnxruntime's run in the same
rounds, one of each system per round); ``import_s`` that import and ``phases``
the compile profile of ``stripeml.phases``, in seconds, of the median run;
``load`` the 1-minute load average when the case ended):

``model_cold``
    ``stripeml.onnx.compile(model)`` and one run with an empty disk cache.
    ``baselines.onnxruntime``: creating an ``InferenceSession`` and its first
    run, in a fresh process too.
``model_warm``
    the same with the disk cache the cold run left.
With ``--from-file`` each child is given the model's file instead (written
once per model, its inputs beside it) and reads it inside the timed part, as
``stripeml.onnx.compile("model.onnx")`` and ``InferenceSession("model.onnx")``
do; the records say ``"source": "file"`` (else ``"memory"``).

``model_second_shape``
    a model with a symbolic sequence length (``bert_base_seq``), compiled and
    run at sequence 128, then at 64, in one process with an empty cache,
    ``--repeats`` times (fresh processes): ``stripeml_s`` is the median second
    compile, ``first_s`` the median first, ``ratio`` second / first of those
    medians (``ratios``: each process's), ``cpu_s`` / ``first_cpu_s`` the main
    thread's CPU time of each process's second / first compile.  The first
    call at 64 runs the program of 128 on padded inputs (docs/onnx.md,
    "Shorter lengths through the first length's program"): its import and
    check, and the call; ``STRIPEML_LENGTHS=0`` times a compile at 64 instead.

    python bench/bench_compile.py                       # all cases
    python bench/bench_compile.py --models zoo_resnet50 # only these models
    python bench/bench_compile.py --no-tile             # models only
    python bench/bench_compile.py --no-tile --from-file # models read from their files

Models: the light ResNet-50 and SqueezeNet of the ``onnx`` package, BERT-base
(12 x 768, sequence 128) and GPT-2 small (sequence 128) from ``bench/models.py``
(those need torch and transformers the first time, ``make bench-deps``; without
them they are skipped, said on stderr).

Tile-program cases (JSON lines, fields as documented in ``bench/run.py``):

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

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

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


def tile_cases() -> None:
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


# ---- whole models, each in a fresh process -----------------------------------------------

HERE = Path(__file__).resolve().parent
MODELS = ("zoo_resnet50", "zoo_squeezenet", "bert_base_128", "gpt2_128")
SECOND_SHAPE = "bert_base_seq"


def _child(args: list[str], cache: str | None = None) -> dict:
    """Run this script with ``args`` in a fresh process; its JSON answer (the
    stripeml it imports is the one on ``$PYTHONPATH``, else the installed one)."""
    env = dict(os.environ)
    # as a user's process: no OpenBLAS overrides, and Python's bytecode cached (an
    # installed package has its .pyc files; PYTHONDONTWRITEBYTECODE would make every
    # fresh process compile stripeml's sources again, about 75 ms)
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    if cache is not None:
        env["STRIPEML_CACHE_DIR"] = cache
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=HERE.parent,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _load_model(name: str):
    sys.path.insert(0, str(HERE))
    from models import build

    return build(name)


def _model_and_feeds(name: str, path: str | None):
    """``name``'s model (its file ``path``, when given: read inside the timed part)
    and its inputs."""
    if path is None:
        return _load_model(name)
    return path, dict(np.load(path + ".npz"))


def child_stripeml(name: str, seqs: list[int], path: str | None = None) -> dict:
    """Compile and run ``name`` once per sequence length (or once, at its own shape);
    from the file ``path`` when given."""
    start = time.perf_counter()
    import contextlib

    import onnx  # noqa: F401 - imported before the clock, as a user's process has it

    import stripeml.onnx

    try:
        from stripeml import phases
    except ImportError:  # a stripeml from before the compile profile (comparisons)
        phases = None

    import_s = time.perf_counter() - start
    model, feeds = _model_and_feeds(name, path)
    times, cpu, profiles = [], [], []
    fn = None
    for seq in seqs or [0]:
        given = {k: v[:, :seq] for k, v in feeds.items()} if seq else feeds
        rec = phases.recording() if phases is not None else contextlib.nullcontext()
        with rec as profile:
            t0, c0 = time.perf_counter(), time.thread_time()
            if fn is None:
                fn = stripeml.onnx.compile(model, target="cpu")
            with phases.phase("first run") if phases is not None else contextlib.nullcontext():
                fn(**given)
            times.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
        rows = profile.rows() if profile is not None else []
        profiles.append({n: round(s, 4) for n, s, _ in rows})
    return {"import_s": import_s, "times": times, "cpu": cpu, "phases": profiles}


def child_ort(name: str, path: str | None = None) -> dict:
    """onnxruntime: import, then session creation and the first run (from the file
    ``path``, read inside the timed part, when given)."""
    start = time.perf_counter()
    import onnxruntime as ort

    import_s = time.perf_counter() - start
    model, feeds = _model_and_feeds(name, path)
    data = model if path is not None else model.SerializeToString()
    t0 = time.perf_counter()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    return {"import_s": import_s, "times": [time.perf_counter() - t0]}


def _load() -> float:
    return os.getloadavg()[0]


def _available(name: str) -> bool:
    needs_torch = not name.startswith("zoo_")
    if needs_torch and importlib.util.find_spec("torch") is None:
        sys.path.insert(0, str(HERE))
        from models import CACHE

        if not (CACHE / f"{name}.onnx").exists():
            print(
                f"{name}: skipped (needs torch and transformers: make bench-deps)", file=sys.stderr
            )
            return False
    return True


def model_record(case: str, name: str, seconds: float, baselines: dict, **extra: object) -> str:
    return json.dumps(
        {
            "bench": "compile",
            "case": case,
            "model": name,
            "sizes": {},
            "threads": None,
            "target": "cpu",
            "repeats": 1,
            "stripeml_s": seconds,
            "baselines": baselines,
            "load": round(_load(), 2),
            **extra,
        }
    )


def model_cases(names: list[str], repeats: int, from_file: bool = False) -> None:
    """Per model: onnxruntime, cold and warm, each ``repeats`` times in fresh
    processes, interleaved (one of each per round); the medians, every time beside.
    ``from_file``: every child is given the model's file (written here, with its
    inputs beside it) and reads it inside the timed part."""
    for name in names:
        if not _available(name):
            continue
        _child(["--child-import"])  # writes the bytecode caches, if none were there
        with tempfile.TemporaryDirectory(prefix="stripeml-bench-model-") as folder:
            extra: list[str] = []
            if from_file:
                model, feeds = _load_model(name)
                path = os.path.join(folder, f"{name}.onnx")
                with open(path, "wb") as f:
                    f.write(model.SerializeToString())
                np.savez(path + ".npz", **feeds)
                del model
                extra = ["--path", path]
            _model_rounds(name, repeats, extra)


def _model_rounds(name: str, repeats: int, extra: list[str]) -> None:
    """One model's rounds: onnxruntime, cold and warm (``extra``: the children's
    arguments naming the model's file), and their records."""
    runs: dict[str, list[dict]] = {"ort": [], "model_cold": [], "model_warm": []}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="stripeml-bench-cache-") as cache:
            runs["ort"].append(_child(["--child-ort", name, *extra]))
            runs["model_cold"].append(_child(["--child", name, *extra], cache))
            runs["model_warm"].append(_child(["--child", name, *extra], cache))
    ort = [r["times"][0] for r in runs["ort"]]
    base = {"onnxruntime": statistics.median(ort)}
    for case in ("model_cold", "model_warm"):
        got = runs[case]
        times = [r["times"][0] for r in got]
        mid = sorted(range(len(got)), key=lambda k: times[k])[len(got) // 2]
        print(
            model_record(
                case,
                name,
                statistics.median(times),
                base,
                repeats=repeats,
                times=[round(t, 3) for t in times],
                onnxruntime_times=[round(t, 3) for t in ort],
                import_s=round(got[mid]["import_s"], 3),
                phases=got[mid]["phases"][0],
                source="file" if extra else "memory",
            ),
            flush=True,
        )


def second_shape_case(repeats: int = 1) -> None:
    """``repeats`` fresh processes, each with an empty cache, compiling and running
    ``bert_base_seq`` at 128 then 64; the medians (``ratio``: of the second
    compile's median over the first's; ``ratios``: each process's), every time
    beside, and the main thread's CPU time of each (``thread_time``: the wall
    without the waits for the helper process and for other processes' turns on
    a busy machine)."""
    if not _available(SECOND_SHAPE):
        return
    _child(["--child-import"])  # writes the bytecode caches, if none were there
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="stripeml-bench-cache-") as cache:
            runs.append(_child(["--child", SECOND_SHAPE, "--seqs", "128,64"], cache))
    firsts = [r["times"][0] for r in runs]
    seconds = [r["times"][1] for r in runs]
    mid = sorted(range(len(runs)), key=lambda k: seconds[k])[len(runs) // 2]
    first, second = statistics.median(firsts), statistics.median(seconds)
    print(
        model_record(
            "model_second_shape",
            SECOND_SHAPE,
            second,
            {},
            repeats=repeats,
            first_s=first,
            ratio=round(second / first, 3),
            times=[round(t, 3) for t in seconds],
            first_times=[round(t, 3) for t in firsts],
            ratios=[round(b / a, 3) for a, b in zip(firsts, seconds)],
            cpu_s=[round(r["cpu"][1], 3) for r in runs],
            first_cpu_s=[round(r["cpu"][0], 3) for r in runs],
            phases=runs[mid]["phases"][1],
        ),
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join([*MODELS, SECOND_SHAPE]))
    parser.add_argument("--no-tile", action="store_true", help="skip the Tile-program cases")
    parser.add_argument(
        "--repeats", type=int, default=3, help="fresh processes per model case (medians reported)"
    )
    parser.add_argument(
        "--from-file",
        action="store_true",
        help="give each process the model's file (read inside the timed part), not a ModelProto",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--child-ort", help=argparse.SUPPRESS)
    parser.add_argument("--seqs", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child-import", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        seqs = [int(x) for x in args.seqs.split(",") if x]
        print(json.dumps(child_stripeml(args.child, seqs, args.path)))
        return 0
    if args.child_import:  # import every module a compile uses (a tiny compile, own cache)
        import stripeml.onnx  # noqa: F401

        with tempfile.TemporaryDirectory() as scratch:
            os.environ["STRIPEML_CACHE_DIR"] = scratch
            stripeml.compile("function (A) -> (B) { B = A + 1; }", target="cpu")(np.ones(3))
        print("{}")
        return 0
    if args.child_ort:
        print(json.dumps(child_ort(args.child_ort, args.path)))
        return 0
    if not args.no_tile:
        tile_cases()
    names = [n for n in args.models.split(",") if n]
    sys.path.insert(0, str(HERE))
    from models import REGISTRY

    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        parser.error(f"--models: unknown model {', '.join(unknown)}; known: {', '.join(REGISTRY)}")
    model_cases([n for n in names if n != SECOND_SHAPE], max(1, args.repeats), args.from_file)
    if SECOND_SHAPE in names:
        second_shape_case(max(1, args.repeats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
