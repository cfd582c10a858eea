"""Which LLVM pipeline each kernel body gets, and which of its loops run to a
bound given at run time instead of a constant (the CPU code generator,
:mod:`.llvm`).

Both are functions of the kernel and the vector width alone, so a body's code
does not depend on which program or process compiled it first; docs/
performance.md ("Compile time") and docs/cpu-backend.md ("New input shapes")
have the measurements behind each rule.
"""

from __future__ import annotations

from ..ir.nodes import Block, Intrinsic, Load, Refinement, Store, walk_blocks, work_estimate
from .llvm_math import MATH_FUNCTIONS
from .llvm_plan import TILE_REDUCTION_UNROLL, parallel_index
from .llvm_tile import reduction_unroll
from .llvm_transpose import MIN_SIDE


def runtime_bounds(kernel: Block, opt: int, vector_width: int = 16) -> tuple[str, ...]:
    """The indices of root kernel ``kernel`` whose loops run to a bound its
    body takes at run time instead of their range as a constant (the step's
    gather passes the range): in a body compiled at O1 (``opt``, :func:`body_opt_level`),
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
    leaf kernel takes a runtime bound on its thread-split index
    (:func:`_split_rows`) and, when it is element-wise with an innermost loop
    over vectors, on its outer loops (:func:`_outer_loops`)."""
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
            rows = _split_rows(kernel)
            outer = _outer_loops(kernel, vector_width)
            return tuple(i.name for i in kernel.idxs if i.name in rows or i.name in outer)
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


def _outer_loops(kernel: Block, vector_width: int) -> set[str]:
    """The runtime-bound outer loops of an O3 element-wise leaf kernel
    (:func:`runtime_bounds`): every index of range 2 or more but the innermost,
    when the kernel is in vector lanes (``vector``), reduces over nothing, and
    its innermost loop runs over a unit-stride dimension of at least two
    vectors, so that it stays a loop.  LLVM unrolled an outer loop of a
    constant 14 trips around such a loop in full (DenseNet-121's batch norm
    and ReLU over 14 x 14 pixels and 320-992 channels: 14 copies of the
    channel loop, 80-90 ms of LLVM a body instead of 11-12 ms at 28 x 28),
    which copies loops and gains nothing: no load or accumulator is shared
    between the copies of an element-wise loop.  Its innermost loop keeps its
    constant (the one LLVM's vectorisers and unrollers work on)."""
    if kernel.sub_blocks or "vector" not in kernel.tags:
        return set()
    loops = [i for i in kernel.idxs if i.range >= 2]
    outs = [r for r in kernel.refs if r.dir == "out"]
    if len(loops) < 2 or not outs or any(r.agg not in ("", "assign") for r in outs):
        return set()
    written = {n for r in outs for a in r.access for n, c in a.terms if c != 0}
    if any(i.name not in written for i in loops):
        return set()  # a reduction
    inner = loops[-1]
    if inner.range < 2 * vector_width or not any(inner.name in _unit_stride(r) for r in outs):
        return set()
    return {i.name for i in loops[:-1] if i.affine is None}


def body_opt_level(kernel: Block, vector_width: int = 16) -> int:
    """The LLVM pipeline a kernel's body gets (docs/performance.md, "Compile time"):

    * O1 for *glue* (``copy`` and ``fill`` kernels: they only move or set data,
      in loops the code generator vectorises itself) and for kernels the code
      generator tiled itself (:func:`generator_tiled`: every innermost block a
      register tile of at least :data:`O1_TILE_VECTORS` accumulator vectors
      over an innermost reduction of at least :data:`O1_INNER_REDUCTION`
      steps or a shorter one the code generator unrolls by four, or an
      epilogue, in vector lanes, no math-library call), where O3 found nothing
      more to do (ResNet-50's tiled convolutions 0.98-1.01x the time at O1,
      BERT-base's plain matmuls 1.00x, for 0.6x the compile time), and for
      the transforms of Winograd convolutions (``winograd``: straight-line sums
      of 16 loads in vector lanes, where O3's unrolling cost ~90 ms per body),
      and for *tiny* kernels, of at most :data:`TINY_WORK` scalar operations
      (:func:`~stripeml.ir.nodes.work_estimate`: a transformer's per-row scalars of a
      normalisation, its mask's conversion; about a microsecond a call, where
      O3 cost 10-25 ms of LLVM each and O1 5-7);
    * O3, with loop and SLP vectorisation and unrolling, for the rest: scalar
      reductions, element-wise kernels (at O1 SqueezeNet ran 1.10x the time),
      BERT-base's matmul with a GELU epilogue (2.0x at O1), tiles of fewer
      than :data:`O1_TILE_VECTORS` vectors (a classifier's matrix-vector
      product: 1.3x at O1 on one thread) or over another short reduction
      (ShuffleNet's depthwise convolutions and pooling: 1.15-4x at O1), where
      LLVM's unrolling pays;
    * O2 for attention's ``nest`` (:func:`_attention`): as fast as at O3, for a
      third of LLVM's time, which a second sequence length waits for;
    * O0 for a kernel tagged ``once`` (the weight transform of a Winograd
      convolution whose weights are constant): it reads constants only, so
      it runs once (:mod:`stripeml.analysis.constness`), under a millisecond
      even at O0, where O1 cost the light ResNet-50 about 60 ms of LLVM for its
      three bodies (O0 about 10);
    * O0 for a Winograd transform of at most :data:`WINOGRAD_O0_WORK`
      operations: the cut last block row, column and corner of an image
      whose sides F(4 x 4)'s blocks do not divide (SqueezeNet's 55, 27 and
      13), and the transforms of small images.  Each such body cost 20-30 ms
      of LLVM at O1 and 5-10 at O0 for a kernel of a few microseconds: the
      light SqueezeNet's cold compile 1.77-1.89 -> 1.61-1.65 s, Inception v1's
      3.92-4.13 -> 3.69-3.95 s, their steady states the same (2026-12-07,
      docs/performance.md).  Up to 2^18 the steady state lost 4-7%
      (SqueezeNet's 13 x 13 images: their whole-block input transforms too).

    A function of the kernel and the vector width alone, so a body's code does
    not depend on which program or process compiled it first.
    """
    if "copy" in kernel.tags or "fill" in kernel.tags or generator_tiled(kernel, vector_width):
        return 1
    if _scalar_copy(kernel, vector_width):
        return 1
    if "once" in kernel.tags:
        return 0  # reads constants only: run once (constant weights' Winograd transform)
    work = work_estimate(kernel)
    if "winograd" in kernel.tags:  # straight-line sums, in vector lanes already
        return 0 if work <= WINOGRAD_O0_WORK else 1
    if work <= TINY_WORK:  # a microsecond of work: O3 cannot pay back
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
#: A Winograd transform (``winograd``'s input and output transforms) of at most
#: this many scalar operations gets O0, not O1 (:func:`body_opt_level`).
WINOGRAD_O0_WORK = 1 << 16
#: A register tile compiled at O1 keeps at least this many vectors of accumulators ...
O1_TILE_VECTORS = 4
#: ... and its innermost reduction runs at least this many steps, or fewer that
#: the code generator unrolls four at a time itself (:func:`.llvm_tile.reduction_unroll`).
O1_INNER_REDUCTION = 64


def generator_tiled(kernel: Block, vector_width: int = 16, *, math: bool = False) -> bool:
    """Whether every innermost block of ``kernel`` is a ``register_tile`` (of at
    least :data:`O1_TILE_VECTORS` vectors of ``vector_width`` lanes, over an
    innermost reduction :func:`_large_tile` accepts) or an ``epilogue``, both
    put in vector lanes by the ``vectorize`` pass, calling no function of the
    math library (:data:`.llvm_math.MATH_FUNCTIONS`; with
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
    vectors over an innermost reduction of at least :data:`O1_INNER_REDUCTION`
    steps, or of fewer that the code generator unrolls four steps at a time
    itself (:func:`.llvm_tile.reduction_unroll`: a multiple of 4 of at least
    8, MobileNetV2's 16 channels, SqueezeNet's Winograd products).  Other
    short reductions (a depthwise convolution's or a pooling's 3 x 3 window,
    a first convolution's 3 channels, ShuffleNet's groups of 34) stay O3,
    where LLVM unrolls them: in processes of their own, ShuffleNet's depthwise
    convolutions and pooling ran 1.15-4x the time at O1, its grouped 1 x 1
    convolutions over 34 channels (unrolled in twos) 1.07-1.10x
    (docs/performance.md, "O1 for large register tiles over short
    reductions too")."""
    out = [r for r in tile.refs if r.agg not in ("", "assign")]
    if len(out) != 1:
        return False
    kept = {n for a in out[0].access for n in a.names}
    elements = 1
    for idx in tile.idxs:
        if idx.name in kept:
            elements *= idx.range
    reduction = [idx for idx in tile.idxs if idx.name not in kept]
    if elements < O1_TILE_VECTORS * max(1, vector_width) or not reduction:
        return False
    if reduction[-1].range >= O1_INNER_REDUCTION:
        return True
    return reduction_unroll(tile, [idx.name for idx in reduction]) == TILE_REDUCTION_UNROLL
