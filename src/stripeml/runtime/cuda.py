"""``target="cuda"``: Stripe -> CUDA C -> PTX (NVRTC) -> an NVIDIA GPU (CUDA driver API).

:data:`DEVICE` is what :class:`~.gpu.GpuBackend` uses for the ``cuda``
dialect: it compiles the CUDA C the backend printed (:mod:`stripeml.codegen.cuda`)
to PTX with NVRTC at once, so ``f.lower(...)`` works (and is tested) on machines without a GPU.  Running
needs a GPU and its driver: the first call creates the primary context of
device 0, loads the PTX and allocates one device buffer per root buffer,
reused by every later call.  Both come with the ``cuda`` extra:
``pip install 'stripeml[cuda]'`` (``cuda-bindings``, ``nvidia-cuda-nvrtc``).

The PTX targets the GPU found at compile time, else ``compute_90`` (Hopper,
the bundled ``cuda.toml``); the driver JIT-compiles it for newer GPUs.
"""

from __future__ import annotations

import threading

import numpy as np

from ..codegen.gpu_abi import GpuModule, KernelInfo
from ..errors import StripeError, format_bytes
from .gpu import GpuProgram
from .host import out_of_memory

#: The PTX architecture when no GPU says otherwise (NVIDIA Hopper, as cuda.toml).
DEFAULT_ARCH = "compute_90"


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise StripeError(
            "target 'cuda' needs NVRTC: pip install 'stripeml[cuda]' "
            "(cuda-bindings and nvidia-cuda-nvrtc)"
        ) from exc
    return nvrtc


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise StripeError(
            "target 'cuda' needs cuda-bindings: pip install 'stripeml[cuda]'"
        ) from exc
    return driver


def _check(result, what: str):
    """Unwrap a cuda-bindings ``(error, *values)`` tuple, raising on failure."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise StripeError(f"target 'cuda': {what} failed: {err!r}")
    return values[0] if len(values) == 1 else values


_GPU_LOCK = threading.Lock()
_GPU: dict[str, object] = {}


def gpu_context() -> tuple[object, object, str]:
    """``(device, context, arch)`` of GPU 0, initialised once; ``StripeError``
    (saying why) when there is no usable GPU."""
    driver = _driver()
    with _GPU_LOCK:
        if "error" in _GPU:
            raise StripeError(str(_GPU["error"]))
        if "context" not in _GPU:
            try:
                _check(driver.cuInit(0), "cuInit")
                count = _check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
                if count < 1:
                    raise StripeError("target 'cuda': no CUDA GPU found")
                dev = _check(driver.cuDeviceGet(0), "cuDeviceGet")
                attr = driver.CUdevice_attribute
                major = _check(
                    driver.cuDeviceGetAttribute(
                        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev
                    ),
                    "cuDeviceGetAttribute",
                )
                minor = _check(
                    driver.cuDeviceGetAttribute(
                        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev
                    ),
                    "cuDeviceGetAttribute",
                )
                ctx = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            except StripeError as exc:
                _GPU["error"] = f"target 'cuda': no usable CUDA GPU ({exc})"
                raise StripeError(str(_GPU["error"])) from None
            except Exception as exc:  # the driver library itself is missing
                _GPU["error"] = f"target 'cuda': no usable CUDA GPU ({exc})"
                raise StripeError(str(_GPU["error"])) from None
            _GPU.update(device=dev, context=ctx, arch=f"compute_{major}{minor}")
        return _GPU["device"], _GPU["context"], str(_GPU["arch"])


def gpu_available() -> tuple[bool, str]:
    """Whether a CUDA GPU can run kernels here, and if not, why."""
    try:
        gpu_context()
    except StripeError as exc:
        return False, str(exc)
    return True, ""


def compile_ptx(source: str, arch: str = DEFAULT_ARCH, name: str = "stripeml.cu") -> str:
    """CUDA C -> PTX text with NVRTC (no GPU needed); ``StripeError`` with the log."""
    nvrtc = _nvrtc()
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "nvrtc")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if int(err) != 0:
            size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtc log")
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise StripeError(
                f"target 'cuda': NVRTC could not compile the CUDA C:\n{log.decode(errors='replace')}"
            )
        size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
        ptx = b" " * size
        _check(nvrtc.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return ptx.rstrip(b"\0 ").decode()


def check_device_memory(buffers, sizes: list[int], free: int, total: int) -> None:
    """:class:`ShapeError` before any device allocation when the buffers need
    more than the GPU has free (``cuMemGetInfo``), naming the biggest."""
    if sum(sizes) <= free:
        return
    parts = [(f"'{b.info.name}' {b.info.dtype}{b.info.sizes}", n) for b, n in zip(buffers, sizes)]
    why = (
        f"the GPU has {format_bytes(free)} free of its {format_bytes(total)}"
        if free < total
        else f"the GPU has {format_bytes(total)}"
    )
    raise out_of_memory("loading the program on the CUDA GPU", parts, why)


class CudaDevice:
    """The CUDA dialect's device half for :class:`~.gpu.GpuBackend`: CUDA C compiled
    to PTX with NVRTC at once (no GPU needed), loaded on the GPU at the first run."""

    def load(self, module: GpuModule) -> CudaCompiled:
        ok, _ = gpu_available()
        arch = gpu_context()[2] if ok else DEFAULT_ARCH
        return CudaCompiled(module, compile_ptx(module.source, arch))


class CudaCompiled(GpuProgram):
    """CUDA C, its PTX, and (on first run, when a GPU is present) the loaded module."""

    def __init__(self, module: GpuModule, ptx: str) -> None:
        super().__init__(module, module.source)
        self.ptx = ptx
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        driver = _driver()
        _dev, ctx, _arch = gpu_context()
        _check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self._driver = driver
        self._mod = _check(driver.cuModuleLoadData(self.ptx.encode() + b"\0"), "cuModuleLoadData")
        sizes = [max(b.nbytes, b.dtype.itemsize) for b in self.buffers]
        free, total = _check(driver.cuMemGetInfo(), "cuMemGetInfo")
        check_device_memory(self.buffers, sizes, int(free), int(total))
        self._dev = []
        try:
            for n in sizes:
                self._dev.append(_check(driver.cuMemAlloc(n), "cuMemAlloc"))
        except StripeError:
            for ptr in self._dev:  # what was allocated before the failure goes back
                driver.cuMemFree(ptr)
            raise
        self._stream = _check(driver.cuStreamCreate(0), "cuStreamCreate")
        self._functions = {}
        self._args = {}
        for step in self.module.steps:
            info = step.kernel
            if info is None:
                continue
            fn = _check(
                driver.cuModuleGetFunction(self._mod, info.symbol.encode()), "cuModuleGetFunction"
            )
            self._functions[info.symbol] = fn
            ptrs = [np.array([int(self._dev[i])], dtype=np.uint64) for i in info.buffers]
            self._args[info.symbol] = (
                ptrs,
                np.array([p.ctypes.data for p in ptrs], dtype=np.uint64),
            )
        self._loaded = True
        for k in range(len(self.buffers)):
            self.upload(k, self._host[k])

    def run(self, inputs, outputs=None):
        self._load()
        _check(self._driver.cuCtxSetCurrent(gpu_context()[1]), "cuCtxSetCurrent")
        return super().run(inputs, outputs)

    def upload(self, k: int, host: np.ndarray) -> None:
        _check(
            self._driver.cuMemcpyHtoDAsync(
                self._dev[k], host.ctypes.data, host.nbytes, self._stream
            ),
            "cuMemcpyHtoD",
        )

    def download(self, k: int, host: np.ndarray) -> None:
        _check(
            self._driver.cuMemcpyDtoHAsync(
                host.ctypes.data, self._dev[k], host.nbytes, self._stream
            ),
            "cuMemcpyDtoH",
        )

    def launch(self, kernel: KernelInfo) -> None:
        _ptrs, argv = self._args[kernel.symbol]
        _check(
            self._driver.cuLaunchKernel(
                self._functions[kernel.symbol],
                kernel.groups,
                1,
                1,
                kernel.group_size,
                1,
                1,
                0,
                self._stream,
                argv.ctypes.data,
                0,
            ),
            "cuLaunchKernel",
        )

    def finish(self) -> None:
        _check(self._driver.cuStreamSynchronize(self._stream), "cuStreamSynchronize")


DEVICE = CudaDevice()
