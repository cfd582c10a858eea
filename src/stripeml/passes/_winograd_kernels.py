"""The kernels :mod:`.winograd` writes in place of a matched convolution: the
weight transform, the input transforms (one per part: whole blocks and cut
ones), the products, and the output transforms with an inlined consumer (see
that module's docstring)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..ir.affine import Affine
from ..ir.nodes import Block, Index, Intrinsic, Load, Refinement, Store, TensorShape
from ._common import fresh
from ._winograd_body import TRANSFORMS, Body, inline, transformed, view

__all__ = ["Conv", "plain", "rewrite"]


@dataclass(frozen=True)
class Conv:
    """A matched convolution: index names, sizes, and its three views."""

    n: str
    y: str
    x: str
    co: str
    ky: str
    kx: str
    ci: str
    sizes: dict[str, int]
    image: Refinement
    weights: Refinement
    out: Refinement


def plain(a: Affine) -> tuple[str, ...] | None:
    """The index names of ``a`` when each has coefficient 1 (any constant), else None."""
    coeffs = a.coeffs
    if any(v != 1 for v in coeffs.values()):
        return None
    return tuple(sorted(coeffs))


def rewrite(
    k: Block,
    c: Conv,
    taken: set[str],
    consumer: Block | None = None,
    roots: dict | None = None,
    tile: int = 2,
) -> tuple[list[Refinement], list[Block]]:
    ix = Affine.index
    z = c.sizes
    bt, gt, at_ = TRANSFORMS[tile]
    side = tile + 2  # the input blocks' side
    ty, tx = -(-z[c.y] // tile), -(-z[c.x] // tile)  # m x m output blocks, the last ones cut
    fy, fx = z[c.y] // tile, z[c.x] // tile  # whole ones
    nn, cin, cout = z[c.n], z[c.ci], z[c.co]
    u_name = fresh(f"{k.name}_wu", taken)
    v_name = fresh(f"{k.name}_wv", taken)
    m_name = fresh(f"{k.name}_wm", taken)
    taken |= {u_name, v_name, m_name}
    u = Refinement("none", u_name, TensorShape.dense("f32", (side, side, cin, cout)))
    pts = nn * ty * tx  # the m x m output blocks, the products' rows
    v = Refinement("none", v_name, TensorShape.dense("f32", (side, side, pts, cin)))
    m = Refinement("none", m_name, TensorShape.dense("f32", (side, side, pts, cout)))
    w_parent = Refinement("in", c.weights.from_ or c.weights.into, c.weights.shape)
    img_parent = Refinement("in", c.image.from_ or c.image.into, c.image.shape)
    out_parent = Refinement("out", c.out.from_ or c.out.into, c.out.shape)
    tags = frozenset({"kernel", "eltwise", "winograd"})

    # U[a, b, ci, co] = (G g G^T)[a, b] over [ci, co]
    body = Body()
    stmts, uu = transformed(gt, "W", 3, (3, 3))
    body.stmts = list(stmts)
    wrefs = [
        view("in", f"W{p}{q}", w_parent, (Affine.constant(p), Affine.constant(q), ix("ci"), ix("co")))
        for p in range(3) for q in range(3)
    ]  # fmt: skip
    urefs = []
    for a in range(side):
        for b in range(side):
            urefs.append(view("out", f"U{a}{b}", replace(u, dir="none"),
                               (Affine.constant(a), Affine.constant(b), ix("ci"), ix("co")), "assign"))  # fmt: skip
            body.store(f"U{a}{b}", uu[a][b])
    weights = (roots or {}).get(w_parent.into)
    constant = weights is not None and weights.const  # else transformed at every call
    k_u = Block(
        (Index("ci", cin), Index("co", cout)), tuple(wrefs + urefs), tuple(body.stmts),
        tags=tags | {"once"} if constant else tags, name=fresh(f"{k.name}_wino_u", taken),
    )  # fmt: skip
    taken.add(k_u.name)

    # The blocks: whole ones, then (sizes not a multiple of m) the last block row
    # and column, whose input blocks lack their last rows or columns (taken as 0:
    # the output pixels kept read only the rows and columns that exist) and whose
    # output blocks keep only their first ``size % m`` rows or columns.  Each part:
    # (its block count, or minus its one block's index; the input rows it reads).
    ys = [(fy, side)] if fy else []
    ys += [(-(ty - 1), z[c.y] % tile + 2)] if z[c.y] % tile else []
    xs = [(fx, side)] if fx else []
    xs += [(-(tx - 1), z[c.x] % tile + 2)] if z[c.x] % tile else []
    parts = [(py, px) for py in ys for px in xs]
    # Each part's blocks are consecutive rows of the products (so each part's
    # writes of V are one box: liveness decides their coverage without isl).
    bases, base = [], 0
    for py, px in parts:
        bases.append(base)
        base += nn * max(py[0], 1) * max(px[0], 1)
    assert base == pts

    def at(part: tuple[int, int], name: str) -> tuple[Affine, list[Index]]:
        count = part[0]
        if count > 0:
            return ix(name), [Index(name, count)]
        return Affine.constant(-count), []

    # per part: its block row and column (an index or a constant), the indices
    # it adds, and the products' row of its block (n, t, s)
    geometry = []
    for (py, px), first in zip(parts, bases):
        t, t_idx = at(py, "t")
        s_, s_idx = at(px, "s")
        width = max(px[0], 1)
        row = (
            ix("n", max(py[0], 1) * width)
            + (ix("t", width) if t_idx else 0)
            + (ix("s") if s_idx else 0)
            + first
        )
        geometry.append((py, px, t, s_, [*t_idx, *s_idx], row))

    kernels_v: list[Block] = []
    for py, px, t, s_, idxs, row in geometry:
        drefs = []
        for i in range(min(py[1], side)):
            for j in range(min(px[1], side)):
                sub = {c.n: ix("n"), c.y: t * tile, c.ky: Affine.constant(i), c.x: s_ * tile,
                       c.kx: Affine.constant(j), c.ci: ix("ci")}  # fmt: skip
                access = tuple(a.substitute(sub) for a in c.image.access)
                drefs.append(view("in", f"D{i}{j}", img_parent, access))
        # the block's loads and sums: the same for every convolution of this geometry
        body = Body()
        stmts, vv = transformed(bt, "D", side, (min(py[1], side), min(px[1], side)))
        body.stmts = list(stmts)
        vrefs = []
        for a in range(side):
            for b in range(side):
                access = (Affine.constant(a), Affine.constant(b), row, ix("ci"))
                vrefs.append(view("out", f"V{a}{b}", v, access, "assign"))
                body.store(f"V{a}{b}", vv[a][b])
        kernels_v.append(Block(
            (Index("n", nn), *idxs, Index("ci", cin)),
            tuple(drefs + vrefs), tuple(body.stmts), tags=tags,
            name=fresh(f"{k.name}_wino_v", taken),
        ))  # fmt: skip
        taken.add(kernels_v[-1].name)

    # M[a, b, p, co] = +(V[a, b, p, ci] * U[a, b, ci, co]): 16 (36) products of P x C by C x CO
    k_m = Block(
        (Index("a", side), Index("b", side), Index("p", pts), Index("co", cout), Index("ci", cin)),
        (
            view("in", v_name, v, (ix("a"), ix("b"), ix("p"), ix("ci"))),
            view("in", u_name, u, (ix("a"), ix("b"), ix("ci"), ix("co"))),
            view("out", m_name, m, (ix("a"), ix("b"), ix("p"), ix("co")), "add"),
        ),
        (
            Load("$v", v_name), Load("$u", u_name),
            Intrinsic("mul", ("$v", "$u"), "$p", "f32"), Store(m_name, "$p"),
        ),
        tags=frozenset({"kernel", "contraction", "agg_add"}), name=k.name, comment=k.comment,
    )  # fmt: skip

    # out[n, m t + i, m s + j, co] = (A^T M A)[i, j], the pixels that exist
    kernels_o: list[Block] = []
    for py, px, t, s_, idxs, row in geometry:
        body = Body()
        mrefs = []
        for a in range(side):
            for b in range(side):
                access = (Affine.constant(a), Affine.constant(b), row, ix("co"))
                mrefs.append(view("in", f"M{a}{b}", m, access))
        stmts, yy = transformed(at_, "M", side, (side, side))
        body.stmts = list(stmts)
        orefs = []
        shared: dict[tuple, str] = {}  # the consumer's loads of one element, once a block
        for i in range(py[1] - 2):
            for j in range(px[1] - 2):
                sub = {c.n: ix("n"), c.y: t * tile + i, c.x: s_ * tile + j, c.co: ix("co")}
                if consumer is not None:
                    (read,) = [r for r in consumer.refs if (r.from_ or r.into) == out_parent.into]
                    # the consumer's index in each dimension of the result -> the pixel
                    dims = (c.n, c.y, c.x, c.co)
                    pixel = {plain(a)[0]: sub[o] for a, o in zip(read.access, dims)}  # type: ignore[index]
                    orefs += inline(
                        consumer, read.into, yy[i][j], pixel, f"{i}{j}", body, roots or {}, shared
                    )
                    continue
                access = tuple(a.substitute(sub) for a in c.out.access)
                orefs.append(view("out", f"O{i}{j}", out_parent, access, "assign"))
                body.store(f"O{i}{j}", yy[i][j])
        kernels_o.append(Block(
            (Index("n", nn), *idxs, Index("co", cout)),
            tuple(mrefs + orefs), tuple(body.stmts), tags=tags,
            name=fresh(f"{k.name}_wino_o", taken),
            comment=consumer.comment if consumer is not None else "",
        ))  # fmt: skip
        taken.add(kernels_o[-1].name)
    return [u, v, m], [k_u, *kernels_v, k_m, *kernels_o]
