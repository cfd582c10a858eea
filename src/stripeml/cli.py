"""The ``stripeml`` command: run a Tile program, show its Stripe IR, run the demo.

::

    stripeml run FILE.tile --input A=64x32 --input B=32x16:f32 [--target T] [--seed S] [--repeat N]
    stripeml ir  FILE.tile --input A=64x32 ... [--target T] [--stages] [--code] [--timing] [--report]
    stripeml demo [NAME ...] [--target T] [--list]
    stripeml targets [NAME_OR_FILE ...]
    stripeml onnx MODEL.onnx [--target T] [--random] [--check] [--bench N]

``--target`` is ``interp``, a bundled target name (``cpu``, ``examples/npu``;
see ``stripeml targets``) or the path of a target ``.toml`` file.

``FILE`` is a path, or the name of a bundled example (``matmul`` or
``matmul.tile``, see ``stripeml demo --list``); for a bundled example the
``--input`` options may be left out and the demo's shapes are used.

Exit status: 0 on success; 1 when stripeml rejects the program, its inputs or
the target file (any :class:`stripeml.StripeError`, printed as
``FILE:line:col: message`` with the source line and a caret when the error has
a location, never a traceback) or when a demo example fails; 2 for bad
command-line use (malformed ``--input``, a file or ``--target`` that does not
exist, inputs that do not match the program's parameters).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import stripeml

from .demo import EXAMPLES, InputSpec, find_example, format_table, random_inputs, run_demo
from .errors import TargetError
from .ir.dtypes import DTYPES

PROG = "stripeml"
_TARGET_HELP = (
    "interp, a bundled target (cpu, opencl, cuda, examples/npu ...; see `stripeml targets`) "
    "or a target .toml file (default: interp)"
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DIMS = re.compile(r"[0-9]+(x[0-9]+)*\Z")
_LOCATION = re.compile(r"([0-9]+):([0-9]+): ")
DTYPE_NAMES = tuple(DTYPES)  # bool i8 i16 i32 i64 u8 u16 u32 u64 f16 f32 f64


class UsageError(Exception):
    """Bad command-line use found after parsing (exit status 2)."""


# --------------------------------------------------------------------------
# --input NAME=DxDxD[:dtype]


def parse_input_spec(text: str) -> InputSpec:
    """Parse ``NAME=64x32[:dtype]`` or ``NAME=scalar[:dtype]`` (dtype defaults to f32).

    Raises :class:`argparse.ArgumentTypeError` (never a StripeError) with a
    message saying what is wrong, so argparse reports it as a usage error.
    """
    name, eq, rest = text.partition("=")
    name = name.strip()
    if not eq:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected NAME=SHAPE[:DTYPE], e.g. A=64x32 or A=64x32:f64 or S=scalar"
        )
    if not _NAME.match(name):
        raise argparse.ArgumentTypeError(f"{text!r}: {name!r} is not a parameter name")
    shape_text, colon, dtype = rest.strip().partition(":")
    dtype = dtype.strip() if colon else "f32"
    if dtype not in DTYPES:
        raise argparse.ArgumentTypeError(
            f"{text!r}: unknown dtype {dtype!r} (one of {', '.join(DTYPE_NAMES)})"
        )
    shape_text = shape_text.strip().lower()
    if shape_text == "scalar":
        return InputSpec(name, (), dtype)
    if not _DIMS.match(shape_text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: shape {shape_text!r} must be sizes joined by 'x' (64x32) or 'scalar'"
        )
    shape = tuple(int(d) for d in shape_text.split("x"))
    if any(d <= 0 for d in shape):
        raise argparse.ArgumentTypeError(f"{text!r}: every size must be positive")
    return InputSpec(name, shape, dtype)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


# --------------------------------------------------------------------------
# Errors


def format_error(err: BaseException, filename: str, source: str = "") -> str:
    """``FILE:line:col: message`` plus the source line and a caret when ``err``
    has a location; ``FILE: message`` otherwise.  A :class:`TargetError` is
    about the target file, which its message already names: it prints as is.

    The location is ``err.line``/``err.column`` (1-based) when present, else a
    leading ``line:col:`` in the message (how the checker and shape binding
    report positions).  A snippet the error already carries is dropped: the
    snippet is redrawn here from ``source``.
    """
    text = str(err)
    if isinstance(err, TargetError):
        return text
    message = getattr(err, "message", None)
    if not isinstance(message, str):
        message = text.splitlines()[0] if text else type(err).__name__
    line, column = getattr(err, "line", None), getattr(err, "column", None)
    lead = _LOCATION.match(message)
    if lead and (not isinstance(line, int) or (int(lead[1]), int(lead[2])) == (line, column)):
        line, column, message = int(lead[1]), int(lead[2]), message[lead.end() :]
    if not isinstance(line, int) or not isinstance(column, int) or line < 1:
        return f"{filename}: {text or message}"
    out = f"{filename}:{line}:{column}: {message}"
    lines = source.splitlines()
    if line <= len(lines):
        src_line = lines[line - 1].expandtabs(1)
        out += f"\n    {src_line}\n    {' ' * (max(column, 1) - 1)}^"
    return out


# --------------------------------------------------------------------------
# Shared steps


def _load_source(file: str) -> tuple[Path, str]:
    """The program's path and text; ``file`` may name a bundled example."""
    path = Path(file)
    if not path.is_file():
        example = find_example(file)
        if example is None:
            raise UsageError(
                f"cannot read {file!r}: no such file, and no bundled example of that name "
                f"(see `{PROG} demo --list`)"
            )
        path = example.path
    try:
        return path, path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {file!r}: {e}") from None


def function_name(path: Path) -> str:
    """The compiled function's name: the file stem, made an identifier."""
    name = re.sub(r"\W", "_", path.stem)
    return name if name[:1].isalpha() or name[:1] == "_" else f"_{name}"


def _display(file: str, path: Path) -> str:
    """How messages name the program: as typed, or the bundled file's path."""
    return file if Path(file).is_file() else str(path)


def _input_specs(path: Path, given: Sequence[InputSpec]) -> tuple[InputSpec, ...]:
    seen: set[str] = set()
    for spec in given:
        if spec.name in seen:
            raise UsageError(f"--input {spec.name} is given twice")
        seen.add(spec.name)
    if given:
        return tuple(given)
    example = find_example(path)
    return example.inputs if example is not None else ()


def _ordered_arrays(
    f: object, specs: Sequence[InputSpec], seed: int
) -> tuple[list[np.ndarray], tuple[InputSpec, ...]]:
    """Random arrays in the program's parameter order (checks names match)."""
    params = tuple(getattr(f, "params", ()))
    by_name = {s.name: s for s in specs}
    missing = [p for p in params if p not in by_name]
    unknown = [s.name for s in specs if s.name not in params]
    if missing or unknown:
        want = ", ".join(params) or "no inputs"
        parts = []
        if missing:
            parts.append(f"missing --input for {', '.join(missing)}")
        if unknown:
            parts.append(f"no parameter named {', '.join(unknown)}")
        raise UsageError(f"{'; '.join(parts)} (the program takes {want})")
    ordered = tuple(by_name[p] for p in params)
    arrays = random_inputs(ordered, seed)
    return [arrays[p] for p in params], ordered


def _as_tuple(result: object) -> tuple[np.ndarray, ...]:
    return result if isinstance(result, tuple) else (result,)  # type: ignore[return-value]


def checksum(array: np.ndarray) -> tuple[float, str]:
    """The sum (as a float64) and the first 12 hex digits of the SHA-256 of the
    array's bytes in C order: enough to compare runs and backends by eye."""
    a = np.ascontiguousarray(array)
    return float(np.sum(a, dtype=np.float64)), hashlib.sha256(a.tobytes()).hexdigest()[:12]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"


# --------------------------------------------------------------------------
# Subcommands


def _check_target(target: str) -> None:
    """A ``--target`` that names no bundled target and no file is a usage error."""
    if target == "interp":
        return
    from .targets import resolve_target

    try:
        resolve_target(target)
    except TargetError as e:
        raise UsageError(str(e)) from None


def _cmd_run(args: argparse.Namespace) -> int:
    _check_target(args.target)
    path, source = _load_source(args.file)
    specs = _input_specs(path, args.input)
    try:
        compile_ = stripeml.compile  # imports the compiler: not part of the timing
        start = time.perf_counter()
        f = compile_(source, target=args.target, name=function_name(path))
        compile_seconds = time.perf_counter() - start
        arrays, ordered = _ordered_arrays(f, specs, args.seed)
        start = time.perf_counter()
        outputs = _as_tuple(f(*arrays))
        first = compile_seconds + time.perf_counter() - start
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            f(*arrays)
            times.append(time.perf_counter() - t0)
    except stripeml.StripeError as e:
        print(format_error(e, _display(args.file, path), source), file=sys.stderr)
        return 1
    names = tuple(getattr(f, "outputs", ())) or tuple(f"out{i}" for i in range(len(outputs)))
    print(f"program  {_display(args.file, path)}  (target {args.target}, seed {args.seed})")
    print(f"inputs   {', '.join(s.describe() for s in ordered) or '(none)'}")
    for name, value in zip(names, outputs):
        value = np.asarray(value)
        total, digest = checksum(value)
        print(
            f"output   {name}  shape {format_shape_tuple(value.shape)}  dtype {value.dtype}"
            f"  sum {total:.6g}  sha256 {digest}"
        )
    print(
        f"time     compile + first run {_ms(first)}; "
        f"median of {args.repeat} runs {_ms(statistics.median(times))}"
    )
    return 0


def format_shape_tuple(shape: tuple[int, ...]) -> str:
    """``(64, 16)``; rank 0 prints ``()``."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _cmd_ir(args: argparse.Namespace) -> int:
    _check_target(args.target)
    path, source = _load_source(args.file)
    specs = _input_specs(path, args.input)
    try:
        f = stripeml.compile(source, target=args.target, name=function_name(path))
        arrays, _ = _ordered_arrays(f, specs, args.seed)
        exe = f.lower(*arrays)
        report = _memory_report(f, exe, arrays, args) if args.report else ""
    except stripeml.StripeError as e:
        print(format_error(e, _display(args.file, path), source), file=sys.stderr)
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
    if args.report:
        sections.append(report)
    print("\n\n".join(sections))
    return 0


def _comment(text: str) -> str:
    """Every line of ``text`` as a ``//`` comment (IR output stays parseable by eye)."""
    return "\n".join(f"// {line}".rstrip() for line in text.splitlines())


def _timings(exe: object) -> str:
    """One line per pass run (in order) with its time, then the total."""
    timings = list(getattr(exe, "timings", []))
    if not timings:
        return "(no passes)"
    width = max(len(name) for name in ["total", *(name for name, _ in timings)])
    lines = [f"{name:{width}}  {_ms(seconds):>12}" for name, seconds in timings]
    lines.append(f"{'total':{width}}  {_ms(sum(t for _, t in timings)):>12}")
    return "\n".join(lines)


def _memory_report(
    f: object, exe: object, arrays: Sequence[np.ndarray], args: argparse.Namespace
) -> str:
    """Run the final program with the interpreter and format the bytes per location."""
    from .analysis.memory import is_placed, peak_bytes
    from .runtime.interp import run_with_report
    from .targets.report import format_traffic

    program = exe.program  # type: ignore[attr-defined]
    _, traffic = run_with_report(program, dict(zip(f.params, arrays)))  # type: ignore[attr-defined]
    memories = f.target.memories  # type: ignore[attr-defined]
    peaks = peak_bytes(program) if is_placed(program) else None
    table = format_traffic(traffic.reads, traffic.writes, memories, peaks)
    if peaks is None:
        table += "\npeak bytes: the program is not placed (no `place` pass in the pipeline)"
    title = f"===== memory traffic ({args.target}; interpreter, seed {args.seed}) ====="
    return _comment(f"{title}\n{table}")


def _cmd_targets(args: argparse.Namespace) -> int:
    from .targets import bundled_targets, load_target
    from .targets.report import describe_target, summarize_target

    failed = False
    if args.names:
        blocks = []
        for name in args.names:
            try:
                blocks.append(describe_target(load_target(name)))
            except TargetError as e:
                print(f"{PROG}: {e}", file=sys.stderr)
                failed = True
        print("\n\n".join(blocks))
        return 1 if failed else 0
    bundled = bundled_targets()
    width = max(len(n) for n in ["interp", *bundled])
    print(f"{'interp':{width}}  {'interp':7} (the reference interpreter, no passes)")
    for name, path in bundled.items():
        try:
            print(f"{name:{width}}  {summarize_target(load_target(path))}")
        except TargetError as e:
            print(f"{name:{width}}  ERROR {e}")
            failed = True
    return 1 if failed else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.list:
        for ex in EXAMPLES:
            print(f"{ex.name:16} {ex.path}")
        return 0
    unknown = [n for n in args.names if find_example(n) is None]
    if unknown:
        raise UsageError(
            f"no bundled example named {', '.join(unknown)} "
            f"(have: {', '.join(ex.name for ex in EXAMPLES)})"
        )
    names = [find_example(n).name for n in args.names]  # type: ignore[union-attr]
    _check_target(args.target)
    results = run_demo(args.target, names, args.seed)
    print(format_table(results))
    failed = [r for r in results if not r.ok]
    for r in failed:
        detail = r.error if args.verbose else r.error.split("\nTraceback", 1)[0].strip()
        print(f"\nFAIL {r.name}: {detail}")
    print(f"\n{len(results) - len(failed)}/{len(results)} examples OK on {args.target}")
    return 1 if failed else 0


# --------------------------------------------------------------------------
# Parser


def _add_program_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "file",
        metavar="FILE",
        help="a .tile file, or the name of a bundled example (see `stripeml demo --list`)",
    )
    p.add_argument(
        "-i",
        "--input",
        action="append",
        default=[],
        type=parse_input_spec,
        metavar="NAME=SHAPE[:DTYPE]",
        help=(
            "one per parameter: SHAPE is sizes joined by 'x' (64x32) or 'scalar'; DTYPE one "
            f"of {' '.join(DTYPE_NAMES)} (default f32). Inputs are random, seeded by --seed. "
            "May be left out for a bundled example (the demo's shapes are used)"
        ),
    )
    p.add_argument(
        "-t",
        "--target",
        default="interp",
        help=_TARGET_HELP,
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``stripeml`` command."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="stripeml: a tensor compiler on the Stripe nested-polyhedral IR.",
        epilog=f"Run `{PROG} COMMAND --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {stripeml.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

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
    _add_program_args(run)
    run.add_argument(
        "-r",
        "--repeat",
        type=_positive_int,
        default=10,
        help="timed runs after the first (default 10)",
    )
    run.set_defaults(handler=_cmd_run, parser=run)

    ir = sub.add_parser(
        "ir",
        help="print the Stripe IR of a Tile program for given input shapes",
        description=(
            "Compile FILE, specialise it for the --input shapes and print the final "
            "Stripe IR; --stages prints the IR after each pass instead, --code the "
            "generated backend source."
        ),
        epilog=f"example: {PROG} ir matmul.tile --input A=64x32 --input B=32x16 --stages",
    )
    _add_program_args(ir)
    ir.add_argument("--stages", action="store_true", help="print the IR after every pass")
    ir.add_argument("--code", action="store_true", help="print the generated backend source")
    ir.add_argument("--timing", action="store_true", help="print the time each pass took")
    ir.add_argument(
        "--report",
        action="store_true",
        help=(
            "run the final program with the interpreter on the random inputs and print the "
            "bytes read and written per memory location (and peak bytes once placed)"
        ),
    )
    ir.set_defaults(handler=_cmd_ir, parser=ir)

    demo = sub.add_parser(
        "demo",
        help="run every bundled example and check it against NumPy",
        description=(
            "Compile and run every bundled example program (or those named), compare "
            "with an independent NumPy reference and print a table. Exits 1 if any fails."
        ),
    )
    demo.add_argument("names", nargs="*", metavar="NAME", help="only these examples")
    demo.add_argument("-t", "--target", default="interp", help=_TARGET_HELP)
    demo.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    demo.add_argument("--list", action="store_true", help="list the bundled examples and exit")
    demo.add_argument(
        "-v", "--verbose", action="store_true", help="show tracebacks of internal errors"
    )
    demo.set_defaults(handler=_cmd_demo, parser=demo)

    from .onnx.cli import add_parser as add_onnx_parser

    add_onnx_parser(sub, _positive_int)

    targets = sub.add_parser(
        "targets",
        help="list the bundled targets, or describe target files",
        description=(
            "Without arguments, list the bundled targets with their backend and memories. "
            "With names or .toml paths, load and validate each and print every fact and "
            "its pass pipeline (auto values as detected on this machine)."
        ),
        epilog=f"example: {PROG} targets examples/npu my_chip.toml",
    )
    targets.add_argument("names", nargs="*", metavar="NAME_OR_FILE", help="targets to describe")
    targets.set_defaults(handler=_cmd_targets, parser=targets)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stripeml`` console script; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version and usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    try:
        return args.handler(args)
    except UsageError as e:
        args.parser.print_usage(sys.stderr)
        print(f"{args.parser.prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
