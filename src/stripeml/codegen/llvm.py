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

import hashlib
import re
from collections.abc import Callable
from dataclasses import replace

import llvmlite.ir as ir

from ..analysis.canonical import CanonicalKernel, canonical_kernel
from ..errors import StripeError
from ..ir.nodes import Block, Program, Special
from .cpu_abi import Body, CpuModule, KernelInfo, Step, root_buffers
from .llvm_builder import entry_declaration, forwarder_text
from .llvm_kernel import KernelEmitter
from .plan import kernel_symbol

#: Finds a body compiled before: its symbol -> its info, or None (then it is generated).
Known = Callable[[str], KernelInfo | None]


def generate(
    program: Program,
    *,
    vector_width: int = 8,
    triple: str = "",
    fma: bool = False,
    known: Known | None = None,
    on_body: Callable[[Body], None] | None = None,
    vector_registers: int = 16,
    int8_dot: bool = False,
) -> CpuModule:
    """Generate the LLVM code and the metadata the CPU runtime needs.

    Each root kernel becomes a wrapper in the module ``llvm_ir`` (it gathers
    the kernel's buffer pointers into an array) and a body of its own
    (``bodies``: an entry taking that array, the kernel's code inlined in it), generated from the kernel's canonical form
    (:func:`stripeml.analysis.canonical.canonical_kernel`) and named after it, so kernels equal
    up to names share one body.  A body ``known`` reports is not generated
    again (its ``llvm_ir`` is ``None``); ``on_body`` is told of each body as soon
    as it is generated (the runtime starts compiling it while the rest are).

    ``vector_registers``: the ISA's, which bound a register tile's accumulators
    (:func:`.llvm_plan.max_tile_vectors`).

    ``fma``: float multiplies and the additions they feed carry LLVM's
    ``contract`` flag, so LLVM may fuse them into one FMA (one rounding instead
    of two; results may differ from the interpreter in the last bits).

    ``int8_dot``: a ``dot4`` added into an int32 accumulator of 4, 8 or 16 lanes
    is one ``vpdpbusd`` (x86 VNNI: exact, so no result changes).
    """
    if not triple:
        import llvmlite.binding as llvm

        triple = llvm.get_process_triple()
    name = (program.root.name or "stripeml").replace("\\", "").replace('"', "")
    glue = [f'; ModuleID = "{name}"\ntarget triple = "{triple}"\n\n']
    root = program.root
    slot = {r.into: i for i, r in enumerate(root.refs)}
    buffers = root_buffers(root)
    steps: list[Step] = []
    bodies: dict[str, Body] = {}
    declared: set[str] = set()
    for n, stmt in enumerate(root.stmts):
        if isinstance(stmt, Special):
            steps.append(Step(special=stmt))
        elif isinstance(stmt, Block):
            canon = canonical_kernel(root, stmt)
            symbol = body_symbol(canon.text)
            body = bodies.get(symbol)
            if body is None:
                info = known(symbol) if known is not None else None
                if info is not None:
                    body = Body(symbol, None, info, body_opt_level(stmt))
                else:
                    body = _body(
                        canon, symbol, vector_width, triple, fma, vector_registers, int8_dot
                    )
                    if on_body is not None:
                        on_body(body)
                bodies[symbol] = body
            if symbol not in declared:  # the body's entry: (its own pointer array, start, end)
                declared.add(symbol)
                glue.append(entry_declaration(symbol))
            wrapper = kernel_symbol(n, stmt)
            glue.append(
                forwarder_text(
                    wrapper, symbol, [slot[name] for name in canon.buffers], canon.offsets
                )
            )
            steps.append(Step(kernel=replace(body.info, symbol=wrapper, block_name=stmt.name)))
        else:
            raise StripeError(f"cpu: root statement {type(stmt).__name__} is not supported")
    text = "".join(glue)
    return CpuModule(text, buffers, tuple(steps), tuple(bodies.values()))


def release(module: ir.Module) -> None:
    """Unlink ``module``'s IR objects once its text is printed, so reference counting
    frees them now.  llvmlite's objects point back at their parents (an instruction
    at its block, a block at its function, a function and its arguments at each
    other and at the module), so without this every module becomes cyclic garbage,
    which Python's collector walks at the first collection after a compile
    (ResNet-50: 139 k objects, 48 ms of one collection, on top of the 2 s compile)."""
    functions = list(module.functions)
    for fn in functions:
        for block in fn.blocks:
            for ins in block.instructions:  # SSA cycles: a loop's phi and its update
                ins.operands = []
                if isinstance(ins, ir.PhiInstr):
                    ins.incomings.clear()
            block.instructions.clear()
            block.terminator = None
        fn.blocks.clear()
        fn.args = ()
        fn.return_value = None
    module.globals.clear()
    module.metadata.clear()  # metadata nodes point at the module
    module.namedmetadata.clear()
    cache = getattr(module, "_metadatacache", None)  # llvmlite's deduplication of metadata
    if isinstance(cache, dict):
        cache.clear()


def body_symbol(canonical_text: str) -> str:
    """The symbol of the body generated from a canonical kernel's text: a hash of
    it, so equal kernels (and only those) share a name."""
    return "sk_" + hashlib.sha256(canonical_text.encode()).hexdigest()[:32]


def body_opt_level(kernel: Block) -> int:
    """The LLVM pipeline a kernel's body gets: O3 (loop and SLP vectorisation,
    unrolling), except copies, which only move data and whose loops the code
    generator vectorises itself.  Measured (docs/performance.md, "Compile
    time"): copies at O1 ran no slower (ShuffleNet 0.97x), elementwise kernels
    at O1 did (SqueezeNet 1.10x, ResNet-50 1.02x), so they keep O3."""
    return 1 if "copy" in kernel.tags else 3


def _body(
    canon: CanonicalKernel,
    symbol: str,
    vector_width: int,
    triple: str,
    fma: bool,
    vector_registers: int = 16,
    int8_dot: bool = False,
) -> Body:
    module = ir.Module(name=symbol)
    module.triple = triple
    root = canon.program.root
    info = KernelEmitter(
        module,
        root,
        canon.kernel,
        symbol,
        vector_width,
        fma,
        body_only=True,
        vector_registers=vector_registers,
        int8_dot=int8_dot,
    ).run()
    text = str(module)
    release(module)
    if re.search(r"[\s<(]half[\s>,)]", text) and not _native_half(triple):
        raise StripeError("cpu: float16 needs the F16C conversions on x86 (this host lacks them)")
    return Body(symbol, text, info, body_opt_level(canon.kernel))


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
