"""The contract between the CPU code generator and the CPU runtime.

The generator turns a Stripe program into LLVM: one body per distinct
root-level kernel (kernels equal up to names share one), each compiled in a
module of its own (:class:`Body`), plus this metadata.  Every kernel function
has the C signature::

    void kernel(void **args, int64_t start, int64_t end);

Without a ``gather`` (:attr:`KernelInfo.gather`), ``args`` is the program's
buffer table: ``args[i]`` is the base pointer of the i-th root refinement of
the program (``program.root.refs`` order: parameters, results and
program-level temporaries alike).  With one, the function is a body's entry
and ``args`` the step's own array, which the runtime fills from that table
before the call: entry ``j`` is ``table[gather[2j]] + gather[2j + 1]``
(a pointer moved by a constant number of bytes), or ``gather[2j + 1]`` itself
where ``gather[2j]`` is ``-1`` (a runtime bound, an ``int64``).  The kernel
runs the iterations ``start <= p < end`` of
its *parallel index* (``KernelInfo.parallel_extent`` iterations in all); when
``splittable`` is true, disjoint ranges may run concurrently on different
threads without races, otherwise the runtime must call it once with
``(0, parallel_extent)``.  Root-level ``special`` statements are not compiled:
the runtime executes them between kernels (``Step.special``).

Where ``buffers[i]`` points is the runtime's business, and the generated code
assumes only that buffers a kernel uses together do not overlap.  For a
program temporary (``BufferInfo.kind == "none"``) with a byte ``offset`` set by
the ``place`` pass, the runtime points into one arena per location at that
offset, so temporaries never live at the same root statement share memory;
the offsets come from the program (its root refinements, in ``buffers``
order), not from this metadata, which the kernel cache stores without them
(the cache key hashes the program text, offsets included).  Allocations
nested in kernels are stack slots of the generated code; their offsets are
ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.nodes import Block, Special


@dataclass(frozen=True, slots=True)
class KernelInfo:
    symbol: str  # the LLVM function name
    block_name: str  # the Stripe block it came from
    parallel_extent: int  # iterations of the split index (>= 1)
    splittable: bool  # disjoint [start, end) ranges may run concurrently
    work: int  # estimated scalar operations, to decide whether threads pay off
    grain: int = (
        1  # chunk bounds are multiples of this (the lanes, when the split index is vectorised)
    )
    # how the runtime fills the argument array (module docstring): (slot, add) pairs;
    # empty: the function takes the program's buffer table itself
    gather: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class BufferInfo:
    """One root refinement: a kernel parameter, a result or a program temporary."""

    name: str
    dtype: str  # Stripe dtype name
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    kind: str  # "in" | "out" | "none" (program temporary)


def root_buffers(root: Block) -> tuple[BufferInfo, ...]:
    """Every root refinement of the program whose root block is ``root``, in order."""
    return tuple(
        BufferInfo(r.into, r.shape.dtype, r.shape.sizes, r.shape.strides, r.dir) for r in root.refs
    )


@dataclass(frozen=True, slots=True)
class Step:
    """One root statement in order: a compiled kernel or a special."""

    kernel: KernelInfo | None = None
    special: Special | None = None


@dataclass(frozen=True, slots=True)
class Body:
    """The compiled function of one distinct kernel, ``symbol(args, start, end)``
    (``args`` filled by a step's gather), shared by every root kernel with the same canonical form
    (:mod:`stripeml.analysis.canonical`).  ``llvm_ir``: its module on its own, or ``None`` when
    the caller said it has this body compiled already.  ``info``: what the
    runtime needs to split it (its ``symbol`` is the body's).  ``opt``: the
    LLVM optimisation level it deserves (see :func:`.llvm.body_opt_level`)."""

    symbol: str
    llvm_ir: str | None
    info: KernelInfo
    opt: int = 3


@dataclass(frozen=True, slots=True)
class CpuModule:
    """The program's code: the steps call the ``bodies`` (one per distinct
    kernel, each compiled in its own module) through their gathers, and
    ``llvm_ir`` holds any other ABI function a step names (none from the code
    generator: a step without a gather names one here)."""

    llvm_ir: str
    buffers: tuple[BufferInfo, ...]
    steps: tuple[Step, ...]
    bodies: tuple[Body, ...] = ()

    def all_ir(self) -> str:
        """``llvm_ir``, then each body's generated here (what ``exe.code`` shows)."""
        parts = [self.llvm_ir] if self.llvm_ir else []
        return "\n".join([*parts, *(b.llvm_ir for b in self.bodies if b.llvm_ir)])
