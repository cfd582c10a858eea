"""The straight-line bodies of :mod:`.winograd`'s transforms: the matrices ``B^T``,
``G`` and ``A^T`` as sums, the statements that compute them, and the inlined
elementwise kernel of the output transform."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir.affine import Affine
from ..ir.nodes import Block, Constant, Intrinsic, Load, Refinement, Statement, Store, TensorShape

#: The rows of B^T, G and A^T of F(2 x 2, 3 x 3) as (coefficient, column) terms.
BT = (((1, 0), (-1, 2)), ((1, 1), (1, 2)), ((-1, 1), (1, 2)), ((1, 1), (-1, 3)))
G = (((1.0, 0),), ((0.5, 0), (0.5, 1), (0.5, 2)), ((0.5, 0), (-0.5, 1), (0.5, 2)), ((1.0, 2),))
AT = (((1, 0), (1, 1), (1, 2)), ((1, 1), (-1, 2), (-1, 3)))

#: The same for F(4 x 4, 3 x 3) (Lavin and Gray's points 0, 1, -1, 2, -2 and
#: infinity): 6 x 6 input blocks, 36 products for 16 output pixels.
BT4 = (
    ((4, 0), (-5, 2), (1, 4)),
    ((-4, 1), (-4, 2), (1, 3), (1, 4)),
    ((4, 1), (-4, 2), (-1, 3), (1, 4)),
    ((-2, 1), (-1, 2), (2, 3), (1, 4)),
    ((2, 1), (-1, 2), (-2, 3), (1, 4)),
    ((4, 1), (-5, 3), (1, 5)),
)
G4 = (
    ((1 / 4, 0),),
    ((-1 / 6, 0), (-1 / 6, 1), (-1 / 6, 2)),
    ((-1 / 6, 0), (1 / 6, 1), (-1 / 6, 2)),
    ((1 / 24, 0), (1 / 12, 1), (1 / 6, 2)),
    ((1 / 24, 0), (-1 / 12, 1), (1 / 6, 2)),
    ((1.0, 2),),
)
AT4 = (
    ((1, 0), (1, 1), (1, 2), (1, 3), (1, 4)),
    ((1, 1), (-1, 2), (2, 3), (-2, 4)),
    ((1, 1), (1, 2), (4, 3), (4, 4)),
    ((1, 1), (-1, 2), (8, 3), (-8, 4), (1, 5)),
)

#: By output block side ``m``: ``(B^T, G, A^T)``; the input blocks are ``m + 2`` wide.
TRANSFORMS = {2: (BT, G, AT), 4: (BT4, G4, AT4)}


class Body:
    """Statements of an elementwise leaf: loads, sums with coefficients, stores."""

    def __init__(self) -> None:
        self.stmts: list[Statement] = []
        self._n = 0

    def _name(self) -> str:
        self._n += 1
        return f"${self._n}"

    def load(self, ref: str) -> str:
        into = f"${ref}"
        self.stmts.append(Load(into, ref))
        return into

    def combine(self, terms: list[tuple[float, str | None]]) -> str:
        """``sum(coeff * value)``, with additions and subtractions for coefficients
        of +-1 and one multiplication by a shared factor otherwise."""
        present = sorted(((c, v) for c, v in terms if v is not None), key=lambda t: t[0] < 0)
        if not present:  # every value is a missing pixel: 0
            zero = self._name()
            self.stmts.append(Constant(zero, 0.0, "f32"))
            return zero
        return self._sum(present)

    def _sum(self, terms: list[tuple[float, str]]) -> str:
        """``combine``'s sum, ``terms`` non-empty, a positive one first when any is."""
        factor = abs(terms[0][0])
        unit = all(abs(c) == factor for c, _ in terms)
        scale = factor if unit and factor != 1 else 1.0
        acc = ""
        for c, v in terms:
            sign = c / scale if unit else c
            if not unit and abs(c) != 1:
                k = self._name()
                self.stmts.append(Constant(k, float(abs(c)), "f32"))
                p = self._name()
                self.stmts.append(Intrinsic("mul", (v, k), p, "f32"))
                v = p
            if not acc:
                if sign < 0:
                    acc = self._name()
                    self.stmts.append(Intrinsic("neg", (v,), acc, "f32"))
                else:
                    acc = v
                continue
            nxt = self._name()
            self.stmts.append(Intrinsic("add" if sign > 0 else "sub", (acc, v), nxt, "f32"))
            acc = nxt
        if scale != 1.0:
            k = self._name()
            self.stmts.append(Constant(k, float(scale), "f32"))
            p = self._name()
            self.stmts.append(Intrinsic("mul", (acc, k), p, "f32"))
            acc = p
        return acc

    def store(self, ref: str, value: str) -> None:
        self.stmts.append(Store(ref, value))


def view(
    dir_: str, into: str, parent: Refinement, access: tuple[Affine, ...], agg: str = ""
) -> Refinement:
    """A one-element view ``into`` of root buffer ``parent`` at ``access``."""
    shape = TensorShape(parent.shape.dtype, (1,) * len(access), parent.shape.strides)
    return Refinement(dir_, into, shape, parent.into, access, agg, parent.location)


def separable(rows: tuple, grid: Sequence[Sequence[str | None]], body: Body) -> list[list[str]]:
    """``R grid R^T`` for the rows ``R`` of a 1-D transform (``grid`` square, its
    side the number of columns ``R`` reads): rows first, then columns."""
    half = [[body.combine([(c, grid[j][col]) for c, j in row]) for col in range(len(grid[0]))]
            for row in rows]  # fmt: skip
    return [
        [body.combine([(c, half[a][j]) for c, j in row]) for row in rows] for a in range(len(rows))
    ]


def inline(
    e: Block,
    read: str,
    value: str,
    sub: dict[str, Affine],
    tag: str,
    body: Body,
    parents: dict[str, Refinement],
) -> list[Refinement]:
    """``e``'s statements at one pixel into ``body`` (its indices replaced by ``sub``,
    its refs and scalars renamed with ``tag``, the load of ``read`` by ``value``);
    the refs it needs."""
    refs = []
    scalars = {read: value}
    names = {r.into: f"{r.into}_{tag}" for r in e.refs}
    for r in e.refs:
        if r.into == read:
            continue
        parent = parents[r.from_ or r.into]
        access = tuple(a.substitute(sub) for a in r.access)
        refs.append(view(r.dir, names[r.into], parent, access, r.agg))
    for t in e.stmts:
        if isinstance(t, Load):
            if t.ref == read:
                scalars[t.into] = value
                continue
            scalars[t.into] = f"{t.into}_{tag}"
            body.stmts.append(Load(scalars[t.into], names[t.ref]))
        elif isinstance(t, Constant):
            scalars[t.into] = f"{t.into}_{tag}"
            body.stmts.append(Constant(scalars[t.into], t.value, t.dtype))
        elif isinstance(t, Intrinsic):
            scalars[t.into] = f"{t.into}_{tag}"
            ins = tuple(scalars[x] for x in t.inputs)
            body.stmts.append(Intrinsic(t.op, ins, scalars[t.into], t.dtype))
        elif isinstance(t, Store):
            body.stmts.append(Store(names[t.ref], scalars[t.value]))
    return refs
