"""``stripeml explore``: write the compiler explorer's HTML page for a Tile
program or an ONNX model (docs/explorer.md).

::

    stripeml explore FILE.tile --input A=512x384 --input B=384x256 [--target T] -o report.html
    stripeml explore MODEL.onnx [--input NAME=1x3x224x224] [--target T] -o report.html

A path ending in ``.onnx`` is a model (its inputs: seeded random values of the
declared shapes, ``--input`` giving those with symbolic dimensions); anything
else is a Tile program or a bundled example, as for ``stripeml run``.  Progress goes to
stderr; the page's path and size to stdout.  Exit status as for every command:
2 for bad command-line use (no such file, a malformed ``--input``, an output
folder that does not exist), 1 when the program, model or target is rejected
or the ``explore`` extra (matplotlib) is missing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
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


def _progress(start: float) -> Any:
    def say(text: str) -> None:
        print(f"[{PROG}] {time.perf_counter() - start:6.1f} s  {text}", file=sys.stderr, flush=True)

    return say


def cmd_explore(args: argparse.Namespace) -> int:
    """``stripeml explore``: compile, run, write the page."""
    out = Path(args.output)
    if out.is_dir():
        raise UsageError(f"-o {args.output}: is a folder; give the path of the .html file to write")
    if not out.parent.is_dir():
        raise UsageError(f"-o {args.output}: the folder {str(out.parent)!r} does not exist")
    say = _progress(time.perf_counter())
    if args.file.lower().endswith(".onnx"):
        return _explore_onnx(args, out, say)
    path, source = load_source(args.file)
    specs = input_specs(path, args.input)
    shown = display_name(args.file, path)
    try:
        say(f"compiling {shown} for {args.target}")
        with doing(f"compiling {shown}"):
            f = stripeml.compile(source, target=args.target, name=function_name(path))
            arrays, _ = ordered_arrays(f, specs, args.seed)
            exe = f.lower(*arrays)
        with doing(f"exploring {shown}"):
            exe.explore(out, *arrays, progress=say)
    except stripeml.StripeError as e:
        print_error(e, shown, source, debug=args.debug)
        return 1
    except OSError as e:
        raise UsageError(f"cannot write {args.output}: {e.strerror or e}") from None
    return _done(out)


def _explore_onnx(args: argparse.Namespace, out: Path, say: Any) -> int:
    from ..onnx import compile as onnx_compile

    shapes = onnx_input_shapes(args.file, args.input)
    try:
        say(f"importing {args.file}")
        with doing(f"compiling {args.file}"):
            fn = onnx_compile(args.file, target=args.target, progress=say)
            arrays = onnx_inputs(fn, shapes, args.seed)
            exe = fn.lower(*arrays)
        if exe is None:
            print(
                f"{args.file}: the whole model folds to constants: nothing to explore",
                file=sys.stderr,
            )
            return 1
        with doing(f"exploring {args.file}"):
            exe.explore(out, *fn.specialise(arrays).call_args(arrays), progress=say)
    except stripeml.StripeError as e:
        print(f"{args.file}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        raise UsageError(f"cannot write {args.output}: {e.strerror or e}") from None
    return _done(out)


def _done(out: Path) -> int:
    size = out.stat().st_size
    print(f"wrote {out} ({size / 1e6:.1f} MB): open it in a web browser")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``explore`` subcommand."""
    p = sub.add_parser(
        "explore",
        help="write an HTML page: the IR after each pass, where each buffer lives, the roofline",
        description=(
            "Compile FILE (a .tile program, a bundled example, or an .onnx model) for --target, "
            "run it on seeded random inputs and write one self-contained HTML page: the program "
            "after each pass with diffs and times, each memory location's buffers over the "
            "program's steps, each kernel's time, FLOPs and bytes against the target's roofline, "
            "and the bytes moved per memory level (docs/explorer.md)."
        ),
        epilog=(
            f"examples: {PROG} explore matmul --input A=512x384 --input B=384x256 "
            f"--target examples/npu -o matmul.html;  {PROG} explore resnet50.onnx -o resnet.html"
        ),
    )
    p.add_argument(
        "file", metavar="FILE", help="a .tile file, a bundled example, or an .onnx model"
    )
    p.add_argument(
        "-i",
        "--input",
        action="append",
        default=[],
        type=parse_input_spec,
        metavar="NAME=SHAPE[:DTYPE]",
        help=(
            "a Tile program's parameter (one each; may be left out for a bundled example), or "
            "the shape of an ONNX input with symbolic dimensions (its dtype is the model's)"
        ),
    )
    p.add_argument("-t", "--target", default="cpu", help=CPU_TARGET_HELP)
    p.add_argument("-o", "--output", required=True, metavar="REPORT.html", help="the page to write")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.set_defaults(handler=cmd_explore, parser=p)
