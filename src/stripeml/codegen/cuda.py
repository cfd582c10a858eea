"""CUDA C: the C-style base with CUDA's qualifiers, ids, barrier and math names.

CUDA spells float math with an ``f`` suffix (``expf``), has no OpenCL vector
type names (the typedefs below give the base's names), marks kernels
``extern "C" __global__`` (unmangled names for ``cuModuleGetFunction``) and
reinterprets bits with ``__int_as_float`` / ``__longlong_as_double`` (and
back with ``__float_as_int`` / ``__double_as_longlong``).
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
    """CUDA C (``__global__``, ``__shared__``, ``__syncthreads``)."""

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
    prelude = _TYPEDEFS
    f32_math_suffix = "f"
    f32_from_bits = "__int_as_float(0x{:08x})"
    f64_from_bits = "__longlong_as_double(0x{:016x}LL)"
    types = {**CStyle.types, "i8": "signed char", "i64": "i64_t", "u64": "u64_t"}

    def reinterpret(self, x: str, src: str, dst: str) -> str:
        """CUDA's bit-reinterpreting intrinsics (no ``as_type``)."""
        if dst == "f32":
            return f"__int_as_float((int)({x}))"
        if dst == "f64":
            return f"__longlong_as_double((long long)({x}))"
        fn = "__float_as_int" if src == "f32" else "__double_as_longlong"
        return f"(({self.ctype(dst)}){fn}({x}))"


def generate_cuda(program: Program, **options: int) -> GpuModule:
    """CUDA C for ``program`` (one ``__global__`` function per root kernel) and its metadata.

    ``options``: those of :func:`.cstyle.generate` (``max_group_size``,
    ``shared_memory``, ``strip``).
    """
    return generate(program, CudaStyle(), **options)
