"""Run every benchmark in this folder and print what they measure, as JSON lines.

Usage::

    python bench/run.py              # all bench/bench_*.py   (or: make bench)
    python bench/run.py compile      # only those whose name contains "compile"
    python bench/run.py --out results.jsonl

Each ``bench_*.py`` is a script run in its own process with this Python; it
prints one JSON object per line, one per case measured:

``bench``
    the benchmark file's stem without ``bench_`` (``"compile"``).
``case``
    what was measured (``"compile"``, ``"lower"``, ``"matmul"``...).
``sizes``
    the problem sizes, an object (``{"M": 256, "K": 256, "N": 256}``).
``threads``
    threads stripeml was allowed to use for the case.
``target``
    the stripeml target (``"interp"``, ``"cpu"``...), or ``null`` when no code runs.
``repeats``
    how many timed repetitions each median is over.
``stripeml_s``
    median seconds of stripeml.
``baselines``
    median seconds of each baseline measured in the same run, by name
    (``{"numpy": 0.0012, "torch": 0.0009}``; NumPy always when there is an
    equivalent, PyTorch and onnxruntime when installed); ``{}`` when nothing
    compares.  Ratios between these hold on a noisy machine, absolute
    numbers do not.

Lines that are not JSON are passed to stderr unchanged.  The exit status is
non-zero when a benchmark fails.  Benchmarks are never tests: nothing here
asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def discover(patterns: list[str]) -> list[Path]:
    """The ``bench_*.py`` scripts whose stem contains one of ``patterns`` (all if none)."""
    scripts = sorted(HERE.glob("bench_*.py"))
    return [s for s in scripts if not patterns or any(p in s.stem for p in patterns)]


def run_one(script: Path) -> tuple[list[dict], int]:
    """Run ``script``; return the JSON records it printed and its exit status."""
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=HERE.parent
    )
    records = []
    for line in proc.stdout.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            print(line, file=sys.stderr)
            continue
        if isinstance(record, dict):
            record.setdefault("bench", script.stem.removeprefix("bench_"))
            records.append(record)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        print(f"{script.name}: exit status {proc.returncode}", file=sys.stderr)
    return records, proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run stripeml's benchmarks (JSON lines).")
    parser.add_argument("names", nargs="*", help="only benchmarks whose name contains these")
    parser.add_argument("--out", type=Path, help="also write the JSON lines to this file")
    args = parser.parse_args(argv)

    scripts = discover(args.names)
    if not scripts:
        print("no benchmark matches", file=sys.stderr)
        return 2
    failed = 0
    lines: list[str] = []
    for script in scripts:
        records, status = run_one(script)
        failed += status != 0
        for record in records:
            line = json.dumps(record, sort_keys=True)
            lines.append(line)
            print(line, flush=True)
    if args.out is not None:
        args.out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
