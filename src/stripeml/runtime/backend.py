"""The backend interface, and backends made from targets.

A backend turns a verified Stripe program into something callable: the NumPy
interpreter (``interp``), the host CPU through LLVM (``cpu``, imported
lazily so the core does not load llvmlite), OpenCL devices through pyopencl
(``opencl``) and NVIDIA GPUs through NVRTC and the CUDA driver (``cuda``),
both optional extras imported only when a target names them.  Every target but the bare
``"interp"`` is a target file (:mod:`stripeml.targets`): its facts configure
the backend and its pipeline is the backend's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..errors import StripeError, TargetError
from ..ir.nodes import Program

if TYPE_CHECKING:
    from ..targets import Target


class Compiled(Protocol):
    """A program compiled for one backend."""

    code: str

    def run(
        self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]: ...


class Backend(Protocol):
    name: str

    def pipeline(self) -> list: ...

    def compile(self, program: Program) -> Compiled: ...


@dataclass
class _InterpCompiled:
    program: Program
    code: str = ""

    def run(
        self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        from .interp import run

        return run(self.program, inputs, outputs)


class InterpBackend:
    """``target="interp"``: the reference interpreter.

    No passes by default; a target file with ``backend = "interp"`` (an
    accelerator only the interpreter runs) gives its pipeline as ``passes``.
    """

    name = "interp"

    def __init__(self, passes: Sequence[object] = (), target: Target | None = None) -> None:
        self.passes = tuple(passes)
        self.target = target

    def pipeline(self) -> list:
        return list(self.passes)

    def compile(self, program: Program) -> Compiled:
        return _InterpCompiled(program)


_PLANNED: dict[str, str] = {}

# Backends made from target files, by (resolved path, modification time): a
# file is loaded (and the host probed) once, and again after it changes.
_BACKENDS: dict[str, tuple[int, Backend]] = {}
_LOCK = threading.Lock()


def get_backend(target: str | os.PathLike[str] | Target) -> Backend:
    """The backend for a target: ``"interp"``, a bundled target name (``"cpu"``
    loads ``targets/cpu.toml``), a path to a target ``.toml`` file, or a
    :class:`~stripeml.targets.Target`."""
    from ..targets import Target, load_target, resolve_target

    if isinstance(target, Target):
        return backend_for(target)
    if not isinstance(target, (str, os.PathLike)):
        raise StripeError(f"target must be a string, got {type(target).__name__}")
    if target == "interp":
        return InterpBackend()
    path = resolve_target(target).resolve()
    try:
        stamp = path.stat().st_mtime_ns
    except OSError as exc:
        raise TargetError(f"{path}: cannot read the target file: {exc}") from None
    key = str(path)
    with _LOCK:
        cached = _BACKENDS.get(key)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    backend = backend_for(load_target(path))
    with _LOCK:
        _BACKENDS[key] = (stamp, backend)
    return backend


def backend_for(target: Target) -> Backend:
    """A fresh backend running ``target``'s pipeline with its facts."""
    if target.backend == "interp":
        return InterpBackend(target.passes(), target)
    if target.backend == "cpu":
        from .cpu import CpuBackend

        return CpuBackend(
            threads=target.threads,
            vector_width=target.vector_width,
            fma=target.fma,
            passes=tuple(target.passes()),
            target=target,
        )
    # A device whose subgroup is no wider than its vector lanes (a CPU running
    # OpenCL) vectorises one work-item's loops, so its work-items keep a strip
    # of accumulators; a GPU spreads outputs over threads instead.
    strip = 0
    if target.subgroup_size and target.subgroup_size <= target.vector_width:
        strip = 8 * target.vector_width
    if target.backend == "opencl":
        from .opencl import OpenCLBackend

        return OpenCLBackend(
            passes=tuple(target.passes()),
            max_group_size=target.max_threads_per_group or 256,
            shared_memory=target.shared_memory_bytes or 0,
            strip=strip,
            target=target,
        )
    if target.backend == "cuda":
        from .cuda import CudaBackend

        return CudaBackend(
            passes=tuple(target.passes()),
            max_group_size=target.max_threads_per_group or 1024,
            shared_memory=target.shared_memory_bytes or 0,
            strip=strip,
            target=target,
        )
    planned = _PLANNED.get(target.backend, f"backend '{target.backend}'")
    where = f" ({target.source})" if target.source else ""
    raise StripeError(
        f"target '{target.name}'{where} is not available yet ({planned} is not built)"
    )
