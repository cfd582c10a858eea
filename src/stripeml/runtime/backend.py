"""The backend interface, and the backend of a target.

A backend turns an optimised Stripe program into something callable: the
NumPy interpreter (``interp``), the host CPU through LLVM (``cpu``), and GPUs
through OpenCL or CUDA (``opencl``, ``cuda``: one :class:`~.gpu.GpuBackend`
parameterised by its dialect).  :func:`backend_for` makes the backend of a
resolved :class:`~stripeml.targets.Target` through that kind's frozen options
object (``CpuOptions.from_target``, ``GpuOptions.from_target``), once per
target.  Backends never run passes: the pipeline is the target's
(``target.passes``), run by the caller before ``compile``.  The CPU, OpenCL and
CUDA modules import their native dependencies lazily, so the core loads none
of them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from ..ir.nodes import Program
from ..targets.target import GPU_BACKENDS, Target


class Compiled(Protocol):
    """A program compiled for one backend."""

    code: str

    def run(
        self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]: ...


class Backend(Protocol):
    """Compiles optimised programs for one kind of machine."""

    @property
    def name(self) -> str:
        """The backend's kind (``interp``, ``cpu``, ``opencl``, ``cuda``)."""
        ...

    @property
    def cache_dir(self) -> str | os.PathLike[str] | None:
        """Where the disk cache lives (``None``: the default place, or no cache)."""
        ...

    def compile(self, program: Program) -> Compiled: ...

    def describe(self) -> str | None:
        """Everything besides the program that compiled code depends on (the disk
        cache's key), or ``None`` when results are not cached on disk."""
        ...


@dataclass
class _InterpCompiled:
    program: Program
    code: str = ""

    def run(
        self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        from .interp import run

        return run(self.program, inputs, outputs)


@dataclass(frozen=True)
class InterpBackend:
    """The reference interpreter: runs the program as it is (no options)."""

    name: ClassVar[str] = "interp"
    cache_dir: ClassVar[None] = None

    def compile(self, program: Program) -> Compiled:
        return _InterpCompiled(program)

    def describe(self) -> str | None:
        return None


# One backend per target (targets are frozen and hashable).
_BACKENDS: dict[Target, Backend] = {}
_LOCK = threading.Lock()


def backend_for(target: Target) -> Backend:
    """The backend that runs ``target``'s programs, made once per target."""
    with _LOCK:
        cached = _BACKENDS.get(target)
    if cached is not None:
        return cached
    backend = _make(target)
    with _LOCK:
        return _BACKENDS.setdefault(target, backend)


def _make(target: Target) -> Backend:
    if target.backend == "interp":
        return InterpBackend()
    if target.backend == "cpu":
        from .cpu import CpuBackend, CpuOptions

        return CpuBackend(CpuOptions.from_target(target))
    if target.backend in GPU_BACKENDS:
        from .gpu import GpuBackend, GpuOptions

        return GpuBackend(target.backend, GpuOptions.from_target(target))
    raise AssertionError(f"the target loader accepted backend {target.backend!r}")
