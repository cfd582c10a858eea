"""``stripeml targets``: list the bundled targets, or load, validate and describe
target files (every fact, auto values as detected here, and the pipeline).

A name or path that finds no file is bad command-line use (exit status 2,
before anything loads); a file that does not validate exits 1."""

from __future__ import annotations

import argparse
import sys

from ..errors import TargetError
from .common import PROG, UsageError


def cmd_targets(args: argparse.Namespace) -> int:
    """``stripeml targets``: list the bundled targets, or describe the ones named."""
    from ..targets import bundled_targets, load_target, resolve_target
    from ..targets.report import describe_target, summarize_target

    failed = False
    if args.names:
        paths = []
        for name in args.names:
            try:
                paths.append(resolve_target(name))
            except TargetError as e:
                raise UsageError(str(e)) from None
        blocks = []
        for path in paths:
            try:
                blocks.append(describe_target(load_target(path)))
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


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``targets`` subcommand."""
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
    targets.set_defaults(handler=cmd_targets, parser=targets)
