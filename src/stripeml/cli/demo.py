"""``stripeml demo``: run every bundled example (or those named) on a target and
check each against an independent NumPy reference.

When an example fails, the target itself is tried once on the smallest program
there is (:data:`PROBE`): if that fails too, nothing can run on it here (no
GPU, no OpenCL driver), so the command says so once and stops, instead of
repeating the same message for every example.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import stripeml

from ..demo import EXAMPLES, DemoResult, check_example, find_example, format_table
from .common import PROG, TARGET_HELP, UsageError, doing

#: The program that tells whether a target can run anything at all.
PROBE = "function (A[N]) -> (B) {\n    B = A + 1;\n}\n"


def target_problem(target: str) -> str | None:
    """Why nothing can run on ``target`` here (the :class:`~stripeml.StripeError`
    that compiling and running :data:`PROBE` raises), or ``None`` when it runs."""
    try:
        f = stripeml.compile(PROBE, target=target, name="probe")
        f(np.zeros(4, np.float32))
    except stripeml.StripeError as e:
        return str(e)
    return None


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
    names = {ex.name for _, ex in found if ex is not None}
    stripeml.compile  # noqa: B018 - import the compiler now, outside the timings
    results: list[DemoResult] = []
    probed = False
    for ex in EXAMPLES:
        if names and ex.name not in names:
            continue
        with doing(f"running the example {ex.name}"):
            result = check_example(ex, args.target, args.seed)
        if not result.ok and result.max_abs_err is None and not probed:
            probed = True  # it did not compile or run: can anything?
            problem = target_problem(args.target)
            if problem is not None:
                print(
                    f"{PROG} demo: nothing runs on target {args.target} here: {problem}",
                    file=sys.stderr,
                )
                return 1
        results.append(result)
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
            "with an independent NumPy reference and print a table. Exits 1 if any fails "
            "(once, without the table, when nothing can run on the target here)."
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
