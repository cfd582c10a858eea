"""``target="opencl"``: Stripe -> OpenCL C -> any OpenCL device, through pyopencl.

:data:`DEVICE` is what :class:`~.gpu.GpuBackend` uses for the ``opencl``
dialect: it builds the OpenCL C the backend printed
(:mod:`stripeml.codegen.opencl`) for the device and returns an
:class:`OpenCLCompiled` that launches one NDRange per root kernel on one
in-order queue.  The device is the first GPU of the first platform that has
one, else the first device found (PoCL's CPU device in CI);
``PYOPENCL_CTX`` (pyopencl's own variable) picks another.  pyopencl and a
driver come with the ``opencl`` extra: ``pip install 'stripeml[opencl]'``
(``pocl-binary-distribution`` brings PoCL, which runs kernels on the CPU).
"""

from __future__ import annotations

import os
import threading
from functools import cache

import numpy as np

from ..codegen.gpu_abi import GpuModule, KernelInfo
from ..errors import StripeError, format_bytes
from .gpu import GpuProgram
from .host import RootBuffer, out_of_memory


def _check_device_memory(module: GpuModule, device) -> None:
    """:class:`ShapeError` before any allocation when a buffer is larger than
    the device allocates at once, or all of them than its global memory."""
    parts = [(f"'{b.name}' {b.dtype}{b.sizes}", RootBuffer.of(b).nbytes) for b in module.buffers]
    what = f"loading the program on OpenCL device '{device.name.strip()}'"
    big = max(parts, key=lambda p: p[1], default=("", 0))
    if big[1] > device.max_mem_alloc_size:
        why = f"the device allocates at most {format_bytes(device.max_mem_alloc_size)} at once"
        raise out_of_memory(what, [big], why)
    if sum(n for _, n in parts) > device.global_mem_size:
        why = f"the device has {format_bytes(device.global_mem_size)} of global memory"
        raise out_of_memory(what, parts, why)


def _cl():
    try:
        import pyopencl as cl
    except ImportError as exc:
        raise StripeError(
            "target 'opencl' needs pyopencl and an OpenCL driver: "
            "pip install 'stripeml[opencl]' (PoCL runs OpenCL on the CPU)"
        ) from exc
    return cl


_DEVICE_LOCK = threading.Lock()
_DEVICE: list = []  # [(context, queue, device)] once created


def device_context():
    """The shared (context, queue, device) of this process, created on first use."""
    cl = _cl()
    with _DEVICE_LOCK:
        if not _DEVICE:
            device = None
            if not os.environ.get("PYOPENCL_CTX"):
                try:
                    platforms = cl.get_platforms()
                except cl.Error as exc:
                    raise StripeError(f"target 'opencl': no OpenCL platform ({exc})") from None
                devices = [d for p in platforms for d in p.get_devices()]
                if not devices:
                    raise StripeError("target 'opencl': no OpenCL device found")
                gpus = [d for d in devices if d.type & cl.device_type.GPU]
                device = (gpus or devices)[0]
                ctx = cl.Context([device])
            else:
                ctx = cl.create_some_context(interactive=False)
                device = ctx.devices[0]
            _DEVICE.append((ctx, cl.CommandQueue(ctx), device))
        return _DEVICE[0]


_PROBE_SOURCE = "__kernel void stripeml_probe(__global float *a) { a[get_global_id(0)] += 1.0f; }"


@cache
def device_problem() -> str | None:
    """Why OpenCL programs cannot run here, or None when they can: no pyopencl, no
    platform or device, or a driver that builds no kernel at all (a trivial one is
    compiled once per process; PoCL 3.0's LLVM 14, for one, names a CPU it does not
    know 'generic' and then refuses that name)."""
    try:
        cl = _cl()
        ctx, _, device = device_context()
    except StripeError as exc:
        return str(exc)
    try:
        cl.Program(ctx, _PROBE_SOURCE).build()
    except cl.Error as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if "error" in ln.lower()]
        why = lines[-1] if lines else str(exc).strip().splitlines()[0]
        return (
            f"the OpenCL driver builds no kernel for device '{device.name.strip()}' "
            f"(a one-line kernel fails too: {why})"
        )
    return None


class OpenCLDevice:
    """The OpenCL dialect's device half for :class:`~.gpu.GpuBackend`."""

    def load(self, module: GpuModule) -> OpenCLCompiled:
        return OpenCLCompiled(module)


class OpenCLCompiled(GpuProgram):
    """A program built for the OpenCL device, with its device buffers."""

    def __init__(self, module: GpuModule) -> None:
        _check_device_memory(module, device_context()[2])
        super().__init__(module, module.source)
        cl = _cl()
        self._cl = cl
        ctx, self.queue, device = device_context()
        if module.uses_f64 and "cl_khr_fp64" not in device.extensions:
            raise StripeError(
                f"target 'opencl': float64 needs cl_khr_fp64, which '{device.name}' lacks"
            )
        limit = device.max_work_group_size
        for step in module.steps:
            info = step.kernel
            if info is not None and info.group_size > limit:
                raise StripeError(
                    f"target 'opencl': kernel '{info.block_name}' needs work-groups of "
                    f"{info.group_size}, the device allows {limit} (lower max_threads_per_group)"
                )
        try:
            built = cl.Program(ctx, module.source).build()
        except cl.Error as exc:
            problem = device_problem()
            if problem is not None:  # the driver's, not this program's
                raise StripeError(f"target 'opencl': {problem}") from None
            raise StripeError(f"target 'opencl': the OpenCL C does not build:\n{exc}") from None
        flags = cl.mem_flags.READ_WRITE
        self._dev = [cl.Buffer(ctx, flags, max(b.nbytes, b.dtype.itemsize)) for b in self.buffers]
        for k in range(len(self.buffers)):
            self.upload(k, self._host[k])
        self._kernels: dict[str, object] = {}
        for step in module.steps:
            info = step.kernel
            if info is not None:
                kern = getattr(built, info.symbol)
                kern.set_args(*(self._dev[i] for i in info.buffers))
                self._kernels[info.symbol] = kern

    def upload(self, k: int, host: np.ndarray) -> None:
        self._cl.enqueue_copy(self.queue, self._dev[k], host, is_blocking=False)

    def download(self, k: int, host: np.ndarray) -> None:
        self._cl.enqueue_copy(self.queue, host, self._dev[k], is_blocking=False)

    def launch(self, kernel: KernelInfo) -> None:
        size = kernel.group_size
        self._cl.enqueue_nd_range_kernel(
            self.queue, self._kernels[kernel.symbol], (kernel.groups * size,), (size,)
        )

    def finish(self) -> None:
        self.queue.finish()


DEVICE = OpenCLDevice()
