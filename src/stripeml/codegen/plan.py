"""What every code generator decides about a kernel, whatever it prints.

The LLVM generator (:mod:`.llvm_kernel`) and the C-style GPU generators
(:mod:`.cstyle_kernel`) walk Stripe blocks the same way; these are the
decisions they share, pure questions about blocks (no printing, no LLVM):

* **names**: :func:`sanitize`, :func:`kernel_symbol`, and the root buffers a
  kernel takes as parameters (:func:`stripeml.analysis.canonical.kernel_buffers`);
* **refinements** (:func:`views`): where a view starts in the underlying
  memory (:func:`view_offset`) and how generated code treats it, its *mode*
  (:func:`ref_mode`, the modes listed in :data:`MODES`);
* **aggregation**, the scope rule of ``docs/stripe-ir.md``: which scope
  accumulates in a register (:func:`register_scope`, which needs the store's
  address to be :func:`injective`), which loops a register accumulator
  runs inside (:func:`split_by_address`) and whether it needs a "touched" flag
  (:func:`needs_touched_flag`); every other scope first writes the
  aggregation's identity to the elements it touches, in a copy of its loop
  nest over the indices :func:`needed_in_init` keeps, into the views
  :func:`init_targets` names;
* **loops**: each constraint bounds the innermost loop it mentions, or becomes
  one guard (:func:`place_constraints`, :func:`bound_terms`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Protocol, TypeVar

from ..analysis.dependence import race_free_indices
from ..ir.affine import Affine
from ..ir.nodes import Block, Constraint, Refinement, Special, Store

#: Stripe's comparison intrinsics as C operators (llvmlite spells its integer
#: and float predicates the same way).
COMPARISONS = {
    "cmp_lt": "<",
    "cmp_le": "<=",
    "cmp_gt": ">",
    "cmp_ge": ">=",
    "cmp_eq": "==",
    "cmp_ne": "!=",
}

#: How generated code treats a refinement (:func:`ref_mode`).
MODES = {
    "read": "an input view: only loaded",
    "plain": "stored as is (no aggregation, or assign; also allocations)",
    "scope": "aggregates while its parent does not: the scope rule picks reg or mem",
    "reg": "accumulates in a register, stored once at the end",
    "mem": "accumulates in memory, after the identity was written",
    "init": "in the identity-writing copy: its elements receive the identity",
    "skip": "in the identity-writing copy: not touched",
}


# -- names ---------------------------------------------------------------------


def sanitize(name: str) -> str:
    """``name`` as a C / LLVM identifier fragment: other characters become ``_``."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "kernel"


def kernel_symbol(position: int, kernel: Block) -> str:
    """The function name of the kernel that is root statement number ``position``."""
    return f"k{position}_{sanitize(kernel.name)}"


def index_names(blk: Block) -> set[str]:
    """The names of ``blk``'s own indices."""
    return {i.name for i in blk.idxs}


# -- refinements -------------------------------------------------------------------


class View(Protocol):
    """What :func:`views` needs of a backend's binding of a parent refinement."""

    offset: Affine
    mode: str


V = TypeVar("V", bound=View)


def views(
    blk: Block, prefs: Mapping[str, V], init: Collection[int] | None
) -> Iterator[tuple[Refinement, V | None, Affine, str]]:
    """``(ref, parent, offset, mode)`` for each refinement of ``blk``, in order.

    ``prefs``: the bindings of the enclosing block's refinements, by name;
    ``init``: the ids of those an identity-writing copy of ``blk`` initialises
    (:func:`init_targets`), ``None`` when emitting ``blk`` itself.  An
    allocation has no parent, offset 0 and mode ``plain`` (``skip`` in a copy).
    """
    for r in blk.refs:
        if r.dir == "none":
            yield r, None, Affine(), "skip" if init is not None else "plain"
            continue
        p = prefs[r.from_]
        target = init is not None and id(p) in init
        mode = ref_mode(r, p.mode, init=init is not None, target=target)
        yield r, p, view_offset(p.offset, r), mode


def view_offset(parent: Affine, ref: Refinement) -> Affine:
    """The element offset of view ``ref``'s origin, given its parent's (``parent``):
    views keep their parent's strides, so offsets compose by addition."""
    off = parent
    for a, st in zip(ref.access, ref.shape.strides):
        off = off + a * st
    return off


def ref_mode(ref: Refinement, parent_mode: str, init: bool = False, target: bool = False) -> str:
    """The mode (:data:`MODES`) of view ``ref`` (not an allocation) whose parent
    has ``parent_mode``.

    ``init``: the block is being emitted as an identity-writing copy, and
    ``target`` says whether the parent is one of the views it initialises
    (:func:`init_targets`).
    """
    if init:
        if target or parent_mode == "init":
            return "init"
        return "read" if ref.dir == "in" else "skip"
    if ref.dir == "in":
        return "read"
    if ref.agg in ("", "assign"):
        return "plain"
    mode = parent_mode if parent_mode in ("mem", "reg") else "scope"
    if ref.dir == "inout" and mode == "scope":
        return "mem"  # the element's old value is aggregated too: no identity first
    return mode


# -- aggregation ---------------------------------------------------------------------


def injective(offset: Affine, blk: Block, names: Collection[str] | None = None) -> bool:
    """Whether distinct points of ``blk``'s indices (``names`` of them, default all)
    in ``offset`` reach distinct elements (mixed-radix test: each coefficient exceeds
    the span of all smaller ones)."""
    own = index_names(blk) if names is None else set(names)
    terms = sorted((abs(c), blk.idx(n).range) for n, c in offset.terms if n in own)
    span = 0
    for c, r in terms:
        if c <= span:
            return False
        span += c * (r - 1)
    return True


def register_scope(blk: Block, scopes: Mapping[str, Affine]) -> str | None:
    """The scope ref of ``blk`` that accumulates in a register, or ``None``.

    ``scopes`` maps each ref in mode ``scope`` to its element offset.  A
    register works for a leaf block whose only store is to its only scope, at
    an address :func:`injective` in the block's indices (else several points
    share an element, and it accumulates in memory).
    """
    if len(scopes) != 1 or blk.sub_blocks:
        return None
    ((name, offset),) = scopes.items()
    stores = [s for s in blk.stmts if isinstance(s, Store)]
    if len(stores) != 1 or stores[0].ref != name:
        return None
    if any(isinstance(s, Special) for s in blk.stmts):
        return None
    return name if injective(offset, blk) else None


def deferred_scope(blk: Block, scopes: Collection[str] = ()) -> bool:
    """Whether ``blk``'s scopes may be left to the one statement that writes them, a
    block: when no two points of ``blk`` write one element (every index race-free,
    decided by :func:`~stripeml.analysis.dependence.race_free_indices`), each element
    is aggregated by one instance of that block alone, which is then the scope (it
    writes the identity first, or keeps the element in a register), instead of
    ``blk`` writing the identity to every element in a separate pass first.  A
    ``#register_tile`` below a kernel of tiles (``unroll``) so starts from the
    identity in registers.  Each view of ``scopes`` must be touched by one of the
    statement blocks alone (the others: a packed panel's copy before the tiles;
    the other kernels of a ``nest``)."""
    subs = [s for s in blk.stmts if isinstance(s, Block)]
    if not subs or len(subs) != len(blk.stmts):
        return False
    for name in scopes:
        if sum(any(r.from_ == name for r in s.refs) for s in subs) != 1:
            return False
    names = {i.name for i in blk.idxs if i.range > 1}
    return names <= set(race_free_indices(blk))


def split_by_address(order: list[str], offset: Affine) -> tuple[list[str], list[str]]:
    """``order`` split into the indices of a register accumulator's address (the
    loops outside it: one accumulator per element) and the rest (the reduction
    loops inside), each in ``order``'s order."""
    addr = set(offset.names)
    return [n for n in order if n in addr], [n for n in order if n not in addr]


def needs_touched_flag(blk: Block, inner: list[str]) -> bool:
    """Whether a register accumulator whose reduction runs over ``inner`` needs a
    flag saying that some point reached it: only constraints on those indices can
    leave an element without points (which must then keep its contents)."""
    return any(n in inner for c in blk.constraints for n in c.expr.names)


def needed_in_init(blk: Block, name: str, written: Collection[str] | None = None) -> bool:
    """In the identity-writing copy, an index matters if it can change which elements
    are touched: of the refs ``written`` (the views it initialises; default: every
    output)."""
    if blk.sub_blocks:
        return True
    if any(name in c.expr.names for c in blk.constraints):
        return True
    return any(
        r.dir in ("out", "inout")
        and (written is None or r.into in written)
        and any(name in a.names for a in r.access)
        for r in blk.refs
    )


def init_targets(prefs: Mapping[str, object], blk: Block, names: Collection[str]) -> set[int]:
    """The parent binds (by ``id``) that ``blk``'s refs ``names`` refine: the views
    an identity-writing copy of ``blk`` initialises (``ref_mode(..., target=True)``)."""
    out = set()
    for r in blk.refs:
        if r.into in names and r.from_ in prefs:
            out.add(id(prefs[r.from_]))
    return out


# -- loops ---------------------------------------------------------------------------


def place_constraints(
    blk: Block,
    order: list[str],
    bound: Collection[str],
    guards_here: bool,
    bound_own: Collection[str] = (),
) -> tuple[list[Constraint], dict[str, list[Constraint]]]:
    """(guards, bounds per loop) for loops over ``order`` (indices of ``blk``).

    Each constraint bounds the innermost loop of ``order`` it mentions.  One
    that mentions an index of ``blk`` neither in ``order`` nor in ``bound``
    (the names already bound) belongs to a loop another call emits (the
    reduction loops inside a register accumulator) and is left out.  With
    ``guards_here``, a constraint on bound names only becomes a guard around
    the loops, provided every index of ``blk`` it mentions is in ``bound_own``
    (indices the caller bound itself, such as GPU work-item indices).
    """
    pos = {n: i for i, n in enumerate(order)}
    own = index_names(blk)
    guards: list[Constraint] = []
    per_loop: dict[str, list[Constraint]] = {n: [] for n in order}
    for c in blk.constraints:
        names = [n for n in c.expr.names if n in pos]
        if any(n in own and n not in pos and n not in bound for n in c.expr.names):
            continue
        if names:
            per_loop[max(names, key=pos.__getitem__)].append(c)
        elif guards_here and all(n in bound_own for n in c.expr.names if n in own):
            guards.append(c)
    return guards, per_loop


def bound_terms(c: Constraint, name: str, base: Affine) -> tuple[int, Affine]:
    """``(coef, rest)`` with ``c`` reading ``coef * v + rest >= 0`` for the loop
    variable ``v`` of index ``name`` (whose value is ``base + v``): a lower bound
    ``v >= ceil(-rest / coef)`` when ``coef > 0``, else the upper bound
    ``v <= floor(rest / -coef)``."""
    coef = c.expr.coeff(name)
    return coef, c.expr - Affine.index(name, coef) + base * coef
