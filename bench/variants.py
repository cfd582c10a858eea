"""Paired A/B of target variants: one model compiled for several variants of the
``cpu`` target's pass options, timed in one process, interleaved with onnxruntime.

::

    .venv/bin/python bench/variants.py zoo_squeezenet,gpt2_128 \\
        base unroll.vector_groups=0 "unroll.registers=0+partial_sums.threads=1" --rounds 15

A variant is ``base`` (the target as it is) or terms joined by ``+``: each
``PASS.OPTION=VALUE`` replaces one option of a pass of the pipeline (an int, a float, ``true``/``false``, else
a string: the target loader's ``$`` references are already resolved in ``base``),
each ``PASS=off`` leaves that pass out.  Each model
(a name of ``bench/models.py``) is compiled once per variant in a fresh cache folder,
each output checked against onnxruntime (the largest difference over the largest
value at most 1e-3, else the model is reported and not timed), then timed: every
round runs each contender once in shuffled order, each a block of a few calls (the
best of them) after a 0.05 s pause, so that another library's spinning threads go
idle.  One JSON line per model: the median seconds of each contender and the median
over rounds of each one's time over the first variant's (``vs_first``; onnxruntime's
too), and the 1-minute load average.  Speed is compared only within a line: the
machine is shared, and two sittings differ more than two variants in one.

Each round is sampled before and after by ``quiet.py`` (the share of the
machine's FMA peak that two threads get, and the hand-over latency between
them: the host takes a vCPU away, or places the two under different L3 caches,
for seconds at a time, unseen by the load average).  The line says how many
rounds were quiet, the least and median share and the median and longest
hand-over, and gives ``median_s_quiet`` and ``vs_first_quiet``, the same
figures over the quiet rounds only;
``--quiet-rounds N`` goes on past ``--rounds`` until N rounds were quiet.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import tempfile
import time
from typing import Any

import models
import numpy as np
from bench_onnx import ort_session, relative_error
from quiet import CpuShare, Rounds


def variant(spec: str, threads: int = 2) -> Any:
    """The ``cpu`` target with the pass options of ``spec`` replaced (see above)."""
    from stripeml import api
    from stripeml.errors import StripeError
    from stripeml.targets.target import PassSpec

    target = api.target_for("cpu", threads)
    if spec == "base":
        return target
    changes: dict[str, dict[str, object]] = {}
    dropped: set[str] = set()
    for term in spec.split("+"):
        if term.endswith("=off") and "." not in term:
            dropped.add(term[: -len("=off")])
            continue
        key, sep, value = term.partition("=")
        pass_name, dot, option = key.partition(".")
        if not (sep and dot and pass_name and option):
            raise SystemExit(
                f"variant {spec!r}: expected PASS.OPTION=VALUE or PASS=off terms, got {term!r}"
            )
        number = value.lstrip("-")
        parsed: object = int(value) if number.isdigit() else value
        if isinstance(parsed, str) and number.replace(".", "", 1).isdigit():
            parsed = float(value)  # a fraction: ``nest.fraction=0.25``
        if value in ("true", "false"):
            parsed = value == "true"
        changes.setdefault(pass_name, {})[option] = parsed
    names = {p.name for p in target.pipeline}
    unknown = sorted((set(changes) | dropped) - names)
    if unknown:
        raise SystemExit(f"variant {spec!r}: no pass {unknown} in the pipeline {sorted(names)}")
    pipeline = []
    for p in target.pipeline:
        if p.name in dropped:
            continue
        if p.name in changes:
            options = dict(p.options)
            options.update(changes[p.name])
            try:
                p = PassSpec(p.name, tuple(options.items()))  # built (and checked) here
            except StripeError as exc:
                raise SystemExit(f"variant {spec!r}: {exc}") from None
        pipeline.append(p)
    return dataclasses.replace(target, pipeline=tuple(pipeline))


def measure(
    name: str,
    specs: list[str],
    rounds: int,
    quiet_rounds: int = 0,
    threads: int = 2,
    share: CpuShare | None = None,
) -> dict[str, Any]:
    import stripeml.onnx

    model, feeds = models.build(name)
    session = ort_session(model)
    want = session.run(None, feeds)
    runs = []
    for spec in specs:
        f = stripeml.onnx.compile(model, target=variant(spec))
        err = relative_error(f(**feeds), want)
        if not err <= 1e-3:
            return {"model": name, "ok": False, "variant": spec, "max_err": err}
        runs.append(lambda f=f: f(**feeds))
    runs.append(lambda: session.run(None, feeds))
    from stripeml.runtime.kept_layouts import wait_writes

    wait_writes()  # stripeml's cache files, written after the first calls: not while timed
    start = time.perf_counter()
    runs[0]()
    calls = max(1, min(10, int(0.1 / max(time.perf_counter() - start, 1e-4))))
    times: list[list[float]] = [[] for _ in runs]
    log = Rounds(share if share is not None else CpuShare(threads))
    most = rounds + 4 * quiet_rounds
    while len(log.flags) < rounds or (sum(log.flags) < quiet_rounds and len(log.flags) < most):
        with log.round():
            order = list(range(len(runs)))
            random.shuffle(order)
            for i in order:
                time.sleep(0.05)
                best = float("inf")
                for _ in range(calls):
                    start = time.perf_counter()
                    runs[i]()
                    best = min(best, time.perf_counter() - start)
                times[i].append(best)
    labels = [*specs, "onnxruntime"]
    line = {
        "model": name,
        "ok": True,
        "rounds": len(log.flags),
        "calls_per_block": calls,
        **_figures(labels, times, ""),
        **log.summary(),
    }
    if any(log.flags):  # the same figures over the quiet rounds only
        line.update(_figures(labels, [log.quiet_only(t) for t in times], "_quiet"))
    line["load_avg_1m"] = os.getloadavg()[0]
    return line


def _figures(labels: list[str], times: list[list[float]], suffix: str) -> dict[str, Any]:
    """Each contender's median seconds, and the median over rounds of its time over
    the first variant's."""
    return {
        f"median_s{suffix}": {k: float(np.median(t)) for k, t in zip(labels, times)},
        f"vs_first{suffix}": {
            k: float(np.median([x / y for x, y in zip(t, times[0])])) for k, t in zip(labels, times)
        },
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", help="comma-separated names of bench/models.py")
    parser.add_argument(
        "variants", nargs="+", help="'base', or PASS.OPTION=VALUE and PASS=off terms joined by '+'"
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--quiet-rounds",
        type=int,
        default=0,
        help="go on past --rounds until this many rounds were quiet (bench/quiet.py), "
        "at most 4 more rounds per quiet round asked for",
    )
    args = parser.parse_args(argv)
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(var, None)
    # A fresh cache: the program cache is keyed by the target's fingerprint, but a
    # warm one would hide the compile; each variant still compiles its own kernels.
    os.environ["STRIPEML_CACHE_DIR"] = tempfile.mkdtemp(prefix="stripeml-variants-")
    unknown = [n for n in args.models.split(",") if n not in models.REGISTRY]
    if unknown:
        parser.error(f"unknown model {unknown}; known: {', '.join(models.REGISTRY)}")
    for spec in args.variants:
        variant(spec)  # a bad variant fails before anything is compiled
    status = 0
    share = CpuShare(2)  # once for every model (after the cache folder is set)
    for name in args.models.split(","):
        line = measure(name, args.variants, args.rounds, args.quiet_rounds, share=share)
        status |= 0 if line["ok"] else 1
        print(json.dumps(line), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
