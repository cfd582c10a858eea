"""The benchmark set timed in several passes, each in a fresh process, and summed up
per model (``bench/bench_onnx.py --set ... --passes N``).

Why: on a shared machine a slow period (another tenant's memory traffic, a core
taken away) lasts tens of seconds and lands on whichever models are being timed
then; within it the memory-bound models and the threaded runtimes slow down the
most, so one model's ratio can move from 0.9 to 1.3 between two runs minutes
apart.  A pass is the whole set once, in its own process (``bench_onnx.py --set
NAMES --blocks B``, whose lines are passed through with a ``pass`` field added),
so the passes of one model lie minutes apart.  Then one ``set_summary`` line per
model gives every pass's ratio, their median, and the medians of both runtimes'
times and of the load averages.  Nothing is dropped: the per-pass lines stay in
the output, and a model that failed its check in any pass fails the whole run.

Fields of a ``set_summary`` line: ``model``, ``passes`` (how many timed it),
``ratios`` (stripeml / onnxruntime, in pass order), ``ratio`` (their median),
``stripeml_s`` and ``baselines.onnxruntime`` (medians over the passes of each
pass's median), ``load_avg_1m`` (the load averages as each pass reached the model),
``ok`` (every pass agreed with onnxruntime; a model skipped in every pass has
``ratio`` null and its ``skipped`` reason), ``ratios_quiet`` and ``ratio_quiet``
(the same over the passes that had quiet rounds, each pass's ``ratio_quiet``:
``bench/quiet.py``).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["run_passes", "summarise"]

_SCRIPT = Path(__file__).resolve().parent / "bench_onnx.py"


def _child(names: list[str], blocks: int, threads: int = 2) -> tuple[list[str], int]:
    """One pass: ``bench_onnx.py --set`` in a fresh process; its stdout lines and
    exit status (its stderr, the progress, goes straight to ours)."""
    cmd = [sys.executable, str(_SCRIPT), "--set", ",".join(names), "--blocks", str(blocks)]
    cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    return out.stdout.splitlines(), out.returncode


def run_passes(
    names: list[str],
    blocks: int,
    passes: int,
    child: Callable[[list[str], int], tuple[list[str], int]] = _child,
    emit: Callable[[str], None] = print,
) -> int:
    """Run ``passes`` passes of the set ``names``; emit each pass's JSON lines (with
    ``pass``) and then the summary lines; the exit status (1 when any pass failed)."""
    records: list[dict[str, Any]] = []
    status = 0
    for i in range(passes):
        print(f"-- pass {i + 1} of {passes}", file=sys.stderr, flush=True)
        lines, code = child(names, blocks)
        status = status or (1 if code else 0)
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                print(line, file=sys.stderr)
                continue
            record["pass"] = i + 1
            records.append(record)
            emit(json.dumps(record))
    for summary in summarise(records, names):
        emit(json.dumps(summary))
        if not summary["ok"]:
            status = 1
    return status


def summarise(records: Iterable[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """One ``set_summary`` record per model of ``names``, from the passes' ``set``
    records (see the module's docstring)."""
    by_model: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in records:
        if r.get("case") == "set" and r.get("model") in by_model:
            by_model[r["model"]].append(r)
    out = []
    for name in names:
        runs = by_model[name]
        timed = [r for r in runs if r.get("ratio") is not None]
        calm = [r for r in timed if r.get("ratio_quiet") is not None]  # bench/quiet.py
        summary: dict[str, Any] = {
            "bench": "onnx",
            "case": "set_summary",
            "model": name,
            "threads": 2,
            "target": "cpu",
            "passes": len(timed),
            "ratios": [round(r["ratio"], 4) for r in timed],
            "ratio": statistics.median(r["ratio"] for r in timed) if timed else None,
            "stripeml_s": statistics.median(r["stripeml_s"] for r in timed) if timed else None,
            "baselines": (
                {"onnxruntime": statistics.median(r["baselines"]["onnxruntime"] for r in timed)}
                if timed
                else {}
            ),
            "load_avg_1m": [r.get("load_avg_1m") for r in timed],
            "ratios_quiet": [round(r["ratio_quiet"], 4) for r in calm],
            "ratio_quiet": statistics.median(r["ratio_quiet"] for r in calm) if calm else None,
            "ok": bool(runs) and all(r.get("ok", True) for r in runs),
        }
        if not timed:
            reasons = {r.get("skipped") or r.get("error") for r in runs} - {None}
            summary["skipped"] = "; ".join(sorted(reasons)) or "not run"
            summary["ok"] = summary["ok"] and all(r.get("skipped") for r in runs)
        out.append(summary)
    return out
