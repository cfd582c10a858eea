"""stripeml's kernels on PyTorch's OpenMP team or on the runtime's own pool,
whichever runs a program faster here (see :mod:`stripeml.runtime.omp_team`).

PyTorch's CPU operators run on an OpenMP team whose workers (libgomp's, with
``OMP_WAIT_POLICY`` unset) spin for about 3 ms after each parallel operator.
A stripeml program that starts then (a training step alternates the two: the
loss and the optimizer step in PyTorch, the forward and backward programs in
stripeml) shares the second core with that spinning thread if its kernels run
on the runtime's native pool: a transformer block's training step took 16 ms
that way, 9 ms with the kernels on PyTorch's team itself.  But the team's
worker is a thread that spins a lot: where other processes of higher priority
compete for the cores, it is descheduled holding a chunk while the caller
waits (a small CNN's step: 24 ms on the team against 3.6 ms on the native
pool, the process at ``nice 5`` beside two busy ones at ``nice 0``).

So each compiled program measures: :class:`ThreadChoice` runs its calls on
one or the other, alternating for a few calls at first and again now and then
(the less often the longer the same one stays faster), and otherwise on the
one under which the median time from one call to the next (a training step)
was lower.  ``STRIPEML_TORCH_OPENMP=0`` turns the team
off (every call on the native pool).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

_ENTRY: list[tuple[int, int] | None] = []  # found once: [entry points or None]


def openmp_team() -> tuple[int, int] | None:
    """PyTorch's OpenMP runtime's ``GOMP_parallel`` and ``omp_get_thread_num``,
    or None (another parallel backend, no such runtime, or turned off)."""
    if not _ENTRY:
        found = None
        if os.environ.get("STRIPEML_TORCH_OPENMP", "1") != "0":
            import torch

            from ..api.omp import openmp_entry_points

            if "parallel backend: OpenMP" in torch.__config__.parallel_info():
                found = openmp_entry_points()
        _ENTRY.append(found)
    return _ENTRY[0]


class ThreadChoice:
    """Where one program's split kernels run, call by call: PyTorch's OpenMP team
    (``entry``: its entry points) or the runtime's native pool.

    A probe is ``2 * PROBE`` calls alternating between the two (the team
    first); after it, the one with the lower median wall time runs the next
    ``run`` calls, then another probe.  ``run`` starts at ``FIRST_RUN`` and
    doubles each time a probe confirms the choice (to ``MOST_RUN``), and falls
    back to ``FIRST_RUN`` when it changes."""

    PROBE = 6
    FIRST_RUN = 64
    MOST_RUN = 4096

    def __init__(self, entry: tuple[int, int]) -> None:
        self.entry = entry
        #: whether calls outside a probe run on the team
        self.team = True
        self._times: tuple[list[float], list[float]] = ([], [])  # native, team
        self._probing = 2 * self.PROBE  # calls left in the current probe
        self._run = self.FIRST_RUN
        self._left = 0  # calls left before the next probe
        #: probes made so far (for tests and curiosity)
        self.probes = 0
        #: when the last call started, and whether it ran on the team
        self.last: tuple[float, bool] | None = None

    def next_is_team(self) -> bool:
        """Whether the next call runs on the team."""
        if self._probing > 0:
            return self._probing % 2 == 0
        return self.team

    def record(self, team: bool, seconds: float) -> None:
        """A call ran (on the team or not), and ``seconds`` passed from its start
        to the next call's."""
        if self._probing > 0:
            self._times[team].append(seconds)
            self._probing -= 1
            if self._probing == 0:
                self.probes += 1
                was = self.team
                native, on_team = (statistics.median(t) for t in self._times)
                self.team = on_team <= native
                self._times = ([], [])
                same = self.team == was
                self._run = min(2 * self._run, self.MOST_RUN) if same else self.FIRST_RUN
                self._left = self._run
            return
        self._left -= 1
        if self._left <= 0:
            self._probing = 2 * self.PROBE


def choice() -> ThreadChoice | None:
    """A new program's :class:`ThreadChoice`; None when there is no team to use."""
    entry = openmp_team()
    return None if entry is None else ThreadChoice(entry)


def call(choice: ThreadChoice | None, fn: Callable[..., Any], args: Sequence[Any]) -> Any:
    """``fn(*args)``, its split kernels where ``choice`` says.

    What is timed is the interval from one call's start to the next's (in a
    training loop: a whole step), charged to the first call's choice: on the
    team, libgomp's worker spins for 3 ms after the call too, which slows what
    runs next where the cores are shared with other processes, and the
    call's own time would not show that."""
    if choice is None:
        return fn(*args)
    from ..api.omp import LOCAL

    now = time.perf_counter()
    if choice.last is not None:
        choice.record(choice.last[1], now - choice.last[0])
    on_team = choice.next_is_team()
    choice.last = (now, on_team)
    if not on_team:
        return fn(*args)
    local = LOCAL  # (omp_team.team(), without a generator's cost)
    was = getattr(local, "entry", None)
    local.entry = choice.entry
    try:
        return fn(*args)
    finally:
        local.entry = was
