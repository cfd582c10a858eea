"""Stripe -> LLVM IR for the CPU backend: the module and its metadata.

Each root-level kernel block becomes one function with the ABI of
:mod:`stripeml.codegen.cpu_abi`, emitted by :class:`.llvm_kernel.KernelEmitter`
(loop nests, refinements, aggregation; its docstring has the rules); root
``special`` statements stay with the runtime (``Step.special``).  The layout
of the code generator:

* :mod:`.plan`: the decisions it shares with the GPU generators;
* :mod:`.llvm_plan`: the CPU's own (thread split, vector index, register tiles);
* :mod:`.llvm_builder`: the kernel's functions, values, memory and loops;
* :mod:`.llvm_kernel`: blocks, refinements and statements;
* :mod:`.llvm_tile`: register tiles;
* :mod:`.llvm_types`, :mod:`.llvm_ops`, :mod:`.llvm_math`: dtypes, scalar and
  vector intrinsics, the math library.
"""

from __future__ import annotations

import re

import llvmlite.ir as ir

from ..analysis.constness import constness
from ..errors import StripeError
from ..ir.nodes import Block, Load, Program, Special, Statement, Store
from .cpu_abi import CpuModule, HostCopy, Step, root_buffers
from .llvm_kernel import KernelEmitter
from .plan import kernel_symbol


def generate(
    program: Program, *, vector_width: int = 8, triple: str = "", fma: bool = False
) -> CpuModule:
    """Generate the LLVM module and the metadata the CPU runtime needs.

    ``fma``: float multiplies and the additions they feed carry LLVM's
    ``contract`` flag, so LLVM may fuse them into one FMA (one rounding instead
    of two; results may differ from the interpreter in the last bits).
    """
    module = ir.Module(name=program.root.name or "stripeml")
    if not triple:
        import llvmlite.binding as llvm

        triple = llvm.get_process_triple()
    module.triple = triple
    root = program.root
    buffers = root_buffers(root)
    constant = constness(program).statements
    steps: list[Step] = []
    for n, stmt in enumerate(root.stmts):
        copy = host_copy(root, stmt) if n in constant else None
        if isinstance(stmt, Special):
            steps.append(Step(special=stmt))
        elif copy is not None:
            steps.append(Step(copy=copy))
        elif isinstance(stmt, Block):
            symbol = kernel_symbol(n, stmt)
            info = KernelEmitter(module, root, stmt, symbol, vector_width, fma).run()
            steps.append(Step(kernel=info))
        else:
            raise StripeError(f"cpu: root statement {type(stmt).__name__} is not supported")
    text = str(module)
    if re.search(r"[\s<(]half[\s>,)]", text) and not _native_half(triple):
        raise StripeError("cpu: float16 needs the F16C conversions on x86 (this host lacks them)")
    return CpuModule(text, buffers, tuple(steps))


def host_copy(root: Block, k: Statement) -> HostCopy | None:
    """``k`` as a strided copy when it is a leaf kernel over a box that loads one
    element of one root buffer and stores it unchanged into another, with
    non-negative index coefficients; else ``None``.

    Only constant kernels are handed to the runtime so (they run once, so
    machine code for them would cost more to make than it saves).
    """
    if not isinstance(k, Block) or k.constraints or k.sub_blocks:
        return None
    if any(i.affine is not None or i.range < 1 for i in k.idxs) or len(k.refs) != 2:
        return None
    src = next((r for r in k.refs if r.dir == "in"), None)
    dst = next((r for r in k.refs if r.dir == "out" and r.agg == "assign"), None)
    if src is None or dst is None or src.shape.dtype != dst.shape.dtype:
        return None
    if len(k.stmts) != 2:
        return None
    load, store = k.stmts
    if not (isinstance(load, Load) and isinstance(store, Store)):
        return None
    if load.ref != src.into or store.ref != dst.into or store.value != load.into:
        return None
    names = [i.name for i in k.idxs]
    parts = []
    for view in (src, dst):
        if view.shape.elem_count != 1:
            return None
        strides = root.ref(view.from_).shape.strides
        offset = sum(a.const * st for a, st in zip(view.access, strides))
        steps = [sum(a.coeff(n) * st for a, st in zip(view.access, strides)) for n in names]
        if offset < 0 or any(s < 0 for s in steps):
            return None
        parts.append((view.from_, offset, tuple(steps)))
    (s_name, s_off, s_st), (d_name, d_off, d_st) = parts
    ranges = tuple(i.range for i in k.idxs)
    return HostCopy(k.name, s_name, d_name, ranges, s_off, s_st, d_off, d_st)


def _native_half(triple: str) -> bool:
    """Whether LLVM converts half <-> float inline for ``triple``: on x86 only with
    F16C (else it calls compiler-rt helpers the JIT cannot resolve)."""
    if not triple.startswith(("x86_64", "i386", "i686")):
        return True
    import llvmlite.binding as llvm

    if triple != llvm.get_process_triple():
        return True  # not the host: the caller chooses the features
    try:
        return bool(llvm.get_host_cpu_features().get("f16c", False))
    except RuntimeError:
        return False
