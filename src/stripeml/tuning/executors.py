"""Where candidates are compiled and timed: this process, or a Ray cluster.

``local``: compiles, checks and times in this process, one candidate after
another (what the search needs from it is :class:`.search.Measurer`),
running only the passes each candidate's choice can change
(:class:`.kernels.Stages`, one per program at the tuning point).

``ray``: compiles and checks on the cluster, many at a time (each a Ray task
of one CPU: the passes and LLVM, whose object code lands in that node's disk
kernel cache), and times on one *measurer* actor per node, which takes one
kernel's candidates at a time: timings run alone on their machine, since
parallel timing on one machine corrupts them.  A measurer first resolves the
target by name on its own node and refuses to time (``TargetError``) unless
the target's facts there match the driver's (``target_key``): a node only
reports for hardware like the one being tuned for.  Kernels are dealt to the
nodes' measurers in turn; all results come back to the driver, which merges
them into its database.  Ray is optional (``pip install stripeml[tune]``).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from ..errors import StripeError, TargetError
from ..passes._kernel_choices import Choice
from ..runtime.kept_layouts import wait_writes
from ..runtime.tuning_db import target_key
from ..targets import Target, resolve
from .kernels import Built, KernelJob, Stages, build_candidate, owner_seconds, window_seconds
from .measure import COUNTER, Timing, time_interleaved
from .space import choice_key

__all__ = ["EXECUTORS", "LocalMeasurer", "RayMeasurer", "make_measurer"]

EXECUTORS = ("local", "ray")


class LocalMeasurer:
    """Compile, check and time in this process."""

    def __init__(self, target: Target, pause_s: float = 0.05, staged: bool = True) -> None:
        self.target = target
        self.pause_s = pause_s
        self._built: dict[tuple[str, str], Built] = {}
        # optimised whole program -> its build: the analytic program is every job's
        self._by_text: dict[str, Built] = {}
        self._analytic: dict[str, str] = {}  # program at the tuning point -> analytic text
        # program at the tuning point -> its pipeline's stages (only the passes a
        # candidate's choice can change are run again; ``staged=False``: every pass)
        self._stages: dict[str, Stages] = {}
        self.staged = staged

    def _build(self, job: KernelJob, choice: Choice) -> Built:
        k = (job.key, choice_key(choice))
        built = self._built.get(k)
        if built is None and not choice and job.program in self._analytic:
            built = self._built[k] = self._by_text[self._analytic[job.program]]
        if built is None:
            built = self._built[k] = build_candidate(
                job, self.target, choice, self._by_text, self._stages_of(job)
            )
            if not choice:
                self._analytic[job.program] = built.text
        return built

    def _stages_of(self, job: KernelJob) -> Stages | None:
        if not self.staged:
            return None
        stages = self._stages.get(job.program)
        if stages is None:
            try:
                stages = Stages(job, self.target)
            except StripeError:
                return None  # the analytic pipeline fails: build_candidate says why
            self._stages = {job.program: stages}  # one program at a time
        return stages

    def check(self, job: KernelJob, choices: list[Choice]) -> list[tuple[str, str | None]]:
        return [(b.text, b.error) for b in (self._build(job, c) for c in choices)]

    def time(self, job: KernelJob, choices: list[Choice], rounds: int) -> list[Timing]:
        runs = []
        for c in choices:
            compiled = self._build(job, c).compiled
            if compiled is None:
                raise StripeError("only checked candidates are timed")
            owners: dict[str, str] = {}
            runs.append(
                lambda compiled=compiled, owners=owners: window_seconds(compiled, job, owners)
            )
        return time_interleaved(
            runs, rounds=rounds, pause_s=self.pause_s, self_timed=True, min_calls=3
        )

    def baselines(self, jobs: list[KernelJob], rounds: int) -> list[Timing]:
        """The analytic choice of each of ``jobs`` (one program, checked), timed
        from the same runs: each run of the program times every job's window."""
        built = self._build(jobs[0], {})
        if built.compiled is None or any(j.program != jobs[0].program for j in jobs):
            raise StripeError("baselines are for the checked analytic program of one program")
        compiled, owners = built.compiled, {}  # type: ignore[var-annotated]
        compiled.run(dict(jobs[0].inputs))  # warm
        wait_writes()  # the cache files the compile left to write: now, not while timing
        per_job: list[list[float]] = [[] for _ in jobs]
        for _ in range(rounds):
            if self.pause_s:
                time.sleep(self.pause_s)
            runs = [owner_seconds(compiled, jobs[0], owners) for _ in range(3)]
            for n, j in enumerate(jobs):
                per_run = [r[""] if "" in r else sum(r.get(w, 0.0) for w in j.window) for r in runs]
                per_job[n].append(sum(per_run) / len(per_run))
        COUNTER.batches += rounds
        COUNTER.candidates += 1
        return [Timing(statistics.median(t), len(t), batches=tuple(t)) for t in per_job]

    def forget(self, job: KernelJob) -> None:
        """Drop a finished kernel's compiled candidates (the analytic program stays)."""
        self._built = {k: v for k, v in self._built.items() if k[0] != job.key}
        stages = self._stages.get(job.program)
        if stages is not None:
            stages.forget()
        keep = set(self._analytic.values())
        self._by_text = {t: b for t, b in self._by_text.items() if t in keep}

    def close(self) -> None:
        self._built.clear()
        self._by_text.clear()
        self._stages.clear()


# -- Ray ------------------------------------------------------------------------


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise StripeError(
            "--executor ray needs Ray: pip install 'stripeml[tune]' (or pip install ray)"
        ) from None
    return ray


def _remote_target(name: str, threads: int, want: str) -> Target:
    target = resolve(name, threads=threads)
    if target_key(target) != want:
        raise TargetError(
            f"this node's '{name}' target differs from the one being tuned (other hardware "
            "facts): it does not report for it"
        )
    return target


def _check_task(job: KernelJob, choice: Choice, name: str, threads: int, want: str) -> tuple:
    built = build_candidate(job, _remote_target(name, threads, want), choice)
    return built.text, built.error


class _Measurer:
    """The per-node actor: times one kernel's candidates at a time."""

    def __init__(self, name: str, threads: int, want: str, pause_s: float) -> None:
        self.local = LocalMeasurer(_remote_target(name, threads, want), pause_s)

    def time(self, job: KernelJob, choices: list[Choice], rounds: int) -> list[Timing]:
        out = self.local.time(job, choices, rounds)
        self.local.forget(job)
        return out


class RayMeasurer:
    """Compile and check as parallel Ray tasks; time on per-node actors."""

    def __init__(self, target: Target, address: str | None, pause_s: float = 0.05) -> None:
        ray = _ray()
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=os.cpu_count() or 2, log_to_driver=False)
            self.started = True
        if target.source and os.path.exists(target.source):
            self.name = target.source  # a target file: the same path on every node
        else:
            self.name = target.name
        self.threads = target.threads
        self.want = target_key(target)
        self._check = ray.remote(num_cpus=1)(_check_task)
        actor = ray.remote(num_cpus=0)(_Measurer)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n for n in ray.nodes() if n.get("Alive")]
        self.actors = []
        for node in nodes:
            strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            self.actors.append(
                actor.options(scheduling_strategy=strategy).remote(
                    self.name, self.threads, self.want, pause_s
                )
            )
        self._next = 0
        self._owner: dict[str, Any] = {}  # kernel key -> the actor that times it

    def check(self, job: KernelJob, choices: list[Choice]) -> list[tuple[str, str | None]]:
        ref = self.ray.put(job)
        futures = [self._check.remote(ref, c, self.name, self.threads, self.want) for c in choices]
        try:
            return [tuple(r) for r in self.ray.get(futures)]
        except self.ray.exceptions.RayTaskError as exc:
            raise StripeError(f"a Ray task failed: {str(exc).strip().splitlines()[-1]}") from None

    def time(self, job: KernelJob, choices: list[Choice], rounds: int) -> list[Timing]:
        actor = self._owner.get(job.key)
        if actor is None:
            actor = self._owner[job.key] = self.actors[self._next % len(self.actors)]
            self._next += 1
        try:
            return list(self.ray.get(actor.time.remote(job, choices, rounds)))
        except self.ray.exceptions.RayTaskError as exc:
            raise StripeError(
                f"a Ray measurer failed: {str(exc).strip().splitlines()[-1]}"
            ) from None

    def forget(self, job: KernelJob) -> None:
        self._owner.pop(job.key, None)

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
        if self.started:
            self.ray.shutdown()


def make_measurer(
    executor: str, target: Target, address: str | None = None, pause_s: float = 0.05
) -> LocalMeasurer | RayMeasurer:
    """The measurer of ``executor`` (``local`` or ``ray``)."""
    if executor == "local":
        if address:
            raise StripeError("a Ray address is for --executor ray")
        return LocalMeasurer(target, pause_s)
    if executor == "ray":
        return RayMeasurer(target, address, pause_s)
    raise StripeError(f"unknown executor {executor!r} (executors: {', '.join(EXECUTORS)})")
