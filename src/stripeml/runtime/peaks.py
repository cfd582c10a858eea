"""The roofline's ceilings on this machine: peak FMA throughput and memory bandwidth.

Measured by running two tiny kernels, compiled like the CPU backend's own
(:mod:`.jit`) and split over the same native thread pool
(:mod:`.native_pool`), with all the threads a target uses:

* **peak GFLOP/s** (:func:`measure_peak_gflops`): a loop of float32 FMAs on
  the widest vectors of the host (16 lanes with AVX-512F, 8 with AVX, else 4)
  into 12 independent accumulators (more than latency x FMA units on current
  cores, so the loop is bound by FMA throughput, not latency), each FMA two
  FLOPs; multiply and add apart where the host has no FMA.  Chunks of a few
  tenths of a millisecond, repeated for about :data:`FLOPS_SECONDS`; the best
  run counts (on a shared machine the quiet moments tell what the cores can do).
* **DRAM GB/s** (:func:`measure_dram_gbps`): ``dst[i] = src[i] * s`` over two
  float32 arrays of twice the last-level cache each (at least 32 MiB), bytes
  read plus bytes written (STREAM's "scale"; the write-allocate reads of plain
  stores are not counted, as kernels' bytes are not), best of the runs within
  :data:`BANDWIDTH_SECONDS`.

Together well under a second.  They run only when a roofline figure is asked
for (``Executable.profile``, ``bench/bench_onnx.py --kernels``), never at
import or compile, and once per machine: :func:`target_peaks` keeps them in
``peaks.json`` under the disk cache's root (:mod:`.cache_root`: the same
folder, trusted the same way), keyed by the CPU's model, its LLVM name and
features, and the thread count, with the load average at the time (a busy
machine measures low).  Delete that file to measure again.  A target
file's ``peak_gflops`` and its DRAM level's ``bandwidth_gbs``, or
``HostFacts(peak_gflops=, dram_gbps=)``, are used instead, never measured; the
environment variable :data:`MEASURE_VARIABLE` set to ``0`` turns measuring
off (the ceilings are then unknown, and so are the profile's fractions).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..targets import Target
from ..targets.host import (
    CpuId,
    HostFacts,
    Peaks,
    detect_cpu,
    detect_cpu_model,
    fma_of,
    vector_width_of,
)
from . import jit, native_pool
from .cache_root import CacheRoot, make_private_dirs

__all__ = [
    "FmaBurst",
    "MEASURE_VARIABLE",
    "PEAKS_FILE",
    "PeaksFile",
    "measure",
    "measure_dram_gbps",
    "measure_peak_gflops",
    "peaks_key",
    "target_peaks",
]

#: Set to ``0`` to never measure (tests, CI): unknown ceilings stay unknown.
MEASURE_VARIABLE = "STRIPEML_MEASURE_PEAKS"
#: The file under the cache root that keeps measured ceilings.
PEAKS_FILE = "peaks.json"
#: About how long each measurement repeats its runs, in seconds.
FLOPS_SECONDS = 0.4
BANDWIDTH_SECONDS = 0.3
_ACCUMULATORS = 12
_FMA_ITERATIONS = 40_000  # per chunk: 40k * 12 vector FMAs, a few tenths of a ms
_MIN_STREAM_BYTES = 32 << 20
_FORMAT = 1


# -- the kernels ---------------------------------------------------------------------


def _fma_ir(lanes: int, fma: bool, accumulators: int = _ACCUMULATORS) -> str:
    """``void peak_fma(i8** ptrs, i64 start, i64 end)``: ``end - start`` iterations of
    ``acc_j = acc_j * a + b`` on ``accumulators`` vectors; ``ptrs[0]`` is a float
    array holding ``a`` and ``b``, where the chunk's sum is stored afterwards (so
    nothing is dead)."""
    v = f"<{lanes} x float>"
    fma_fn = f"@llvm.fma.v{lanes}f32"
    lines = [
        f"declare {v} {fma_fn}({v}, {v}, {v})",
        "define void @peak_fma(i8** %ptrs, i64 %start, i64 %end) {",
        "entry:",
        "  %p0 = load i8*, i8** %ptrs",
        "  %f = bitcast i8* %p0 to float*",
        "  %a0 = load float, float* %f",
        "  %f1 = getelementptr float, float* %f, i64 1",
        "  %b0 = load float, float* %f1",
        f"  %ai = insertelement {v} undef, float %a0, i32 0",
        f"  %a = shufflevector {v} %ai, {v} undef, <{lanes} x i32> zeroinitializer",
        f"  %bi = insertelement {v} undef, float %b0, i32 0",
        f"  %b = shufflevector {v} %bi, {v} undef, <{lanes} x i32> zeroinitializer",
        "  %n = sub i64 %end, %start",
        "  %any = icmp sgt i64 %n, 0",
        "  br i1 %any, label %loop, label %exit",
        "loop:",
        "  %i = phi i64 [0, %entry], [%i1, %loop]",
    ]
    lines += [f"  %x{j} = phi {v} [%b, %entry], [%y{j}, %loop]" for j in range(accumulators)]
    for j in range(accumulators):
        if fma:
            lines.append(f"  %y{j} = call {v} {fma_fn}({v} %x{j}, {v} %a, {v} %b)")
        else:
            lines.append(f"  %m{j} = fmul {v} %x{j}, %a")
            lines.append(f"  %y{j} = fadd {v} %m{j}, %b")
    lines += [
        "  %i1 = add i64 %i, 1",
        "  %more = icmp slt i64 %i1, %n",
        "  br i1 %more, label %loop, label %exit",
        "exit:",
    ]
    lines += [f"  %z{j} = phi {v} [%b, %entry], [%y{j}, %loop]" for j in range(accumulators)]
    total = "%z0"
    for j in range(1, accumulators):
        lines.append(f"  %s{j} = fadd {v} {total}, %z{j}")
        total = f"%s{j}"
    lines += [
        # The chunk's slot: start / n + 1 vectors in (chunks are of equal length).
        "  %nn = select i1 %any, i64 %n, i64 1",
        "  %slot = sdiv i64 %start, %nn",
        f"  %off = mul i64 %slot, {lanes}",
        f"  %off1 = add i64 %off, {lanes}",
        "  %q = getelementptr float, float* %f, i64 %off1",
        f"  %qv = bitcast float* %q to {v}*",
        f"  store {v} {total}, {v}* %qv, align 4",
        "  ret void",
        "}",
    ]
    return "\n".join(lines)


_STREAM_IR = """
define void @peak_stream(i8** %ptrs, i64 %start, i64 %end) {
entry:
  %p0 = load i8*, i8** %ptrs
  %q1 = getelementptr i8*, i8** %ptrs, i64 1
  %p1 = load i8*, i8** %q1
  %q2 = getelementptr i8*, i8** %ptrs, i64 2
  %p2 = load i8*, i8** %q2
  %src = bitcast i8* %p0 to float*
  %dst = bitcast i8* %p1 to float*
  %sp = bitcast i8* %p2 to float*
  %s = load float, float* %sp
  %any = icmp slt i64 %start, %end
  br i1 %any, label %loop, label %exit
loop:
  %i = phi i64 [%start, %entry], [%i1, %loop]
  %a = getelementptr float, float* %src, i64 %i
  %x = load float, float* %a, align 4
  %y = fmul float %x, %s
  %b = getelementptr float, float* %dst, i64 %i
  store float %y, float* %b, align 4
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %end
  br i1 %more, label %loop, label %exit
exit:
  ret void
}
"""


def _load(ir_text: str, symbol: str) -> tuple[jit.LoadedObject, int]:
    code = jit.load_object(jit.compile_ir(ir_text, count=False), count=False)
    return code, code.address(symbol)


def _best_rate(
    addr: int, ptrs: ctypes.Array[ctypes.c_void_p], bounds: np.ndarray, threads: int, budget: float
) -> float:
    """The fewest seconds one run of ``addr`` over ``bounds``' chunks took, on
    ``threads`` threads, repeated for about ``budget`` seconds (after one warm-up)."""
    pool = native_pool.pool(threads - 1) if threads > 1 else None
    kernel = jit.KERNEL_TYPE(addr)
    chunks = len(bounds) - 1

    def run() -> None:
        if pool is None or not pool.run(addr, ctypes.addressof(ptrs), bounds):
            for k in range(chunks):
                kernel(ptrs, int(bounds[k]), int(bounds[k + 1]))

    run()  # wakes the pool's workers, touches the pages
    best = float("inf")
    stop = time.perf_counter() + budget
    while True:
        start = time.perf_counter()
        run()
        now = time.perf_counter()
        best = min(best, now - start)
        if now >= stop:
            return best


class FmaBurst:
    """The peak FMA loop (``measure_peak_gflops``'s) compiled once, to run again and
    again on ``threads`` threads: ``chunks_per_thread`` chunks each of about a tenth
    of a millisecond, so one run takes about half a millisecond.  :meth:`gflops`
    times one run (after a warm-up run); on a shared machine a run well under the
    stored peak means the process did not get all its cores then
    (``bench/quiet.py``)."""

    def __init__(self, threads: int, cpu: CpuId | None = None, chunks_per_thread: int = 4) -> None:
        cpu = cpu or detect_cpu()
        self.lanes, fma = vector_width_of(cpu), fma_of(cpu)
        self.threads = max(1, threads)
        self._code, self._addr = _load(_fma_ir(self.lanes, fma), "peak_fma")
        chunks = chunks_per_thread * self.threads
        self._scratch = np.zeros(self.lanes * (chunks + 2), np.float32)
        self._scratch[:2] = (0.999999, 1e-6)  # acc -> acc * a + b stays finite and normal
        self._ptrs = (ctypes.c_void_p * 1)(self._scratch.ctypes.data)
        self._bounds = np.arange(chunks + 1, dtype=np.int64) * _FMA_ITERATIONS
        self.flops = chunks * _FMA_ITERATIONS * _ACCUMULATORS * self.lanes * 2

    def best_seconds(self, budget: float) -> float:
        """The fewest seconds a run took, repeated for about ``budget`` seconds."""
        return _best_rate(self._addr, self._ptrs, self._bounds, self.threads, budget)

    def gflops(self) -> float:
        """GFLOP/s of one run, now."""
        return self.flops / self.best_seconds(0.0) / 1e9


def measure_peak_gflops(
    threads: int, cpu: CpuId | None = None, seconds: float = FLOPS_SECONDS
) -> float:
    """Float32 GFLOP/s of independent vector FMAs on ``threads`` threads of this host."""
    burst = FmaBurst(threads, cpu)
    return burst.flops / burst.best_seconds(seconds) / 1e9


def measure_dram_gbps(
    threads: int, last_level_bytes: int = 0, seconds: float = BANDWIDTH_SECONDS
) -> float:
    """GB/s of ``dst = src * s`` over two float32 arrays of ``2 * last_level_bytes``
    each (at least 32 MiB) on ``threads`` threads: bytes read plus written."""
    n = max(_MIN_STREAM_BYTES, 2 * last_level_bytes) // 4
    code, addr = _load(_STREAM_IR, "peak_stream")
    src = np.ones(n, np.float32)
    dst = np.empty(n, np.float32)
    scale = np.ones(1, np.float32)
    ptrs = (ctypes.c_void_p * 3)(src.ctypes.data, dst.ctypes.data, scale.ctypes.data)
    chunks = 8 * max(1, threads)
    bounds = (np.arange(chunks + 1, dtype=np.int64) * n) // chunks
    best = _best_rate(addr, ptrs, bounds, threads, seconds)
    del code
    return 8 * n / best / 1e9


def measure(cpu: CpuId, threads: int, host: HostFacts | None = None) -> Peaks:
    """Both ceilings of this host with ``threads`` threads; unknown for any other
    ``cpu`` (an imaginary one described by a test cannot be measured here)."""
    if cpu != detect_cpu():
        return Peaks()
    facts = host or HostFacts()
    last = max(facts.caches) if facts.caches else 3
    return Peaks(
        measure_peak_gflops(threads, cpu), measure_dram_gbps(threads, facts.cache(last).size_bytes)
    )


# -- keeping them ----------------------------------------------------------------------


def peaks_key(cpu: CpuId, threads: int) -> str:
    """What a measurement depends on: the CPU's model, LLVM name and features, threads."""
    return (
        f"{detect_cpu_model() or 'unknown'} | {cpu.name} | lanes={vector_width_of(cpu)} "
        f"fma={fma_of(cpu)} | threads={threads}"
    )


class PeaksFile:
    """Measured ceilings in ``ROOT/peaks.json`` (``ROOT``: the disk cache's root,
    used only when :class:`~.cache_root.CacheRoot` trusts it).  Unreadable or
    malformed contents count as absent; a failed write is ignored."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.root = CacheRoot(directory)
        self.path = self.root.path / PEAKS_FILE

    def _entries(self) -> dict[str, object]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            return {}
        entries = data.get("entries")
        return entries if isinstance(entries, dict) else {}

    def get(self, key: str) -> Peaks | None:
        if not self.root.usable():
            return None
        entry = self._entries().get(key)
        if not isinstance(entry, dict):
            return None
        values = [entry.get("peak_gflops"), entry.get("dram_gbps")]
        if not all(isinstance(x, (int, float)) and x > 0 for x in values):
            return None
        return Peaks(float(values[0]), float(values[1]))  # type: ignore[arg-type]

    def put(self, key: str, peaks: Peaks) -> None:
        if not peaks.known or not self.root.usable():
            return
        entries = self._entries()
        entries[key] = {
            "peak_gflops": peaks.gflops,
            "dram_gbps": peaks.gbps,
            "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            # a busy machine measures low: the 1-minute load average says how busy
            "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        }
        text = json.dumps({"format": _FORMAT, "entries": entries}, indent=1, sort_keys=True)
        try:
            make_private_dirs(self.root.path)
            fd, tmp = tempfile.mkstemp(prefix=".peaks.", suffix=".tmp", dir=self.root.path)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError, UnboundLocalError):
                Path(tmp).unlink()


_MEASURED: dict[str, Peaks] = {}  # this process's measurements, by peaks_key
_LOCK = threading.Lock()


def measuring_enabled() -> bool:
    """Whether :data:`MEASURE_VARIABLE` allows measuring (anything but ``0``)."""
    return os.environ.get(MEASURE_VARIABLE, "").strip() != "0"


def _remembered(store: PeaksFile | None, host: HostFacts) -> Callable[[CpuId, int], Peaks]:
    """A measurer that looks in this process's memory, then ``store``, before measuring."""

    def find(cpu: CpuId, threads: int) -> Peaks:
        key = peaks_key(cpu, threads)
        with _LOCK:  # one measurement at a time: two at once would halve both
            found = _MEASURED.get(key)
            if found is None and store is not None:
                found = store.get(key)
            if found is None:
                found = measure(cpu, threads, host)
                if store is not None:
                    store.put(key, found)
            if found.known:
                _MEASURED[key] = found
            return found

    return find


def target_peaks(
    target: Target, *, measure: bool | None = None, store: PeaksFile | None = None
) -> Peaks:
    """The ceilings roofline figures on ``target`` use: the file's ``peak_gflops``
    and DRAM ``bandwidth_gbs``, else (a ``cpu`` target) its host facts'
    (given, or measured once per machine and thread count and kept in ``store``,
    by default :class:`PeaksFile` in the cache root).  ``measure=False``, or
    :data:`MEASURE_VARIABLE` ``=0`` when ``measure`` is ``None``, measures
    nothing: what is not given stays unknown."""
    given = Peaks(target.peak_gflops, target.dram_gbps)
    host = target.host
    if given.known or target.backend != "cpu" or host is None:
        return given
    allowed = measuring_enabled() if measure is None else measure
    if not allowed:
        return given | host.peaks(target.threads)
    how = _remembered(store if store is not None else PeaksFile(), host)
    return given | host.peaks(target.threads, how)
