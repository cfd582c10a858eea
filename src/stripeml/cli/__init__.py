"""The ``stripeml`` command: run a Tile program, show its Stripe IR, run the demo.

::

    stripeml run FILE.tile --input A=64x32 --input B=32x16:f32 [--target T] [--seed S] [--repeat N]
    stripeml ir  FILE.tile --input A=64x32 ... [--target T] [--stages] [--code] [--timing] [--report]
    stripeml demo [NAME ...] [--target T] [--list]
    stripeml targets [NAME_OR_FILE ...]
    stripeml onnx MODEL.onnx [--target T] [--random] [--check] [--bench N]
    stripeml cache [--info | --clear] [--dir PATH]

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

One module per command group, each adding its subcommands to the parser:
:mod:`.program` (``run``, ``ir``), :mod:`.demo`, :mod:`.targets`, :mod:`.cache` and
:mod:`stripeml.onnx.cli` (``onnx``); :mod:`.common` holds what they share.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import stripeml

from . import cache, demo, program, targets
from .common import (
    PROG,
    UsageError,
    checksum,
    format_error,
    format_shape_tuple,
    function_name,
    parse_input_spec,
    positive_int,
)

__all__ = [
    "build_parser",
    "checksum",
    "format_error",
    "format_shape_tuple",
    "function_name",
    "main",
    "parse_input_spec",
]


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
    program.add_parsers(sub)
    demo.add_parser(sub)
    from ..onnx.cli import add_parser as add_onnx_parser

    add_onnx_parser(sub, positive_int)
    targets.add_parser(sub)
    cache.add_parser(sub)
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
