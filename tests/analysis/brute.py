"""Brute-force oracles for the analyses: enumerate points and elements in Python loops.

Nothing here uses isl: points of a nest are the integer tuples of each
block's index box (offsets evaluated at the enclosing point) that satisfy the
constraints; accesses are evaluated point by point.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from hypothesis import strategies as st

from stripeml.ir import (
    Affine,
    Block,
    Constant,
    Constraint,
    Index,
    Load,
    Refinement,
    Special,
    Store,
    TensorShape,
)


def nest_points(blocks: Sequence[Block], env: dict[str, int] | None = None) -> Iterator[dict]:
    """Every point of the innermost block over the nest, as ``{index: value}``."""
    env = dict(env or {})
    if not blocks:
        yield env
        return
    block, rest = blocks[0], blocks[1:]
    bases = [i.affine.evaluate(env) if i.affine is not None else 0 for i in block.idxs]
    for values in itertools.product(*(range(i.range) for i in block.idxs)):
        point = dict(env)
        point.update({i.name: b + v for i, b, v in zip(block.idxs, bases, values)})
        if all(c.expr.evaluate(point) >= 0 for c in block.constraints):
            yield from nest_points(rest, point)


def elements(exprs: Sequence[Affine], sizes: Sequence[int], point: dict) -> Iterator[tuple]:
    """The elements ``exprs(point) + [0, sizes)``."""
    origin = [e.evaluate(point) for e in exprs]
    for off in itertools.product(*(range(s) for s in sizes)):
        yield tuple(o + x for o, x in zip(origin, off))


# -- random kernels -------------------------------------------------------------------------

INDEX_NAMES = ("i", "j", "k")


@st.composite
def affines_of(draw, names: Sequence[str], coeffs=(-2, -1, 0, 1, 2), consts=(-2, 2)) -> Affine:
    return Affine.build(
        {n: draw(st.sampled_from(coeffs)) for n in names}, draw(st.integers(*consts))
    )


@st.composite
def kernels(draw, max_refs: int = 3, constraints: bool = True) -> Block:
    """A small root-level kernel: 1-3 indices, random affine accesses, maybe a constraint.

    Views read (``in``) or write (``out``, ``add``) buffers ``B0``, ``B1`` (each of one rank); sizes are
    not checked against any parent (the analyses do not need them).
    """
    n = draw(st.integers(1, 3))
    idxs = tuple(Index(INDEX_NAMES[k], draw(st.integers(1, 5))) for k in range(n))
    names = [i.name for i in idxs]
    cons = ()
    if constraints and draw(st.booleans()):
        cons = (Constraint(draw(affines_of(names, consts=(-1, 4)))),)
    refs, stmts = [], []
    ranks = [draw(st.integers(0, 2)) for _ in range(2)]
    for r in range(draw(st.integers(1, max_refs))):
        b = draw(st.integers(0, 1))
        buffer, rank = f"B{b}", ranks[b]
        access = tuple(draw(affines_of(names)) for _ in range(rank))
        sizes = tuple(draw(st.sampled_from((1, 1, 2))) for _ in range(rank))
        shape = TensorShape("f32", sizes, tuple(range(rank, 0, -1)))
        write = draw(st.booleans())
        name = f"R{r}"
        if write:
            refs.append(Refinement("out", name, shape, buffer, access, "add"))
            stmts.append(("store", name))
        else:
            refs.append(Refinement("in", name, shape, buffer, access))
            stmts.append(("load", name))
    body: list = [Constant("$c", 1.0, "f32")]
    body += [Load(f"$v{k}", name) for k, (kind, name) in enumerate(stmts) if kind == "load"]
    body += [Store(name, "$c") for kind, name in stmts if kind == "store"]
    return Block(idxs=idxs, refs=tuple(refs), stmts=tuple(body), constraints=cons)


# -- accesses through nested blocks ----------------------------------------------------


def touches(block: Block) -> list[tuple[dict, str, tuple, bool]]:
    """``(top point, buffer, element, is_write)`` for every load/store under ``block``.

    Elements are in the coordinates of the buffers ``block``'s views refine;
    accesses through ``none`` allocations are left out.
    """
    out: list[tuple[dict, str, tuple, bool]] = []
    origins = {r.into: (r.from_, None) for r in block.refs if r.dir != "none"}
    for p in nest_points([block]):
        here = {
            name: (buf, tuple(a.evaluate(p) for a in block.ref(name).access))
            for name, (buf, _) in origins.items()
        }
        _touch(block, p, p, here, out)
    return out


def _touch(block: Block, top: dict, env: dict, views: dict, out: list) -> None:
    for s in block.stmts:
        if isinstance(s, (Load, Store)) and s.ref in views:
            buf, elem = views[s.ref]
            out.append((top, buf, elem, isinstance(s, Store)))
        elif isinstance(s, Block):
            for p in nest_points([s], env):
                inner = {}
                for r in s.refs:
                    if r.dir != "none" and r.from_ in views:
                        buf, base = views[r.from_]
                        inner[r.into] = (
                            buf,
                            tuple(b + a.evaluate(p) for b, a in zip(base, r.access)),
                        )
                _touch(s, top, p, inner, out)


def brute_race_free_nested(block: Block) -> tuple[str, ...]:
    """Indices of ``block`` along which no element is written at one value and touched at another."""
    found = touches(block)
    safe = []
    for idx in block.idxs:
        seen: dict[tuple, set[tuple[int, bool]]] = {}
        for top, buf, elem, write in found:
            seen.setdefault((buf, elem), set()).add((top[idx.name], write))
        if all(
            len({v for v, _ in uses}) == 1 or not any(w for _, w in uses) for uses in seen.values()
        ):
            safe.append(idx.name)
    return tuple(safe)


# -- nested kernels, with specials, inout views and private buffers ---------------------

INNER_NAMES = ("p", "q")


@st.composite
def nests(draw) -> Block:
    """A kernel from :func:`kernels` (some outputs made ``inout``) with one nested block.

    The nested block has 1-2 indices, maybe a constraint over the whole nest,
    and views of some of the kernel's views (random accesses and sizes, the
    parent's direction); it loads and stores them, may copy one into another
    with a special (whole views), and uses a private ``none`` buffer.
    """
    kernel = draw(kernels(max_refs=3))
    refs = [
        Refinement("inout", r.into, r.shape, r.from_, r.access, r.agg)
        if r.dir == "out" and draw(st.booleans())
        else r
        for r in kernel.refs
    ]
    n = draw(st.integers(1, 2))
    idxs = tuple(Index(INNER_NAMES[k], draw(st.integers(1, 3))) for k in range(n))
    names = [i.name for i in kernel.idxs] + [i.name for i in idxs]
    cons = ()
    if draw(st.booleans()):
        cons = (Constraint(draw(affines_of(names, consts=(-1, 4)))),)
    views, body = [], []
    for r in refs:
        if not draw(st.booleans()):
            continue
        access = tuple(draw(affines_of(names, coeffs=(-1, 0, 1, 2))) for _ in r.access)
        sizes = tuple(draw(st.sampled_from((1, 1, 2, 3))) for _ in r.access)
        shape = TensorShape("f32", sizes, r.shape.strides)
        v = Refinement(r.dir, f"V{len(views)}", shape, r.into, access, r.agg)
        views.append(v)
        if v.dir in ("in", "inout"):
            body.append(Load(f"$l{len(body)}", v.into))
        if v.dir in ("out", "inout"):
            body.append(Store(v.into, "$c"))
    readable = [v.into for v in views if v.dir != "out"]
    writable = [v.into for v in views if v.dir != "in"]
    if readable and writable and draw(st.booleans()):
        body.append(Special("copy", (draw(st.sampled_from(readable)),), (writable[0],)))
    private = Refinement("none", "P", TensorShape("f32", (2,), (1,)), location="REGISTER")
    body = [Constant("$c", 1.0, "f32"), *body, Store("P", "$c"), Load("$p", "P")]
    inner = Block(idxs=idxs, refs=(*views, private), stmts=tuple(body), constraints=cons)
    return Block(
        idxs=kernel.idxs,
        refs=tuple(refs),
        stmts=(*kernel.stmts, inner),
        constraints=kernel.constraints,
    )


def brute_touches(
    stmts: Sequence, views: dict, env: dict, priors: bool
) -> set[tuple[int, str, tuple, bool]]:
    """``(statement, buffer, element, is_write)`` for everything ``stmts`` touch at ``env``.

    ``views`` maps the names visible to ``stmts`` to ``(buffer, origin, sizes)``
    with the origin evaluated; nested blocks are entered point by point.
    Loads and stores touch their view's origin, specials their whole views;
    with ``priors``, entering an ``inout`` view reads its whole box.
    """
    out: set[tuple[int, str, tuple, bool]] = set()
    for k, s in enumerate(stmts):
        _brute_stmt(s, k, views, env, priors, out)
    return out


def _brute_stmt(s, k: int, views: dict, env: dict, priors: bool, out: set) -> None:
    if isinstance(s, (Load, Store)) and s.ref in views:
        buf, origin, _ = views[s.ref]
        out.add((k, buf, origin, isinstance(s, Store)))
    elif isinstance(s, Special):
        for names, write in ((s.inputs, False), (s.outputs, True)):
            for name in names:
                if name in views:
                    buf, origin, sizes = views[name]
                    out.update((k, buf, e, write) for e in elements(_consts(origin), sizes, {}))
    elif isinstance(s, Block):
        for p in nest_points([s], env):
            inner = {}
            for r in s.refs:
                if r.dir == "none" or r.from_ not in views:
                    continue
                buf, base, _ = views[r.from_]
                origin = tuple(b + a.evaluate(p) for b, a in zip(base, r.access))
                inner[r.into] = (buf, origin, r.shape.sizes)
                if priors and r.dir == "inout":
                    out.update(
                        (k, buf, e, False) for e in elements(_consts(origin), r.shape.sizes, {})
                    )
            for t in s.stmts:
                _brute_stmt(t, k, inner, p, priors, out)


def _consts(values: Sequence[int]) -> tuple[Affine, ...]:
    return tuple(Affine.constant(v) for v in values)
