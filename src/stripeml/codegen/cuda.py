"""CUDA C: the C-style base with CUDA's qualifiers, ids, barrier and math names.

CUDA spells float math with an ``f`` suffix (``expf``), has no OpenCL vector
type names (the typedefs below give the base's names), marks kernels
``extern "C" __global__`` (unmangled names for ``cuModuleGetFunction``) and
reinterprets bits with ``__int_as_float`` / ``__longlong_as_double``.
"""

from __future__ import annotations

from ..ir.nodes import Program
from .cstyle import CStyle, generate
from .gpu_abi import GpuModule

_TYPEDEFS = """\
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef long long i64_t;
typedef unsigned long long u64_t;"""


class CudaStyle(CStyle):
    name = "cuda"
    kernel_qualifier = 'extern "C" __global__ void'
    global_qualifier = ""
    local_decl = "__shared__"
    local_pointer = ""
    restrict = "__restrict__"
    function_qualifier = "static __device__ __forceinline__"
    group_id = "blockIdx.x"
    local_id = "threadIdx.x"
    barrier = "__syncthreads();"
    u64_suffix = "ULL"
    types = {**CStyle.types, "i8": "signed char", "i64": "i64_t", "u64": "u64_t"}

    def header(self, uses_f64: bool) -> str:
        return _TYPEDEFS

    def math_name(self, op: str, dt: str) -> str:
        name = "rint" if op == "round" else op
        return name + "f" if dt == "f32" else name

    def float_from_bits(self, dt: str, bits: int) -> str:
        if dt == "f32":
            return f"__int_as_float(0x{bits:08x})"
        return f"__longlong_as_double(0x{bits:016x}LL)"


def generate_cuda(program: Program, **options: int) -> GpuModule:
    """CUDA C for ``program`` (one ``__global__`` function per root kernel) and its metadata.

    ``options``: those of :func:`.cstyle.generate` (``max_group_size``,
    ``shared_memory``, ``strip``).
    """
    return generate(program, CudaStyle(), **options)  # type: ignore[arg-type]
