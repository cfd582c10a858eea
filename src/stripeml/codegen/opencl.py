"""OpenCL C: the C-style base, whose defaults are OpenCL's spelling.

OpenCL C's math functions are overloaded on float and double, so only the
dialect's name and the ``cl_khr_fp64`` pragma (for sources that use float64)
differ from :class:`CStyle`.
"""

from __future__ import annotations

from ..ir.nodes import Program
from .cstyle import CStyle, generate
from .gpu_abi import GpuModule


class OpenCLStyle(CStyle):
    """OpenCL C (``__kernel``, ``__global``, ``__local``, ``barrier``)."""

    name = "opencl"
    f64_prelude = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable"


def generate_opencl(program: Program, **options: int) -> GpuModule:
    """OpenCL C for ``program`` (one ``__kernel`` per root kernel) and its metadata.

    ``options``: those of :func:`.cstyle.generate` (``max_group_size``,
    ``shared_memory``, ``strip``).
    """
    return generate(program, OpenCLStyle(), **options)
