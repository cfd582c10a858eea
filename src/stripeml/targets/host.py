"""Facts about the host machine: what a target file's ``auto`` values become.

Detection happens here, once, when a target file is loaded; passes never look
at the machine, and the CPU backend's JIT asks :func:`detect_cpu` (the one
place that queries LLVM about the host) for the same description.  Each fact is detected lazily (a target without ``auto`` costs
nothing) and may be given explicitly instead, which is how tests describe an
imaginary machine:

* ``threads``: the CPUs in this process's affinity set;
* ``vector_width``: f32 lanes of the widest vector unit LLVM reports
  (``avx512f`` -> 16, ``avx``/``avx2`` -> 8, else 4; 4 without llvmlite);
* ``vector_registers``: the vector registers the ISA names (32 with
  AVX-512F or on AArch64, else 16), what a register tile may hold;
* ``fma``: whether the CPU has fused multiply-add;
* ``int8_dot``: whether it has an integer dot-product instruction
  (uint8 x int8 -> int32, x86's VNNI);
* ``caches``: size and line size per level from
  ``/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size,coherency_line_size}``
  (instruction caches skipped), with :data:`FALLBACK_CACHE_BYTES` and
  :data:`FALLBACK_LINE_BYTES` where a level is missing;
* ``dram_bytes``: physical memory (``sysconf``), else :data:`FALLBACK_DRAM_BYTES`;
* ``peak_gflops`` and ``dram_gbps``: the roofline's ceilings, float32 FMA
  throughput and memory bandwidth with all of a target's threads
  (:meth:`HostFacts.peaks`).  Unlike the others these are *measured*, by
  running code (the runtime's :mod:`stripeml.runtime.peaks` supplies the
  measurement and keeps it on disk), and only when a roofline figure is asked
  for: never while a target loads or a program compiles.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

CACHE_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")
FALLBACK_CACHE_BYTES = {1: 32 * KiB, 2: 512 * KiB, 3: 8 * MiB}
FALLBACK_LINE_BYTES = 64
FALLBACK_DRAM_BYTES = 16 * GiB

_SYSFS_SIZE = re.compile(r"\s*([0-9]+)\s*([KMG]?)\s*\Z", re.IGNORECASE)
_SYSFS_UNIT = {"": 1, "K": KiB, "M": MiB, "G": GiB}


@dataclass(frozen=True)
class CacheLevel:
    """One data (or unified) cache level of the host."""

    level: int
    size_bytes: int
    line_bytes: int


def detect_threads() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class CpuId:
    """What the CPU says about itself, as LLVM reads it: its target triple, CPU name
    and the ISA features it has (``avx2``, ``fma``, ``neon`` ...)."""

    triple: str
    name: str
    features: frozenset[str]
    #: LLVM's full feature string (``+avx2,-avx512f,...``, sorted), for code generators.
    feature_string: str = ""


#: The CPU when LLVM cannot be asked: a 64-bit host with no known vector extension.
BASELINE_CPU = CpuId("unknown", "generic", frozenset())


@lru_cache(maxsize=1)
def detect_cpu() -> CpuId:
    """This machine's CPU from LLVM's host detection (llvmlite), once per process;
    :data:`BASELINE_CPU` without llvmlite."""
    try:
        import llvmlite.binding as llvm
    except ImportError:
        return BASELINE_CPU
    try:
        text = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # LLVM cannot detect features here: baseline only
        text = ""
    on = frozenset(f[1:] for f in text.split(",") if f.startswith("+"))
    return CpuId(llvm.get_process_triple(), llvm.get_host_cpu_name(), on, text)


@lru_cache(maxsize=1)
def detect_cpu_model() -> str:
    """The CPU's marketing name (``model name`` of ``/proc/cpuinfo``, else
    :func:`platform.processor`), "" when the OS does not say."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("model name", "Model", "Hardware"):
                    return " ".join(value.split())
    except OSError:
        pass
    return " ".join(platform.processor().split())


@dataclass(frozen=True)
class Peaks:
    """The roofline's two ceilings: float32 GFLOP/s and memory GB/s (``None``: unknown)."""

    gflops: float | None = None
    gbps: float | None = None

    @property
    def known(self) -> bool:
        return self.gflops is not None and self.gbps is not None

    def __or__(self, other: Peaks) -> Peaks:
        """These ceilings, with ``other``'s where these are unknown."""
        return Peaks(
            self.gflops if self.gflops is not None else other.gflops,
            self.gbps if self.gbps is not None else other.gbps,
        )


#: How a host's peaks are measured: ``measure(cpu, threads) -> Peaks``.
PeakMeasure = Callable[[CpuId, int], Peaks]


def vector_width_of(cpu: CpuId) -> int:
    """f32 lanes of ``cpu``'s widest vector unit: 16 (AVX-512F), 8 (AVX/AVX2), else 4."""
    if "avx512f" in cpu.features:
        return 16
    if cpu.features & {"avx2", "avx"}:
        return 8
    return 4


def vector_registers_of(cpu: CpuId) -> int:
    """Vector registers of ``cpu``'s ISA: 32 (AVX-512F's zmm0-31, AArch64's v0-31),
    else 16 (x86-64's xmm/ymm0-15)."""
    if "avx512f" in cpu.features or "aarch64" in cpu.triple:
        return 32
    return 16


def fma_of(cpu: CpuId) -> bool:
    """Whether ``cpu`` has fused multiply-add (x86 FMA3; always on AArch64)."""
    return bool(cpu.features & {"fma", "neon"}) or "aarch64" in cpu.triple


def int8_dot_of(cpu: CpuId) -> bool:
    """Whether ``cpu`` has an integer dot-product instruction for the vector width
    the code generator uses: x86 AVX512-VNNI (``vpdpbusd``: four uint8 x int8
    products summed into each int32 lane), or AVX-VNNI on an AVX2 machine."""
    if "avx512f" in cpu.features:
        return bool({"avx512vnni", "avx512vl"} <= cpu.features)
    return "avxvnni" in cpu.features and "avx2" in cpu.features


def detect_vector_width() -> int:
    """f32 lanes of this machine's widest vector unit (:func:`vector_width_of`)."""
    return vector_width_of(detect_cpu())


def detect_fma() -> bool:
    """Whether this machine has fused multiply-add (:func:`fma_of`)."""
    return fma_of(detect_cpu())


def detect_caches(root: str | os.PathLike[str] = CACHE_ROOT) -> dict[int, CacheLevel]:
    """Data/unified caches of CPU 0 by level, from a sysfs ``cache`` directory.

    Unreadable or malformed entries are skipped; a missing directory gives ``{}``.
    """
    found: dict[int, CacheLevel] = {}
    try:
        entries = sorted(Path(root).glob("index*"))
    except OSError:
        return found
    for entry in entries:
        try:
            level = int(_read(entry / "level"))
            kind = _read(entry / "type").lower()
            size = _sysfs_size(_read(entry / "size"))
        except (OSError, ValueError):
            continue
        if kind == "instruction" or level in found or size <= 0:
            continue
        try:
            line = int(_read(entry / "coherency_line_size"))
        except (OSError, ValueError):
            line = FALLBACK_LINE_BYTES
        found[level] = CacheLevel(level, size, line if line > 0 else FALLBACK_LINE_BYTES)
    return found


def detect_dram_bytes() -> int:
    """Physical memory in bytes, or :data:`FALLBACK_DRAM_BYTES` when the OS does not say."""
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return FALLBACK_DRAM_BYTES
    return pages * page if pages > 0 and page > 0 else FALLBACK_DRAM_BYTES


class HostFacts:
    """The host as target files see it; each fact detected on first use, then kept.

    Any fact may be given to the constructor instead of detected; ``cpu``
    describes another CPU (its ISA features decide ``vector_width`` and ``fma``),
    and ``cache_root`` points cache detection at another sysfs ``cache``
    directory (tests).  ``peak_gflops`` and ``dram_gbps`` given here are never
    measured; ``measure_peaks`` is how the missing ones are (:meth:`peaks`).
    """

    def __init__(
        self,
        *,
        threads: int | None = None,
        vector_width: int | None = None,
        vector_registers: int | None = None,
        fma: bool | None = None,
        int8_dot: bool | None = None,
        dram_bytes: int | None = None,
        cpu: CpuId | None = None,
        cache_root: str | os.PathLike[str] = CACHE_ROOT,
        peak_gflops: float | None = None,
        dram_gbps: float | None = None,
        measure_peaks: PeakMeasure | None = None,
    ) -> None:
        self._given = {
            "threads": threads,
            "vector_width": vector_width,
            "vector_registers": vector_registers,
            "dram_bytes": dram_bytes,
        }
        self._fma = fma
        self._int8_dot = int8_dot
        self._cpu = cpu
        self.cache_root = Path(cache_root)
        for name, value in (("peak_gflops", peak_gflops), ("dram_gbps", dram_gbps)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0
            ):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        self._given_peaks = Peaks(
            None if peak_gflops is None else float(peak_gflops),
            None if dram_gbps is None else float(dram_gbps),
        )
        self._measure_peaks = measure_peaks
        self._peaks: dict[int, Peaks] = {}

    def _fact(self, name: str, detect) -> int:
        given = self._given[name]
        return int(given) if given is not None else detect()

    @cached_property
    def threads(self) -> int:
        return self._fact("threads", detect_threads)

    @cached_property
    def cpu(self) -> CpuId:
        return self._cpu if self._cpu is not None else detect_cpu()

    @cached_property
    def vector_width(self) -> int:
        if self._cpu is not None:
            return self._fact("vector_width", lambda: vector_width_of(self.cpu))
        return self._fact("vector_width", detect_vector_width)

    @cached_property
    def vector_registers(self) -> int:
        return self._fact("vector_registers", lambda: vector_registers_of(self.cpu))

    @cached_property
    def fma(self) -> bool:
        if self._fma is not None:
            return self._fma
        return fma_of(self._cpu) if self._cpu is not None else detect_fma()

    @cached_property
    def int8_dot(self) -> bool:
        if self._int8_dot is not None:
            return self._int8_dot
        return int8_dot_of(self.cpu)

    @cached_property
    def dram_bytes(self) -> int:
        return self._fact("dram_bytes", detect_dram_bytes)

    @cached_property
    def caches(self) -> dict[int, CacheLevel]:
        return detect_caches(self.cache_root)

    def cache(self, level: int) -> CacheLevel:
        """Cache ``level`` (1-based) as detected, else the documented fallback."""
        found = self.caches.get(level)
        if found is not None:
            return found
        lines = [c.line_bytes for c in self.caches.values()]
        size = FALLBACK_CACHE_BYTES.get(level, FALLBACK_CACHE_BYTES[3])
        return CacheLevel(level, size, lines[0] if lines else FALLBACK_LINE_BYTES)

    def peaks(self, threads: int | None = None, measure: PeakMeasure | None = None) -> Peaks:
        """The ceilings with ``threads`` threads (default :attr:`threads`): the
        given ones, the others from ``measure`` (else the constructor's
        ``measure_peaks``), called at most once per thread count; unknown
        (``None``) when there is nothing to measure them with."""
        n = self.threads if threads is None else threads
        if self._given_peaks.known:
            return self._given_peaks
        found = self._peaks.get(n)
        if found is None:
            how = measure if measure is not None else self._measure_peaks
            if how is None:
                return self._given_peaks
            found = self._peaks[n] = self._given_peaks | how(self.cpu, n)
        return found

    @property
    def peak_gflops(self) -> float | None:
        """Float32 GFLOP/s of FMAs on :attr:`threads` threads (:meth:`peaks`)."""
        return self.peaks().gflops

    @property
    def dram_gbps(self) -> float | None:
        """Memory bandwidth in GB/s on :attr:`threads` threads (:meth:`peaks`)."""
        return self.peaks().gbps

    @property
    def line_bytes(self) -> int:
        """The line size of the smallest detected cache level (or the fallback)."""
        return self.cache(min(self.caches)).line_bytes if self.caches else FALLBACK_LINE_BYTES


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii").strip()


def _sysfs_size(text: str) -> int:
    """``32K`` / ``1M`` / ``512`` (sysfs writes sizes in bytes with a K/M/G suffix)."""
    m = _SYSFS_SIZE.match(text)
    if m is None:
        raise ValueError(f"not a size: {text!r}")
    return int(m[1]) * _SYSFS_UNIT[m[2].upper()]
