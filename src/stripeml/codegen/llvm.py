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
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace

import llvmlite.ir as ir

from ..analysis.canonical import CanonicalKernel, canonical_kernel
from ..errors import StripeError
from ..ir.nodes import (
    Block,
    Intrinsic,
    Load,
    Program,
    Refinement,
    Special,
    Store,
    walk_blocks,
    work_estimate,
)
from .cpu_abi import Body, CpuModule, KernelInfo, Step, root_buffers
from .llvm_builder import entry_declaration, forwarder_text
from .llvm_kernel import KernelEmitter
from .llvm_math import MATH_FUNCTIONS
from .llvm_plan import parallel_index
from .llvm_text import module_text
from .llvm_transpose import MIN_SIDE
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
    bounded: dict[str, tuple[str, ...]] = {}  # body symbol -> its runtime-bound indices
    options = (triple, vector_width, fma, vector_registers, int8_dot)
    # the bodies that cost LLVM most (O3 kernels with nested blocks: loop nests
    # LLVM's vectorisers and unrollers work on) are generated as their kernels
    # come, the others (O1, and O3 leaves: one loop nest each) once every kernel
    # has its canonical form, so the costliest reach a helper process sooner
    # (BERT-base's attention nest, at 64 after 128: 32 -> 20 ms into the code
    # generator); then the glue, in statement order
    kernels: list[tuple[int, Block | Special, CanonicalKernel | None, str]] = []
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

    for n, stmt in enumerate(root.stmts):
        if isinstance(stmt, Special):
            kernels.append((n, stmt, None, ""))
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
            kernels.append((n, stmt, canon, symbol))
        else:
            raise StripeError(f"cpu: root statement {type(stmt).__name__} is not supported")
    for symbol, waiting in later:
        made[symbol] = make(symbol, waiting)
    for n, stmt, form, symbol in kernels:
        if form is None or not isinstance(stmt, Block):
            assert isinstance(stmt, Special)
            steps.append(Step(special=stmt))
            continue
        body = bodies.setdefault(symbol, made[symbol])  # in statement order, as before
        bounds = bounded[symbol]
        if body.symbol not in declared:  # the body's entry: (its own pointer array, start, end)
            declared.add(body.symbol)
            glue.append(entry_declaration(body.symbol, len(bounds)))
        wrapper = kernel_symbol(n, stmt)
        glue.append(
            forwarder_text(
                wrapper,
                body.symbol,
                [slot[name] for name in form.buffers],
                form.offsets,
                [stmt.idx(name).range for name in bounds],
            )
        )
        steps.append(Step(kernel=replace(body.info, symbol=wrapper, block_name=stmt.name)))
    linked: dict[str, Body] = {}  # one per symbol: the generated one where a twin shares it
    for body in bodies.values():
        if body.llvm_ir is not None or body.symbol not in linked:
            linked[body.symbol] = body
    text = "".join(glue)
    return CpuModule(text, buffers, tuple(steps), tuple(linked.values()))


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


def runtime_bounds(kernel: Block, opt: int, vector_width: int = 16) -> tuple[str, ...]:
    """The indices of root kernel ``kernel`` whose loops run to a bound its
    body takes at run time instead of their range as a constant (the wrapper
    passes the range): in a body compiled at O1 (``opt``, :func:`body_opt_level`),
    every index of the kernel's own block with no affine and a range of at
    least 2, except, in a kernel with no nested block, the indices that move a
    view's unit-stride last dimension: its innermost loop may run in vector
    lanes, whose scalar tail loop LLVM deletes for a constant range that the
    lanes divide (with those bounds too, BERT-base's O1 bodies took 18% more
    of LLVM's time), but for the thread-split index, whose loop runs between
    bounds the caller passes anyway.  A body's code then often does not depend on those ranges (a
    matmul's loop over row tiles: a second sequence length of a transformer),
    and kernels whose code is the same share one body (:func:`_same_code`).
    At O1 LLVM neither unrolls nor vectorises loops, so a constant trip count
    gave it nothing to use.  O3 bodies keep their constants, except a kernel the
    code generator tiled itself but for a call of the math library in an
    epilogue (:func:`generator_tiled` with ``math``: BERT-base's matmul with its
    GELU ``erf``, O3 for the epilogue's sake): its own block's indices are
    loops over whole register tiles, which LLVM's vectorisers and unrollers
    leave alone (they work on the innermost loops, whose ranges stay
    constants); a second sequence length then links the first's body.  An O3
    leaf kernel takes a runtime bound on its thread-split index only
    (:func:`_split_rows`)."""
    if opt != 1:
        tiled_but_math = (
            opt == 3
            and bool(kernel.sub_blocks)
            and generator_tiled(kernel, vector_width, math=True)
            and not generator_tiled(kernel, vector_width)
        )
        if tiled_but_math:
            return tuple(i.name for i in kernel.idxs if i.affine is None and i.range >= 2)
        if opt == 3 and not kernel.sub_blocks:
            return _split_rows(kernel)
        return ()
    lanes: set[str] = set()
    if not kernel.sub_blocks:  # a leaf: its innermost loop may run in vector lanes
        for r in kernel.refs:
            lanes |= _unit_stride(r)
        # but the thread-split index's loop runs from the caller's start to its
        # end: its scalar tail stays whatever the range (a mask's conversion)
        lanes.discard(parallel_index(kernel) or "")
    return tuple(
        i.name for i in kernel.idxs if i.affine is None and i.range >= 2 and i.name not in lanes
    )


def _split_rows(kernel: Block) -> tuple[str, ...]:
    """The runtime-bound index of an O3 leaf kernel (:func:`runtime_bounds`): its
    thread-split index (:func:`.llvm_plan.parallel_index`), when it moves no
    unit-stride dimension of a view it reads (so it is not the loop LLVM's
    vectorisers work on) and another index of range 2 or more does: that
    loop runs from ``max(0, start)`` to ``min(range, end)``, bounds the
    caller passes anyway, so LLVM knew only an upper bound of its trip count
    (the innermost loops keep their constants); the range as a runtime value
    takes the sequence length out of a transformer's row-wise kernels (a
    layer norm's mean, variance and scaling over rows of 768: a third
    sequence length links the second's)."""
    par = parallel_index(kernel)
    if par is None:
        return ()
    idx = kernel.idx(par)
    if idx.affine is not None or idx.range < 2:
        return ()
    ranges = {i.name: i.range for i in kernel.idxs}
    inner = False
    for r in kernel.refs:
        if r.dir == "in" and r.access and r.shape.strides and r.shape.strides[-1] == 1:
            names = {n for n, c in r.access[-1].terms if c != 0}
            if par in names:
                return ()
            inner = inner or any(ranges.get(n, 0) >= 2 for n in names)
    return (par,) if inner else ()


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
    the old body computes exactly what the new one would (the wrapper passes
    this kernel's own bounds).  Only the LLVM time is saved: the text is
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


def body_opt_level(kernel: Block, vector_width: int = 16) -> int:
    """The LLVM pipeline a kernel's body gets (docs/performance.md, "Compile time"):

    * O1 for *glue* (``copy`` and ``fill`` kernels: they only move or set data,
      in loops the code generator vectorises itself) and for kernels the code
      generator tiled itself (:func:`generator_tiled`: every innermost block a
      register tile of at least :data:`O1_TILE_VECTORS` accumulator vectors
      over an innermost reduction of at least :data:`O1_INNER_REDUCTION`, or
      an epilogue, in vector lanes, no math-library call), where O3 found
      nothing more to do (ResNet-50's tiled convolutions 0.98-1.01x the time at
      O1, BERT-base's plain matmuls 1.00x, for 0.6x the compile time), and for
      the transforms of Winograd convolutions (``winograd``: straight-line sums
      of 16 loads in vector lanes, where O3's unrolling cost ~90 ms per body),
      and for *tiny* kernels, of at most :data:`TINY_WORK` scalar operations
      (:func:`~stripeml.ir.nodes.work_estimate`: a transformer's per-row scalars of a
      normalisation, its mask's conversion; about a microsecond a call, where
      O3 cost 10-25 ms of LLVM each and O1 5-7);
    * O3, with loop and SLP vectorisation and unrolling, for the rest: scalar
      reductions, element-wise kernels (at O1 SqueezeNet ran 1.10x the time),
      BERT-base's matmul with a GELU epilogue (2.0x at O1), tiles of one or two
      vectors or over a short reduction (SqueezeNet's pooling and first
      convolution: 1.07-1.5x at O1; MobileNetV2's 1x1 convolution of 16
      channels 1.37x), where LLVM's unrolling pays;
    * O2 for attention's ``nest`` (:func:`_attention`): as fast as at O3, for a
      third of LLVM's time, which a second sequence length waits for;
    * O0 for a kernel tagged ``once`` (the weight transform of a Winograd
      convolution whose weights are constant): it reads constants only, so
      it runs once (:mod:`stripeml.analysis.constness`), under a millisecond
      even at O0, where O1 cost the light ResNet-50 about 60 ms of LLVM for its
      three bodies (O0 about 10).

    A function of the kernel and the vector width alone, so a body's code does
    not depend on which program or process compiled it first.
    """
    if "copy" in kernel.tags or "fill" in kernel.tags or generator_tiled(kernel, vector_width):
        return 1
    if _scalar_copy(kernel, vector_width):
        return 1
    if "once" in kernel.tags:
        return 0  # reads constants only: run once (constant weights' Winograd transform)
    if work_estimate(kernel) <= TINY_WORK:  # a microsecond of work: O3 cannot pay back
        return 1
    if "winograd" in kernel.tags:  # straight-line sums, in vector lanes already
        return 1
    if "nest" in kernel.tags and _attention(kernel):
        return 2
    return 3


def _scalar_copy(kernel: Block, vector_width: int) -> bool:
    """A leaf kernel that stores what it loads, element for element (an ONNX
    ``Transpose``), which the code generator runs one element at a time: no
    index moves both views in unit stride (no vector lanes), the indices that
    move each in unit stride do not both have ranges that
    :data:`.llvm_transpose.MIN_SIDE` divides (no transposing tiles of
    shuffles), and the destination's runs a vector's width or more (where
    LLVM's O3 vectorises over it with gathers).  Glue: O3 spent 0.34 s of LLVM
    on each of the two bodies of Inception-v1's four 27 x 27 x 192 transposes,
    for no faster a model; ShuffleNet's channel shuffles (a destination run of
    4) ran 4% slower at O1, and keep O3."""
    if kernel.sub_blocks or len(kernel.stmts) != 2:
        return False
    ld, st = kernel.stmts
    if not (isinstance(ld, Load) and isinstance(st, Store) and st.value == ld.into):
        return False
    src, dst = kernel.ref(ld.ref), kernel.ref(st.ref)
    if dst.agg not in ("", "assign"):
        return False
    ranges = {i.name: i.range for i in kernel.idxs}
    unit_src = {n for n in _unit_stride(src) if ranges.get(n, 0) >= 2}
    unit_dst = {n for n in _unit_stride(dst) if ranges.get(n, 0) >= 2}
    if unit_src & unit_dst or not any(ranges[a] >= vector_width for a in unit_dst):
        return False  # in vector lanes, or a short destination run
    return not any(
        ranges.get(a, 0) % MIN_SIDE == 0 and ranges.get(b, 0) % MIN_SIDE == 0
        for a in unit_dst
        for b in unit_src
    )


def _unit_stride(ref: Refinement) -> set[str]:
    """The indices that move ``ref``'s element by one (its last dimension, of stride 1)."""
    if not ref.access or not ref.shape.strides or ref.shape.strides[-1] != 1:
        return set()
    return {n for n, c in ref.access[-1].terms if c == 1}


def _attention(kernel: Block) -> bool:
    """Whether a ``nest`` kernel holds a contraction and an ``exp``: attention's
    scores, softmax and product with the values, the costliest body LLVM
    compiles in a transformer (BERT-base's: 0.24 s at O3, 0.085 s at O2, and
    as fast either way; other nests, of convolutions, ran up to 3% slower at
    O2)."""
    contraction = exp = False
    for blk in walk_blocks(kernel):
        contraction = contraction or "contraction" in blk.tags
        exp = exp or any(isinstance(s, Intrinsic) and s.op == "exp" for s in blk.stmts)
        if contraction and exp:
            return True
    return False


#: Kernels of at most this many scalar operations (points times statements) are
#: compiled at O1 (:func:`body_opt_level`).
TINY_WORK = 4096
#: A register tile compiled at O1 keeps at least this many vectors of accumulators ...
O1_TILE_VECTORS = 4
#: ... and its innermost reduction index runs at least this many steps.
O1_INNER_REDUCTION = 64


def generator_tiled(kernel: Block, vector_width: int = 16, *, math: bool = False) -> bool:
    """Whether every innermost block of ``kernel`` is a ``register_tile`` (of at
    least :data:`O1_TILE_VECTORS` vectors of ``vector_width`` lanes, over an
    innermost reduction of at least :data:`O1_INNER_REDUCTION` steps) or an
    ``epilogue``, both put in vector lanes by the ``vectorize`` pass, calling
    no function of the math library (:data:`.llvm_math.MATH_FUNCTIONS`; with
    ``math``, calls are allowed): code LLVM's vectorisers, unrollers and
    inliner have nothing left to do with (but the calls)."""
    if "tiled" not in kernel.tags and "nest" not in kernel.tags:
        return False
    stack = list(kernel.sub_blocks)
    if not stack:
        return False
    while stack:
        blk = stack.pop()
        subs = blk.sub_blocks
        if subs:
            stack.extend(subs)
        elif "vector" not in blk.tags or blk.tags.isdisjoint(("register_tile", "epilogue")):
            return False
        elif not math and any(
            isinstance(st, Intrinsic) and st.op in MATH_FUNCTIONS for st in blk.stmts
        ):
            return False  # BERT's GELU epilogue (erf) ran its matmul 2.0x slower at O1
        elif "register_tile" in blk.tags and not _large_tile(blk, vector_width):
            return False
    return True


def _large_tile(tile: Block, vector_width: int) -> bool:
    """Whether register tile ``tile`` accumulates at least :data:`O1_TILE_VECTORS`
    vectors over an innermost reduction of at least :data:`O1_INNER_REDUCTION`."""
    out = [r for r in tile.refs if r.agg not in ("", "assign")]
    if len(out) != 1:
        return False
    kept = {n for a in out[0].access for n in a.names}
    elements = 1
    for idx in tile.idxs:
        if idx.name in kept:
            elements *= idx.range
    reduction = [idx for idx in tile.idxs if idx.name not in kept]
    return (
        elements >= O1_TILE_VECTORS * max(1, vector_width)
        and bool(reduction)
        and reduction[-1].range >= O1_INNER_REDUCTION
    )


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
