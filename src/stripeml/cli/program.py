"""``stripeml run`` and ``stripeml ir``: compile a Tile program for given input
shapes, then run it (checksums and times) or print its Stripe IR (after each
pass, the generated code, pass timings, a memory-traffic report).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

import stripeml
from stripeml import phases

from .common import (
    PROG,
    add_program_args,
    as_tuple,
    checksum,
    display_name,
    doing,
    format_ms,
    format_shape_tuple,
    function_name,
    input_specs,
    load_source,
    ordered_arrays,
    ordered_specs,
    positive_int,
    print_error,
    shape_only_arrays,
)

if TYPE_CHECKING:  # the compiler loads lazily (``stripeml.compile``)
    from ..api import Executable, Function


def cmd_run(args: argparse.Namespace) -> int:
    """``stripeml run``: compile, run on seeded random inputs, print checksums and times."""
    path, source = load_source(args.file)
    specs = input_specs(path, args.input)
    shown = display_name(args.file, path)
    try:
        compile_ = stripeml.compile  # imports the compiler: not part of the timing
        start = time.perf_counter()
        with doing(f"compiling {shown}"):
            f = compile_(source, target=args.target, name=function_name(path))
        compile_seconds = time.perf_counter() - start
        arrays, ordered = ordered_arrays(f, specs, args.seed)
        start = time.perf_counter()
        with doing(f"running {shown}"):
            outputs = as_tuple(f(*arrays))
            first = compile_seconds + time.perf_counter() - start
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                f(*arrays)
                times.append(time.perf_counter() - t0)
    except stripeml.StripeError as e:
        print_error(e, shown, source, debug=args.debug)
        return 1
    names = tuple(getattr(f, "outputs", ())) or tuple(f"out{i}" for i in range(len(outputs)))
    print(f"program  {display_name(args.file, path)}  (target {args.target}, seed {args.seed})")
    print(f"inputs   {', '.join(s.describe() for s in ordered) or '(none)'}")
    for name, value in zip(names, outputs):
        value = np.asarray(value)
        total, digest = checksum(value)
        print(
            f"output   {name}  shape {format_shape_tuple(value.shape)}  dtype {value.dtype}"
            f"  sum {total:.6g}  sha256 {digest}"
        )
    print(
        f"time     compile + first run {format_ms(first)}; "
        f"median of {args.repeat} runs {format_ms(statistics.median(times))}"
    )
    return 0


def cmd_ir(args: argparse.Namespace) -> int:
    """``stripeml ir``: print the Stripe IR (stages, code, timings, report as asked)."""
    path, source = load_source(args.file)
    specs = input_specs(path, args.input)
    shown = display_name(args.file, path)
    try:
        compile_ = stripeml.compile  # imports the compiler: not part of the profile
        with phases.recording() as profile:
            start = time.perf_counter()
            with doing(f"compiling {shown}"):
                f = compile_(source, target=args.target, name=function_name(path))
            if args.report:  # the interpreter runs the program: it needs real inputs
                arrays, _ = ordered_arrays(f, specs, args.seed)
            else:  # lowering looks at shapes and dtypes only: no data
                arrays = shape_only_arrays(ordered_specs(f, specs))
            with doing(f"compiling {shown}"):
                exe = f.lower(*arrays)
            wall = time.perf_counter() - start
        report = ""
        if args.report:
            with doing(f"running {shown} for --report"):
                report = _memory_report(f, exe, arrays, args)
    except stripeml.StripeError as e:
        print_error(e, shown, source, debug=args.debug)
        return 1
    sections: list[str] = []
    if args.stages:
        for name, text in exe.stages:
            sections.append(f"// ===== {name} =====\n{text.rstrip()}")
    if args.code:
        code = exe.code.rstrip()
        sections.append(
            f"// ===== code ({args.target}) =====\n"
            + (code or f"// (target {args.target} generates no backend source)")
        )
    if not sections:
        sections.append(exe.ir.rstrip())
    if args.timing:
        sections.append(_comment(f"===== pass timings ({args.target}) =====\n{_timings(exe)}"))
        sections.append(
            _comment(f"===== compile phases ({args.target}) =====\n{profile.table(wall)}")
        )
    if args.report:
        sections.append(report)
    print("\n\n".join(sections))
    return 0


def _comment(text: str) -> str:
    """Every line of ``text`` as a ``//`` comment (IR output stays parseable by eye)."""
    return "\n".join(f"// {line}".rstrip() for line in text.splitlines())


def _timings(exe: Executable) -> str:
    """One line per pass run (in order) with its time, then the total."""
    timings = list(exe.timings)
    if not timings:
        return "(no passes)"
    width = max(len(name) for name in ["total", *(name for name, _ in timings)])
    lines = [f"{name:{width}}  {format_ms(seconds):>12}" for name, seconds in timings]
    lines.append(f"{'total':{width}}  {format_ms(sum(t for _, t in timings)):>12}")
    return "\n".join(lines)


def _memory_report(
    f: Function, exe: Executable, arrays: Sequence[np.ndarray], args: argparse.Namespace
) -> str:
    """Run the final program with the interpreter and format the bytes per location."""
    from ..analysis.memory import is_placed, peak_bytes
    from ..runtime.interp import run_with_report
    from ..targets.report import format_traffic

    program = exe.program
    _, traffic = run_with_report(program, dict(zip(f.params, arrays)))
    memories = f.target.memories
    peaks = peak_bytes(program) if is_placed(program) else None
    table = format_traffic(traffic.reads, traffic.writes, memories, peaks)
    if peaks is None:
        table += "\npeak bytes: the program is not placed (no `place` pass in the pipeline)"
    title = f"===== memory traffic ({args.target}; interpreter, seed {args.seed}) ====="
    return _comment(f"{title}\n{table}")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add the ``run`` and ``ir`` subcommands."""
    run = sub.add_parser(
        "run",
        help="compile a Tile program, run it on random inputs, print checksums and times",
        description=(
            "Compile FILE, run it on seeded random inputs and print each output's name, "
            "shape, dtype, sum and a hash of its bytes, with the time of compile + first "
            "run and the median of --repeat further runs."
        ),
        epilog=f"example: {PROG} run matmul.tile --input A=64x32 --input B=32x16",
    )
    add_program_args(run)
    run.add_argument(
        "-r",
        "--repeat",
        type=positive_int,
        default=10,
        help="timed runs after the first (default 10)",
    )
    run.set_defaults(handler=cmd_run, parser=run)

    ir = sub.add_parser(
        "ir",
        help="print the Stripe IR of a Tile program for given input shapes",
        description=(
            "Compile FILE, specialise it for the --input shapes and print the final "
            "Stripe IR; --stages prints the IR after each pass instead, --code the "
            "generated backend source. Without --report no input data is made: "
            "only the shapes and dtypes of the --input specs are used."
        ),
        epilog=f"example: {PROG} ir matmul.tile --input A=64x32 --input B=32x16 --stages",
    )
    add_program_args(ir)
    ir.add_argument("--stages", action="store_true", help="print the IR after every pass")
    ir.add_argument("--code", action="store_true", help="print the generated backend source")
    ir.add_argument(
        "--timing",
        action="store_true",
        help="print the time each pass took, and the compile's time per phase",
    )
    ir.add_argument(
        "--report",
        action="store_true",
        help=(
            "run the final program with the interpreter on the random inputs and print the "
            "bytes read and written per memory location (and peak bytes once placed)"
        ),
    )
    ir.set_defaults(handler=cmd_ir, parser=ir)
