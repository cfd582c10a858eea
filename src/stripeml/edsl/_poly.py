"""The EDSL's integer expressions: dimensions, indices, their polynomials and
the constraints ``<`` makes of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from ._trace import Tree, assigned_names, current, misuse, scalar_tree, text_of, user_loc

# --------------------------------------------------------------------- integer expressions
IntLike = Union["Poly", int]


class Poly:
    """An integer expression of dimensions, indices and integer constants: an
    index polynomial (``x + kx - 1``, ``2 * x``) or a size (``X / 2``).  ``<``
    makes a constraint (``i - k < N`` means ``0 <= i - k < N``)."""

    __slots__ = ("tree", "has_index")

    def __init__(self, tree: Tree, has_index: bool) -> None:
        self.tree = tree
        self.has_index = has_index

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {text_of(self.tree)}>"

    def __str__(self) -> str:
        return text_of(self.tree)

    __hash__ = object.__hash__

    @staticmethod
    def _of(v: Any, what: str) -> Poly:
        if isinstance(v, Poly):
            return v
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            t = scalar_tree(int(v))
            assert t is not None
            return Poly(t, False)
        raise misuse(f"{what}: {v!r} is not an integer, a dimension or an index expression")

    def _bin(self, op: str, other: Any, swap: bool = False) -> Poly:
        if not isinstance(other, (Poly, int, np.integer)) or isinstance(other, bool):
            return NotImplemented
        o = Poly._of(other, f"'{op}'")
        if op == "+" and not swap and isinstance(other, (int, np.integer)) and other < 0:
            op, o = "-", Poly._of(-int(other), "'-'")
        a, b = (o, self) if swap else (self, o)
        return Poly(("bin", op, a.tree, b.tree), a.has_index or b.has_index)

    def __add__(self, o: Any) -> Poly:
        return self._bin("+", o)

    def __radd__(self, o: Any) -> Poly:
        return self._bin("+", o, True)

    def __sub__(self, o: Any) -> Poly:
        return self._bin("-", o)

    def __rsub__(self, o: Any) -> Poly:
        return self._bin("-", o, True)

    def __mul__(self, o: Any) -> Poly:
        return self._bin("*", o)

    def __rmul__(self, o: Any) -> Poly:
        return self._bin("*", o, True)

    def __floordiv__(self, o: Any) -> Poly:
        return self._bin("/", o)

    def __rfloordiv__(self, o: Any) -> Poly:
        return self._bin("/", o, True)

    # Tile's integer '/' is floor division, so '/' means the same here.
    __truediv__ = __floordiv__
    __rtruediv__ = __rfloordiv__

    def __neg__(self) -> Poly:
        return Poly(("un", "-", self.tree), self.has_index)

    def __pos__(self) -> Poly:
        return self

    def __lt__(self, o: Any) -> Constraint:
        return Constraint(self, Poly._of(o, "the bound of a constraint"))

    def __gt__(self, o: Any) -> Constraint:
        return Constraint(Poly._of(o, "a constraint"), self)  # N > p is p < N

    def __le__(self, o: Any) -> Constraint:
        raise misuse("a constraint is 'poly < bound' (meaning 0 <= poly < bound); use '<'")

    __ge__ = __le__

    def __bool__(self) -> bool:
        raise misuse(f"'{self}' has no truth value while tracing (it is symbolic)")


class Dim(Poly):
    """A dimension: bound to a size by ``T.bind_dims``; usable in sizes, index
    polynomials and elementwise expressions (as an integer constant)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        super().__init__(("name", name), False)
        self.name = name


class Index(Poly):
    """An index of a contraction (its range is inferred from the bounds)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        super().__init__(("name", name), True)
        self.name = name


@dataclass(frozen=True)
class Constraint:
    """``poly < bound``: ``0 <= poly < bound`` on the contraction it is added to."""

    poly: Poly
    bound: Poly

    def __bool__(self) -> bool:
        raise misuse("a constraint has no truth value; pass it to add_constraint")


def _names(n: int, names: str | Sequence[str] | None, upper: bool, what: str) -> list[str]:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise misuse(f"E.{what}(n): n must be a non-negative int, got {n!r}")
    if names is not None:
        got = names.replace(",", " ").split() if isinstance(names, str) else list(names)
        if len(got) != n:
            raise misuse(f"E.{what}({n}, names=...) got {len(got)} names")
        return got
    found = assigned_names(user_loc())
    if found is not None and len(found) == n:
        return found
    return [""] * n


def dims(n: int, names: str | Sequence[str] | None = None) -> tuple[Dim, ...]:
    """``n`` new dimensions, named after the variables they are assigned to
    (``M, K, N = E.dims(3)``) or ``names`` (``"M K N"``)."""
    trace = current("E.dims")
    return tuple(
        Dim(trace.fresh(w, True, f"D{len(trace.used)}")) for w in _names(n, names, True, "dims")
    )


def indexes(n: int, names: str | Sequence[str] | None = None) -> tuple[Index, ...]:
    """``n`` new indices, named like :func:`dims` names dimensions."""
    trace = current("E.indexes")
    return tuple(
        Index(trace.fresh(w, False, f"i{len(trace.used)}"))
        for w in _names(n, names, False, "indexes")
    )
