"""``stripeml tune``: measure per-kernel alternatives and store the winners
(docs/tuning.md).

::

    stripeml tune FILE.tile --input ... | MODEL.onnx [--target T] [--budget SECONDS]
                  [--executor local|ray] [--ray-address ADDR]
    stripeml tune --show [--target T]
    stripeml tune --export FILE.json [--target T] | --import FILE.json

A progress line on stderr (kernels done, best speedup so far, time left of the
budget), then the table of kernels by time saved and the whole program's
latency before and after, timed interleaved.  Exit status as for every
command: 2 for bad command-line use, 1 when the program, model, target or an
imported file is rejected.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import stripeml

from .common import (
    CPU_TARGET_HELP,
    PROG,
    UsageError,
    display_name,
    doing,
    function_name,
    input_specs,
    load_source,
    onnx_input_shapes,
    onnx_inputs,
    ordered_arrays,
    parse_input_spec,
    print_error,
)


def _bar(progress: Any) -> None:
    done, total = progress.kernels_done, max(progress.kernels, 1)
    width = 24
    filled = width * done // total
    left = max(0.0, progress.budget_s - progress.elapsed_s)
    current = progress.current[:40]
    line = (
        f"\r[{'#' * filled}{'.' * (width - filled)}] kernels {done}/{progress.kernels}  "
        f"best {progress.best_gain:.2f}x  {left:5.0f} s left  {current:<40}"
    )
    print(line, end="", file=sys.stderr, flush=True)


def _function(args: argparse.Namespace) -> tuple[Any, list[Any], str]:
    """The compiled function, its example inputs and the name to show."""
    if args.file.lower().endswith(".onnx"):
        from ..onnx import compile as onnx_compile

        shapes = onnx_input_shapes(args.file, args.input)
        fn = onnx_compile(args.file, target=args.target)
        return fn, onnx_inputs(fn, shapes, args.seed), args.file
    path, source = load_source(args.file)
    specs = input_specs(path, args.input)
    f = stripeml.compile(source, target=args.target, name=function_name(path))
    arrays, _ = ordered_arrays(f, specs, args.seed)
    return f, list(arrays), display_name(args.file, path)


def _database(args: argparse.Namespace) -> Any:
    from ..runtime.tuning_db import TuningDB

    return TuningDB()


def _target_key(args: argparse.Namespace) -> str | None:
    if args.target_given is None:
        return None
    from ..api import target_for
    from ..runtime.tuning_db import target_key

    return target_key(target_for(args.target))


def _show(args: argparse.Namespace) -> int:
    from ..runtime.tuning_db import compiler_key

    db = _database(args)
    rows = db.rows(_target_key(args))
    current = compiler_key()
    print(f"tuning database {db.path}: {len(rows)} entr{'y' if len(rows) == 1 else 'ies'}")
    if rows:
        print(f"{'gain':>6} {'base ms':>9} {'tuned ms':>9} {'target':<10} {'compiler':<9} kernel")
    for r in rows:
        compiler = "current" if r.compiler == current else "older"
        choice = (
            "; ".join(
                f"{p}: " + ", ".join(f"{k}={v!r}" for k, v in sorted(o.items()))
                for p, o in sorted(r.choice.items())
            )
            or "analytic choice"
        )
        print(
            f"{r.gain:5.2f}x {r.base_s * 1e3:9.3f} {r.best_s * 1e3:9.3f} {r.target_name:<10} "
            f"{compiler:<9} {r.label}\n{'':>48}{choice}"
        )
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    """``stripeml tune``."""
    args.target_given = args.target
    args.target = args.target or "cpu"
    modes = [m for m in ("show", "export", "import_") if getattr(args, m)]
    if len(modes) > 1 or (modes and args.file):
        raise UsageError("give one of FILE, --show, --export and --import")
    try:
        if args.show:
            return _show(args)
        if args.export:
            n = _database(args).export(args.export, _target_key(args))
            print(f"wrote {n} entr{'y' if n == 1 else 'ies'} to {args.export}")
            return 0
        if args.import_:
            if not os.path.isfile(args.import_):
                raise UsageError(f"--import {args.import_}: no such file")
            n = _database(args).import_(args.import_)
            print(f"imported {n} entr{'y' if n == 1 else 'ies'} from {args.import_}")
            return 0
    except OSError as e:
        raise UsageError(f"cannot write {args.export}: {e.strerror or e}") from None
    if not args.file:
        raise UsageError("give a FILE to tune (or --show, --export, --import)")
    if not args.budget > 0:
        raise UsageError(f"--budget {args.budget}: must be a positive number of seconds")
    if args.ray_address and args.executor != "ray":
        raise UsageError("--ray-address is for --executor ray")
    shown = args.file
    source = ""
    try:
        with doing(f"compiling {args.file}"):
            f, arrays, shown = _function(args)
        start = time.perf_counter()
        print(
            f"[{PROG}] tuning {shown} for {args.target} within {args.budget:g} s "
            f"({args.executor} executor)",
            file=sys.stderr,
        )
        with doing(f"tuning {shown}"):
            report = stripeml.tune(
                f, *arrays, budget_s=args.budget, executor=args.executor,
                ray_address=args.ray_address, progress=_bar,
            )  # fmt: skip
        print(file=sys.stderr)
    except stripeml.StripeError as e:
        print(file=sys.stderr)
        if not args.file.lower().endswith(".onnx"):
            try:
                source = load_source(args.file)[1]
            except UsageError:
                source = ""
        print_error(e, shown, source, debug=args.debug)
        return 1
    print(report.table())
    print(f"[{PROG}] done in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``tune`` subcommand."""
    p = sub.add_parser(
        "tune",
        help="measure per-kernel alternatives to the target file's choices; store the winners",
        description=(
            "Tune FILE (a .tile program, a bundled example, or an .onnx model) for --target: "
            "per kernel, alternatives to the target file's pass options are compiled, checked "
            "against the interpreter and timed; the winners go to the tuning database in the "
            "cache folder, which every later compile on this target uses (docs/tuning.md)."
        ),
        epilog=(
            f"examples: {PROG} tune matmul --input A=512x384 --input B=384x256 --budget 60;  "
            f"{PROG} tune model.onnx --budget 600;  {PROG} tune --show"
        ),
    )
    p.add_argument(
        "file", metavar="FILE", nargs="?", help="a .tile file, an example, or an .onnx model"
    )
    p.add_argument(
        "-i", "--input", action="append", default=[], type=parse_input_spec,
        metavar="NAME=SHAPE[:DTYPE]",
        help="a Tile program's parameter, or the shape of an ONNX input with symbolic dimensions",
    )  # fmt: skip
    p.add_argument("-t", "--target", default=None, help=CPU_TARGET_HELP)
    p.add_argument(
        "--budget", type=float, default=60.0, metavar="SECONDS",
        help="time to spend measuring (default 60)",
    )  # fmt: skip
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where candidates compile and run (ray: pip install 'stripeml[tune]')",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="the Ray cluster to join (default: a local Ray instance)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument(
        "--show", action="store_true", help="list the database's entries with their gain"
    )
    p.add_argument(
        "--export", metavar="FILE.json", help="write the database (of --target if given)"
    )
    p.add_argument(
        "--import", dest="import_", metavar="FILE.json", help="merge an exported database"
    )
    p.set_defaults(handler=cmd_tune, parser=p)
