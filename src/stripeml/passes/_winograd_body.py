"""The straight-line bodies of :mod:`.winograd`'s transforms: the matrices ``B^T``,
``G`` and ``A^T`` as sums, the statements that compute them, and the inlined
elementwise kernel of the output transform."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

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

#: F(4 x 4)'s matrices as straight-line programs with shared partial sums (a
#: tests checks each against its matrix): steps ``(name, op, a, b)``, ``op``
#: ``add``/``sub`` of two values or ``mul`` of one by the number ``b``; ``x<j>``
#: the inputs, ``y<i>`` row ``i``'s result (an input's name: that input).  Row by
#: row sums (:meth:`Body.combine`) take B^T 25 operations per 6 values, these 17;
#: A^T 17 and 13; G 15 and 12.  F(2 x 2)'s rows are minimal as they are.
PROGRAMS: dict[tuple, tuple[tuple[str, str, str, object], ...]] = {
    BT4: (
        ("a", "mul", "x2", 4.0),
        ("c", "sub", "x4", "a"),  # x4 - 4 x2
        ("b", "mul", "x1", 4.0),
        ("e", "sub", "x3", "b"),  # x3 - 4 x1
        ("y1", "add", "c", "e"),
        ("y2", "sub", "c", "e"),
        ("f", "sub", "x4", "x2"),
        ("g0", "sub", "x3", "x1"),
        ("g", "mul", "g0", 2.0),
        ("y3", "add", "f", "g"),
        ("y4", "sub", "f", "g"),
        ("h", "mul", "x0", 4.0),
        ("h2", "sub", "c", "x2"),  # x4 - 5 x2
        ("y0", "add", "h", "h2"),
        ("k", "mul", "x3", 4.0),
        ("k2", "sub", "x5", "e"),  # x5 - x3 + 4 x1
        ("y5", "sub", "k2", "k"),
    ),
    AT4: (
        ("a", "add", "x1", "x2"),
        ("b", "sub", "x1", "x2"),
        ("c", "add", "x3", "x4"),
        ("d", "sub", "x3", "x4"),
        ("a0", "add", "x0", "a"),
        ("y0", "add", "a0", "c"),
        ("d2", "mul", "d", 2.0),
        ("y1", "add", "b", "d2"),
        ("c4", "mul", "c", 4.0),
        ("y2", "add", "a", "c4"),
        ("d8", "mul", "d", 8.0),
        ("b8", "add", "b", "d8"),
        ("y3", "add", "b8", "x5"),
    ),
    G4: (
        ("y0", "mul", "x0", 1 / 4),
        ("p", "add", "x0", "x2"),
        ("p1", "add", "p", "x1"),
        ("y1", "mul", "p1", -1 / 6),
        ("p2", "sub", "p", "x1"),
        ("y2", "mul", "p2", -1 / 6),
        ("q4", "mul", "x2", 4.0),
        ("q", "add", "x0", "q4"),
        ("q24", "mul", "q", 1 / 24),
        ("r", "mul", "x1", 1 / 12),
        ("y3", "add", "q24", "r"),
        ("y4", "sub", "q24", "r"),
        ("y5", "add", "x2", "zero"),  # x2 itself
    ),
}


class Body:
    """Statements of an elementwise leaf: loads, sums with coefficients, stores."""

    def __init__(self) -> None:
        self.stmts: list[Statement] = []
        self._n = 0
        self._consts: dict[float, str] = {}  # each coefficient's scalar, made once

    def const(self, value: float) -> str:
        """The scalar holding ``value`` (a ``Constant`` statement the first time):
        F(4 x 4)'s transforms use a few coefficients dozens of times each."""
        name = self._consts.get(value)
        if name is None:
            name = self._consts[value] = self._name()
            self.stmts.append(Constant(name, value, "f32"))
        return name

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
            return self.const(0.0)
        return self._sum(present)

    def _sum(self, terms: list[tuple[float, str]]) -> str:
        """``combine``'s sum, ``terms`` non-empty, a positive one first when any is."""
        factor = abs(terms[0][0])
        unit = all(abs(c) == factor for c, _ in terms)
        groups: dict[float, list[tuple[float, str]]] = {}
        for c, v in terms:
            groups.setdefault(abs(c), []).append((1.0 if c > 0 else -1.0, v))
        if not unit and any(len(g) > 1 for m, g in groups.items() if m != 1):
            # several terms of one magnitude (F(4 x 4)'s ``4 x1 - 4 x2``): their
            # signed sum, then one product by it, per magnitude
            parts = []
            for m, g in groups.items():
                part = self._sum(sorted(g, key=lambda t: t[0] < 0))
                if m != 1:
                    k = self.const(float(m))
                    p = self._name()
                    self.stmts.append(Intrinsic("mul", (part, k), p, "f32"))
                    part = p
                parts.append((1.0, part))
            return self._sum(parts)
        scale = factor if unit and factor != 1 else 1.0
        acc = ""
        for c, v in terms:
            sign = c / scale if unit else c
            if not unit and abs(c) != 1:
                k = self.const(float(abs(c)))
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
            k = self.const(float(scale))
            p = self._name()
            self.stmts.append(Intrinsic("mul", (acc, k), p, "f32"))
            acc = p
        return acc

    def run(self, program: tuple, values: Sequence[str | None], rows: int) -> list[str | None]:
        """``program`` (:data:`PROGRAMS`) on ``values`` (None: a missing pixel, 0):
        its ``rows`` results (None: 0)."""
        env: dict[str, str | None] = {f"x{j}": v for j, v in enumerate(values)}
        env["zero"] = None
        for name, op, a, b in program:
            if op == "mul":
                env[name] = self._scaled(env[a], float(b))
            else:
                env[name] = self._sum2(op, env[a], env[b])
        return [env[f"y{i}"] for i in range(rows)]

    def _scaled(self, a: str | None, k: float) -> str | None:
        """``a * k`` (None: 0)."""
        if a is None:
            return None
        p = self._name()
        self.stmts.append(Intrinsic("mul", (a, self.const(k)), p, "f32"))
        return p

    def _sum2(self, op: str, a: str | None, b: str | None) -> str | None:
        """``a + b`` or ``a - b`` (``op``), None standing for 0 (no statement where
        an operand is 0)."""
        if b is None or (a is None and op == "add"):
            return b if a is None else a
        p = self._name()
        if a is None:
            self.stmts.append(Intrinsic("neg", (b,), p, "f32"))
        else:
            self.stmts.append(Intrinsic(op, (a, b), p, "f32"))
        return p

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
    side the number of columns ``R`` reads): rows first, then columns; by
    ``R``'s program (:data:`PROGRAMS`) where it has one."""
    program = PROGRAMS.get(rows)
    if program is not None:
        n, m = len(grid[0]), len(rows)
        cols = [body.run(program, [grid[j][col] for j in range(n)], m) for col in range(n)]
        out = [body.run(program, [cols[j][a] for j in range(n)], m) for a in range(m)]
        return [[body.const(0.0) if v is None else v for v in row] for row in out]
    half = [[body.combine([(c, grid[j][col]) for c, j in row]) for col in range(len(grid[0]))]
            for row in rows]  # fmt: skip
    return [
        [body.combine([(c, half[a][j]) for c, j in row]) for row in rows] for a in range(len(rows))
    ]


@lru_cache(maxsize=64)
def transformed(
    rows: tuple, prefix: str, side: int, present: tuple[int, int]
) -> tuple[tuple[Statement, ...], tuple[tuple[str, ...], ...]]:
    """The statements of ``R grid R^T`` (:func:`separable`) for a ``side`` x
    ``side`` grid of loads of the views ``<prefix><i><j>``, the first
    ``present`` rows and columns of it (the others taken as 0), and the
    scalars of the result: the same for every convolution of one block
    geometry, so made once (a body's statements and names do not depend on
    the buffers its views refine)."""
    body = Body()
    grid = [[body.load(f"{prefix}{i}{j}") if i < present[0] and j < present[1] else None
             for j in range(side)] for i in range(side)]  # fmt: skip
    out = separable(rows, grid, body)
    return tuple(body.stmts), tuple(tuple(r) for r in out)


def inline(
    e: Block,
    read: str,
    value: str,
    sub: dict[str, Affine],
    tag: str,
    body: Body,
    parents: dict[str, Refinement],
    shared: dict[tuple, str] | None = None,
) -> list[Refinement]:
    """``e``'s statements at one pixel into ``body`` (its indices replaced by ``sub``,
    its refs and scalars renamed with ``tag``, the load of ``read`` by ``value``);
    the refs it needs.  ``shared`` (one dict for all the pixels of a block)
    remembers the scalars loaded from a buffer ``e`` does not write, by element,
    and the constants, by value: a later pixel reading the same element (a
    bias, a scale: ``[co]``) reuses the first one's load and view."""
    refs = []
    scalars = {read: value}
    names = {r.into: f"{r.into}_{tag}" for r in e.refs}
    written = {r.from_ or r.into for r in e.refs if r.dir != "in"}
    keys: dict[str, tuple] = {}  # ref -> its element, for the refs whose loads are shared
    for r in e.refs:
        if r.into == read:
            continue
        parent = parents[r.from_ or r.into]
        access = tuple(a.substitute(sub) for a in r.access)
        if shared is not None and r.dir == "in" and parent.into not in written:
            keys[r.into] = ("load", parent.into, access)
            if keys[r.into] in shared:
                continue  # an earlier pixel's view and load serve this one
        refs.append(view(r.dir, names[r.into], parent, access, r.agg))
    for t in e.stmts:
        if isinstance(t, Load):
            if t.ref == read:
                scalars[t.into] = value
                continue
            key = keys.get(t.ref)
            if shared is not None and key is not None and key in shared:
                scalars[t.into] = shared[key]
                continue
            scalars[t.into] = f"{t.into}_{tag}"
            body.stmts.append(Load(scalars[t.into], names[t.ref]))
            if shared is not None and key is not None:
                shared[key] = scalars[t.into]
        elif isinstance(t, Constant):
            ckey = ("const", t.value, t.dtype)
            if shared is not None and ckey in shared:
                scalars[t.into] = shared[ckey]
                continue
            scalars[t.into] = f"{t.into}_{tag}"
            body.stmts.append(Constant(scalars[t.into], t.value, t.dtype))
            if shared is not None:
                shared[ckey] = scalars[t.into]
        elif isinstance(t, Intrinsic):
            scalars[t.into] = f"{t.into}_{tag}"
            ins = tuple(scalars[x] for x in t.inputs)
            body.stmts.append(Intrinsic(t.op, ins, scalars[t.into], t.dtype))
        elif isinstance(t, Store):
            body.stmts.append(Store(names[t.ref], scalars[t.value]))
    return refs
