"""The differential run: programs from seeds, checked on every target in workers.

:func:`check` runs in a worker: it generates the program of a seed (or takes a
stored one), evaluates the reference, then runs each target in its call mode
and judges the outcome (``backends.run_target``).  :func:`run_programs` feeds
seeds to a :class:`~.pool.Pool` and folds the outcomes into a
:class:`Tally`; a death or hang is charged to the target that was running.
"""

from __future__ import annotations

import time
import traceback
from collections import Counter
from dataclasses import dataclass, field

from .backends import FAILURES, pick_mode, run_target
from .generate import generate
from .known import affected
from .pool import Pool, note
from .program import from_json, to_json
from .reference import MustFail, evaluate


def check(payload: dict) -> dict:
    """Worker side: one program on the payload's targets (see the module docstring)."""
    exclude = frozenset(payload.get("exclude", ()))
    if "case" in payload:
        program, inputs = from_json(payload["case"])
        seed = payload.get("seed", 0)
    else:
        seed = payload["seed"]
        program, inputs = generate(seed, exclude)
    result: dict = {"seed": seed, "outcomes": [], "events": []}
    note("reference")
    began = time.perf_counter()
    try:
        ref = evaluate(program, inputs)
        result["reference_seconds"] = round(time.perf_counter() - began, 3)
        events = ref.events
    except MustFail as e:
        ref, events = e, getattr(e, "events", set())
        result["must_fail"] = e.kind
    except Exception:
        result["reference_crash"] = traceback.format_exc()[-3000:]
        return result
    result["events"] = sorted(events)
    for target in payload["targets"]:
        known = affected(exclude, events, target)
        if known:
            result["outcomes"].append(
                {"target": target, "status": "skipped", "kind": ",".join(known)}
            )
            continue
        mode = payload.get("modes", {}).get(target) or pick_mode(
            seed, target, program, ref, exclude
        )
        note(target)
        began = time.perf_counter()
        outcome = run_target(program, inputs, ref, target, mode, seed, exclude)
        outcome["seconds"] = round(time.perf_counter() - began, 3)
        result["outcomes"].append(outcome)
    return result


@dataclass
class Failure:
    seed: int
    target: str
    status: str
    kind: str
    mode: str
    detail: str
    source: str

    def signature(self) -> tuple[str, str]:
        """One bug, whichever targets show it: minimised once."""
        return (self.status, self.kind)


@dataclass
class Tally:
    """What a run saw, in counts (and the failures themselves)."""

    programs: int = 0
    per_target: dict[str, Counter] = field(default_factory=dict)
    errors: Counter = field(default_factory=Counter)  # "target status kind" -> count
    modes: Counter = field(default_factory=Counter)
    target_seconds: Counter = field(default_factory=Counter)
    events: Counter = field(default_factory=Counter)
    must_fail: int = 0
    reference_crashes: int = 0
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, seed: int, result: dict, exclude: frozenset[str], targets: list[str]) -> None:
        self.programs += 1
        self.events.update(result.get("events", ()))
        self.must_fail += "must_fail" in result
        if "reference_crash" in result:
            self.reference_crashes += 1
            self.failures.append(
                Failure(seed, "reference", "crash", "reference", "", result["reference_crash"], "")
            )
            return
        if result.get("status") in ("death", "hang"):  # the pool's verdict on the task
            result = {"outcomes": [{"target": result["step"], "mode": "", **result}]}
        self.target_seconds["reference"] += result.get("reference_seconds", 0.0)
        for o in result["outcomes"]:
            t, status = o["target"], o["status"]
            self.per_target.setdefault(t, Counter())[status] += 1
            self.modes[o.get("mode", "")] += 1
            self.target_seconds[t] += o.get("seconds", 0.0)
            if status != "ok":
                self.errors[f"{t} {status} {o.get('kind', '')}".strip()] += 1
            if status in FAILURES:
                source = generate(seed, exclude)[0].source() if seed >= 0 else ""
                detail = o.get("detail", "") or f"exit code {o.get('exitcode')}"
                self.failures.append(
                    Failure(
                        seed, t, status, o.get("kind", status), o.get("mode", ""), detail, source
                    )
                )

    def summary(self) -> dict:
        return {
            "programs": self.programs,
            "per_target": {t: dict(c) for t, c in sorted(self.per_target.items())},
            "failures": len(self.failures),
            "mismatches": sum(f.status == "mismatch" for f in self.failures),
            "crashes": sum(f.status == "crash" for f in self.failures),
            "errors_on_valid_programs": sum(f.status == "error" for f in self.failures),
            "deaths": sum(f.status == "death" for f in self.failures),
            "hangs": sum(f.status == "hang" for f in self.failures),
            "reference_crashes": self.reference_crashes,
            "expected_errors": self.must_fail,
            "outcomes_by_kind": dict(sorted(self.errors.items())),
            "modes": dict(sorted(self.modes.items())),
            "seconds_per_target": {t: round(v, 1) for t, v in sorted(self.target_seconds.items())},
            "events": dict(sorted(self.events.items())),
            "seconds": round(self.seconds, 1),
        }


def run_programs(
    seeds: range,
    targets: list[str],
    exclude: frozenset[str] = frozenset(),
    pool: Pool | None = None,
    timeout: float = 120.0,
    progress=None,
) -> Tally:
    """Check the program of every seed on ``targets``; ``progress(tally)`` after each."""
    tally = Tally()
    start = time.monotonic()
    own = pool is None
    pool = pool or Pool(1, timeout)
    tasks = [
        (seed, "runner:check", {"seed": seed, "exclude": sorted(exclude), "targets": targets})
        for seed in seeds
    ]
    try:
        for seed, result in pool.run(tasks, timeout):
            tally.add(seed, result, exclude, targets)
            tally.seconds = time.monotonic() - start
            if progress:
                progress(tally)
    finally:
        if own:
            pool.close()
    return tally


def case_json(seed: int, exclude: frozenset[str]) -> dict:
    """The stored form of a seed's program and inputs."""
    return to_json(*generate(seed, exclude))
