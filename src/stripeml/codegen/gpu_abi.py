"""The contract between the C-style GPU code generators and the GPU runtimes.

:func:`stripeml.codegen.cstyle.generate` turns a Stripe program into one
source file (OpenCL C or CUDA C) with one ``__kernel`` / ``__global__``
function per root-level kernel block, plus this metadata.  A kernel's
parameters are the base pointers of the root buffers it uses
(``KernelInfo.buffers``: indices into ``program.root.refs``), in that order;
it runs as ``groups`` work-groups (CUDA blocks) of ``group_size`` work-items
(threads), one dimension each.  Root-level ``special`` statements are not
compiled: the runtime runs them on the host between kernels (``GpuStep``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.nodes import Special
from .cpu_abi import BufferInfo


@dataclass(frozen=True, slots=True)
class KernelInfo:
    symbol: str  # the kernel function's name in the source
    block_name: str  # the Stripe block it came from
    buffers: tuple[int, ...]  # root refs passed as arguments, in parameter order
    groups: int  # work-groups / CUDA blocks (>= 1)
    group_size: int  # work-items / threads per group (>= 1)
    mapping: str  # "naive" (one work-item per parallel point) or "tiled"
    shared_bytes: int = 0  # local / shared memory one group uses


@dataclass(frozen=True, slots=True)
class GpuStep:
    """One root statement in order: a kernel launch or a special run on the host."""

    kernel: KernelInfo | None = None
    special: Special | None = None


@dataclass(frozen=True, slots=True)
class GpuModule:
    source: str  # the whole OpenCL C / CUDA C translation unit
    buffers: tuple[BufferInfo, ...]  # every root refinement, in order
    steps: tuple[GpuStep, ...]
    uses_f64: bool = False
