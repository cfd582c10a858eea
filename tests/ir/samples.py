"""Small hand-built Stripe programs for tests (valid unless a name says otherwise).

Every builder returns a fresh :class:`Program` built with the node API only
(no parser), so other test suites can reuse them as inputs::

    from ir.samples import SAMPLES, matmul        # tests/ on sys.path (pytest's default)
    from tests.ir.samples import SAMPLES, matmul  # or the repository root on sys.path
    program = matmul(4, 5, 6)
"""

from __future__ import annotations

import math

from stripeml.ir import (
    Affine,
    Block,
    Constant,
    Constraint,
    Index,
    Intrinsic,
    Load,
    LoadIndex,
    Program,
    Refinement,
    Special,
    Store,
    TensorShape,
)


def aff(const: int = 0, **coeffs: int) -> Affine:
    """``aff(-1, x=1, kx=1)`` is ``x + kx - 1``."""
    return Affine.build(coeffs, const)


def idx(name: str) -> Affine:
    return Affine.index(name)


def param(dir: str, name: str, sizes: tuple[int, ...], dtype: str = "f32") -> Refinement:
    """A root refinement (program parameter, result or temporary) with a dense layout."""
    return Refinement(dir, name, TensorShape.dense(dtype, sizes))


def view(
    dir: str,
    name: str,
    parent: Refinement,
    access: tuple[Affine, ...],
    sizes: tuple[int, ...] | None = None,
    agg: str = "",
    into: str | None = None,
) -> Refinement:
    """A view of ``parent`` (same dtype and strides), by default of one element."""
    sizes = sizes if sizes is not None else (1,) * parent.shape.rank
    shape = TensorShape(parent.shape.dtype, sizes, parent.shape.strides)
    agg = agg or ("assign" if dir in ("out", "inout") else "")
    return Refinement(dir, into or name, shape, from_=parent.into, access=access, agg=agg)


def program(refs: tuple[Refinement, ...], *stmts) -> Program:
    return Program(Block(refs=refs, stmts=tuple(stmts), tags=frozenset({"program"})))


def matmul(m: int = 37, k: int = 53, n: int = 29, dtype: str = "f32") -> Program:
    """``C[m, n : M, N] = +(A[m, k] * B[k, n])``."""
    a, b = param("in", "A", (m, k), dtype), param("in", "B", (k, n), dtype)
    c = param("out", "C", (m, n), dtype)
    kernel = Block(
        idxs=(Index("m", m), Index("n", n), Index("k", k)),
        refs=(
            view("in", "A", a, (idx("m"), idx("k"))),
            view("in", "B", b, (idx("k"), idx("n"))),
            view("out", "C", c, (idx("m"), idx("n")), agg="add"),
        ),
        stmts=(
            Load("$a", "A"),
            Load("$b", "B"),
            Intrinsic("mul", ("$a", "$b"), "$c", dtype),
            Store("C", "$c"),
        ),
        tags=frozenset({"kernel", "contraction", "agg_add"}),
        name="matmul",
        comment="C[m, n : M, N] = +(A[m, k] * B[k, n])",
    )
    return program((a, b, c), kernel)


def padded_conv(x: int = 10, kx: int = 3, constrained: bool = True) -> Program:
    """``O[x : X] = +(I[x + kx - 1] * K[kx])``: zero padding via constraints.

    With ``constrained=False`` the constraints are dropped and the access to
    ``I`` goes out of bounds (an invalid program).
    """
    i, k, o = param("in", "I", (x,)), param("in", "K", (kx,)), param("out", "O", (x,))
    constraints = (Constraint(aff(-1, x=1, kx=1)), Constraint(aff(x, x=-1, kx=-1)))
    kernel = Block(
        idxs=(Index("x", x), Index("kx", kx)),
        refs=(
            view("in", "I", i, (aff(-1, x=1, kx=1),)),
            view("in", "K", k, (idx("kx"),)),
            view("out", "O", o, (idx("x"),), agg="add"),
        ),
        stmts=(
            Load("$i", "I"),
            Load("$k", "K"),
            Intrinsic("mul", ("$i", "$k"), "$p", "f32"),
            Store("O", "$p"),
        ),
        constraints=constraints if constrained else (),
        tags=frozenset({"kernel", "contraction", "agg_add"}),
        name="conv",
        comment="O[x : X] = +(I[x + kx - 1] * K[kx])",
    )
    return program((i, k, o), kernel)


def eltwise_broadcast(m: int = 4, n: int = 5) -> Program:
    """``C = A + B`` with ``A: (m, n)`` and ``B: (1, n)`` broadcast over rows."""
    a, b, c = param("in", "A", (m, n)), param("in", "B", (1, n)), param("out", "C", (m, n))
    kernel = Block(
        idxs=(Index("i", m), Index("j", n)),
        refs=(
            view("in", "A", a, (idx("i"), idx("j"))),
            view("in", "B", b, (Affine(), idx("j"))),
            view("out", "C", c, (idx("i"), idx("j"))),
        ),
        stmts=(
            Load("$a", "A"),
            Load("$b", "B"),
            Intrinsic("add", ("$a", "$b"), "$c", "f32"),
            Store("C", "$c"),
        ),
        tags=frozenset({"kernel", "eltwise"}),
        name="add",
        comment="C = A + B",
    )
    return program((a, b, c), kernel)


def tiled_cached(tiles: int = 4, tile: int = 8) -> Program:
    """``B = 2 * A`` tiled: each tile is staged through a ``none`` buffer in L1."""
    n = tiles * tile
    a, b = param("in", "A", (n,)), param("out", "B", (n,))
    outer_a = view("in", "A", a, (idx("io") * tile,), sizes=(tile,))
    outer_b = view("out", "B", b, (idx("io") * tile,), sizes=(tile,))
    cache = Refinement("none", "T", TensorShape.dense("f32", (tile,)), location="L1", offset=0)
    fill = Block(
        idxs=(Index("i", tile),),
        refs=(view("in", "A", outer_a, (idx("i"),)), view("out", "T", cache, (idx("i"),))),
        stmts=(Load("$a", "A"), Store("T", "$a")),
        tags=frozenset({"copy"}),
        name="fill",
    )
    scale = Block(
        idxs=(Index("i", tile),),
        refs=(view("in", "T", cache, (idx("i"),)), view("out", "B", outer_b, (idx("i"),))),
        stmts=(
            Load("$t", "T"),
            Constant("$two", 2.0, "f32"),
            Intrinsic("mul", ("$t", "$two"), "$y", "f32"),
            Store("B", "$y"),
        ),
        tags=frozenset({"eltwise"}),
        name="scale",
    )
    kernel = Block(
        idxs=(Index("io", tiles),),
        refs=(outer_a, outer_b, cache),
        stmts=(fill, scale),
        tags=frozenset({"kernel", "tiled"}),
        name="scale_tiled",
        comment="B = 2 * A",
    )
    return program((a, b), kernel)


def every_statement() -> Program:
    """One kernel using every statement kind, and the three specials at the root."""
    x, y = param("in", "X", (6,)), param("out", "Y", (6,))
    r, g = param("out", "R", (2, 3)), param("out", "G", (2, 3))
    ind, t = param("in", "I", (2,), "i32"), param("none", "T", (6,))
    kernel = Block(
        idxs=(Index("i", 6),),
        refs=(view("in", "X", x, (idx("i"),)), view("out", "T", t, (idx("i"),))),
        stmts=(
            Load("$x", "X"),
            LoadIndex("$i", aff(1, i=2)),
            Intrinsic("cast", ("$i",), "$fi", "f32"),
            Constant("$zero", 0.0, "f32"),
            Constant("$ninf", -math.inf, "f32"),
            Constant("$true", True, "bool"),
            Intrinsic("cmp_lt", ("$x", "$zero"), "$neg", "bool"),
            Intrinsic("and", ("$neg", "$true"), "$both", "bool"),
            Intrinsic("exp", ("$x",), "$e", "f32"),
            Intrinsic("select", ("$both", "$e", "$fi"), "$s", "f32"),
            Intrinsic("max", ("$s", "$ninf"), "$m", "f32"),
            Store("T", "$m"),
        ),
        tags=frozenset({"kernel", "eltwise"}),
        name="kinds",
    )
    return program(
        (x, ind, y, r, g, t),
        kernel,
        Special("copy", ("T",), ("Y",)),
        Special("reshape", ("T",), ("R",)),
        Special("gather", ("R", "I"), ("G",), (("axis", 0),)),
    )


def scatter_topk() -> Program:
    """The specials with word params at the root: scatter, scatter_nd and topk."""
    x, s = param("in", "X", (4, 5)), param("none", "S", (4, 5))
    i, u = param("in", "I", (4, 2), "i64"), param("in", "U", (4, 2))
    j, v = param("in", "J", (3, 1), "u8"), param("in", "V", (3, 5))
    n, k = param("out", "N", (4, 5)), param("out", "K", (4, 3), "i64")
    return program(
        (x, i, u, j, v, s, n, k),
        Special("scatter", ("X", "I", "U"), ("S",), (("axis", 1), ("reduce", "add"))),
        Special("scatter_nd", ("S", "J", "V"), ("N",), (("reduce", "none"),)),
        Special("topk", ("N",), ("K",), (("axis", -1), ("k", 3), ("order", "smallest"))),
    )


SAMPLES = {
    "matmul": matmul,
    "padded_conv": padded_conv,
    "eltwise_broadcast": eltwise_broadcast,
    "tiled_cached": tiled_cached,
    "every_statement": every_statement,
    "scatter_topk": scatter_topk,
}
