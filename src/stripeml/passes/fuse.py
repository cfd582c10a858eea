"""``fuse``: run producer/consumer kernels as one kernel, intermediates in registers.

Two rewrites of consecutive kernels at the program (root) level, applied
greedily from the first kernel on until none applies:

**pointwise producer into its consumer.**  ``P`` is tagged ``#eltwise`` (not
``#fill``); ``Q``, the next root statement, is tagged ``#eltwise`` (not
``#fill``) or ``#contraction``.  They fuse when

1. ``Q`` reads a buffer ``V`` that ``P`` writes, and ``P`` and ``Q`` are both
   *pointwise* on ``V`` (no constraints, no index offsets, one distinct index
   of coefficient 1 per dimension of size > 1, every index of range > 1 used:
   see :func:`~stripeml.passes._common.pointwise_dims`), which maps ``Q``'s
   points one to one onto ``P``'s;
2. every view of ``Q`` on a buffer ``P`` writes is an ``in`` view of one
   element at exactly the element ``P`` writes at the matching point, and
   ``P`` writes that buffer through one ``out``/``assign`` single-element view
   stored once by its own top-level statements (no nested block, no special);
3. ``Q`` writes no buffer that ``P`` reads or writes;
4. ``Q`` holds only scalar statements, and so does ``P`` when ``Q`` is a
   contraction.

The fused block keeps ``P``'s indices, takes both statement lists, and ``Q``'s
loads of ``V`` become ``P``'s stored scalar (``Q``'s scalars, refs and indices
are renamed).  When ``V`` is a root ``none`` temporary that no later statement
reads, ``P``'s store to it and its view disappear (the root temporary itself
is left to ``dce``).  With a contraction ``Q`` the fused block is that
contraction (``#contraction``, its aggregation) computing ``P``'s values on
the fly: softmax's ``exp`` feeding its row sum.

**contraction + elementwise consumer.**  ``C`` is a ``#contraction`` kernel with
scalar statements only, one ``out`` view (of buffer ``T``) and no view of
``T`` to read; ``E``, next, is ``#eltwise`` (not ``#fill``) with scalar
statements only.  They fuse when

1. ``C``'s output access is, per dimension, a distinct index with coefficient
   1 (an *output index*) or, for a dimension of size 1, the constant 0;
   ``C`` has no index offsets;
2. isl shows that every element of ``T`` is reached by some point of ``C``
   (so the register below, zero on the interpreter and undefined elsewhere,
   is always overwritten), and no earlier ``#fill`` block writes ``T``;
3. ``E`` is pointwise on ``T`` and reads it only through one-element ``in``
   views at that access;
4. ``E`` writes no buffer that ``C`` reads, nor ``T``.

The result is an outer block over ``E``'s indices (tags ``E``'s plus
``#fused``) whose first statement is an inner block ``#reduce`` (``C``'s tags
but ``#kernel``) over the remaining (reduction) indices of ``C``, aggregating
into a rank-0 ``none`` buffer of the outer block at location ``REGISTER``;
``E``'s statements then load that register.  Constraints of ``C`` that mention
a reduction index go to the inner block, the others (implied by coverage) stay
outside.  ``C``'s input views split per dimension: a dimension whose access
uses output indices only is pinned by the outer view (size 1); any other is a
full-size outer view indexed by the inner one.  ``T`` is still stored when it
is a program result or a later statement reads it.

The pass runs in time linear in the program: a chain of pointwise kernels
grows one fused kernel, held as a :class:`PointwiseRun` (its refinements and
statements indexed by name), so taking in one more consumer costs that
consumer's size, not the size of the kernel fused so far; which buffers later
statements read is precomputed once.

Requires: verified IR.  Guarantees: the same results (every element any later
statement or the caller can observe has the same value), verified IR, and the
same object when nothing fused.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Union

from ..ir.affine import Affine
from ..ir.nodes import Block, Load, Program, Refinement, Special, Statement, Store
from ._common import (
    READ_DIRS,
    WRITE_DIRS,
    defined_scalars,
    fresh,
    is_element,
    is_leaf,
    join_text,
    pointwise_dims,
    reads,
    rename_stmt,
    renamed_ref,
    substitute_access,
    writes,
)
from ._fuse_contraction import fill_writes, fuse_contraction
from .registry import register

# A pointwise fusion stops where the kernel would refine more than this many
# buffers: the backends' compilers (LLVM's O3 above all) take time growing with the
# square of the pointers one function reads, so a long chain with its own weight per
# node becomes several kernels of bounded size instead of one huge one.
MAX_FUSED_REFS = 128

# A root statement while the pass runs: a fused kernel may still be growing.
_Item = Union[Statement, "PointwiseRun"]


@register
@dataclass(frozen=True)
class Fuse:
    """Fuse elementwise producers into their consumers and contractions into theirs.

    Options: ``eltwise`` (elementwise producer into an elementwise consumer),
    ``into_contraction`` (elementwise producer into a pointwise contraction),
    ``contraction`` (contraction into an elementwise consumer),
    ``unit_stride_reductions_only`` (only contractions whose innermost reduction
    index has unit stride in the inputs it reads fuse into their consumer),
    ``reused_inputs`` (also contractions that read an input element at several
    output points).  The legality
    conditions are in the module docstring.
    """

    eltwise: bool = True
    into_contraction: bool = True
    contraction: bool = True
    # Fuse a contraction into its consumer only when its innermost reduction index
    # walks every input with unit stride (or not at all): the fused reduction then
    # runs in vector lanes (row sums, row maxima).  A matmul-like reduction is
    # faster as its own kernel until tiling fuses at tile level.
    unit_stride_reductions_only: bool = True
    # Fuse a contraction whose inputs are read at several output points (a
    # product: attention's Q @ K^T reads each query row for every key).  Off:
    # such a contraction keeps its own kernel, which ``unroll`` register-tiles
    # (Q @ K^T of BERT-base at sequence 512: 5.1 ms per layer fused, dot
    # product by dot product; ~2.5 ms register-tiled).
    reused_inputs: bool = False
    # Leave an elementwise kernel that reads, point for point, the result of the
    # product or convolution just before it (a bias and activation) for
    # ``epilogue``, which runs it on that kernel's register tiles, rather than
    # fusing it into a reduction over outer dimensions after it (a pooled sum
    # over pixels: squeeze-excite's, of a depthwise convolution's activations):
    # the pool then reads the activated values, which are written once either
    # way, and the raw convolution result is never stored.  Row reductions over
    # the unit-stride dimension (a layer norm's mean) still take the kernel in:
    # ``nest`` builds its row chains from them.
    keep_epilogues: bool = True
    name: ClassVar[str] = "fuse"
    layer_local: ClassVar[bool] = True

    def run(self, program: Program) -> Program:
        # Greedy from the first kernel on: fuse the last two items while they fuse
        # (a fused kernel may then fuse with the one before it), else take the next
        # root statement.  "Later" statements are those not taken yet.
        root = program.root
        root_refs: dict[str, Refinement] = {}
        for r in root.refs:
            root_refs.setdefault(r.into, r)
        last_read: dict[str, int] = {}
        for k, s in enumerate(root.stmts):
            for b in reads(s):
                last_read[b] = k
        filled: set[str] = set()  # buffers the #fill blocks taken so far write
        out: list[_Item] = []
        changed = False
        for k, s in enumerate(root.stmts):
            filled |= fill_writes(s)
            out.append(s)
            while len(out) >= 2:

                def read_later(buffer: str, k: int = k) -> bool:
                    return last_read.get(buffer, -1) > k

                fused = self._fuse_pair(out, root_refs, filled, read_later)
                if fused is None:
                    break
                out[-2:] = [fused]
                changed = True
        if not changed:
            return program
        stmts = tuple(x.block() if isinstance(x, PointwiseRun) else x for x in out)
        return Program(root.with_stmts(stmts))

    def _fuse_pair(
        self,
        out: list[_Item],
        root_refs: Mapping[str, Refinement],
        filled: set[str],
        read_later: Callable[[str], bool],
    ) -> _Item | None:
        """The last two items as one, or ``None``; ``out[-2]`` may become a
        :class:`PointwiseRun` (the same kernel) either way."""
        a, b = out[-2], out[-1]
        if not (isinstance(a, (Block, PointwiseRun)) and isinstance(b, (Block, PointwiseRun))):
            return None
        if not ("kernel" in a.tags and "kernel" in b.tags):
            return None
        if "fill" in a.tags or "fill" in b.tags:
            return None
        if isinstance(b, PointwiseRun):
            # A grown kernel fusing backwards into ``a``: it must read what ``a``
            # writes (the cheap test); only then is it a Block again (it stays a
            # run in ``out``, so it is not indexed anew).
            if not (_written(a) & b.read_buffers) or len(a.refs) + len(b.refs) > MAX_FUSED_REFS:
                return None
            b = b.block()
        if "eltwise" in a.tags:
            wanted = ("eltwise" in b.tags and self.eltwise) or (
                "contraction" in b.tags and self.into_contraction
            )
            if not wanted:
                return None
            if (
                "contraction" in b.tags
                and self.keep_epilogues
                and len(out) >= 3
                and not unit_stride_reduction(b)
                and _epilogue_of(out[-3], a)
            ):
                return None
            run = a if isinstance(a, PointwiseRun) else PointwiseRun(a)
            out[-2] = run  # indexed once, even when it does not fuse now
            if len(run.refs) + len(b.refs) > MAX_FUSED_REFS:
                return None
            if not run.absorb(b, root_refs, read_later):
                return None
            return run if "eltwise" in run.tags else run.block()
        if "contraction" in a.tags and "eltwise" in b.tags and self.contraction:
            c = a.block() if isinstance(a, PointwiseRun) else a
            if self.unit_stride_reductions_only and not unit_stride_reduction(c):
                return None
            if not self.reused_inputs and not no_reuse(c):
                return None
            return fuse_contraction(c, b, filled, read_later, root_refs)
        return None


def _epilogue_of(prev: _Item, a: Block | PointwiseRun) -> bool:
    """Whether elementwise ``a`` is an epilogue ``epilogue`` can attach to ``prev``:
    ``prev`` is a contraction kept as its own kernel (it reads an input element
    at several output points: a product, a convolution) and ``a`` reads a
    buffer ``prev`` writes with as many elements as ``a`` has points."""
    if not isinstance(prev, Block) or "contraction" not in prev.tags or "kernel" not in prev.tags:
        return False
    if no_reuse(prev):
        return False
    blk = a.block() if isinstance(a, PointwiseRun) else a
    points = math.prod(i.range for i in blk.idxs)
    for r in prev.refs:
        if r.dir in WRITE_DIRS and r.from_ and r.from_ in reads(blk):
            if math.prod(r.shape.sizes) == points or _root_size(prev, r) == points:
                return True
    return False


def _root_size(prev: Block, r: Refinement) -> int:
    """The number of points ``prev`` writes through ``r`` (its output indices'
    ranges: a root kernel's view is one element)."""
    ranges = {i.name: i.range for i in prev.idxs}
    return math.prod(ranges.get(n, 1) for a in r.access for n in a.names)


def _written(item: Block | PointwiseRun) -> set[str]:
    return set(item.p_out) if isinstance(item, PointwiseRun) else writes(item)


def unit_stride_reduction(c: Block) -> bool:
    """Whether ``c``'s innermost reduction index (the last index not in its output
    access) moves every input view by 0 or 1 elements, and some view by 1."""
    outs = [r for r in c.refs if r.dir in ("out", "inout")]
    in_output = {n for r in outs for a in r.access for n in a.names}
    reduction = [i.name for i in c.idxs if i.name not in in_output]
    if not reduction:
        return True
    last = reduction[-1]
    steps = {
        sum(a.coeff(last) * s for a, s in zip(r.access, r.shape.strides))
        for r in c.refs
        if r.dir == "in"
    }
    return steps <= {0, 1} and 1 in steps


def no_reuse(c: Block) -> bool:
    """Whether every input view of ``c`` moves with every output index of range
    above 1: each input element serves one output element (a row sum, a pooling
    window), so nothing is lost by computing the outputs one at a time.  A product
    like attention's ``Q @ K^T`` reads each row of ``Q`` for every key: it keeps
    its own kernel, where ``unroll`` register-tiles it (and ``epilogue`` then
    attaches the elementwise consumer to each tile)."""
    outs = [r for r in c.refs if r.dir in ("out", "inout")]
    ranges = {i.name: i.range for i in c.idxs}
    out_idx = {n for r in outs for a in r.access for n in a.names if ranges.get(n, 1) > 1}
    for r in c.refs:
        if r.dir != "in":
            continue
        moved = {n for a in r.access for n in a.names}
        if not out_idx <= moved:
            return False
    return True


class PointwiseRun:
    """A kernel ``P`` taking in its pointwise consumers one by one (the first rewrite
    of the module docstring), indexed so that each step costs the consumer's size.

    :meth:`absorb` checks the rule for ``P`` and a consumer ``Q`` and, when it
    holds, merges ``Q`` in place; :meth:`block` gives the kernel as a ``Block``
    (``P`` itself while nothing was absorbed).  Refinements, statements, the
    scalars defined, the stores per view and the twin ``in`` views are kept in
    dictionaries that a merge updates with ``Q``'s part only.
    """

    def __init__(self, p: Block) -> None:
        self.original = p
        self._block: Block | None = p
        self.frame = Block(idxs=p.idxs, constraints=p.constraints)  # what pointwise_dims reads
        self.tags = set(p.tags)
        self.names = [p.name] if p.name else []
        self.comments = [p.comment] if p.comment else []
        self.leaf = is_leaf(p)
        self.has_special = any(isinstance(s, Special) for s in p.stmts)
        self.refs: dict[str, Refinement] = {}
        self.p_out: dict[str, Refinement] = {}  # written buffer -> the view writing it
        self.ambiguous = False  # some buffer written through two views: never fuses
        self.read_buffers: set[str] = set()
        self.twins: dict[Refinement, str] = {}  # an `in` view without its name -> name
        for r in p.refs:
            self.refs[r.into] = r
            self._index_ref(r)
        self.stmts: list[Statement | None] = []  # None: a store taken out
        self.stores: dict[str, list[int]] = {}
        self.loads: dict[str, str] = {}
        self.scalars: set[str] = set()
        self.top_number = -1  # the largest n of the scalars named like "$n"
        self.nested: set[str] = set()  # views that nested blocks refine
        for s in p.stmts:
            self._append(s)
        self._take_scalars(defined_scalars(p.stmts))

    # -- indexes ---------------------------------------------------------------------
    def _index_ref(self, r: Refinement) -> None:
        if r.dir in WRITE_DIRS:
            if r.from_ in self.p_out:
                self.ambiguous = True
            self.p_out[r.from_] = r
        if r.dir in READ_DIRS and r.from_:
            self.read_buffers.add(r.from_)
        if r.dir == "in" and not r.const:  # a renamed view has const False
            self.twins.setdefault(renamed_ref(r, ""), r.into)

    def _append(self, s: Statement) -> None:
        if isinstance(s, Store):
            self.stores.setdefault(s.ref, []).append(len(self.stmts))
        elif isinstance(s, Load):
            self.loads[s.ref] = s.into
        elif isinstance(s, Block):
            self.nested.update(x.from_ for x in s.refs)
        self.stmts.append(s)

    def _take_scalars(self, names: set[str]) -> None:
        self.scalars |= names
        for t in names:
            if t[1:].isdigit():
                self.top_number = max(self.top_number, int(t[1:]))

    def _fresh_scalar(self, name: str) -> str:
        """As ``_common.fresh_scalar`` over the scalars defined so far."""
        if name not in self.scalars:
            return name
        if name[1:].isdigit():
            return f"${self.top_number + 1}"
        return fresh(name, self.scalars)

    # -- the rewrite -----------------------------------------------------------------
    def absorb(
        self, q: Block, root_refs: Mapping[str, Refinement], read_later: Callable[[str], bool]
    ) -> bool:
        """Merge consumer ``q`` in when the pointwise rule holds (else change nothing)."""
        if not is_leaf(q) or ("contraction" in q.tags and not self.leaf):
            return False
        if self.has_special or self.ambiguous:
            return False
        shared = [r for r in q.refs if r.from_ in self.p_out]
        if not shared or any(b in self.read_buffers or b in self.p_out for b in writes(q)):
            return False
        first = self.p_out[shared[0].from_]
        theta = _point_map(self.frame, q, first, shared[0], root_refs)
        if theta is None:
            return False
        values = self._stored_values(shared, theta, root_refs)
        if values is None:
            return False
        self._merge(q, shared, values, theta, root_refs, read_later)
        return True

    def _stored_values(
        self,
        shared: list[Refinement],
        theta: dict[str, Affine],
        root_refs: Mapping[str, Refinement],
    ) -> dict[str, str] | None:
        """For each view of ``q`` on an output of ``P``: the scalar ``P`` stores there."""
        values: dict[str, str] = {}
        for r in shared:
            w = self.p_out[r.from_]
            if r.dir != "in" or w.dir != "out" or w.agg != "assign":
                return None
            if not (is_element(r) and is_element(w)) or r.shape != w.shape:
                return None
            if tuple(a.substitute(theta) for a in r.access) != w.access:
                return None
            if pointwise_dims(self.frame, w.access, root_refs[w.from_].shape.sizes) is None:
                return None
            stored = self.stores.get(w.into, [])
            if len(stored) != 1 or w.into in self.nested:
                return None
            store = self.stmts[stored[0]]
            assert isinstance(store, Store)
            values[r.into] = store.value
        return values

    def _merge(
        self,
        q: Block,
        shared: list[Refinement],
        values: dict[str, str],
        theta: dict[str, Affine],
        root_refs: Mapping[str, Refinement],
        read_later: Callable[[str], bool],
    ) -> None:
        # Views of q: drop those of P's outputs, share identical inputs, rename the rest.
        ref_map: dict[str, str] = {}
        reused: dict[str, str] = dict(values)  # q ref -> scalar of P that replaces its loads
        new_refs: list[Refinement] = []
        for r in q.refs:
            if r.into in values:
                continue
            moved = substitute_access(r, theta)
            twin = self.twins.get(renamed_ref(moved, "")) if r.dir == "in" else None
            if twin is not None:
                ref_map[r.into] = twin
                if twin in self.loads:
                    reused[r.into] = self.loads[twin]
                continue
            into = fresh(r.into, self.refs)
            new = renamed_ref(moved, into)
            self.refs[into] = new
            ref_map[r.into] = into
            new_refs.append(new)
        q_stmts = self._merge_scalars(q.stmts, reused, ref_map, theta)
        dropped = {
            self.p_out[b].into
            for b in {r.from_ for r in shared}
            if root_refs[b].dir == "none" and not read_later(b)
        }
        for into in dropped:
            del self.p_out[self.refs.pop(into).from_]
            for k in self.stores.pop(into, []):
                self.stmts[k] = None
        for r in new_refs:
            self._index_ref(r)
        for s in q_stmts:
            self._append(s)
        if "contraction" in q.tags:
            self.tags = set(q.tags)
        self.tags |= q.tags | {"fused"}
        if q.name:
            self.names.append(q.name)
        if q.comment:
            self.comments.append(q.comment)
        self._block = None

    def _merge_scalars(
        self,
        stmts: Sequence[Statement],
        loaded: dict[str, str],
        ref_map: dict[str, str],
        theta: dict[str, Affine],
    ) -> list[Statement]:
        """``stmts`` renamed to follow the statements so far (SSA).

        Loads of a ref in ``loaded`` disappear: their scalar becomes the given one.
        """
        scalars: dict[str, str] = {}
        out: list[Statement] = []
        for s in stmts:
            if isinstance(s, Load) and s.ref in loaded:
                scalars[s.into] = loaded[s.ref]
                continue
            into = getattr(s, "into", None)
            if isinstance(into, str) and not isinstance(s, Block):
                new = self._fresh_scalar(into)
                self._take_scalars({new})
                if new != into:
                    scalars[into] = new
            out.append(rename_stmt(s, scalars, ref_map, theta))
        return out

    def block(self) -> Block:
        """The kernel as a ``Block`` (``P`` itself while nothing was absorbed)."""
        if self._block is None:
            self._block = Block(
                idxs=self.original.idxs,
                refs=tuple(self.refs.values()),
                stmts=tuple(s for s in self.stmts if s is not None),
                constraints=self.original.constraints,
                tags=frozenset(self.tags),
                name=join_text(*self.names, sep="_"),
                comment=join_text(*self.comments, sep="; "),
            )
        return self._block


def _point_map(
    p: Block, q: Block, written: Refinement, read: Refinement, root_refs: Mapping[str, Refinement]
) -> dict[str, Affine] | None:
    """``q``'s indices as affines of ``p``'s, when both are pointwise on one buffer."""
    sizes = root_refs[written.from_].shape.sizes
    pd = pointwise_dims(p, written.access, sizes)
    qd = pointwise_dims(q, read.access, sizes)
    if pd is None or qd is None:
        return None
    theta = {i.name: Affine() for i in q.idxs}  # the indices left out have range 1
    for pn, qn in zip(pd, qd):
        if qn is not None:
            theta[qn] = Affine.index(pn) if pn is not None else Affine()
    return theta
