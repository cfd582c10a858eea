"""OpenCL C: the C-style base with OpenCL's qualifiers, ids and barrier.

OpenCL C's math functions are overloaded on float and double, so only the
qualifiers and the ``cl_khr_fp64`` pragma differ from :class:`CStyle`.
"""

from __future__ import annotations

from ..ir.nodes import Program
from .cstyle import CStyle, generate
from .gpu_abi import GpuModule


class OpenCLStyle(CStyle):
    name = "opencl"

    def header(self, uses_f64: bool) -> str:
        return "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" if uses_f64 else ""


def generate_opencl(program: Program, **options: int) -> GpuModule:
    """OpenCL C for ``program`` (one ``__kernel`` per root kernel) and its metadata.

    ``options``: those of :func:`.cstyle.generate` (``max_group_size``,
    ``shared_memory``, ``strip``).
    """
    return generate(program, OpenCLStyle(), **options)  # type: ignore[arg-type]
