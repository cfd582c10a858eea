"""Running a compiled program's steps (:class:`StepRunner`, a base of
:class:`.cpu_run.CpuCompiled`): each run of kernels as one native call on the
thread pool (:mod:`.native_pool`), the host's specials between them; timed
(``step_seconds``: ``Executable.profile``, the tuner's windows), each kernel by
the clock stamps its batch writes, each special from Python."""

from __future__ import annotations

import ctypes
import time
from typing import TYPE_CHECKING

import numpy as np

from ..codegen.cpu_abi import CpuModule
from ..ir.nodes import Special
from . import native_pool
from .chunking import chunk_bounds
from .host import RootBuffer, run_root_special

if TYPE_CHECKING:
    from . import shared_constants
    from .jit import Kernel


class Gather:
    """A kernel step's gather (:attr:`.cpu_abi.KernelInfo.gather`): the table
    ``[m, slot, add, ...]`` the native batch reads (``address``), and the same
    as NumPy indices for the steps run from Python (:func:`gathered`)."""

    __slots__ = ("adds", "address", "entries", "slots", "table", "values")

    def __init__(self, pairs: tuple[int, ...]) -> None:
        self.entries = len(pairs) // 2
        self.table = np.array([self.entries, *pairs], np.int64)
        self.address = int(self.table.ctypes.data)
        slots = self.table[1::2]
        self.values = slots < 0  # entries that are the add alone (a bound)
        self.slots = np.where(self.values, 0, slots)
        self.adds = self.table[2::2]


def gathered(pointers: ctypes.Array[ctypes.c_void_p], gather: Gather) -> np.ndarray:
    """The argument array ``gather`` makes from the buffer table ``pointers``
    (what the native batch fills on its stack), for a call from Python."""
    table = np.frombuffer(memoryview(pointers).cast("B"), np.int64)
    picked = table[gather.slots]
    picked[gather.values] = 0
    return picked + gather.adds


class StepRunner:
    """The steps of a compiled program, planned once per threading option set and
    run in order.  The attributes are :class:`.cpu_run.CpuCompiled`'s."""

    module: CpuModule
    threads: int
    min_chunk_work: int
    chunks_per_thread: int
    step_seconds: dict[str, float] | None
    _buffers: tuple[RootBuffer, ...]
    _temps: tuple[RootBuffer, ...]
    _const_steps: frozenset[int]
    _reuse: shared_constants.Reuse | None
    _kernels: dict[str, Kernel]
    _addresses: dict[str, int]
    _plans: dict[tuple[int, int, int, bool], list[tuple]]
    _batch_plans: dict[tuple[int, int, int, bool], list]
    _bound_arrays: list[np.ndarray]

    def _run_steps(
        self,
        pointers: ctypes.Array[ctypes.c_void_p],
        storages: list[np.ndarray],
        constant: bool = False,
    ) -> None:
        times = self.step_seconds
        ptrs = ctypes.addressof(pointers)
        # Runs of kernels go to native code in one call each (no Python between
        # kernels); specials run here in between.  On one thread too, with a
        # pool of no workers (not another library's team): a call through
        # ctypes per kernel cost about 0.5 us each (a 2-layer LSTM's 130
        # kernels: 0.340 -> 0.275 ms of CPU per run).  Timed (``step_seconds``),
        # the batch stamps the clock after each kernel: the kernels run as they
        # do untimed, back to back, the workers spinning between them (timed
        # one by one from Python, a worker slept between kernels, and
        # MobileNetV2's kernels on two threads summed to 1.8x its call).
        pool = native_pool.pool(self.threads - 1, team=self.threads > 1)
        if pool is None:
            self._run_timed(self._plan(constant), pointers, storages, times)
            return
        specials: dict[int, int] = {}  # a special's step, when timed
        if times is not None:
            specials = {id(p[5]): p[0] for p in self._plan(constant) if p[5] is not None}
        for part in self._batches(constant):
            if not isinstance(part, native_pool.Batch):
                start = time.perf_counter() if times is not None else 0.0
                self._run_special(part, storages)
                if times is not None:
                    self._add_time(times, specials[id(part)], time.perf_counter() - start)
                continue
            if times is None:
                if not pool.run_batch(part, ptrs):
                    self._run_plain(part.plan, pointers)
                continue
            stamps = np.zeros(part.steps + 1, np.int64)
            if not pool.run_batch(part, ptrs, int(stamps.ctypes.data)):
                self._run_timed(part.plan, pointers, storages, times)
                continue
            took = np.diff(stamps) * 1e-9
            for step, seconds in zip(part.plan, took.tolist()):
                self._add_time(times, step[0], seconds)

    def _add_time(self, times: dict[str, float], k: int, seconds: float) -> None:
        """Add ``seconds`` to step ``k``'s entry of ``times`` (its kernel's block
        name, or ``special<k>``)."""
        info = self.module.steps[k].kernel
        name = info.block_name if info is not None else f"special{k}"
        times[name] = times.get(name, 0.0) + seconds

    def _run_timed(
        self,
        plan: list[tuple],
        pointers: ctypes.Array[ctypes.c_void_p],
        storages: list[np.ndarray],
        times: dict[str, float] | None,
    ) -> None:
        """``plan``'s steps one by one from Python (no pool, or the pool is busy
        elsewhere), each timed when ``times`` is given."""
        ptrs = ctypes.addressof(pointers)
        pool: native_pool.NativePool | native_pool.TeamPool | None = None
        fetched = False  # the pool, fetched at the first split kernel
        for k, fn, addr, extent, bounds, special, gather in plan:
            start = time.perf_counter() if times is not None else 0.0
            if special is not None:
                self._run_special(special, storages)
            else:
                args = None if gather is None else gathered(pointers, gather)
                at = ptrs if args is None else int(args.ctypes.data)  # (args alive below)
                given = pointers if args is None else at
                if bounds is None:
                    fn(given, 0, extent)
                else:
                    if not fetched:
                        pool, fetched = native_pool.pool(self.threads - 1), True
                        if isinstance(pool, native_pool.NativePool):
                            pool.apart()  # once a run: no worker on this thread's CPU
                    if pool is None or not pool.run_raw(addr, at, *bounds):
                        fn(given, 0, extent)
            if times is not None:
                self._add_time(times, k, time.perf_counter() - start)

    def _batches(self, constant: bool) -> list:
        """The plan as runs of kernels (:class:`native_pool.Batch`, each with its
        ``plan`` steps) and the specials between them, computed once."""
        key = (self.threads, self.min_chunk_work, self.chunks_per_thread, constant)
        found = self._batch_plans.get(key)
        if found is not None:
            return found
        parts: list = []
        run: list[tuple] = []

        def close() -> None:
            if run:
                batch = native_pool.Batch(
                    [
                        (
                            addr,
                            extent,
                            *(bounds if bounds is not None else (0, 0)),
                            gather.address if gather is not None else 0,
                        )
                        for _, _, addr, extent, bounds, _, gather in run
                    ],
                    list(run),
                    max((g.entries for *_, g in run if g is not None), default=1),
                )
                parts.append(batch)
                run.clear()

        for step in self._plan(constant):
            if step[5] is not None:
                close()
                parts.append(step[5])
            else:
                run.append(step)
        close()
        self._batch_plans[key] = parts
        return parts

    def _run_plain(self, plan: list[tuple], pointers: ctypes.Array[ctypes.c_void_p]) -> None:
        """Kernel steps one by one on this thread (the pool is busy elsewhere)."""
        for _, fn, _, extent, _, _, gather in plan:
            if gather is None:
                fn(pointers, 0, extent)
            else:
                args = gathered(pointers, gather)  # (alive until the call returns)
                fn(args.ctypes.data, 0, extent)

    def _plan(self, constant: bool = False) -> list[tuple]:
        """Per step ``(position, fn, address, extent, (bounds address, chunks) or None,
        special, Gather or None)`` for the current threading options (computed
        once per option set): the constant steps, or all the others."""
        key = (self.threads, self.min_chunk_work, self.chunks_per_thread, constant)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        plan = []
        skip = self._reuse.skip if self._reuse is not None else frozenset()
        for k, step in enumerate(self.module.steps):
            if (k in self._const_steps) != constant or k in skip:
                continue
            info = step.kernel
            if info is None:  # run by the host: a special, or a copy kernel
                if not self._in_place_view(step.special):
                    plan.append((k, None, 0, 0, None, step.special, None))
                continue
            cuts = chunk_bounds(info, self.threads, self.min_chunk_work, self.chunks_per_thread)
            bounds = None
            if len(cuts) > 2:
                arr = np.array(cuts, np.int64)
                self._bound_arrays.append(arr)  # kept alive: the pool reads it by address
                bounds = (arr.ctypes.data, len(cuts) - 1)
            fn = self._kernels[info.symbol]
            gather = Gather(info.gather) if info.gather else None
            if gather is not None:
                self._bound_arrays.append(gather.table)  # (the pool reads it by address)
            addr = self._addresses[info.symbol]
            plan.append((k, fn, addr, info.parallel_extent, bounds, None, gather))
        self._plans[key] = plan
        return plan

    def _run_special(self, special: Special, storages: list[np.ndarray]) -> None:
        run_root_special(special, self._buffers, storages)

    def _in_place_view(self, special: Special | None) -> bool:
        """Whether ``special`` is a ``bitview`` whose result ``place`` gave its
        source's bytes: two dense temporaries of one arena at one offset, so the
        special has nothing to do (:func:`.host.run_root_special` would find the
        same memory at every call).  Left out of the plan, it no longer splits
        the run of kernels around it into two native calls (ResNet-50 int8: 53
        views, one per quantised convolution)."""
        if special is None or special.op != "bitview":
            return False
        if len(special.inputs) != 1 or len(special.outputs) != 1:
            return False
        found = [b for b in self._temps if b.info.name in (special.inputs[0], special.outputs[0])]
        if len(found) != 2:
            return False
        x, y = found
        return (
            x.offset is not None
            and x.offset == y.offset
            and x.location == y.location
            and x.nbytes == y.nbytes
            and x.dense
            and y.dense
            and x.origin == 0 == y.origin
        )
