"""GPUs: one backend for OpenCL and CUDA, and what their runtimes share.

:class:`GpuBackend` is the backend of every ``opencl`` and ``cuda`` target:
its ``dialect`` names the device module (:mod:`.opencl` or :mod:`.cuda`,
imported on first use, so pyopencl and cuda-bindings stay optional) that
prints the program in its C dialect and loads it on its device; its
:class:`GpuOptions` come from the target file's facts.

A compiled GPU program (:class:`GpuProgram`) keeps one device buffer per root
refinement for its whole life, so repeated calls reuse device memory; a call
uploads the inputs (and the results' initial contents: zeros, or the caller's
``out=`` arrays, since elements a program never stores keep them), launches
the kernels in order, runs root-level ``special`` statements on the host with
the interpreter's implementations (downloading their inputs, uploading their
outputs), and downloads the results.  Subclasses provide the device calls.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from ..codegen.gpu_abi import GpuModule, KernelInfo
from ..ir.nodes import Program, Special
from ..targets.target import Target
from .host import RootBuffer, check_memory, check_names, checked, run_root_special


@dataclass(frozen=True)
class GpuOptions:
    """What the C-style code generators are told about a device.

    ``max_group_size``: work-items per work-group (threads per block);
    ``shared_memory``: bytes of local/shared memory a group may use;
    ``strip``: accumulators one work-item keeps along a vectorised strip (0:
    one output each).
    """

    max_group_size: int
    shared_memory: int = 0
    strip: int = 0

    @classmethod
    def from_target(cls, target: Target) -> GpuOptions:
        """The options of an ``opencl``/``cuda`` target (the loader requires
        ``max_threads_per_group`` of those)."""
        if target.max_threads_per_group is None:
            raise ValueError(f"target '{target.name}' has no max_threads_per_group")
        return cls(
            max_group_size=target.max_threads_per_group,
            shared_memory=target.shared_memory_bytes or 0,
            strip=target.work_item_strip,
        )


class Device(Protocol):
    """A dialect's device module (``DEVICE`` of :mod:`.opencl`, :mod:`.cuda`):
    builds the printed program for its device."""

    def load(self, module: GpuModule) -> GpuProgram: ...


@dataclass(frozen=True)
class GpuBackend:
    """``target="opencl"`` / ``"cuda"`` (and their target files): the program
    printed by the dialect's code generator, loaded on its device."""

    dialect: str  # "opencl" | "cuda": the module of this package that runs it
    options: GpuOptions
    cache_dir: ClassVar[None] = None  # compiled GPU code is not cached on disk

    @property
    def name(self) -> str:
        return self.dialect

    def device(self) -> Device:
        return importlib.import_module(f"{__package__}.{self.dialect}").DEVICE

    def generate(self, program: Program) -> GpuModule:
        """The program in this dialect's C (``codegen.<dialect>.generate_<dialect>``)."""
        codegen = importlib.import_module(
            f"{__package__.rpartition('.')[0]}.codegen.{self.dialect}"
        )
        o = self.options
        return getattr(codegen, f"generate_{self.dialect}")(
            program, max_group_size=o.max_group_size, shared_memory=o.shared_memory, strip=o.strip
        )

    def compile(self, program: Program) -> GpuProgram:
        return self.device().load(self.generate(program))

    def describe(self) -> str | None:
        return None  # compiled GPU code is not cached on disk


class GpuProgram:
    """A program compiled for a GPU runtime; subclasses implement the device calls."""

    def __init__(self, module: GpuModule, code: str) -> None:
        self.module = module
        self.code = code
        self.buffers = tuple(RootBuffer.of(b) for b in module.buffers)
        # Host copies of every buffer live as long as the program: check first.
        check_memory(
            "loading the program on the device (host copies of its buffers)",
            [(f"'{b.info.name}' {b.info.dtype}{b.info.sizes}", b.nbytes) for b in self.buffers],
        )
        self._host = [b.storage(at_least=1) for b in self.buffers]
        self._lock = threading.Lock()

    # -- device hooks ------------------------------------------------------------------
    def upload(self, k: int, host: np.ndarray) -> None:
        raise NotImplementedError

    def download(self, k: int, host: np.ndarray) -> None:
        raise NotImplementedError

    def launch(self, kernel: KernelInfo) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError

    # -- calls ---------------------------------------------------------------------------
    def run(
        self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        outputs = dict(outputs or {})
        check_names(self.buffers, inputs, outputs)
        with self._lock:
            results: dict[str, np.ndarray] = {}
            for k, buf in enumerate(self.buffers):
                kind, name = buf.info.kind, buf.info.name
                if kind == "in":
                    buf.logical(self._host[k])[...] = checked(buf, inputs[name], "input")
                    self.upload(k, self._host[k])
                elif kind == "out":
                    given = outputs.get(name)
                    view = buf.logical(self._host[k])
                    view[...] = 0 if given is None else checked(buf, given, "output")
                    self.upload(k, self._host[k])
            for step in self.module.steps:
                if step.kernel is not None:
                    self.launch(step.kernel)
                elif step.special is not None:
                    self._run_special(step.special)
            for k, buf in enumerate(self.buffers):
                if buf.info.kind == "out":
                    self.download(k, self._host[k])
            self.finish()
            for k, buf in enumerate(self.buffers):
                if buf.info.kind != "out":
                    continue
                name = buf.info.name
                if name in outputs:
                    outputs[name][...] = buf.logical(self._host[k])
                    results[name] = outputs[name]
                else:
                    results[name] = np.array(buf.logical(self._host[k]), order="C")
        return {b.info.name: results[b.info.name] for b in self.buffers if b.info.kind == "out"}

    def _run_special(self, special: Special) -> None:
        index = {b.info.name: k for k, b in enumerate(self.buffers)}
        touched = [index[n] for n in (*special.inputs, *special.outputs)]
        for k in touched:
            self.download(k, self._host[k])
        self.finish()
        run_root_special(special, self.buffers, self._host)
        for name in special.outputs:
            self.upload(index[name], self._host[index[name]])
