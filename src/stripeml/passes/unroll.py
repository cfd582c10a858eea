"""``unroll``: register tiles for GEMM-like kernels.

A selected root kernel (a leaf ``#contraction`` whose only output is one
aggregating single-element view, without index offsets) is split into an
outer block over register tiles and an inner block over the points of one
tile and the whole reduction::

    block [m:64, n:96, k:128] (in A[m, k], in B[k, n], out C[m, n]:add)
  becomes
    block [m:16, n:6] #kernel #contraction #tiled (in A[4*m, 0] (4, 128),
          in B[0, 16*n] (128, 16), out C[4*m, 16*n]:add (4, 16))
      block [m_r:4, n_r:16, k:128] #register_tile (in A[m_r, k], in B[k, n_r],
            out C[m_r, n_r]:add) { ... }

The vector index (``n``: unit stride in the output and read with stride 0 or 1
by every input) takes ``vector_width * vectors`` points, the row index
(``m``, another output index) ``rows``; the CPU code generator keeps such a
tile's ``rows * vectors`` accumulators in vector registers across the
reduction loop (see codegen/llvm.py, ``register_tile``).  Output indices used
in constraints are not tiled (their constraints move to the inner block, where
they bound the reduction loops).  The vector index's range must be a multiple
of the vector tile, else the kernel is left alone.

Row indices are output indices that the inputs read along the vector index do
not depend on (a blocked weight layout's block index ``cb`` of ``W[cb, .., c]``
selects panels instead, and goes outermost); the innermost one whose range is
a multiple of ``rows`` is taken (adjacent pixels: contiguous broadcasts).

2-D tiles: when no row candidate's range is a multiple of ``rows`` but two
take a factor each (``rows = r1 * r2``), the tile is ``r1`` points of the
innermost times ``r2`` of another: 2 x 2 pixels of a 14x14 image, with the
full ``rows * vectors`` accumulators (3x3 conv 14x14x256 -> 256, one thread
of a 2-core znver3: 92 GFLOP/s against 72 with 7 x 8 tiles).

Taller tiles: when no row candidate's range is a multiple of ``rows`` but one
has a divisor ``d`` with ``rows < d <= max_rows``, the kernel is tiled whole with
``d``-row tiles of ``min(vectors, max_vectors // d)`` vectors: the 7 rows of a 7x7 or
14x14 image in one kernel that packs and reads its weights once (ResNet-50 4%
faster than with the split below, measured A/B in one process).

Short rows: when every row candidate's range is at most ``rows`` and some are
shorter (2-5 points: a 3 x 3 convolution's weight gradient, whose output
pixels are its taps), the longest short one is the tile's rows, whole, with
the vectors the accumulators allow: the conv1 weight gradient of
``bench_torch.py``'s small CNN (8 x 32 x 32 x 3 -> 16) ran 85-114 us against
191-221 us as one-row tiles (three alternating processes each).  No model of
``bench/models.py``'s inference set has such a kernel: their optimised
programs are unchanged.

Ragged rows: when no row candidate's range is a multiple of ``rows`` but one's
range R exceeds it, the kernel is split into two root kernels over disjoint
rows: ``[0, R - R % rows)`` tiled with ``rows``, and the last ``R % rows``
rows (accesses shifted by the start) tiled with ``rows = R % rows``, as many
vectors as ``max_vectors`` allows and no packing (each panel meets one such
tile, so a packed copy is never reused); when another row index has more
than ``rows`` points (the last column of a 13x13 image), the rest is tiled
along it like any kernel instead, so each panel is read once and not once
per point of that index.  When the head laid its constant weights out in
panels, the rest tiles its vectors to that width and reads those panels (in
cache) rather than the plain weights no other kernel reads.  Each part is its own aggregation
scope over disjoint output elements (``epilogue`` later attaches a following
elementwise kernel to both parts or to neither).  The remainder part makes a
second pass over the inputs read along the vector index (memory-bound: ~0.4 ms
for 2 rows of a 1024x1024 W on a 2-core znver3).

Packing: an input read along the vector index through a strided panel of at
most ``pack_max_bytes`` is copied per panel into a dense ``none`` buffer
(``#copy #cache_in``), so the register tile never walks a long row stride
(0 turns packing off); not when the tile has no row index and every row
candidate has one point (a matrix-vector product: each panel meets one
tile, so a packed copy is written and read once).  With a single panel the panel and tile levels merge,
so the tile rows stay the kernel's own (parallel) indices.  ``row_blocks``
and ``k_block`` (both off by default) split the row index into outer blocks
and the reduction into blocks (see docs/passes.md section 11).

Transposed operands: when no index is unit-stride in every input but one is
in the output and each input reads it at stride 0 or 1 or through exactly
one dimension (``A @ B.T``: attention's scores read the keys across the
vector index), that index is taken and the inputs read across it are packed
per panel whatever ``pack_max_bytes`` says, dense with its dimension
innermost, so the tile reads whole vectors; such a kernel needs at least two
panels and more than one row (else nothing packs it), and a ragged split's
rest keeps packing.

Panel rows (``panel_rows``, on): a vector index that is one panel of a wider
dimension (``32 * j_b + j_c``: attention's keys as ``nest`` lays them out) and
narrower than the tile's vectors gives the tile the rows its accumulators allow
that divide the row range (8 x 2 vectors of 16, not 4 x 2); a vector index
narrow because the data is (16 output channels) keeps the rows.

Left alone: kernels with nested blocks, index offsets or allocations,
several outputs or an ``assign`` output, no reduction index, no vector
index (unit stride in the output, stride 0 or 1 in every input, not in a
constraint), or a vector range below one vector.

Ragged vectors: a vector range ``R`` that whole vectors do not divide, of at
most ``mixed_vectors`` registers (24 channels in 16 lanes), is one tile as
wide as ``R``, the code generator's registers whole vectors and a narrower
one (a mixed tile, rows of at most 8).  A wider one (1000 output channels) is
split into two root kernels, like ragged rows: ``[0, R - R % w)`` tiled as
above, and the last ``R % w`` points with the widest power-of-two lanes (at
least 4) dividing them, all its vectors in one tile (12 points: 3 vectors of
4 lanes), no packing; a narrower rest stays untiled (``vectorize`` takes it).
This module chooses the tile shape; ``_unroll_rows.py`` the taller, shorter or
short rows where ``rows`` divides no row range; ``_register_tile.py`` builds
the nest and ``_unroll_splits.py`` the mixed tile and the two parts of a split
kernel.

Requires: verified IR.  Guarantees: the same points in the same scopes (the
outer block is the aggregation scope; the inner block aggregates into it with
the same operation), verified IR, and the same object when nothing applies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..analysis.access import index_stride
from ..analysis.select import parse_selector
from ..ir.nodes import Block, Program, Refinement, Statement
from ._common import inside_nests
from ._const_panels import PanelLayouts
from ._register_tile import register_tiles
from ._unroll_rows import other_rows
from ._unroll_shapes import moves, packable, panel_of_wider, two_rows, vectors_dividing
from ._unroll_splits import mixed_tile, split_rows, split_vector
from .registry import check_non_negative, check_positive, check_selector, register


@register
@dataclass(frozen=True)
class Unroll:
    """Split GEMM-like kernels into register tiles (options: tile shape)."""

    vector_width: int = 8
    vectors: int = 2
    rows: int = 4
    max_vectors: int = 12
    # Ragged row ranges: taller tiles of up to this many rows when they divide
    # the range (0 or ``rows``: never; then rows split into tiles + a remainder),
    # then, where none does, of up to ``long_rows`` (BERT's 128 tokens: 8 x 3
    # vectors, 1.10-1.19x faster on two threads than 4 x 6, docs/performance.md).
    max_rows: int = 7
    long_rows: int = 8
    # ... only where a tile's panel (its reduction times its lanes) exceeds half of
    # this (the target's L1: a Winograd product's short panels, in L1 whatever the
    # rows, ran 2-6% slower in 8-row tiles; 0: any panel).
    long_rows_bytes: int = 0
    # Inputs read along the vector index are copied per panel into a dense buffer
    # (no cache-set conflicts from a long row stride) when the panel is this small
    # and at least ``pack_min_tiles`` register tiles read it (0: any number).
    pack_max_bytes: int = 1 << 18
    pack_min_tiles: int = 0
    # ... and its rows are at least this many bytes apart (0: any).  The cpu
    # target sets 2048: a panel whose rows are closer (1 KiB in a 256 x 256
    # matrix, 256 B in a 3 x 3 convolution's weights) reads as fast in place
    # from L2 as packed, and the copy is saved (matmul 256, one thread of the
    # 2-core Zen 4 VM: 0.98x the time unpacked; 1024 x 1024, rows 4 KiB apart:
    # 1.11x the time unpacked, so it stays packed).
    pack_min_stride: int = 0
    # Reductions longer than this are split into blocks of it (0: never; blocking
    # measured slower than streaming one packed panel from L2 on a 2-core znver3).
    k_block: int = 0
    # Split the row index into this many outer blocks, first among the kernel's
    # indices (threads take whole row blocks), when the inputs read along rows
    # exceed ``pack_max_bytes`` but one block's share fits: each block's rows then
    # stay in L2 across the panels.  Off: 2 measured -2%..+17% (median +3%) on the
    # 3x3 conv 56x56x64 with 2 threads of a loaded 2-core znver3, not conclusive.
    row_blocks: int = 1
    # Depthwise-like kernels (every input reads the vector index: a channel shared
    # by image, weight and output) take rows along a pixel index the weight does
    # not depend on (False: such kernels get one-pixel tiles, as before).
    channel_rows: bool = True
    # Inside a ``nest`` (one row block at a time) a packed panel would be copied
    # once per block: strided panels are read in place there unless this is set
    # (inputs read across the vector index are always packed).
    pack_in_nests: bool = False
    # A product whose vector index is one panel of a wider dimension, narrower
    # than the tile's vectors (attention's keys in ``nest``'s panels of 32: 2
    # vectors of 16 for Q @ K^T), spends the accumulators left on taller tiles:
    # 8 x 2 vectors, not 4 x 2 (False: the rows as given).
    panel_rows: bool = True
    select: str = "contraction"
    # The target's vector registers (0: the shape options as given).  A register
    # file that holds twice the tile's accumulators with room to spare grows the
    # tile (see :meth:`shaped`): AVX-512's 32 registers take 6 x 4 tiles.
    registers: int = 0
    # Whole vectors that the tile's vectors do not divide (125 vectors of 8
    # lanes: 4 x 1 tiles) are split into groups of the tile's vectors and one
    # narrower tile, when there are at least this many groups (0: never; three
    # vectors stay three 4 x 1 tiles, a second kernel costing more than it saves).
    vector_groups: int = 4
    # A ragged vector index of at most this many registers: one mixed tile (0: split).
    mixed_vectors: int = 8
    name: ClassVar[str] = "unroll"
    layer_local: ClassVar[bool] = True
    # The search space of ``stripeml tune`` (docs/tuning.md), from the shape
    # :meth:`shaped` gives: every root kernel is tiled on its own.
    tunable: ClassVar[dict[str, tuple[object, ...]]] = {
        "rows": (1, 2, 3, 4, 5, 6, 7, 8),
        "vectors": (1, 2, 3, 4, 6),
        "max_rows": (0, 7, 14),
        "long_rows": (0, 8),
        "pack_max_bytes": (0, 1 << 16, 1 << 18, 1 << 20, 1 << 22),
        "row_blocks": (1, 2, 4),
        "k_block": (0, 64, 128, 256, 512),
        "channel_rows": (False, True),
        "mixed_vectors": (0, 8),
    }

    def __post_init__(self) -> None:
        check_selector(self)
        check_positive(self, "vector_width", "vectors", "rows", "max_vectors", "row_blocks")
        check_non_negative(
            self,
            "max_rows",
            "long_rows",
            "long_rows_bytes",
            "pack_max_bytes",
            "pack_min_tiles",
            "pack_min_stride",
            "k_block",
            "registers",
        )
        check_non_negative(self, "vector_groups", "mixed_vectors")

    def shaped(self) -> Unroll:
        """The options with the tile shape of ``registers`` (0 left alone).

        A tile may keep ``3/4`` of the registers as accumulators (12 of 16, 24 of
        32), the rest holding the operands; ``max_vectors`` is raised to that.
        While twice the vectors fit with the rows given, the vectors double, and
        the rows are then what the accumulators allow: with 32 registers, 6 rows of
        4 vectors (64 lanes on AVX-512), whose 24 accumulators need 10 loads per 24
        FMAs where 4 x 2 needed 6 per 8 (on a 2-core Xeon with two 512-bit FMA
        units: ResNet-50 0.87x, Inception-v2 0.81x, SqueezeNet 0.86x the time,
        docs/performance.md, "Register tiles from the register file").  With 16
        registers the options stay as given."""
        if not self.registers:
            return self
        budget = max(1, self.registers * 3 // 4)
        vectors, rows = self.vectors, self.rows
        while 2 * vectors * rows <= budget:
            vectors *= 2
        if vectors != self.vectors:
            rows = max(1, budget // vectors)
        elif vectors * rows < budget:
            # No room to double: the rows given take the vectors left (16
            # registers: 4 x 3, 12 accumulators, 3 panel loads and a broadcast).
            vectors = budget // rows
        return replace(
            self,
            registers=0,
            vectors=vectors,
            rows=rows,
            max_vectors=max(self.max_vectors, budget),
        )

    def tuning_start(self) -> Unroll:
        """The options a kernel is tiled with (:meth:`shaped`), where tuning starts."""
        return self.shaped()

    def run(self, program: Program) -> Program:
        if self.registers:
            return self.shaped().run(program)
        # The kernels of each ``nest`` too, the nest standing in for the root.
        nested = (
            self
            if self.pack_in_nests or self.pack_max_bytes == 0
            else (
                replace(self, pack_max_bytes=1)  # no strided panel fits; transposed ones pack
            )
        )
        return inside_nests(self._run_root(program), nested._run_root)

    def _run_root(self, program: Program) -> Program:
        laid = PanelLayouts(program.root)
        stmts: list[Statement] = []
        changed = False
        for s in program.root.stmts:
            parts = None
            if isinstance(s, Block) and parse_selector(self.select)(s.tags):
                parts = self._tile(laid.root, s, laid=laid)
            changed |= parts is not None
            stmts.extend(laid.pending)
            stmts.extend(parts or [s])
            laid.pending = []
        if not changed:
            return program
        return Program(replace(laid.root, stmts=tuple(stmts)))

    def _tile(
        self, root: Block, k: Block, row: str | None = None, laid: PanelLayouts | None = None
    ) -> list[Block] | None:
        """The tiled blocks replacing ``k`` (two for a ragged split), or None to
        leave it alone; ``row``: the row index to use (taller tiles, a split's parts)."""
        if k.sub_blocks or any(i.affine is not None for i in k.idxs) or "register_tile" in k.tags:
            return None
        outs = [r for r in k.refs if r.dir in ("out", "inout")]
        if (
            len(outs) != 1
            or outs[0].agg not in ("add", "mul", "max", "min")
            or outs[0].dir != "out"
        ):
            return None
        if any(r.dir == "none" or r.shape.elem_count != 1 for r in k.refs):
            return None
        out = outs[0]
        ranges = {i.name: i.range for i in k.idxs}
        in_cons = {n for c in k.constraints for n in c.expr.names}
        stride = {n: index_stride(out, n) for n in ranges}
        addr = [n for n in ranges if stride[n] != 0]
        red = [n for n in ranges if stride[n] == 0]
        if not red:
            return None
        w = self.vector_width
        ins = [r for r in k.refs if r.dir == "in"]

        # (A constant read across the index is as good as read along it: it is laid
        # out once in panels with that index innermost, ``_const_panels``.)
        def along(r: Refinement, n: str) -> bool:
            return index_stride(r, n) in (0, 1) or (
                laid is not None and laid.across(r, n, ranges[n])
            )

        vcands = [
            n for n in addr
            if stride[n] == 1 and n not in in_cons and all(along(r, n) for r in ins)
        ]  # fmt: skip
        transposed = False
        if not vcands and self.pack_max_bytes > 0:
            # An input read across the vector index (the keys of attention's
            # Q @ K^T, a transposed view): its panels are packed with that index
            # innermost, so the tile still reads whole vectors.
            vcands = [
                n for n in addr
                if stride[n] == 1 and n not in in_cons and all(packable(r, n) for r in ins)
            ]  # fmt: skip
            transposed = True
        if not vcands:
            return None
        v = vcands[-1]
        if ranges[v] % w and ranges[v] > w:
            # A ragged vector index (1000 output channels in 16 lanes): whole
            # vectors, and the rest in narrower lanes, as two kernels.  Not with
            # constraints (a padded pooling window): the code generator keeps no
            # register tile whose reduction may be empty, so the rest would run
            # scalar (ShuffleNet's 3x3 max pool over 24 channels: 0.18 ms whole,
            # 0.04 + 0.49 ms split).
            if k.constraints:
                return None
            return mixed_tile(self, root, k, v, row, laid) or split_vector(
                self, root, k, v, row, laid
            )
        # Row indices: output indices that the inputs read along ``v`` (the panels:
        # weights) do not depend on, so each panel vector serves every row of a
        # tile.  (An index of a blocked weight layout, ``W[cb, ..., c]`` with the
        # output channel ``16*cb + c``, selects panels instead: it stays outside.)
        # (With a transposed input, every input that moves with ``v`` is a panel: a
        # row index it depends on would not reuse its packed copy.  A row maximum
        # ``M[i] = >(S[i, j])`` has none, and stays a vectorised row reduction.)
        panel_ins = [
            r for r in ins
            if index_stride(r, v) == 1 or (transposed and moves(r, v))
            or (laid is not None and laid.across(r, v, ranges[v]))
        ]  # fmt: skip
        row_ok = [
            n for n in addr
            if n != v and n not in in_cons and all(index_stride(r, n) == 0 for r in panel_ins)
        ]  # fmt: skip
        if row is None and not row_ok and self.channel_rows and not transposed:
            shared = self._channel_rows(root, k, v, addr, in_cons, ins, red, laid)
            if shared is not None:
                return shared
        rows_cands = [n for n in row_ok if ranges[n] % self.rows == 0]
        if row is not None:
            rows_cands = [row]
        elif not rows_cands and self.rows > 1:
            # Two row indices whose ranges take a factor of ``rows`` each: a 2-D tile
            # of pixels (2 x 2 of a 14 x 14 image) keeps the full tile shape.
            pair = two_rows(row_ok, ranges, self.rows)
            if pair is not None and ranges[v] % w == 0:
                u1, u2 = pair
                vec = vectors_dividing(
                    min(self.vectors, self.max_vectors // self.rows), ranges[v], w
                )
                return [self._build(root, k, v, vec * w, u1, red, u2, laid)]
            if ranges[v] % w == 0:
                tiled = other_rows(self, root, k, ranges, red, row_ok, panel_ins, laid)
                if tiled is not None:
                    return tiled
            ragged = [n for n in row_ok if ranges[n] > self.rows]
            others = [n for n in ragged[1:] if n != ragged[0]]
            split = split_rows(self, root, k, ragged[0], laid, bool(others)) if ragged else None
            if split is not None:
                return split
        u = rows_cands[-1] if rows_cands and self.rows > 1 else None
        # Without a row index, spend the accumulators on more vectors along v.
        # (Not with an input to pack across the vector index: keep several panels.)
        limit = self.vectors if u is not None or transposed else self.max_vectors
        rows = self.rows if u is not None else 1
        want = min(limit, self.max_vectors // rows)
        vec = vectors_dividing(want, ranges[v], w)
        if vec < 1 or ranges[v] % (vec * w):
            return None
        want = min(want, ranges[v] // w)
        if (
            u is not None
            and not transposed
            and 2 * vec <= want
            and self.vector_groups
            and ranges[v] >= self.vector_groups * want * w
        ):
            # Whole vectors whose count the tile's vectors do not divide (1000
            # output channels: 125 vectors of 8 lanes, so 4 x 1 tiles, 4 FMAs per
            # 5 loads): the whole groups of ``want`` vectors, and the rest in one
            # narrower tile, as two kernels (SqueezeNet's classifier conv).
            split = split_vector(self, root, k, v, row, laid, group=want)
            if split is not None:
                return split
        if transposed and (
            ranges[v] // (vec * w) < 2 or (u is None and all(ranges[n] == 1 for n in row_ok))
        ):
            return None  # one panel, or one row: nothing would pack the transposed input
        if u is None and all(ranges[n] == 1 for n in row_ok):
            # One row (a matrix-vector product): each panel meets one tile, so a
            # packed copy would be written and read once; stream the input instead.
            # A constant matrix is still laid out in dense panels, once: read in
            # place, its rows are one page each apart (AlexNet's 9216 x 4096
            # classifier: 17.7 GB/s strided, against NumPy's 38).
            stream = replace(self, pack_max_bytes=0)
            return [
                stream._build(
                    root, k, v, vec * w, u, red, None, laid, lay_out=self.pack_max_bytes > 0
                )
            ]
        if (
            self.panel_rows
            and u is not None
            and ranges[v] == vec * w
            and 2 * rows * vec <= self.max_vectors
            and panel_of_wider(out, v, ranges)
        ):
            # One panel of a wider vector index, narrower than the tile's
            # vectors (attention's keys in panels of 32: 2 vectors of 16): the
            # accumulators left take more rows instead, the most that divide
            # the row range (8 x 2 vectors: 10 loads per 16 FMAs, not 6 per 8).
            heights = [
                d for d in range(rows + 1, self.max_vectors // vec + 1) if ranges[u] % d == 0
            ]
            if heights:
                tall = replace(self, rows=heights[-1])
                return [tall._build(root, k, v, vec * w, u, red, None, laid)]
        return [self._build(root, k, v, vec * w, u, red, None, laid)]

    def _channel_rows(
        self,
        root: Block,
        k: Block,
        v: str,
        addr: list[str],
        in_cons: set[str],
        ins: list[Refinement],
        red: list[str],
        laid: PanelLayouts | None,
    ) -> list[Block] | None:
        """Register tiles for a kernel whose every input reads the vector index ``v``
        (``O[y, x, c] = +(I[y + ky, x + kx, c] * K[ky, kx, c])``: a depthwise
        convolution), so no output index leaves the inputs read along ``v`` alone.
        The rows are the innermost output index ``u`` (not in a constraint) that some
        input does not depend on: each of its vectors (the weight's) then serves all
        the rows of a tile, the others (the image's) are read at shifted pixels.
        Rows: the most, at most ``max_rows``, that divide the range of ``u``; then as
        many vectors as ``max_vectors`` allows.  No panel level and no packing: a
        panel of the image is read by one tile row only, so a dense copy would cost
        a pass over the image and save nothing; the panel index stays beside the
        pixel indices, where ``thread`` may split any of them."""
        ranges = {i.name: i.range for i in k.idxs}
        w = self.vector_width
        if ranges[v] % w or any(index_stride(r, v) != 1 for r in ins):
            return None
        cands = [
            n for n in addr
            if n != v and n not in in_cons and any(index_stride(r, n) == 0 for r in ins)
        ]  # fmt: skip
        if not cands:
            return None
        u = cands[-1]
        rows = next(
            (d for d in range(min(self.max_rows, ranges[u]), 1, -1) if ranges[u] % d == 0), 0
        )
        if rows < 2:
            return None
        vec = vectors_dividing(max(1, self.max_vectors // rows), ranges[v], w)
        if vec < 1:
            return None
        flat = replace(self, rows=rows)
        return [flat._build(root, k, v, vec * w, u, red, None, laid, flat=True)]

    def _build(
        self,
        root: Block,
        k: Block,
        v: str,
        vt: int,
        u: str | None,
        red: list[str],
        u2: tuple[str, int] | None,
        laid: PanelLayouts | None,
        flat: bool = False,
        lay_out: bool | None = None,
    ) -> Block:
        """The register-tiled nest of ``k``, reading its constant panel inputs laid out
        in blocks of ``vt`` (made when ``lay_out``, by default when this pass packs
        panels at all, else reused)."""
        if laid is not None:
            new = self.pack_max_bytes > 0 if lay_out is None else lay_out
            blocked = laid.block(k, v, vt, new=new)
            if blocked is not None:
                k, v = blocked
                root = laid.root
        return register_tiles(
            root, k, v, vt, u, red, u2, flat=flat, tile_rows=self.rows,
            pack_max_bytes=self.pack_max_bytes, pack_min_tiles=self.pack_min_tiles,
            pack_min_stride=self.pack_min_stride,
            row_blocks=self.row_blocks, k_block=self.k_block,
        )  # fmt: skip
