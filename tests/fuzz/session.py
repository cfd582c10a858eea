"""The parent side of a fuzzing session: mutation runs, minimising what failed,
saving regression cases, the summary.

``make fuzz`` (``__main__.py``) and the CI slice (``test_fuzz_slice.py``) both
go through :func:`fuzz_programs` and :func:`fuzz_parsers`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .generate import generate
from .minimise import REGRESSIONS, minimise, save
from .mutate import mutant
from .pool import Pool
from .program import to_json
from .runner import Failure, Tally, run_programs


def mutation_tasks(n: int, seed: int, exclude: frozenset[str]) -> list[tuple[int, str, dict]]:
    """Three Tile mutants for every two IR mutants, each from its own seed (the
    corpus entry cycles with the task number)."""
    kinds = ["tile", "tile", "tile", "ir", "ir"]
    return [
        (
            i,
            "mutate:check",
            {
                "kind": kinds[i % 5],
                "index": i,
                "seed": seed * 1_000_003 + i,
                "exclude": sorted(exclude),
            },
        )
        for i in range(n)
    ]


@dataclass
class MutationTally:
    """What a parser run saw: mutants per parser, outcomes by kind, the failures."""

    mutants: Counter = field(default_factory=Counter)  # per parser
    outcomes: Counter = field(default_factory=Counter)  # "tile rejected TileSyntaxError" ...
    failures: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict:
        status = Counter(f["status"] for f in self.failures)
        return {
            "mutants": dict(self.mutants),
            "non_stripe_errors": status["crash"],
            "deaths": status["death"],
            "hangs": status["hang"],
            "outcomes": dict(sorted(self.outcomes.items())),
            "seconds": round(self.seconds, 1),
        }


def fuzz_parsers(
    n: int, seed: int, pool: Pool, exclude: frozenset[str], timeout: float = 5.0
) -> MutationTally:
    """``n`` mutants checked in ``pool``; a failure keeps its mutant's text."""
    tally = MutationTally()
    start = time.monotonic()
    tasks = mutation_tasks(n, seed, exclude)
    for tid, r in pool.run(tasks, timeout):
        payload = tasks[tid][2]
        kind = payload["kind"]
        tally.mutants[kind] += 1
        status = r["status"]
        tally.outcomes[f"{kind} {r.get('stage') or status} {r.get('error', '')}".strip()] += 1
        if status not in ("ok", "skipped"):
            text = r.get("text") or mutant(kind, payload["index"], payload["seed"])
            tally.failures.append({**payload, **r, "text": text, "step": r.get("step", "")})
    tally.seconds = time.monotonic() - start
    return tally


def fuzz_programs(
    seeds: range,
    targets: list[str],
    pool: Pool,
    exclude: frozenset[str],
    timeout: float = 120.0,
    progress=None,
) -> Tally:
    """The programs of ``seeds`` checked on ``targets`` in ``pool``."""
    return run_programs(seeds, targets, exclude, pool, timeout, progress)


# -- minimising ------------------------------------------------------------------------------


def _one(pool: Pool, func: str, payload: dict, timeout: float) -> dict:
    return [r for _, r in pool.run([(0, func, payload)], timeout)][-1]


def program_predicate(pool: Pool, failure: Failure, timeout: float):
    """Whether a candidate still fails like ``failure`` (same target, status, kind)."""

    def still_fails(case) -> bool:
        payload = {
            "case": to_json(*case),
            "seed": failure.seed,
            "targets": [failure.target],
            "modes": {failure.target: failure.mode} if failure.mode else {},
        }
        r = _one(pool, "runner:check", payload, timeout)
        if r.get("status") in ("death", "hang"):
            return r["status"] == failure.status and r.get("step") == failure.target
        outs = r.get("outcomes") or []
        return (
            bool(outs)
            and outs[0]["status"] == failure.status
            and outs[0].get("kind") == failure.kind
        )

    return still_fails


def minimise_program_failure(
    pool: Pool, failure: Failure, exclude: frozenset[str], timeout: float, budget: int = 300
):
    """The seed's program cut down while it fails like ``failure`` (unchanged if the
    failure does not reproduce on its own)."""
    case = generate(failure.seed, exclude)
    still_fails = program_predicate(pool, failure, timeout)
    if not still_fails(case):
        return case
    return minimise(case, still_fails, budget)


def save_program_failure(
    case, failure: Failure, reason: str, targets: list[str], directory: Path = REGRESSIONS
) -> Path:
    record = {
        "xfail_targets": targets or [failure.target],
        "title": f"{failure.status} on {failure.target}: {failure.detail.splitlines()[0][:160] if failure.detail else failure.kind}",
        "seed": failure.seed,
        "target": failure.target,
        "status": failure.status,
        "kind": failure.kind,
        "mode": failure.mode,
        "detail": failure.detail,
    }
    return save(case, record, reason, directory)


def shrink_text(text: str, still_fails, budget: int = 200) -> str:
    """Delete ever smaller chunks of ``text`` while ``still_fails`` holds (ddmin-like)."""
    chunk = max(1, len(text) // 2)
    while chunk >= 1 and budget > 0:
        i, changed = 0, False
        while i < len(text) and budget > 0:
            cand = text[:i] + text[i + chunk :]
            budget -= 1
            if cand and still_fails(cand):
                text, changed = cand, True
            else:
                i += chunk
        if not changed:
            if chunk == 1:
                break
            chunk //= 2
    return text


def minimise_parser_failure(pool: Pool, failure: dict, timeout: float) -> str:
    """The failing mutant cut down while it fails the same way (status and exception)."""

    def still_fails(text: str) -> bool:
        payload = {"kind": failure["kind"], "text": text, "index": failure["index"]}
        r = _one(pool, "mutate:check", payload, timeout)
        return r.get("status") == failure["status"] and r.get("error") == failure.get("error")

    return shrink_text(failure["text"], still_fails)


def save_parser_failure(
    text: str, failure: dict, reason: str, directory: Path = REGRESSIONS
) -> Path:
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    record = {
        "title": f"{failure['status']} in the {failure['kind']} parser: {failure.get('error', '')}",
        "parser": failure["kind"],
        "index": failure["index"],
        "status": failure["status"],
        "detail": (failure.get("detail") or "")[:2000],
        "xfail": {"reason": reason} if reason else None,
        "text": text,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"parser-{failure['kind']}_{failure['status']}_{digest}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path
