"""The backend interface and the registry of targets.

A backend turns a verified Stripe program into something callable: the NumPy
interpreter (``interp``) and the host CPU through LLVM (``cpu``, imported
lazily so the core does not load llvmlite); the GPU backends plug in here by
name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from ..errors import StripeError
from ..ir.nodes import Program


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
    """``target="interp"``: the reference interpreter (no passes)."""

    name = "interp"

    def pipeline(self) -> list:
        return []

    def compile(self, program: Program) -> Compiled:
        return _InterpCompiled(program)


@lru_cache(maxsize=1)
def _cpu_backend() -> Backend:
    """One CpuBackend per process (host detection runs once)."""
    from .cpu import CpuBackend

    return CpuBackend()


_PLANNED = {
    "opencl": "the OpenCL backend",
    "cuda": "the CUDA backend",
}


def get_backend(target: str) -> Backend:
    """The backend for a target name (or, later, a target .toml path)."""
    if not isinstance(target, str):
        raise StripeError(f"target must be a string, got {type(target).__name__}")
    if target == "interp":
        return InterpBackend()
    if target == "cpu":
        return _cpu_backend()
    if target in _PLANNED:
        raise StripeError(
            f"target '{target}' is not available yet ({_PLANNED[target]} is not built)"
        )
    if target.endswith(".toml"):
        raise StripeError(f"target files are not supported yet: '{target}'")
    raise StripeError(
        f"unknown target '{target}' (known: interp, cpu, opencl, cuda, or a .toml path)"
    )
