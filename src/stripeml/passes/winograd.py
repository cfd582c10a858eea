"""``winograd``: 3 x 3 convolutions as Winograd F(m x m, 3 x 3) transforms and products.

A 3 x 3, stride-1 convolution computes each m x m block of output pixels from
an (m + 2) x (m + 2) block of input pixels with 9 m^2 products per input and
output channel pair.  Winograd's minimal filtering (Lavin and Gray, "Fast
Algorithms for Convolutional Neural Networks", 2016) computes it with
(m + 2)^2:

    U = G g G^T        (each 3 x 3 filter, once: the weights are constant)
    V = B^T d B        (each (m + 2) x (m + 2) input block, per channel)
    M[a, b] = sum_c V[a, b, c] * U[a, b, c, co]     ((m + 2)^2 matrix products)
    Y = A^T M A        (each m x m output block, per output channel)

Option ``tile`` is m.  With 2, F(2 x 2, 3 x 3): ``B^T = [[1, 0, -1, 0], [0, 1,
1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]``, ``G = [[1, 0, 0], [1/2, 1/2, 1/2],
[1/2, -1/2, 1/2], [0, 0, 1]]``, ``A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]``: 2.25
times fewer products, transforms of additions and subtractions.  With 4, F(4 x
4, 3 x 3) (the points 0, 1, -1, 2, -2 and infinity; the matrices in
:mod:`._winograd_body`): 36 products for 16 pixels, 4 times fewer, transforms
with coefficients up to 8 over 6 x 6 blocks.  The matrix products are ordinary
contractions that ``unroll`` register-tiles like any other.  The rounding
differs from the direct sum by a few units in the last place of float32 with
m = 2, a few times that with m = 4 (the transforms add and subtract values of
the input's magnitude, with m = 4 scaled by up to 8, before the products).

**Which kernels.**  A root ``#contraction`` leaf kernel over float32 whose
statements are two loads, their product and a store through an ``add``
output, without constraints or index offsets, whose

* weights are a root buffer of shape ``(3, 3, C, CO)`` read at exactly
  ``[ky, kx, ci, co]`` (the importer's NHWC layout, as ``halo`` leaves it):
  ``const`` ones (a model's), whose transform the runtime computes once, or
  an input or a buffer the program computes (a training step's weights, a
  Tile function's parameter), transformed at every call, and so only where
  the image has at least ``min_blocks_computed_weights`` output blocks (16:
  a 56 x 56 x 64 -> 64 convolution with its weights an input ran 0.34x the
  direct one's time on one thread, a 16 x 16 one 0.52x, 8 x 8 x 128 (4
  blocks) 0.96x);
* image is read at ``[n + c0, y + ky + c1, x + kx + c2, ci + c3]`` (a zero-haloed
  copy, so no constraint bounds it; the constants place it in a larger buffer);
* output is written at ``[n + e0, y + e1, x + e2, co + e3]``;

with ``C`` and ``CO`` at least ``min_channels`` (with few channels the
transforms, which move 4x the image's bytes, cost more than the products save:
the 3-channel stem) and ``CO`` a multiple of ``vector_width`` (the products'
vector index).  A height or width that is not a multiple of m ends in cut
blocks: the last block row (column), with r output rows (columns) left, reads
the r + 2 input rows (columns) that exist, the others taken as 0, and writes
the r output rows (columns) that exist; the input and output transforms then
have a kernel per part (whole blocks, the last row, the last column, the
corner).

**What it becomes.**  Four root kernels and three root temporaries, in place
of the convolution:

* ``U`` ``(m + 2, m + 2, C, CO)``: the weight transform, elementwise over ``[ci, co]``,
  reading only the weights, so the runtime computes it once when they are
  constant (:mod:`stripeml.analysis.constness`), else at every call;
* ``V`` ``(m + 2, m + 2, P, C)``, ``P`` the m x m output blocks: the input transform,
  elementwise over the blocks and ``ci``;
* ``M`` ``(m + 2, m + 2, P, CO)`` ``= +(V[a, b, p, ci] * U[a, b, ci, co])``,
  the convolution's own name and comment (its node in profiles), (m + 2)^2
  matrix products that ``unroll`` register-tiles;
* the output transform, elementwise over the blocks and ``co``, writing the
  output pixels of each block through the kernel's output view; when the
  kernel right after the convolution is elementwise and alone reads its
  result, at its own point, that kernel runs here too, on each pixel, and
  the result's buffer goes.

Options: ``min_channels``, ``min_size`` (the image's smaller side at least
this: the ``cpu`` target says 8, as ResNet's 7 x 7 images, 16 blocks for 49
pixels with a kernel per part, ran faster direct), ``vector_width``, ``select``
(a tag selector of the kernels considered), ``threads`` (at least 2: each
transform comes marked ``#thread`` as :mod:`.thread` would mark it, so that pass
need not analyse it; see :func:`_threaded`), ``enabled`` (tunable: ``stripeml
tune`` may leave a convolution direct; off, the pass changes nothing, so a
convolution and the consumer it would merge are left as they are whatever
segment each is in), ``min_channels`` (tunable too, 16 or 32: a tune may
rewrite a convolution of 16-31 channels, or leave it direct; run on the
convolution's segment alone, the rewrite merges no consumer in another
segment, and the pass manager's segment check falls back to the whole program
if a merge hid a result another segment reads), ``tile`` (2 or 4, tunable: a
tune may run one convolution as F(2 x 2) where the target says F(4 x 4), or
the other way).  The pipeline runs it after ``halo`` (the
image is then a zero-haloed buffer) and ``alias_copy``, before ``nest`` and
``unroll``.

Requires: verified IR.  Guarantees: the same results up to float32 rounding
(tests compare with NumPy and onnxruntime), verified IR, and the same object
when no kernel is rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..analysis.access import index_stride
from ..analysis.select import parse_selector
from ..ir.nodes import (
    Block,
    Constant,
    Intrinsic,
    Load,
    Program,
    Refinement,
    Statement,
    Store,
)
from ._winograd_body import TRANSFORMS
from ._winograd_kernels import Conv, plain, rewrite
from .registry import (
    check_choice,
    check_non_negative,
    check_positive,
    check_selector,
    register,
)
from .thread import choose_among, mark_threaded


@register
@dataclass(frozen=True)
class Winograd:
    """Rewrite 3 x 3 stride-1 convolutions as Winograd F(m, 3)."""

    min_channels: int = 32
    # The image's smaller side at least this (a 7 x 7 map is 16 blocks for 49
    # pixels, its transforms a kernel per part: more compile work than it saves).
    min_size: int = 1
    vector_width: int = 16
    select: str = "contraction"
    # The target's threads: each transform, race-free on every index by
    # construction, is marked #thread as ``thread`` would mark it (0: not marked).
    threads: int = 0
    # False: no convolution is rewritten.  ``stripeml tune`` turns it off per
    # convolution (docs/tuning.md): a target file has no reason to.
    enabled: bool = True
    # The output blocks' side ``m``: 2 (F(2 x 2, 3 x 3), 4 x 4 input blocks, 16
    # products) or 4 (F(4 x 4, 3 x 3), 6 x 6 blocks, 36 products for 4x the pixels:
    # 1.78x fewer multiplications again, transforms with coefficients up to 8,
    # rounding a few times F(2, 3)'s).
    tile: int = 2
    # With ``tile`` 4, F(2 x 2) where the image's sides are even but not all
    # multiples of 4 (ResNet's 14 x 14): F(4 x 4) would add cut blocks there,
    # a transform kernel per part whose 36-value bodies cost compile time.
    whole_blocks: bool = False
    # Weights the program computes or takes as an input (not constant) are
    # transformed at every call: only images of at least this many output blocks.
    min_blocks_computed_weights: int = 16
    name: ClassVar[str] = "winograd"
    layer_local: ClassVar[bool] = True
    # ``min_channels`` 16 (below the file's 32): SqueezeNet's 3 x 3 16 -> 64
    # convolution ran 1.15-1.21x faster in its window (docs/tuning.md); no
    # benchmark convolution has 8-15 channels, so lower values would be dead.
    tunable: ClassVar[dict[str, tuple[object, ...]]] = {
        "enabled": (True, False),
        "min_channels": (16, 32),
        "tile": (2, 4),
    }

    def __post_init__(self) -> None:
        check_selector(self)
        check_positive(self, "min_channels", "min_size", "vector_width")
        check_non_negative(self, "threads", "min_blocks_computed_weights")
        check_choice(self, "tile", sorted(TRANSFORMS))

    def run(self, program: Program) -> Program:
        if not self.enabled:
            return program
        root = program.root
        wanted = parse_selector(self.select)
        taken = {r.into for r in root.refs} | {s.name for s in root.stmts if isinstance(s, Block)}
        stmts: list[Statement] = []
        refs = list(root.refs)
        gone: set[str] = set()  # root temporaries no statement uses any more
        old = list(root.stmts)
        changed = False
        k = 0
        while k < len(old):
            s = old[k]
            k += 1
            conv = _match(root, s) if isinstance(s, Block) and wanted(s.tags) else None
            if conv is None or not self._worth(conv, root):
                stmts.append(s)
                continue
            assert isinstance(s, Block)
            after = old[k] if k < len(old) else None
            consumer = _consumer(root, s, conv, after) if isinstance(after, Block) else None
            roots = {r.into: r for r in refs}
            new_refs, kernels = rewrite(s, conv, taken, consumer, roots, self._tile(conv))
            if self.threads >= 2 and _permutes(consumer):
                kernels = [_threaded(b, self.threads) for b in kernels]
            if consumer is not None:
                k += 1  # merged into the output transform
                gone.add(conv.out.from_ or conv.out.into)
            refs.extend(new_refs)
            stmts.extend(kernels)
            changed = True
        if not changed:
            return program
        refs = [r for r in refs if r.into not in gone]
        return replace(program, root=replace(root, refs=tuple(refs), stmts=tuple(stmts)))

    def _tile(self, c: Conv) -> int:
        """``tile``, or 2 where ``whole_blocks`` asks for it: the image's sides
        are even but not all multiples of ``tile``, so F(2 x 2) has no cut
        blocks where F(4 x 4) would."""
        sides = (c.sizes[c.y], c.sizes[c.x])
        if self.whole_blocks and all(s % 2 == 0 for s in sides):
            if any(s % self.tile for s in sides):
                return 2
        return self.tile

    def _worth(self, c: Conv, root: Block) -> bool:
        z = c.sizes
        weights = next(r for r in root.refs if r.into == (c.weights.from_ or c.weights.into))
        if not weights.const:
            # transformed at every call: (m + 2)^2 values per channel pair, written
            # and read again, against the products saved in each of the blocks
            m = self._tile(c)
            blocks = z[c.n] * -(-z[c.y] // m) * -(-z[c.x] // m)
            if blocks < self.min_blocks_computed_weights:
                return False
        return (
            min(z[c.y], z[c.x]) >= self.min_size
            and z[c.ci] >= self.min_channels
            and z[c.co] >= self.min_channels
            and z[c.co] % self.vector_width == 0
        )


def _threaded(b: Block, threads: int) -> Block:
    """Transform ``b`` (``#winograd``) marked ``#thread`` as :mod:`.thread` would
    mark it after ``vectorize``, every index race-free by construction (see
    :func:`_permutes`), but on a block index rather than the channels (the
    vector lanes) where one splits within :func:`_balanced`; the products
    (``#contraction``) are left to ``thread``."""
    if "winograd" not in b.tags:
        return b
    index = choose_among(b, threads, [i.name for i in b.idxs])
    if index is not None and _lane(b, index):
        # not the channels (the vector lanes), even somewhat unevenly: a split
        # of the lanes' loop between runtime bounds keeps a scalar tail LLVM
        # cannot delete, twice the body's LLVM time (a 28 x 28 F(4 x 4) input
        # transform: 78 ms against 37 at O1); a block row more on one thread
        # (7 x 7 blocks on 2 threads: 4 and 3) costs microseconds
        rows = [i for i in b.idxs if _balanced(i.range, threads) and not _lane(b, i.name)]
        if rows:
            index = max(rows, key=lambda i: i.range).name  # first of the largest
    if index is None or _lane(b, index):
        # ``vectorize`` moves a written unit-stride index last: left to ``thread``,
        # which runs after it (it splits the channels so), told
        # by ``#writes_once`` that every index is race-free: no analysis of its
        # 16 or 36 stores
        return replace(b, tags=b.tags | {"writes_once"})
    return mark_threaded(b, index)


def _balanced(size: int, threads: int) -> bool:
    """Whether ``size`` values split over ``threads`` in equal chunks leave the
    busiest thread at most 1.25 times the mean's work (7 on 2 threads: 4 for
    3.5; on 8: 1 for 0.875; on 16 no)."""
    return -(-size // threads) * threads <= 1.25 * size


def _lane(b: Block, index: str) -> bool:
    """Whether ``index`` moves a written view of ``b`` along its unit-stride
    dimension (the index ``vectorize`` runs in vector lanes)."""
    return any(index_stride(r, index) == 1 for r in b.refs if r.dir == "out")


def _permutes(e: Block | None) -> bool:
    """Whether the transforms of a convolution (whose output transform computes
    the consumer ``e``, when given) are race-free on every index: each point
    writes elements no other point touches.  ``U`` writes ``[a, b, ci, co]``,
    ``V`` a row of its own per block, the output transform the pixels ``2t + i``,
    ``2s + j`` of its block, all reading only what they do not write.  An
    inlined ``e`` must write each of its outputs (distinct buffers, none of them
    read by ``e``) through a permutation of its indices (each once, coefficient
    1, any constants): then it writes each pixel's elements once."""
    if e is None:
        return True
    outs = [r.from_ or r.into for r in e.refs if r.dir == "out"]
    ins = {r.from_ or r.into for r in e.refs if r.dir == "in"}
    if len(set(outs)) != len(outs) or ins & set(outs):
        return False
    names = sorted(i.name for i in e.idxs)
    for r in e.refs:
        if r.dir != "out":
            continue
        dims = [plain(a) for a in r.access]
        if any(n is None or len(n) > 1 for n in dims):
            return False
        if sorted(n[0] for n in dims if n) != names:
            return False
    return True


def _match(root: Block, k: Block) -> Conv | None:
    if not k.has_tags("kernel", "contraction") or k.constraints or k.sub_blocks:
        return None
    if any(i.affine is not None for i in k.idxs) or len(k.refs) != 3:
        return None
    ins = [r for r in k.refs if r.dir == "in"]
    outs = [r for r in k.refs if r.dir == "out" and r.agg == "add"]
    if len(ins) != 2 or len(outs) != 1 or any(r.shape.dtype != "f32" for r in k.refs):
        return None
    if not _product(k, ins, outs[0]):
        return None
    sizes = {i.name: i.range for i in k.idxs}
    roots = {r.into: r for r in root.refs}
    for w, img in ((ins[0], ins[1]), (ins[1], ins[0])):
        parent = roots.get(w.from_ or w.into)
        if parent is None or parent.shape.rank != 4 or w.shape.rank != 4:
            continue
        names = [plain(a) for a in w.access]
        if any(n is None or len(n) != 1 or a.const for n, a in zip(names, w.access)):
            continue
        ky, kx, ci, co = (n[0] for n in names)  # type: ignore[index]
        if parent.shape.sizes != (3, 3, sizes[ci], sizes[co]):
            continue
        if sizes[ky] != 3 or sizes[kx] != 3 or len({ky, kx, ci, co}) != 4:
            continue
        got = _image_and_output(img, outs[0], sizes, ky, kx, ci, co)
        if got is None:
            continue
        n, y, x = got
        if set(sizes) != {n, y, x, co, ky, kx, ci}:
            continue
        return Conv(n, y, x, co, ky, kx, ci, sizes, img, w, outs[0])
    return None


def _product(k: Block, ins: list[Refinement], out: Refinement) -> bool:
    """Whether ``k``'s statements are load, load, their product, and its store."""
    if len(k.stmts) != 4:
        return False
    a, b, m, st = k.stmts
    if not (isinstance(a, Load) and isinstance(b, Load) and isinstance(m, Intrinsic)):
        return False
    if not isinstance(st, Store) or st.ref != out.into or st.value != m.into:
        return False
    return (
        m.op == "mul"
        and sorted(m.inputs) == sorted((a.into, b.into))
        and a.into != b.into
        and {a.ref, b.ref} == {r.into for r in ins}
    )


def _image_and_output(
    img: Refinement, out: Refinement, sizes: dict[str, int], ky: str, kx: str, ci: str, co: str
) -> tuple[str, str, str] | None:
    """``(n, y, x)`` when ``img`` reads ``[n, y + ky, x + kx, ci]`` and ``out`` writes
    ``[n, y, x, co]`` (each plus a constant), else None."""
    if img.shape.rank != 4 or out.shape.rank != 4:
        return None
    ia = [plain(a) for a in img.access]
    oa = [plain(a) for a in out.access]
    if any(a is None for a in ia + oa):
        return None
    o0, o1, o2, o3 = oa
    if not (len(o0) == len(o1) == len(o2) == len(o3) == 1) or o3 != (co,):  # type: ignore[arg-type]
        return None
    n, y, x = o0[0], o1[0], o2[0]  # type: ignore[index]
    if ia != [(n,), tuple(sorted((y, ky))), tuple(sorted((x, kx))), (ci,)]:
        return None
    if len({n, y, x, co, ky, kx, ci}) != 7:
        return None
    return n, y, x


def _uses(s: Statement, name: str) -> bool:
    """Whether ``s`` (a root statement) views or names root buffer ``name``."""
    if isinstance(s, Block):
        return any(r.from_ == name or (not r.from_ and r.into == name) for r in s.refs)
    return name in getattr(s, "inputs", ()) or name in getattr(s, "outputs", ())


def _consumer(root: Block, k: Block, c: Conv, e: Block) -> Block | None:
    """The elementwise kernel ``e`` right after convolution ``k`` when it is the only
    reader of the convolution's result (a temporary nothing else uses), reads it
    once at its own point (``e``'s indices are the result's dimensions, plus the
    output view's constants) and is a plain leaf: the output transform then
    computes ``e`` on its four pixels and the result is never stored."""
    buf = c.out.from_ or c.out.into
    parent = next((r for r in root.refs if r.into == buf), None)
    if parent is None or parent.dir != "none" or "kernel" not in e.tags:
        return None
    if e.constraints or any(i.affine is not None for i in e.idxs) or e.sub_blocks:
        return None
    if not all(isinstance(t, (Load, Store, Intrinsic, Constant)) for t in e.stmts):
        return None
    if any(_uses(t, buf) for t in root.stmts if t is not k and t is not e):
        return None
    reads = [r for r in e.refs if (r.from_ or r.into) == buf]
    if len(reads) != 1 or reads[0].dir != "in" or any(r.dir == "none" for r in e.refs):
        return None
    if any(r.dir == "out" and r.agg not in ("", "assign") for r in e.refs):
        return None
    if any(r.dir == "inout" for r in e.refs):
        return None
    ranges = {i.name: i.range for i in e.idxs}
    z = c.sizes
    want = [(c.n, z[c.n]), (c.y, z[c.y]), (c.x, z[c.x]), (c.co, z[c.co])]
    for a, o, (_, size) in zip(reads[0].access, c.out.access, want):
        names = plain(a)
        if names is None or len(names) != 1 or a.const != o.const or ranges[names[0]] != size:
            return None
    if len({plain(a) for a in reads[0].access}) != 4 or len(ranges) != 4:
        return None
    return e
