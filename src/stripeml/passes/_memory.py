"""Helpers shared by the memory passes (``localize``, ``scalarize``, ``cache``, ``place``, ``pad``).

* **uses** of a buffer: every load, store and special that touches a buffer
  visible in a block, through any chain of views in nested blocks, with the
  element (or box) it touches in the buffer's own coordinates.  Views keep
  their parent's strides, so coordinates compose by adding accesses.
* **isl sets** of those uses: which elements are touched at which points of
  the enclosing nest (footprints, coverage);
* **retargeting** a buffer's uses: renaming it, shifting the views that
  refine it and giving them (and every view below them) new strides;
* small things: byte sizes, fresh index names, option parsing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import islpy as isl

from ..ir.affine import Affine
from ..ir.dtypes import itemsize
from ..ir.isl import ge_constraint, nest_domain
from ..ir.nodes import Block, Load, Refinement, Special, Statement, Store, TensorShape

_SET = isl.dim_type.set

READ_KINDS = ("load", "read")
WRITE_KINDS = ("store", "write")


@dataclass(frozen=True)
class Use:
    """One access to a buffer, seen from the block that declares (or views) it.

    ``kind`` is ``load``/``store`` (one element) or ``read``/``write`` (a whole
    box: special inputs/outputs, and the prior values an ``inout`` view may
    read); ``stmt`` is the index, among the block's statements, of the
    statement holding it; ``path`` the nested blocks from that statement down
    to the block holding the access; ``offset``/``sizes`` the box touched, in
    the buffer's coordinates (a function of the nest's indices).
    """

    kind: str
    stmt: int
    path: tuple[Block, ...]
    offset: tuple[Affine, ...]
    sizes: tuple[int, ...]


def buffer_uses(stmts: Sequence[Statement], name: str, sizes: tuple[int, ...]) -> list[Use]:
    """Every use of the buffer ``name`` (of ``sizes``) by ``stmts`` and blocks nested in them."""
    out: list[Use] = []
    zero = tuple(Affine() for _ in sizes)
    for k, s in enumerate(stmts):
        _collect(s, name, zero, sizes, (), k, out)
    return out


def _collect(
    s: Statement,
    name: str,
    offset: tuple[Affine, ...],
    sizes: tuple[int, ...],
    path: tuple[Block, ...],
    top: int,
    out: list[Use],
) -> None:
    one = tuple(1 for _ in sizes)
    if isinstance(s, Load) and s.ref == name:
        out.append(Use("load", top, path, offset, one))
    elif isinstance(s, Store) and s.ref == name:
        out.append(Use("store", top, path, offset, one))
    elif isinstance(s, Special):
        if name in s.inputs:
            out.append(Use("read", top, path, offset, sizes))
        if name in s.outputs:
            out.append(Use("write", top, path, offset, sizes))
    elif isinstance(s, Block):
        for r in s.refs:
            if r.from_ != name:
                continue
            inner = tuple(o + a for o, a in zip(offset, r.access))
            if r.dir == "inout":  # the prior values may take part in the aggregation
                out.append(Use("read", top, (*path, s), inner, r.shape.sizes))
            for t in s.stmts:
                _collect(t, r.into, inner, r.shape.sizes, (*path, s), top, out)


def reads(uses: Iterable[Use]) -> bool:
    return any(u.kind in READ_KINDS for u in uses)


def writes(uses: Iterable[Use]) -> bool:
    return any(u.kind in WRITE_KINDS for u in uses)


# -- isl sets of uses -------------------------------------------------------------------


def elem_names(rank: int) -> tuple[str, ...]:
    """Dimension names for buffer coordinates (never index names: not identifiers)."""
    return tuple(f"@e{d}" for d in range(rank))


def outer_domain(outer: Sequence[Block]) -> isl.BasicSet:
    """The domain of the last of ``outer`` (outermost first) over the whole nest."""
    return nest_domain(list(outer))


def use_set(use: Use, outer: Sequence[Block]) -> isl.Set:
    """``{(outer indices, element) : the use touches element at that outer point}``.

    ``outer`` is the nest down to the block the buffer is seen from; the indices
    of the blocks in ``use.path`` are projected out.
    """
    dom = nest_domain([*outer, *use.path])
    n_outer = outer_domain(outer).dim(_SET)
    n_all = dom.dim(_SET)
    names = elem_names(len(use.offset))
    dom = dom.add_dims(_SET, len(names))
    for k, n in enumerate(names):
        dom = dom.set_dim_name(_SET, n_all + k, n)
    space = dom.get_space()
    for n, off, size in zip(names, use.offset, use.sizes):
        e = Affine.index(n)
        dom = dom.add_constraint(ge_constraint(e - off, space))
        dom = dom.add_constraint(ge_constraint(off + (size - 1) - e, space))
    dom = dom.project_out(_SET, n_outer, n_all - n_outer)
    return dom.to_set()


def union_set(uses: Iterable[Use], outer: Sequence[Block], rank: int) -> isl.Set:
    """The union of :func:`use_set` over ``uses`` (empty when there are none)."""
    result = isl.Set.empty(box_set(outer, (1,) * rank).get_space())
    for u in uses:
        result = result.union(use_set(u, outer))
    return result.coalesce()


def box_set(outer: Sequence[Block], sizes: Sequence[int]) -> isl.Set:
    """``{(outer indices, element) : outer point in its domain, 0 <= element < sizes}``."""
    dom = outer_domain(outer)
    n = dom.dim(_SET)
    names = elem_names(len(sizes))
    dom = dom.add_dims(_SET, len(names))
    for k, name in enumerate(names):
        dom = dom.set_dim_name(_SET, n + k, name)
    space = dom.get_space()
    for name, size in zip(names, sizes):
        e = Affine.index(name)
        dom = dom.add_constraint(ge_constraint(e, space))
        dom = dom.add_constraint(ge_constraint(Affine.constant(size - 1) - e, space))
    return dom.to_set()


def covers(uses: Iterable[Use], outer: Sequence[Block], sizes: Sequence[int]) -> bool:
    """Whether, at every point of ``outer``, ``uses`` together touch every element of the box."""
    return box_set(outer, sizes).is_subset(union_set(uses, outer, len(sizes)))


# -- rewriting the uses of a buffer -----------------------------------------------------


def with_strides(ref: Refinement, strides: tuple[int, ...]) -> Refinement:
    if ref.shape.strides == strides:
        return ref
    return replace(ref, shape=TensorShape(ref.shape.dtype, ref.shape.sizes, strides))


def retarget(
    stmts: Sequence[Statement],
    old: str,
    new: str,
    strides: tuple[int, ...],
    shift: Sequence[Affine] | None = None,
) -> tuple[Statement, ...]:
    """``stmts`` with the buffer ``old`` renamed ``new`` and re-laid out.

    Loads, stores and specials of ``old`` name ``new``; views of nested blocks
    that refine ``old`` refine ``new``, start ``shift`` earlier (per
    dimension) and have ``strides``, and so do all views below them.
    """
    out: list[Statement] = []
    for s in stmts:
        if isinstance(s, Load) and s.ref == old:
            s = Load(s.into, new)
        elif isinstance(s, Store) and s.ref == old:
            s = Store(new, s.value)
        elif isinstance(s, Special) and old in s.inputs + s.outputs:
            s = replace(
                s,
                inputs=tuple(new if i == old else i for i in s.inputs),
                outputs=tuple(new if o == old else o for o in s.outputs),
            )
        elif isinstance(s, Block) and any(r.from_ == old for r in s.refs):
            refs = []
            body = s.stmts
            for r in s.refs:
                if r.from_ == old:
                    access = r.access
                    if shift is not None:
                        access = tuple(a - d for a, d in zip(r.access, shift))
                    r = with_strides(replace(r, from_=new, access=access), strides)
                    body = retarget(body, r.into, r.into, strides)
                refs.append(r)
            s = replace(s, refs=tuple(refs), stmts=body)
        out.append(s)
    return tuple(out)


# -- small things -----------------------------------------------------------------------


def nbytes(shape: TensorShape) -> int:
    """Bytes of memory a buffer of ``shape`` spans."""
    return shape.extent * itemsize(shape.dtype)


def dense_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    return TensorShape.dense("f32", tuple(sizes)).strides


def nest_index_names(blocks: Iterable[Block]) -> set[str]:
    return {i.name for b in blocks for i in b.idxs}


def fresh_names(base: str, count: int, taken: Iterable[str]) -> list[str]:
    """``count`` names ``base0``, ``base1``, ... avoiding ``taken``."""
    used = set(taken)
    out: list[str] = []
    k = 0
    while len(out) < count:
        name = f"{base}{k}"
        if name not in used:
            out.append(name)
            used.add(name)
        k += 1
    return out


def as_names(value: object) -> tuple[str, ...]:
    """An option holding names: a string (comma separated) or a sequence of strings."""
    if isinstance(value, str):
        return tuple(w.strip() for w in value.split(",") if w.strip())
    return tuple(str(v) for v in value)  # type: ignore[union-attr]


def map_blocks(
    block: Block, fn: Callable[[Block, tuple[Block, ...]], Block], outer: tuple[Block, ...] = ()
) -> Block:
    """Apply ``fn(block, enclosing blocks)`` to every block, children first.

    ``fn`` sees the block with its children already rewritten and the
    enclosing blocks as they were; it returns the block itself when it has
    nothing to change, so unchanged trees keep their identity.
    """
    inner = (*outer, block)
    stmts = tuple(map_blocks(s, fn, inner) if isinstance(s, Block) else s for s in block.stmts)
    if any(a is not b for a, b in zip(stmts, block.stmts)):
        block = replace(block, stmts=stmts)
    return fn(block, outer)
