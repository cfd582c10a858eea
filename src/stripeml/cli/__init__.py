"""The ``stripeml`` command: run a Tile program, show its Stripe IR, run the demo.

::

    stripeml run FILE.tile --input A=64x32 --input B=32x16:f32 [--target T] [--seed S] [--repeat N]
    stripeml ir  FILE.tile --input A=64x32 ... [--target T] [--stages] [--code] [--timing] [--report]
    stripeml demo [NAME ...] [--target T] [--list]
    stripeml targets [NAME_OR_FILE ...]
    stripeml onnx MODEL.onnx [--target T] [--random] [--check] [--bench N]
    stripeml explore FILE.tile --input ... | MODEL.onnx [--target T] -o report.html
    stripeml cache [--info | --clear] [--dir PATH]
    stripeml tune FILE.tile --input ... | MODEL.onnx [--target T] [--budget S] [--executor local|ray]
    stripeml tune --show | --export FILE.json | --import FILE.json

``--target`` is ``interp``, a bundled target name (``cpu``, ``examples/npu``;
see ``stripeml targets``) or the path of a target ``.toml`` file.

``FILE`` is a path, or the name of a bundled example (``matmul`` or
``matmul.tile``, see ``stripeml demo --list``); for a bundled example the
``--input`` options may be left out and the demo's shapes are used.

Exit status (the table is in the README): 0 on success; 1 when stripeml
rejects the program, the model, its inputs or the target file (any
:class:`stripeml.StripeError`, printed as ``FILE:line:col: message`` with the
source line and a caret when the error has a location), when a demo example
fails or the target cannot run at all, when memory runs out (one line saying
what could not be allocated) and on an internal error (a bug: one line asking
to report it); 2 for bad command-line use (malformed ``--input``, a file, model
or ``--target`` that does not exist, inputs that do not match the program's
parameters); 130 when interrupted (Ctrl-C).  Never a traceback, except for an
internal error with ``--debug`` (or ``STRIPEML_DEBUG=1``).

One module per command group, each adding its subcommands to the parser:
:mod:`.program` (``run``, ``ir``), :mod:`.demo`, :mod:`.targets`, :mod:`.explore`, :mod:`.cache`,
:mod:`.tune` and
:mod:`stripeml.onnx.cli` (``onnx``); :mod:`.common` holds what they share.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

import stripeml

from ..errors import InternalError, StripeError
from . import cache, demo, explore, program, targets, tune
from .common import (
    INTERNAL_HINT,
    PROG,
    OutOfMemory,
    UsageError,
    check_target,
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
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    program.add_parsers(sub)
    demo.add_parser(sub)
    from ..onnx.cli import add_parser as add_onnx_parser

    add_onnx_parser(sub, positive_int)
    targets.add_parser(sub)
    explore.add_parser(sub)
    cache.add_parser(sub)
    tune.add_parser(sub)
    for command in sub.choices.values():  # `stripeml run ... --debug` works too
        if "--debug" not in command._option_string_actions:
            command.add_argument(
                "--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP
            )
    return parser


DEBUG_HELP = "print the Python traceback of an internal error (also: STRIPEML_DEBUG=1)"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stripeml`` console script; returns the exit status.

    Every failure prints one message on stderr (the exit statuses are in the
    module docstring): usage errors, :class:`~stripeml.StripeError` a command
    did not report itself, running out of memory, Ctrl-C, and, as an internal
    error with a hint to report it, any other exception (its traceback only
    with ``--debug`` or ``STRIPEML_DEBUG=1``, read here, once).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version and usage errors
        return _status(e)
    # The environment is read here, at the command line's boundary, only.
    args.debug = args.debug or os.environ.get("STRIPEML_DEBUG", "") not in ("", "0")
    try:
        if isinstance(getattr(args, "target", None), str):
            check_target(args.target)  # one that names nothing is usage (2), for every command
        return args.handler(args)
    except UsageError as e:
        args.parser.print_usage(sys.stderr)
        print(f"{args.parser.prog}: error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # a command's own ``parser.error(...)`` (usage, 2)
        return _status(e)
    except OutOfMemory as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except MemoryError as e:
        print(f"{PROG}: {OutOfMemory(f'running `{PROG} {args.command}`', e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`stripeml ... | head`): not an error to report
        _silence_stdout()
        return 141  # 128 + SIGPIPE, as the shell reports a command killed by it
    except StripeError as e:  # one a command did not report with its file
        if isinstance(e, InternalError) and isinstance(e.__cause__, MemoryError):
            print(
                f"{PROG}: {OutOfMemory(f'running `{PROG} {args.command}`', e.__cause__)}",
                file=sys.stderr,
            )
            return 1
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        if isinstance(e, InternalError):
            print(f"{PROG}: {INTERNAL_HINT}", file=sys.stderr)
            if args.debug and e.__cause__ is not None:
                c = e.__cause__
                traceback.print_exception(type(c), c, c.__traceback__, file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - anything else is a bug: say so, no traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(
            f"{PROG}: internal error in `{PROG} {args.command}`: {type(e).__name__}"
            + (f": {first}" if first else "")
            + f"; {INTERNAL_HINT}",
            file=sys.stderr,
        )
        if args.debug:
            traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit raises nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (captured output)
        pass


def _status(e: SystemExit) -> int:
    """The exit status a ``SystemExit`` asks for (argparse: 0 for --help, 2 for usage)."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)  # ``sys.exit("message")``
    return 2
