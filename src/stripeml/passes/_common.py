"""Small IR helpers shared by passes (not a pass itself).

* data flow of root statements: which root buffers a kernel or special reads
  and writes;
* fresh names and scalar renaming, for merging statement lists under SSA;
* option values that list names;
* the *pointwise* test: a kernel whose points are in one-to-one
  correspondence with the elements of a buffer it accesses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from ..ir.affine import Affine
from ..ir.dtypes import is_float, to_numpy
from ..ir.nodes import (
    Block,
    Constant,
    Intrinsic,
    Load,
    LoadIndex,
    Program,
    Refinement,
    Special,
    Statement,
    Store,
)

READ_DIRS = ("in", "inout")
WRITE_DIRS = ("out", "inout")
TOUCH_DIRS = ("in", "out", "inout")  # READ_DIRS and WRITE_DIRS together


# -- data flow at the root ----------------------------------------------------------


def reads(stmt: Statement) -> set[str]:
    """Root buffers a root statement may read (its ``in``/``inout`` views, special inputs)."""
    if isinstance(stmt, Block):
        return {r.from_ for r in stmt.refs if r.dir in READ_DIRS and r.from_}
    if isinstance(stmt, Special):
        return set(stmt.inputs)
    return set()


def touches(stmt: Statement, name: str) -> bool:
    """Whether a root statement may read or write the root buffer ``name``:
    ``name in reads(stmt) | writes(stmt)``, without building the sets (passes
    ask it of every statement before or after one)."""
    if isinstance(stmt, Block):
        return bool(name) and any(r.from_ == name and r.dir in TOUCH_DIRS for r in stmt.refs)
    if isinstance(stmt, Special):
        return name in stmt.inputs or name in stmt.outputs
    return False


def writes(stmt: Statement) -> set[str]:
    """Root buffers a root statement may write (its ``out``/``inout`` views, special outputs)."""
    if isinstance(stmt, Block):
        return {r.from_ for r in stmt.refs if r.dir in WRITE_DIRS and r.from_}
    if isinstance(stmt, Special):
        return set(stmt.outputs)
    return set()


def rewrite_until_fixed(
    root: Block, at: Callable[[Block, int], Block | None], resume: bool = False
) -> Block:
    """``root`` rewritten at its first statement ``k`` where ``at(root, k)`` gives a
    new root, again and again until no statement gives one (``root`` itself when
    none ever does).  Each rewrite must remove something, so this ends.

    ``resume``: after a rewrite at ``k`` (which removed statement ``k``), look on
    from ``k`` instead of from the first statement, and sweep again from the
    first once the last is passed, until a whole sweep rewrites nothing: the
    same fixed point for a rewrite that removes the statement it is asked about,
    without rescanning what comes before it after every rewrite."""
    changed = True
    while changed:
        changed = False
        k = 0
        while k < len(root.stmts):
            new = at(root, k)
            if new is None:
                k += 1
                continue
            root, changed = new, True
            if not resume:
                break
    return root


def refined_below(block: Block, name: str) -> bool:
    """Whether a block or special nested in ``block`` uses its view ``name``."""
    return any(
        isinstance(s, Block) and any(r.from_ == name for r in s.refs) for s in block.stmts
    ) or any(isinstance(s, Special) and name in (*s.inputs, *s.outputs) for s in block.stmts)


def copy_views(s: Statement) -> tuple[Refinement, Refinement] | None:
    """``(source view, destination view)`` when ``s`` is a leaf copy kernel: no
    constraints, two views (an ``in`` and an ``assign`` ``out``), and exactly
    ``$x = load(source)``, ``destination = store($x)``."""
    if not isinstance(s, Block) or s.constraints or s.sub_blocks or len(s.stmts) != 2:
        return None
    if len(s.refs) != 2:
        return None
    src = next((r for r in s.refs if r.dir == "in"), None)
    dst = next((r for r in s.refs if r.dir == "out"), None)
    if src is None or dst is None or dst.agg not in ("", "assign"):
        return None
    load, store = s.stmts
    if not (
        isinstance(load, Load)
        and isinstance(store, Store)
        and load.ref == src.into
        and store.ref == dst.into
        and store.value == load.into
    ):
        return None
    return src, dst


def is_leaf(block: Block) -> bool:
    """A block whose statements are all scalar (no nested blocks, no specials)."""
    return not any(isinstance(s, (Block, Special)) for s in block.stmts)


# -- names ------------------------------------------------------------------------------


def fresh(base: str, taken: Collection[str]) -> str:
    """``base`` if it is free, else ``base_1``, ``base_2`` ... (the first free one)."""
    if base not in taken:
        return base
    k = 1
    while f"{base}_{k}" in taken:
        k += 1
    return f"{base}_{k}"


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


def as_names(value: str | Iterable[object]) -> tuple[str, ...]:
    """An option holding names: a string (comma separated) or a sequence of strings."""
    if isinstance(value, str):
        return tuple(w.strip() for w in value.split(",") if w.strip())
    return tuple(str(v) for v in value)


def fresh_scalar(name: str, taken: Collection[str]) -> str:
    """A free scalar name for ``name``: numbered ones (``$3``) continue the numbering."""
    if name not in taken:
        return name
    if name[1:].isdigit():
        numbers = [int(t[1:]) for t in taken if t[1:].isdigit()]
        return f"${max(numbers) + 1}"
    return fresh(name, taken)


def defined_scalars(stmts: Iterable[Statement]) -> set[str]:
    """Scalars defined by ``stmts`` (not those of nested blocks)."""
    out = set()
    for s in stmts:
        if isinstance(s, (Load, LoadIndex, Constant, Intrinsic)):
            out.add(s.into)
    return out


def rename_stmt(
    stmt: Statement,
    scalars: Mapping[str, str],
    refs: Mapping[str, str],
    idxs: Mapping[str, Affine] | None = None,
) -> Statement:
    """``stmt`` with scalars, refs and (in ``index`` statements) indices renamed.

    Only for scalar statements; nested blocks and specials are returned with
    their ref names renamed (specials) or unchanged (blocks).
    """

    def s(name: str) -> str:
        return scalars.get(name, name)

    def r(name: str) -> str:
        return refs.get(name, name)

    if isinstance(stmt, Load):
        return Load(s(stmt.into), r(stmt.ref))
    if isinstance(stmt, Store):
        return Store(r(stmt.ref), s(stmt.value))
    if isinstance(stmt, LoadIndex):
        expr = stmt.expr.substitute(idxs) if idxs else stmt.expr
        return LoadIndex(s(stmt.into), expr)
    if isinstance(stmt, Constant):
        return Constant(s(stmt.into), stmt.value, stmt.dtype)
    if isinstance(stmt, Intrinsic):
        return Intrinsic(stmt.op, tuple(s(i) for i in stmt.inputs), s(stmt.into), stmt.dtype)
    if isinstance(stmt, Special):
        return Special(
            stmt.op,
            tuple(r(i) for i in stmt.inputs),
            tuple(r(o) for o in stmt.outputs),
            stmt.params,
        )
    return stmt


def substitute_access(ref: Refinement, idxs: Mapping[str, Affine]) -> Refinement:
    """``ref`` with its access affines substituted."""
    access = tuple(a.substitute(idxs) for a in ref.access)
    if access == ref.access:
        return ref
    return Refinement(
        ref.dir, ref.into, ref.shape, ref.from_, access, ref.agg, ref.location, ref.offset
    )


def renamed_ref(ref: Refinement, into: str) -> Refinement:
    """``ref`` under another local name."""
    return Refinement(
        ref.dir, into, ref.shape, ref.from_, ref.access, ref.agg, ref.location, ref.offset
    )


def join_text(*parts: str, sep: str) -> str:
    """Non-empty ``parts`` joined with ``sep``."""
    return sep.join(p for p in parts if p)


# -- pointwise kernels ------------------------------------------------------------------


def single_index(expr: Affine) -> str | None:
    """The index name when ``expr`` is exactly ``1 * name``."""
    if expr.const == 0 and len(expr.terms) == 1 and expr.terms[0][1] == 1:
        return expr.terms[0][0]
    return None


def pointwise_dims(
    block: Block, access: Sequence[Affine], sizes: Sequence[int], every_index: bool = True
) -> tuple[str | None, ...] | None:
    """Per dimension, the index of ``block`` that walks it, when the map is one-to-one.

    ``access`` is the (single-element) view of a buffer of ``sizes``.  The
    result is not ``None`` exactly when ``block``'s points correspond one to one
    to the buffer's elements through ``access``: the block has no constraints
    and no index offsets; each dimension is accessed either by a distinct index
    with coefficient 1 and the dimension's size as range, or (size 1) by the
    constant 0 (``None`` in the result); and every index of range > 1 appears
    (not asked with ``every_index`` false: a contraction's output view, whose
    summed indices are elsewhere).  Indices of range 1 count as 0 in a
    dimension that another index walks.
    """
    if block.constraints or any(i.affine is not None for i in block.idxs):
        return None
    if len(access) != len(sizes):
        return None
    ranges = {i.name: i.range for i in block.idxs}
    # An index over one point is 0: ``T[128 * i0 + i1, i2]`` with ``i0`` over one
    # point (a reshape to ``[1, 128, 3072]`` made an access) walks ``T`` as ``[i1, i2]``.
    zero = {n: Affine() for n, r in ranges.items() if r == 1}
    dims: list[str | None] = []
    for expr, size in zip(access, sizes):
        if zero and single_index(expr) is None and any(n in zero for n in expr.names):
            expr = expr.substitute(zero)
        name = single_index(expr)
        if name is not None and name in ranges and name not in dims and ranges[name] == size:
            dims.append(name)
        elif expr.is_constant and expr.const == 0 and size == 1:
            dims.append(None)
        else:
            return None
    if every_index and any(r > 1 and n not in dims for n, r in ranges.items()):
        return None
    return tuple(dims)


def is_element(ref: Refinement) -> bool:
    """A view of exactly one element."""
    return all(s == 1 for s in ref.shape.sizes)


def inside_nests(program: Program, run: Callable[[Program], Program]) -> Program:
    """``program`` with ``run`` applied to each ``#nest`` kernel's statements, the
    nest standing in for the root (its views and allocations are the buffers)."""
    stmts = []
    for s in program.root.stmts:
        if isinstance(s, Block) and "nest" in s.tags:
            inner = run(Program(s)).root
            if inner is not s:
                s = replace(s, refs=inner.refs, stmts=inner.stmts)
        stmts.append(s)
    if all(a is b for a, b in zip(stmts, program.root.stmts)):
        return program
    return Program(program.root.with_stmts(tuple(stmts)))


def agg_identity(agg: str, dtype: str) -> int | float | bool:
    """The neutral element of aggregation ``agg`` as a constant of ``dtype`` (a cache's
    starting value; the halo of a padded max pool: ``-inf``, or the type's least)."""
    if dtype == "bool":
        return {"add": False, "mul": True, "max": False, "min": True}[agg]
    if agg in ("add", "mul"):
        value = 0 if agg == "add" else 1
        return float(value) if is_float(dtype) else value
    if is_float(dtype):
        return -math.inf if agg == "max" else math.inf
    info = np.iinfo(to_numpy(dtype))
    return int(info.min) if agg == "max" else int(info.max)
