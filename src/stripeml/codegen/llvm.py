"""Stripe -> LLVM IR for the CPU backend: the module and its metadata.

Each root-level kernel block becomes one function with the ABI of
:mod:`stripeml.codegen.cpu_abi`, emitted by :class:`.llvm_kernel.KernelEmitter`
(loop nests, refinements, aggregation; its docstring has the rules); root
``special`` statements stay with the runtime (``Step.special``).  The layout
of the code generator:

* :mod:`.plan`: the decisions it shares with the GPU generators;
* :mod:`.llvm_plan`: the CPU's own (thread split, vector index, register tiles);
* :mod:`.llvm_levels`: each body's LLVM pipeline and runtime-bound loops;
* :mod:`.llvm_builder`: the kernel's functions, values, memory and loops;
* :mod:`.llvm_kernel`: blocks, refinements and statements;
* :mod:`.llvm_tile`: register tiles;
* :mod:`.llvm_types`, :mod:`.llvm_ops`, :mod:`.llvm_math`: dtypes, scalar and
  vector intrinsics, the math library.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace

import llvmlite.ir as ir

from ..analysis.canonical import CanonicalKernel, canonical_kernel
from ..errors import StripeError
from ..ir.nodes import Block, Program, Special
from .cpu_abi import Body, CpuModule, KernelInfo, Step, root_buffers
from .llvm_kernel import KernelEmitter
from .llvm_levels import (
    O1_INNER_REDUCTION,
    O1_TILE_VECTORS,
    TINY_WORK,
    body_opt_level,
    generator_tiled,
    runtime_bounds,
)
from .llvm_text import module_text

__all__ = [
    "O1_INNER_REDUCTION",
    "O1_TILE_VECTORS",
    "TINY_WORK",
    "Known",
    "body_opt_level",
    "body_symbol",
    "generate",
    "generator_tiled",
    "release",
    "runtime_bounds",
]

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

    Each root kernel becomes a step that calls a body (``bodies``: an entry
    taking the kernel's own argument array, the kernel's code inlined in it),
    generated from the kernel's canonical form
    (:func:`stripeml.analysis.canonical.canonical_kernel`) and named after it,
    so kernels equal up to names share one body.  The step's
    :attr:`~.cpu_abi.KernelInfo.gather` says how the runtime fills that array
    from the program's buffers (:func:`step_gather`), so no per-step code is
    generated (``llvm_ir`` is empty): a module of one wrapper per step cost
    BERT-base 40 ms of LLVM per input shape.  A body ``known`` reports is not
    generated again (its ``llvm_ir`` is ``None``); ``on_body`` is told of each
    body as soon as it is generated (the runtime starts compiling it while the
    rest are).

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
    root = program.root
    slot = {r.into: i for i, r in enumerate(root.refs)}
    buffers = root_buffers(root)
    steps: list[Step] = []
    bodies: dict[str, Body] = {}
    bounded: dict[str, tuple[str, ...]] = {}  # body symbol -> its runtime-bound indices
    options = (triple, vector_width, fma, vector_registers, int8_dot)
    # the bodies that cost LLVM most (O3 kernels with nested blocks: loop nests
    # LLVM's vectorisers and unrollers work on) are generated as their kernels
    # come, the others (O1, and O3 leaves: one loop nest each) once every kernel
    # has its canonical form, so the costliest reach a helper process sooner
    # (BERT-base's attention nest, at 64 after 128: 32 -> 20 ms into the code
    # generator); then the steps, in statement order
    kernels: list[tuple[Block | Special, CanonicalKernel | None, str]] = []
    later: list[tuple[str, CanonicalKernel]] = []  # bodies to generate last
    made: dict[str, Body] = {}  # bodies known or generated (or linked to a twin)

    def make(symbol: str, canon: CanonicalKernel) -> Body:
        body = _body(canon, symbol, vector_width, triple, fma, vector_registers, int8_dot)
        twin = _same_code(body, options, made, known)
        if twin is not None:
            return twin
        if on_body is not None:
            on_body(body)
        return body

    for stmt in root.stmts:
        if isinstance(stmt, Special):
            kernels.append((stmt, None, ""))
        elif isinstance(stmt, Block):
            canon = canonical_kernel(root, stmt)
            symbol = body_symbol(canon.text)
            if symbol not in bounded:
                # the level and bounds are functions of the canonical kernel: once per body
                opt = body_opt_level(canon.kernel, vector_width)
                bounded[symbol] = runtime_bounds(canon.kernel, opt, vector_width)
                info = known(symbol) if known is not None else None
                if info is not None:
                    made[symbol] = Body(symbol, None, info, opt)
                elif opt >= 2 and canon.kernel.sub_blocks:
                    made[symbol] = make(symbol, canon)
                else:
                    later.append((symbol, canon))
            kernels.append((stmt, canon, symbol))
        else:
            raise StripeError(f"cpu: root statement {type(stmt).__name__} is not supported")
    for symbol, waiting in later:
        made[symbol] = make(symbol, waiting)
    for stmt, form, symbol in kernels:
        if form is None or not isinstance(stmt, Block):
            assert isinstance(stmt, Special)
            steps.append(Step(special=stmt))
            continue
        body = bodies.setdefault(symbol, made[symbol])  # in statement order, as before
        gather = step_gather(
            [slot[name] for name in form.buffers],
            form.offsets,
            [stmt.idx(name).range for name in bounded[symbol]],
        )
        steps.append(
            Step(kernel=replace(body.info, symbol=body.symbol, block_name=stmt.name, gather=gather))
        )
    linked: dict[str, Body] = {}  # one per symbol: the generated one where a twin shares it
    for body in bodies.values():
        if body.llvm_ir is not None or body.symbol not in linked:
            linked[body.symbol] = body
    return CpuModule("", buffers, tuple(steps), tuple(linked.values()))


def step_gather(
    slots: Sequence[int], offsets: Sequence[int], bounds: Sequence[int]
) -> tuple[int, ...]:
    """A kernel step's :attr:`.cpu_abi.KernelInfo.gather`: its body's argument
    array is ``buffers[slots[i]]`` plus ``offsets[i]`` bytes (the constant
    offsets its canonical form took out) for each buffer, then ``bounds``,
    the ranges of its runtime-bound indices (:func:`runtime_bounds`)."""
    pairs: list[int] = []
    for i, s in enumerate(slots):
        pairs += [s, offsets[i] if i < len(offsets) else 0]
    for n in bounds:
        pairs += [-1, int(n)]
    return tuple(pairs)


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


#: Bodies generated in this process, by their code: (SHA-256 of the body's LLVM
#: text with its symbol taken out, the code generator's options, the
#: optimisation level) -> the body's symbol.  At most :data:`SAME_CODE_ENTRIES`,
#: least recently used first out (about 200 bytes each).
_BY_CODE: OrderedDict[tuple[object, ...], str] = OrderedDict()
_BY_CODE_LOCK = threading.Lock()  # two threads may generate programs at once
SAME_CODE_ENTRIES = 4096


def _same_code(
    body: Body,
    options: tuple[object, ...],
    bodies: dict[str, Body],
    known: Known | None,
) -> Body | None:
    """A body compiled before (in this program or, as ``known`` says, in the
    cache) whose LLVM text is ``body``'s up to its symbol, as ``body`` but
    named after it and not to be compiled; else ``None`` (``body`` is noted
    as the one with that code).

    Two kernels whose canonical forms differ (in the range of a runtime-bound
    index, :func:`runtime_bounds`, or in a root buffer's sizes) may still have
    the same code: then the text generated for the new kernel is the old
    body's, the same function of the buffers and bounds it is called with, so
    the old body computes exactly what the new one would (the step's gather
    passes this kernel's own bounds).  Only the LLVM time is saved: the text is
    generated to be compared."""
    text = body.llvm_ir
    if text is None:
        return None
    digest = hashlib.sha256(text.replace(body.symbol, "").encode()).digest()
    key = (digest, body.opt, *options)
    with _BY_CODE_LOCK:
        symbol = _BY_CODE.get(key)
    if symbol is not None and symbol != body.symbol:
        if any(b.symbol == symbol and b.llvm_ir is not None for b in bodies.values()) or (
            known is not None and known(symbol) is not None
        ):
            with _BY_CODE_LOCK:
                if key in _BY_CODE:
                    _BY_CODE.move_to_end(key)
            return replace(body, symbol=symbol, llvm_ir=None)
    with _BY_CODE_LOCK:
        _BY_CODE[key] = body.symbol
        _BY_CODE.move_to_end(key)
        while len(_BY_CODE) > SAME_CODE_ENTRIES:
            _BY_CODE.popitem(last=False)
    return None


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
    opt = body_opt_level(canon.kernel, vector_width)
    bounds = runtime_bounds(canon.kernel, opt, vector_width)
    emitter = KernelEmitter(
        module,
        root,
        canon.kernel,
        symbol,
        vector_width,
        fma,
        body_only=True,
        vector_registers=vector_registers,
        int8_dot=int8_dot,
        bounds=bounds,
    )
    # At O1 a loop of one trip costs LLVM time and changes no code (ResNet-50's 74
    # bodies byte for byte the same, BERT-base's 13 but for one's register choice);
    # at O3 it changed what the unrollers did, so O3 bodies keep their loops, but
    # for the loops over whole register tiles of one taking runtime bounds (a
    # batch of 1: its index times a stride the sequence length sizes would
    # otherwise keep a second length from linking the body)
    emitter.no_one_trip_loops = opt == 1
    emitter.unroll_epilogues = opt == 1
    emitter.no_one_trip_top_loops = bool(bounds)
    info = emitter.run()
    text = module_text(module)  # str(module), sooner
    release(module)
    # "half" in text: a substring search, 100x sooner than the pattern on 1.3 MB of bodies
    if "half" in text and _HALF.search(text) and not _native_half(triple):
        raise StripeError("cpu: float16 needs the F16C conversions on x86 (this host lacks them)")
    return Body(symbol, text, info, opt)


_HALF = re.compile(r"[\s<(]half[\s>,)]")


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
