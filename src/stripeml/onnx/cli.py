"""``stripeml onnx MODEL.onnx``: compile a model, run it, check and time it.

::

    stripeml onnx model.onnx [--target T] [--random] [--seed S] [--check] [--bench N]
                             [--input NAME=1x3x224x224]

Compiles with progress on stderr, runs on ones (or seeded random inputs with
``--random``), prints each output's shape, dtype and checksum; ``--check``
compares with onnxruntime when it is installed (exit status 1 on a mismatch);
``--bench N`` times N runs and prints the median latency, onnxruntime's median
in the same process, and the slowest kernels.

Exit status as for every ``stripeml`` command (the README's table): 2 for bad
command-line use (a model file that does not exist, a malformed ``--input``,
one naming no graph input, a graph input whose shape is neither declared nor
given), 1 when the model is rejected or ``--check`` finds a mismatch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import phases
from ..errors import InternalError, StripeError

DEFAULT_DIM = 1  # for symbolic dimensions (batch) not given with --input


def add_parser(
    sub: argparse._SubParsersAction, positive_int: Callable[[str], int]
) -> argparse.ArgumentParser:
    """Add the ``onnx`` subcommand (``positive_int``: the command line's checked int type)."""
    p = sub.add_parser(
        "onnx",
        help="compile an ONNX model, run it, compare with onnxruntime, time it",
        description=(
            "Import MODEL (an .onnx file), compile the whole graph for --target and run it "
            "on ones (or random inputs with --random). Symbolic dimensions are 1 unless "
            "--input gives the shape."
        ),
        epilog="example: stripeml onnx resnet50.onnx --random --check --bench 10",
    )
    p.add_argument("model", metavar="MODEL", help="path of an .onnx file")
    p.add_argument(
        "-t", "--target", default="cpu", help="interp, cpu or a target .toml (default cpu)"
    )
    p.add_argument("--random", action="store_true", help="seeded random inputs instead of ones")
    p.add_argument("--seed", type=int, default=0, help="seed for --random (default 0)")
    p.add_argument(
        "--input",
        action="append",
        default=[],
        type=shape_spec,
        metavar="NAME=SHAPE",
        help="shape of an input with symbolic dimensions, e.g. data=4x3x224x224",
    )
    p.add_argument("--check", action="store_true", help="compare the outputs with onnxruntime")
    p.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance of --check")
    p.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance of --check")
    p.add_argument(
        "--bench", type=positive_int, default=0, metavar="N", help="time N runs (and onnxruntime's)"
    )
    p.add_argument(
        "--timing",
        action="store_true",
        help="print the time of each phase: import, fold, lower, each pass, verify, codegen, "
        "LLVM optimise and emit, load, the first run",
    )
    p.set_defaults(handler=run_command, parser=p)
    return p


def shape_spec(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=DxDxD`` (``NAME=`` for rank 0) as ``(name, shape)``; an
    :class:`argparse.ArgumentTypeError` (a usage error) when malformed."""
    name, sep, dims = text.partition("=")
    try:
        if not sep or not name.strip():
            raise ValueError
        shape = tuple(int(d) for d in dims.split("x")) if dims.strip() else ()
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad --input {text!r} (want NAME=DxDxD)") from None
    if any(d < 1 for d in shape):
        raise argparse.ArgumentTypeError(f"bad --input {text!r}: every size must be positive")
    return name.strip(), shape


def _shapes(given: list[tuple[str, tuple[int, ...]]]) -> dict[str, tuple[int, ...]]:
    out = {}
    for name, shape in given:
        if name in out:
            raise argparse.ArgumentTypeError(f"--input {name} is given twice")
        out[name] = shape
    return out


def make_inputs(
    fn: Any, shapes: dict[str, tuple[int, ...]], random: bool, seed: int
) -> list[np.ndarray]:
    """Ones (or seeded random values) for every graph input."""
    rng = np.random.default_rng(seed)
    arrays = []
    for gi in fn.graph.inputs:
        if gi.name in shapes:
            shape = shapes[gi.name]
        elif gi.dims is None:
            raise StripeError(f"input {gi.name!r} has no declared shape: give it with --input")
        else:
            shape = tuple(d if isinstance(d, int) and d > 0 else DEFAULT_DIM for d in gi.dims)
        if not random:
            arrays.append(np.ones(shape, gi.dtype))
        elif gi.dtype.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(gi.dtype))
        elif gi.dtype.kind == "b":
            arrays.append(rng.integers(0, 2, shape).astype(bool))
        else:
            arrays.append(rng.integers(0, 4, shape).astype(gi.dtype))
    return arrays


def _check_inputs(
    parser: argparse.ArgumentParser, fn: Any, shapes: dict[str, tuple[int, ...]]
) -> None:
    """``--input`` must name graph inputs, and give every input without a declared
    shape; else a usage error (``parser.error`` exits 2)."""
    names = [gi.name for gi in fn.graph.inputs]
    unknown = [n for n in shapes if n not in names]
    if unknown:
        parser.error(
            f"--input {', '.join(unknown)}: no such graph input "
            f"(the model takes {', '.join(names) or 'no inputs'})"
        )
    shapeless = [gi.name for gi in fn.graph.inputs if gi.dims is None and gi.name not in shapes]
    if shapeless:
        parser.error(f"input(s) {', '.join(shapeless)} have no declared shape: give --input")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _ort_session(model: Any, threads: int | None = None) -> Any:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # errors only: its warnings about unused initializers are noise
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def run_command(args: argparse.Namespace) -> int:
    from . import compile as onnx_compile

    def progress(text: str) -> None:
        print(f"[stripeml] {text}", file=sys.stderr, flush=True)

    parser: argparse.ArgumentParser = args.parser
    try:
        shapes = _shapes(args.input)
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))  # usage: exits 2
    if not os.path.isfile(args.model):
        parser.error(f"no such ONNX model: {args.model}")
    try:
        with phases.recording() as profile:
            start = time.perf_counter()
            progress(f"loading {args.model}")
            fn = onnx_compile(args.model, target=args.target, progress=progress)
            _check_inputs(parser, fn, shapes)
            arrays = make_inputs(fn, shapes, args.random, args.seed)
            with phases.phase("first run"):
                outs = fn.run(arrays)
            first = time.perf_counter() - start
    except InternalError:
        raise  # a bug (or memory running out): the command line reports it
    except StripeError as e:
        print(f"{args.model}: error: {e}", file=sys.stderr)
        return 1
    print(f"model    {args.model}  (target {args.target})")
    print(
        f"inputs   {', '.join(f'{g.name} {a.shape} {a.dtype}' for g, a in zip(fn.graph.inputs, arrays))}"
    )
    for name, value in zip(fn.output_names, outs):
        print(
            f"output   {name}  shape {value.shape}  dtype {value.dtype}  "
            f"sum {float(np.sum(value, dtype=np.float64)):.6g}"
        )
    print(f"time     import + compile + first run {first:.2f} s")
    if args.timing:
        print("phases   (wall time of each, less the phases nested in it)")
        print("\n".join(f"  {line}" for line in profile.table(first).splitlines()))
    status = 0
    session = None
    if args.check or args.bench:
        session = _ort_session(fn.model)
        if session is None:
            print("onnxruntime is not installed: no comparison")
    feeds = {g.name: a for g, a in zip(fn.graph.inputs, arrays)}
    if args.check and session is not None:
        ref = session.run(None, feeds)
        for name, got, want in zip(fn.output_names, outs, ref):
            ok = got.shape == want.shape and np.allclose(got, want, rtol=args.rtol, atol=args.atol)
            err = (
                float(np.max(np.abs(got.astype(np.float64) - want)))
                if got.shape == want.shape
                else float("nan")
            )
            print(f"check    {name}  {'ok' if ok else 'MISMATCH'}  max abs error {err:.3g}")
            status = status or (0 if ok else 1)
    if args.bench:
        times = []
        for _ in range(args.bench):
            t0 = time.perf_counter()
            fn.run(arrays)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        line = f"latency  median of {args.bench}: {_ms(med)}"
        if session is not None:
            rt = []
            for _ in range(args.bench):
                t0 = time.perf_counter()
                session.run(None, feeds)
                rt.append(time.perf_counter() - t0)
            line += f"; onnxruntime {_ms(statistics.median(rt))} (ratio {statistics.median(rt) / med:.2f}x)"
        print(line)
        exe = fn.lower(*arrays)
        if exe is not None:
            rows = exe.profile(*fn.specialise(arrays).call_args(arrays), repeat=3)
            total = sum(r[2] for r in rows) or 1.0
            print("kernels  (slowest first, median of 3 runs)")
            for name, comment, sec in rows[:15]:
                print(f"  {_ms(sec):>10}  {100 * sec / total:5.1f}%  {name}  {comment[:70]}")
    return status
