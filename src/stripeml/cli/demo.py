"""``stripeml demo``: run every bundled example (or those named) on a target and
check each against an independent NumPy reference."""

from __future__ import annotations

import argparse

from ..demo import EXAMPLES, find_example, format_table, run_demo
from .common import TARGET_HELP, UsageError, check_target


def cmd_demo(args: argparse.Namespace) -> int:
    """``stripeml demo``: run the bundled examples and print a table of results."""
    if args.list:
        for ex in EXAMPLES:
            print(f"{ex.name:16} {ex.path}")
        return 0
    found = [(n, find_example(n)) for n in args.names]
    unknown = [n for n, ex in found if ex is None]
    if unknown:
        raise UsageError(
            f"no bundled example named {', '.join(unknown)} "
            f"(have: {', '.join(ex.name for ex in EXAMPLES)})"
        )
    names = [ex.name for _, ex in found if ex is not None]
    check_target(args.target)
    results = run_demo(args.target, names, args.seed)
    print(format_table(results))
    failed = [r for r in results if not r.ok]
    for r in failed:
        detail = r.error if args.verbose else r.error.split("\nTraceback", 1)[0].strip()
        print(f"\nFAIL {r.name}: {detail}")
    print(f"\n{len(results) - len(failed)}/{len(results)} examples OK on {args.target}")
    return 1 if failed else 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``demo`` subcommand."""
    demo = sub.add_parser(
        "demo",
        help="run every bundled example and check it against NumPy",
        description=(
            "Compile and run every bundled example program (or those named), compare "
            "with an independent NumPy reference and print a table. Exits 1 if any fails."
        ),
    )
    demo.add_argument("names", nargs="*", metavar="NAME", help="only these examples")
    demo.add_argument("-t", "--target", default="interp", help=TARGET_HELP)
    demo.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    demo.add_argument("--list", action="store_true", help="list the bundled examples and exit")
    demo.add_argument(
        "-v", "--verbose", action="store_true", help="show tracebacks of internal errors"
    )
    demo.set_defaults(handler=cmd_demo, parser=demo)
