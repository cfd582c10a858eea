"""``make fuzz``: a long differential run and a parser mutation run, then a summary.

    python -m fuzz --programs N --mutations M --seed S [--workers J] [--exclude none]

(run from ``tests/`` with ``src/`` importable; the Makefile does that).  Program
seeds are ``S * 10**6 + 0 .. N-1`` (the CI slice uses ``S = 0``).  Every
distinct failure (target, status, kind) is minimised and saved into
``tests/fuzz/regressions/`` as an expected failure; the summary (programs per
target, outcomes by kind, mismatches, non-StripeError exceptions, deaths,
hangs, time) is printed and written as JSON (``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .backends import available_targets
from .known import EXCLUDED_NOW, KNOWN
from .pool import Pool
from .session import (
    fuzz_parsers,
    fuzz_programs,
    minimise_parser_failure,
    minimise_program_failure,
    save_parser_failure,
    save_program_failure,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=1000)
    ap.add_argument("--mutations", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--nice", type=int, default=19, help="worker niceness (the machine is shared)")
    ap.add_argument("--targets", default=",".join(available_targets()))
    ap.add_argument(
        "--exclude", default="now", help="'now' (the known bugs not yet fixed), 'none', or names"
    )
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per target per program")
    ap.add_argument("--mutation-timeout", type=float, default=5.0)
    ap.add_argument("--json", default="../build/fuzz/summary.json")
    ap.add_argument("--no-save", action="store_true", help="do not write regression cases")
    ap.add_argument("--minimise", type=int, default=8, help="distinct failures to minimise")
    args = ap.parse_args(argv)

    exclude = {"now": EXCLUDED_NOW, "none": frozenset(), "all": KNOWN}.get(args.exclude)
    if exclude is None:
        exclude = frozenset(x for x in args.exclude.split(",") if x)
    targets = [t for t in args.targets.split(",") if t]
    # A private kernel cache: nothing stale is read, nothing of the user's is touched.
    os.environ.setdefault("STRIPEML_CACHE_DIR", tempfile.mkdtemp(prefix="stripeml-fuzz-"))
    start = time.monotonic()
    seeds = range(args.seed * 10**6, args.seed * 10**6 + args.programs)
    print(f"fuzz: {args.programs} programs on {', '.join(targets)}; {args.mutations} mutations; "
          f"seed {args.seed}; excluded: {', '.join(sorted(exclude)) or 'none'}", flush=True)  # fmt: skip

    shown = [0]

    def progress(tally) -> None:
        for f in tally.failures[shown[0] :]:  # each failure as it is found
            print(f"  found: seed {f.seed} {f.target} {f.status} {f.kind}", flush=True)
        shown[0] = len(tally.failures)
        if tally.programs % 100 == 0:
            print(
                f"  {tally.programs} programs, {len(tally.failures)} failures, {tally.seconds:.0f} s",
                flush=True,
            )

    with Pool(args.workers, args.timeout, nice=args.nice) as pool:
        programs = fuzz_programs(seeds, targets, pool, exclude, args.timeout, progress)
        print(f"  programs done in {programs.seconds:.0f} s; parsers next", flush=True)
        parsers = fuzz_parsers(args.mutations, args.seed, pool, exclude, args.mutation_timeout)
        saved = _minimise(pool, programs, parsers, exclude, args) if not args.no_save else []
    summary = {
        "seed": args.seed,
        "excluded": sorted(exclude),
        "targets": targets,
        "programs": programs.summary(),
        "parsers": parsers.summary(),
        "regressions_saved": [str(p) for p in saved],
        "seconds": round(time.monotonic() - start, 1),
    }
    _print(summary, programs, parsers)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    print(f"summary written to {args.json}")
    bad = programs.failures or parsers.failures
    return 1 if bad else 0


def _minimise(pool, programs, parsers, exclude, args) -> list[Path]:
    saved: list[Path] = []
    seen: set = set()
    for f in programs.failures:
        if f.signature() in seen or len(seen) >= args.minimise or f.target == "reference":
            continue
        seen.add(f.signature())
        print(f"  minimising seed {f.seed}: {f.status} on {f.target} ({f.kind})", flush=True)
        case = minimise_program_failure(pool, f, exclude, args.timeout)
        first = f.detail.splitlines()[0][:200] if f.detail else f.kind
        reason = f"found by make fuzz (seed {f.seed}), not fixed yet: {first}"
        targets = sorted(
            {
                g.target
                for g in programs.failures
                if g.seed == f.seed and g.signature() == f.signature()
            }
        )
        saved.append(save_program_failure(case, f, reason, targets))
        print(case[0].source(), flush=True)
    for f in parsers.failures[: args.minimise]:
        print(f"  minimising a {f['kind']} mutant: {f['status']} {f.get('error', '')}", flush=True)
        text = minimise_parser_failure(pool, f, args.mutation_timeout)
        saved.append(
            save_parser_failure(text, f, f"found by make fuzz: {f['status']} {f.get('error', '')}")
        )
        print(repr(text), flush=True)
    return saved


def _print(summary: dict, programs, parsers) -> None:
    p, m = summary["programs"], summary["parsers"]
    print("\n== programs ==")
    print(
        f"{'target':<24}"
        + "".join(f"{s:>12}" for s in ("ok", "unsupported", "skipped", "failures"))
    )
    for t, c in p["per_target"].items():
        fails = sum(v for k, v in c.items() if k not in ("ok", "unsupported", "skipped"))
        print(
            f"{t:<24}"
            + "".join(f"{c.get(s, 0):>12}" for s in ("ok", "unsupported", "skipped"))
            + f"{fails:>12}"
        )
    print(f"programs {p['programs']}, mismatches {p['mismatches']}, non-StripeError exceptions "
          f"{p['crashes']}, valid programs rejected {p['errors_on_valid_programs']}, deaths {p['deaths']}, "
          f"hangs {p['hangs']}, reference crashes {p['reference_crashes']}, {p['seconds']} s")  # fmt: skip
    print("outcomes by kind:", json.dumps(p["outcomes_by_kind"]))
    print("\n== parsers ==")
    print(f"mutants {m['mutants']}, non-StripeError exceptions {m['non_stripe_errors']}, deaths "
          f"{m['deaths']}, hangs {m['hangs']}, {m['seconds']} s")  # fmt: skip
    for k, v in m["outcomes"].items():
        print(f"  {v:>7}  {k}")
    for f in programs.failures[:20]:
        print(
            f"\nFAIL seed {f.seed} {f.target} {f.status} {f.kind} ({f.mode}): {f.detail[:400]}\n{f.source}"
        )
    for f in parsers.failures[:20]:
        print(
            f"\nFAIL {f['kind']} mutant ({f['status']} {f.get('error', '')}): {f['text']!r}"[:1500]
        )


if __name__ == "__main__":
    sys.exit(main())
