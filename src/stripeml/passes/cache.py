"""``cache``: stage a block's views through dense buffers in a faster memory.

For every selected block ``B`` (tags matching ``select``; never the root or a
``#copy`` block) and every view ``V`` of ``B`` chosen by ``dirs``:

* a ``none`` buffer ``V_<location>`` of ``B`` in ``location``, with ``V``'s
  sizes and a dense row-major layout (fresh per point of ``B``);
* **input** (nothing under ``B`` writes ``V``): a copy-in block (``#copy
  #cache_in``) first in ``B``, one point per element of ``V`` (indices for the
  dimensions of size > 1), loading ``V`` and storing into the buffer;
* **output** (nothing under ``B`` reads ``V``): a copy-out block (``#copy
  #cache_out``) last in ``B``, loading the buffer and storing through ``V``
  with ``V``'s aggregation;
* every use of ``V`` in ``B`` moves to the buffer: ``B``'s loads, and the views
  of nested blocks, which keep their accesses (the buffer's origin is ``V``'s)
  and take the buffer's dense strides, as do all views below them.

Legality:

* an input's copy reads what the compute would have read: views read the
  storage as it was when the enclosing aggregation scope began, which nothing
  inside ``B`` changes;
* an output's nested views now aggregate into the buffer, each nested block
  being its own aggregation scope, and the copy-out stores each buffer element
  once per point of ``B`` through ``V``.  Aggregations are associative and
  commutative, so the combined value per element is the original one, *if*
  the compute stores every element of ``V`` at every point of ``B``: isl must
  show that the stores cover ``V``'s box at every point of ``B`` (otherwise
  the copy-out would store elements the compute never stored, replacing their
  contents or racing an ``assign``).  Views stored to directly by ``B``'s own
  statements or by a special of ``B`` are not cached (those are plain writes
  into an allocation, not aggregated);
* a view that is both read and written under ``B`` (through ``inout`` views,
  whose prior values take part) is not cached;
* a view whose buffer already lives in ``location``, of zero size, or used
  only by copy blocks (``#copy``: already staged, by this pass or another) is
  left alone, so a second run changes nothing.

Options: ``location`` (the memory of the new buffers), ``select`` (the
blocks to work on: a tag selector, :mod:`stripeml.analysis.select`, e.g.
``tiled`` or ``kernel,!fill``), ``dirs`` (``in``, ``out``, or
``all``/``inout`` for both),
``max_bytes`` (at most this many bytes of buffers in ``location`` per block,
those it already has included; views are taken in declaration order while
they fit; ``0``: no limit).

Requires: verified IR.  Guarantees: the same results, verified IR, the same
object when nothing was cached, a fixed point.  New buffers have no
``offset``: run ``place`` afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from ..analysis.access import Access, touched, touched_union, uses
from ..analysis.coverage import covers
from ..analysis.domain import nest_names
from ..analysis.memory import allocation_bytes
from ..analysis.select import parse_selector
from ..errors import OptionError
from ..ir.affine import Affine
from ..ir.nodes import (
    Block,
    Constant,
    Index,
    Load,
    Program,
    Refinement,
    Statement,
    Store,
    TensorShape,
)
from ._common import agg_identity, fresh, fresh_names
from ._rewrite import map_blocks, retarget
from .registry import check_location_names, check_non_negative, check_selector, register

_DIRS = {"in": ("in",), "out": ("out",), "all": ("in", "out"), "inout": ("in", "out")}
_CACHE_TAGS = {"cache_in", "cache_out", "cache_init"}
_IDENTITY_AGGS = ("add", "mul", "max", "min")


@register
@dataclass(frozen=True)
class Cache:
    """Copy the views of selected blocks into dense buffers in ``location``."""

    location: str = "L1"
    select: str = "tiled"
    dirs: str = "all"
    max_bytes: int = 0
    name: ClassVar[str] = "cache"
    layer_local: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_selector(self)
        if len(check_location_names(self, "location")) != 1 or "," in self.location:
            raise OptionError(
                "location",
                f"pass 'cache': option 'location' must be one location name, got {self.location!r}",
            )
        check_non_negative(self, "max_bytes")
        if self.dirs not in _DIRS:
            raise OptionError(
                "dirs",
                f"pass 'cache': option 'dirs' must be one of {', '.join(_DIRS)}, got {self.dirs!r}",
            )

    def run(self, program: Program) -> Program:
        match = parse_selector(self.select)

        def visit(block: Block, outer: tuple[Block, ...]) -> Block:
            if not outer or block.tags & {"copy", *_CACHE_TAGS} or not match(block.tags):
                return block
            return self._cache_block(block, outer)

        root = map_blocks(program.root, visit)
        return program if root is program.root else Program(root)

    def _cache_block(self, block: Block, outer: tuple[Block, ...]) -> Block:
        nest = (*outer, block)
        taken_refs = {r.into for r in block.refs}
        taken_idxs = set(nest_names(nest))
        budget = None
        if self.max_bytes > 0:
            present = [r for r in block.refs if r.dir == "none" and r.location == self.location]
            budget = self.max_bytes - sum(allocation_bytes(r) for r in present)
        refs = list(block.refs)
        stmts = block.stmts
        before: list[Statement] = []
        after: list[Statement] = []
        for view in block.refs:
            kind = self._kind(view, stmts, nest, outer)
            if kind is None:
                continue
            shape = TensorShape.dense(view.shape.dtype, view.shape.sizes)
            cname = fresh(f"{view.into}_{self.location.lower()}", taken_refs)
            buffer = Refinement("none", cname, shape, location=self.location)
            size = allocation_bytes(buffer)
            if budget is not None:
                if size > budget:
                    continue
                budget -= size
            taken_refs.add(cname)
            refs.append(buffer)
            if kind == "in":
                before.append(_copy_block(view, cname, shape.strides, "in", taken_idxs))
            else:
                if kind == "out_init":
                    before.append(_init_block(view, cname, shape.strides, taken_idxs))
                after.append(_copy_block(view, cname, shape.strides, "out", taken_idxs))
            stmts = retarget(stmts, view.into, cname, shape.strides)
        if not before and not after:
            return block
        return replace(block, refs=tuple(refs), stmts=(*before, *stmts, *after))

    def _kind(
        self,
        view: Refinement,
        stmts: tuple[Statement, ...],
        nest: tuple[Block, ...],
        outer: tuple[Block, ...],
    ) -> str | None:
        """``in``, ``out`` or ``out_init`` when ``view`` is to be cached (see the legality rules)."""
        if view.dir == "none" or 0 in view.shape.sizes:
            return None
        if _chain(view, outer)[1].location == self.location:
            return None
        found = uses(stmts, view.into, view.shape.sizes)
        users = {u.stmt for u in found}
        if not users or all(_is_copy_block(stmts[k]) for k in users):
            return None
        wanted = _DIRS[self.dirs]
        reads, writes = any(u.read for u in found), any(u.write for u in found)
        if reads and not writes:
            return "in" if "in" in wanted and view.dir in ("in", "inout") else None
        if writes and not reads and "out" in wanted and view.dir != "in":
            if any(not u.path for u in found):
                return None  # stored by the block itself: plain writes, not aggregated
            if covers(found, nest, view.shape.sizes):
                return "out"
            if view.agg in _IDENTITY_AGGS and _covered_in_scope(found, view, nest):
                return "out_init"
        return None


def _is_copy_block(stmt: Statement) -> bool:
    return isinstance(stmt, Block) and bool(stmt.tags & {"copy", *_CACHE_TAGS})


def _chain(view: Refinement, outer: Sequence[Block]) -> tuple[int, Refinement, tuple[Affine, ...]]:
    """The buffer ``view`` refines: the index in ``outer`` of the block declaring it (the
    root or an allocation's block), its refinement, and ``view``'s origin in it."""
    ref, origin = view, view.access
    for j in range(len(outer) - 1, -1, -1):
        ref = outer[j].ref(ref.from_)
        if not ref.from_:
            return j, ref, origin
        origin = tuple(a + b for a, b in zip(origin, ref.access))
    raise AssertionError("unreachable: a view chain ends at a root ref or an allocation")


def _covered_in_scope(found: list[Access], view: Refinement, nest: tuple[Block, ...]) -> bool:
    """Whether, within each point of the block declaring ``view``'s buffer (one instance of
    the aggregation scope), some point stores each element of every box ``view`` takes.

    ``nest`` ends with the block holding ``view``; ``found`` are seen from it.
    """
    owner, buffer, origin = _chain(view, nest[:-1])
    around, below = nest[: owner + 1], nest[owner + 1 :]
    # The same accesses seen from the block declaring the buffer (the sets need only
    # their paths, element affines and sizes).
    seen = [
        replace(
            u,
            buffer=buffer.into,
            path=(*below, *u.path),
            exprs=tuple(o + x for o, x in zip(origin, u.exprs)),
        )
        for u in found
    ]
    box = Access(buffer.into, view.into, "view", 0, below, origin, view.shape.sizes)
    return touched(box, around).is_subset(touched_union(seen, around, len(origin)))


def _init_block(view: Refinement, cname: str, strides: tuple[int, ...], taken: set[str]) -> Block:
    """Fill the cache ``cname`` of output ``view`` with its aggregation's identity."""
    idxs, access = _copy_indices(view.shape.sizes, taken)
    ones = tuple(1 for _ in access)
    dtype = view.shape.dtype
    return Block(
        idxs=idxs,
        refs=(
            Refinement("out", cname, TensorShape(dtype, ones, strides), cname, access, "assign"),
        ),
        stmts=(
            Constant(f"${cname}", agg_identity(view.agg, dtype), dtype),
            Store(cname, f"${cname}"),
        ),
        tags=frozenset({"cache_init"}),
        name=f"{view.into}_cache_init",
    )


def _copy_indices(
    sizes: tuple[int, ...], taken: set[str]
) -> tuple[tuple[Index, ...], tuple[Affine, ...]]:
    """One index per dimension of size > 1 (fresh names), and the access they make."""
    names = iter(fresh_names("c", sum(1 for s in sizes if s > 1), taken))
    idxs: list[Index] = []
    access: list[Affine] = []
    for s in sizes:
        if s > 1:
            idxs.append(Index(next(names), s))
            access.append(Affine.index(idxs[-1].name))
        else:
            access.append(Affine())
    return tuple(idxs), tuple(access)


def _copy_block(
    view: Refinement, cname: str, strides: tuple[int, ...], kind: str, taken: set[str]
) -> Block:
    """The copy between ``view`` and its cache ``cname`` (``kind`` ``in``: into the cache)."""
    idxs, acc = _copy_indices(view.shape.sizes, taken)
    ones = tuple(1 for _ in acc)
    src_shape = TensorShape(view.shape.dtype, ones, view.shape.strides)
    dst_shape = TensorShape(view.shape.dtype, ones, strides)
    if kind == "in":
        refs = (
            Refinement("in", view.into, src_shape, view.into, acc),
            Refinement("out", cname, dst_shape, cname, acc, "assign"),
        )
        stmts: tuple[Statement, ...] = (
            Load(f"${view.into}", view.into),
            Store(cname, f"${view.into}"),
        )
    else:
        refs = (
            Refinement("in", cname, dst_shape, cname, acc),
            Refinement("out", view.into, src_shape, view.into, acc, view.agg),
        )
        stmts = (Load(f"${cname}", cname), Store(view.into, f"${cname}"))
    return Block(
        idxs=idxs,
        refs=refs,
        stmts=stmts,
        tags=frozenset({"copy", f"cache_{kind}"}),
        name=f"{view.into}_cache_{kind}",
    )
