"""The EDSL's tensors and contractions: Python operators -> Tile source text
(the trace and its text are in ``_trace``, integer expressions in ``_poly``).

Nothing here checks the program: the Tile frontend does, and its errors are
re-raised naming the Python line that wrote the offending statement
(:func:`located`).  This module only refuses what cannot be written as Tile
at all (an access indexed by a float, a contraction of three operands, ...),
with an :class:`~stripeml.errors.EdslError` at the user's line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from ._poly import Constraint, Dim, Index, Poly
from ._trace import (
    Contraction,
    Loc,
    Trace,
    Tree,
    assigned_names,
    cast_spec,
    current,
    misuse,
    scalar_tree,
    text_of,
    user_loc,
)

# --------------------------------------------------------------------- tensors
Operand = Union["Tensor", int, float, bool, Poly]


def _operand_tree(v: Any) -> Any:
    """A tensor (resolved later), a scalar literal, or an index-free integer expression."""
    if isinstance(v, Tensor):
        if v.kind == "output" and v.contraction is None:
            raise misuse(f"{v.name} is used before a contraction writes it")
        return v
    if isinstance(v, Poly):
        return v.tree
    t = scalar_tree(v)
    if t is None:
        raise misuse(f"{v!r} ({type(v).__name__}) is not a tensor, a Python scalar or a dimension")
    return t


class Tensor:
    """A tensor of the traced function: a parameter, a contraction output
    (:func:`output`), or the result of an elementwise operation or builtin.

    Python's operators build Tile expressions, so ``==`` does too: tensors hash
    by identity."""

    def __init__(self, trace: Trace, kind: str, name: str | None, loc: Loc) -> None:
        self.trace = trace
        self.kind = kind  # param | output | eltwise | builtin | gradient
        self.name = name
        self.loc = loc
        self.tree: Tree | None = None  # eltwise: the expression; builtin: the call
        self.dims: tuple[Poly, ...] | None = None  # param: bound dims
        self.dims_loc: Loc | None = None
        self.sizes: tuple[Poly, ...] = ()  # output
        self.dtype: str | None = None  # output: the accumulation dtype asked for
        self.default: Tensor | None = None
        self.contraction: Contraction | None = None
        trace.nodes.append(self)

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<edsl.Tensor {self.name or '(intermediate)'} ({self.kind})>"

    def __bool__(self) -> bool:
        raise misuse(
            "a tensor has no truth value while tracing; use E.select(cond, a, b) "
            "for a per-element choice"
        )

    # -- binding ---------------------------------------------------------------
    def bind_dims(self, *dims: Any) -> None:
        """Declare this input's rank and bind each of its sizes to a dimension
        (or require an integer size: ``W.bind_dims(3, 3, C)``)."""
        loc = user_loc()
        if self.kind != "param":
            raise misuse(
                f"bind_dims binds the sizes of the function's inputs; {self!r} is not one", loc
            )
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, (Dim, int, np.integer)):
                raise misuse(
                    f"bind_dims({', '.join(map(str, dims))}) of {self.name}: {d!r} is not a "
                    "dimension (E.dims) or an integer",
                    loc,
                )
        got = tuple(Poly._of(d, "bind_dims") for d in dims)
        if self.dims is not None:
            same = len(got) == len(self.dims) and all(
                text_of(a.tree) == text_of(b.tree) for a, b in zip(got, self.dims)
            )
            if not same:
                assert self.dims_loc is not None
                raise misuse(
                    f"{self.name} is bound to [{', '.join(map(str, self.dims))}] at "
                    f"{self.dims_loc[0]}:{self.dims_loc[1]}, now to "
                    f"[{', '.join(map(str, got))}]",
                    loc,
                )
            return
        self.dims, self.dims_loc = got, loc

    # -- contractions ----------------------------------------------------------
    def __getitem__(self, key: Any) -> Access:
        loc = user_loc()
        keys = key if isinstance(key, tuple) else (key,)
        idx = []
        for k in keys:
            if isinstance(k, bool) or not isinstance(k, (Poly, int, np.integer)):
                raise misuse(
                    f"{self.name or 'a tensor'}[...] is indexed with {k!r} "
                    f"({type(k).__name__}); an index is an E.indexes index, an integer, "
                    "or an affine expression of them and dimensions",
                    loc,
                )
            idx.append(Poly._of(k, "an index"))
        return Access(self, tuple(idx), loc)

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, _Written):
            return  # ``C[i] += ...`` wrote it already (Access.__iadd__)
        access = self[key]
        loc = access.loc
        combo = _as_combo(value, loc, "the right side of 'C[...] ='")
        _write(access, "=", combo, loc)

    def add_constraint(self, c: Constraint) -> None:
        """Add ``c`` to the contraction just written to this tensor."""
        loc = user_loc()
        if self.contraction is None:
            raise misuse(
                f"add_constraint on {self.name or 'a tensor'}, which no contraction has "
                "written yet (write C[...] += ... first)",
                loc,
            )
        _constrain(self.contraction, c, loc)

    def add_constraints(self, cs: Iterable[Constraint]) -> None:
        for c in cs:
            self.add_constraint(c)

    def set_default(self, d: Tensor) -> None:
        """Start this contraction output from tensor ``d`` instead of zeros."""
        loc = user_loc()
        if self.kind != "output":
            raise misuse(f"set_default is for E.output tensors, not {self!r}", loc)
        if not isinstance(d, Tensor):
            raise misuse(f"the default of {self.name} must be a tensor, got {d!r}", loc)
        self.default = d

    # -- elementwise -----------------------------------------------------------
    def _bin(self, op: str, other: Any, swap: bool = False) -> Tensor:
        if isinstance(other, (Access, Combo)):
            return NotImplemented
        a, b = _operand_tree(self), _operand_tree(other)
        return eltwise(("bin", op, b, a) if swap else ("bin", op, a, b))

    def __add__(self, o: Operand) -> Tensor:
        return self._bin("+", o)

    def __radd__(self, o: Operand) -> Tensor:
        return self._bin("+", o, True)

    def __sub__(self, o: Operand) -> Tensor:
        return self._bin("-", o)

    def __rsub__(self, o: Operand) -> Tensor:
        return self._bin("-", o, True)

    def __mul__(self, o: Operand) -> Tensor:
        return self._bin("*", o)

    def __rmul__(self, o: Operand) -> Tensor:
        return self._bin("*", o, True)

    def __truediv__(self, o: Operand) -> Tensor:
        return self._bin("/", o)

    def __rtruediv__(self, o: Operand) -> Tensor:
        return self._bin("/", o, True)

    def __mod__(self, o: Operand) -> Tensor:
        return self._bin("%", o)

    def __rmod__(self, o: Operand) -> Tensor:
        return self._bin("%", o, True)

    def __and__(self, o: Operand) -> Tensor:
        return self._bin("&", o)

    def __rand__(self, o: Operand) -> Tensor:
        return self._bin("&", o, True)

    def __or__(self, o: Operand) -> Tensor:
        return self._bin("|", o)

    def __ror__(self, o: Operand) -> Tensor:
        return self._bin("|", o, True)

    def __xor__(self, o: Operand) -> Tensor:
        return self._bin("^", o)

    def __rxor__(self, o: Operand) -> Tensor:
        return self._bin("^", o, True)

    def __lshift__(self, o: Operand) -> Tensor:
        return self._bin("<<", o)

    def __rlshift__(self, o: Operand) -> Tensor:
        return self._bin("<<", o, True)

    def __rshift__(self, o: Operand) -> Tensor:
        return self._bin(">>", o)

    def __rrshift__(self, o: Operand) -> Tensor:
        return self._bin(">>", o, True)

    def __lt__(self, o: Operand) -> Tensor:
        return self._bin("<", o)

    def __gt__(self, o: Operand) -> Tensor:
        return self._bin(">", o)

    def __le__(self, o: Operand) -> Tensor:
        return self._bin("<=", o)

    def __ge__(self, o: Operand) -> Tensor:
        return self._bin(">=", o)

    def __eq__(self, o: object) -> Tensor:  # type: ignore[override]
        return self._bin("==", o)

    def __ne__(self, o: object) -> Tensor:  # type: ignore[override]
        return self._bin("!=", o)

    def __neg__(self) -> Tensor:
        return eltwise(("un", "-", _operand_tree(self)))

    def __pos__(self) -> Tensor:
        return self

    def __invert__(self) -> Tensor:
        return eltwise(("un", "~", _operand_tree(self)))


def eltwise(tree: Tree, loc: Loc | None = None) -> Tensor:
    trace = current("an elementwise operation")
    t = Tensor(trace, "eltwise", None, loc or user_loc())
    t.tree = tree
    trace.last_on_line[t.loc] = t
    return t


def output(*sizes: Any, dtype: Any = None, default: Tensor | None = None) -> Tensor:
    """A contraction output of the given sizes (dimension expressions or integers),
    written by one ``C[...] += ...`` (or ``*= >= <= =``).  ``dtype``: the dtype the
    contraction computes in (its operands are cast to it); ``default``: a tensor
    the output starts from instead of zeros."""
    trace = current("E.output")
    loc = user_loc()
    found = assigned_names(loc)
    want = found[0] if found is not None and len(found) == 1 else ""
    t = Tensor(trace, "output", None, loc)
    t.name = trace.fresh(want, True, "") if want else trace.temp()
    for s in sizes:
        if isinstance(s, Index) or (isinstance(s, Poly) and s.has_index):
            raise misuse(f"the size '{s}' of E.output contains an index", loc)
    t.sizes = tuple(Poly._of(s, "a size of E.output") for s in sizes)
    t.dtype = None if dtype is None else cast_spec(dtype, loc)[2]
    if default is not None:
        if not isinstance(default, Tensor):
            raise misuse(f"default= must be a tensor, got {default!r}", loc)
        t.default = default
    return t


class _Written:
    """What ``C[i] += ...`` hands back to ``C.__setitem__``: already recorded."""


class Access:
    """``T[i, j]``: one operand of a contraction (or its output)."""

    def __init__(self, tensor: Tensor, indices: tuple[Poly, ...], loc: Loc) -> None:
        self.tensor, self.indices, self.loc = tensor, indices, loc

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<edsl.Access {self.tensor.name}[{', '.join(map(str, self.indices))}]>"

    def __bool__(self) -> bool:
        raise misuse("an access has no truth value")

    def _combine(self, kind: str, other: Any) -> Combo:
        loc = user_loc()
        if not isinstance(other, Access):
            op = {"mul": "*", "add": "+", "eq": "=="}[kind]
            raise misuse(
                f"a contraction combines two accesses (A[...] * B[...], A[...] + B[...], "
                f"A[...] == B[...]); got {self!r} {op} {other!r}",
                loc,
            )
        return Combo(kind, (self, other), loc)

    def __mul__(self, o: Any) -> Combo:
        return self._combine("mul", o)

    def __add__(self, o: Any) -> Combo:
        return self._combine("add", o)

    def __eq__(self, o: object) -> Combo:  # type: ignore[override]
        return self._combine("eq", o)

    def _other(self, op: str) -> Any:
        raise misuse(
            f"'{op}' is not a contraction combination; Tile has A[...] * B[...], "
            "A[...] + B[...], A[...] == B[...] and E.cond(A[...] == B[...], C[...])"
        )

    def __sub__(self, o: Any) -> Any:
        return self._other("-")

    def __truediv__(self, o: Any) -> Any:
        return self._other("/")

    def __ne__(self, o: object) -> Any:
        return self._other("!=")

    __rmul__ = __radd__ = __rsub__ = __rtruediv__ = __sub__

    # -- the aggregations: C[i] += / *= / >= / <= ----------------------------
    def _agg(self, agg: str, value: Any) -> _Written:
        loc = user_loc()
        _write(self, agg, _as_combo(value, loc, f"the right side of '{_AGG_OP[agg]}'"), loc)
        return _Written()

    def __iadd__(self, v: Any) -> _Written:
        return self._agg("+", v)

    def __imul__(self, v: Any) -> _Written:
        return self._agg("*", v)

    def __ge__(self, v: Any) -> _Written:
        return self._agg(">", v)

    def __le__(self, v: Any) -> _Written:
        return self._agg("<", v)

    def __gt__(self, v: Any) -> Any:
        raise misuse("'C[...] > ...' is not a contraction; the maximum is 'C[...] >= ...'")

    def __lt__(self, v: Any) -> Any:
        raise misuse("'C[...] < ...' is not a contraction; the minimum is 'C[...] <= ...'")


_AGG_OP = {"+": "+=", "*": "*=", ">": ">=", "<": "<=", "=": "="}


@dataclass
class Combo:
    """The value of one contribution: ``none`` (one access), ``mul``, ``add``,
    ``eq``, ``dot4`` or ``cond`` (``A == B ? (C)``)."""

    kind: str
    accesses: tuple[Access, ...]
    loc: Loc

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise misuse("a combination has no truth value")

    def _more(self, o: Any) -> Any:
        raise misuse(
            "a contraction combines at most two accesses (and E.cond a third); "
            "write the rest as another contraction or an elementwise statement"
        )

    __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __rsub__ = __truediv__ = _more


def cond(eq: Combo, value: Access) -> Combo:
    """Tile's conditional combination ``A[...] == B[...] ? (C[...])``: ``C[...]``
    where ``A == B``, else nothing (0)."""
    loc = user_loc()
    if not isinstance(eq, Combo) or eq.kind != "eq":
        raise misuse("E.cond's condition must be A[...] == B[...] (two accesses)", loc)
    if not isinstance(value, Access):
        raise misuse(f"E.cond's value must be an access C[...], got {value!r}", loc)
    return Combo("cond", (*eq.accesses, value), loc)


def dot4(a: Any, b: Any) -> Combo | Tensor:
    """Tile's ``dot4``: of two accesses, the combination ``dot4(A[...], B[...])``
    (``C[m, n] += E.dot4(A[m, k], B[k, n])``); of two tensors (or a tensor and an
    integer), the elementwise function.  Both operands are int32 words: four bytes,
    ``a``'s read as uint8 and ``b``'s as int8, multiplied byte by byte and summed."""
    loc = user_loc()
    accesses = [isinstance(x, Access) for x in (a, b)]
    if all(accesses):
        return Combo("dot4", (a, b), loc)
    if any(accesses):
        raise misuse(
            f"E.dot4 takes two accesses (a contraction's combination) or two tensors (an "
            f"elementwise function), not one of each: got {a!r} and {b!r}",
            loc,
        )
    return eltwise(("call", "dot4", [_operand_tree(a), _operand_tree(b)]), loc)


def _as_combo(value: Any, loc: Loc, what: str) -> Combo:
    if isinstance(value, Access):
        return Combo("none", (value,), loc)
    if isinstance(value, Combo):
        return value
    raise misuse(
        f"{what} must be an access (A[...]) or a combination of two accesses, got "
        f"{value!r}; elementwise math is written on whole tensors (Y = A + B)",
        loc,
    )


def _write(target: Access, agg: str, combo: Combo, loc: Loc) -> None:
    out = target.tensor
    if out.kind != "output":
        raise misuse(
            f"only an E.output tensor takes a contraction; {out!r} is not one "
            "(C = E.output(sizes...) first)",
            loc,
        )
    if out.contraction is not None:
        c = out.contraction
        raise misuse(
            f"{out.name} is already written by the contraction at {c.loc[0]}:{c.loc[1]}; "
            "each E.output takes one contraction",
            loc,
        )
    if len(target.indices) != len(out.sizes):
        raise misuse(
            f"{out.name} has {len(out.sizes)} size(s) but is written with "
            f"{len(target.indices)} index(es)",
            loc,
        )
    for a in combo.accesses:
        if a.tensor is out:
            raise misuse(f"{out.name} is read in its own contraction", loc)
        if a.tensor.kind == "output" and a.tensor.contraction is None:
            raise misuse(f"{a.tensor.name} is read before a contraction writes it", loc)
    if out.dtype is not None:
        combo = _cast_operands(combo, out.dtype, loc)
    trace = out.trace
    c = Contraction(out, agg, target.indices, combo, loc)
    out.contraction = c
    trace.nodes.append(c)
    trace.last_contraction = c


def _cast_operands(combo: Combo, dtype: str, loc: Loc) -> Combo:
    if combo.kind == "eq":
        raise misuse(
            "dtype= with a bare A[...] == B[...] combination: cast the result instead", loc
        )
    if combo.kind == "dot4":
        raise misuse(
            "dtype= with E.dot4(A[...], B[...]): dot4 reads the bytes of int32 operands and "
            "gives int32; cast the result instead",
            loc,
        )
    values = combo.accesses[2:] if combo.kind == "cond" else combo.accesses
    cast = {id(a): Access(cast_to(a.tensor, dtype, loc), a.indices, a.loc) for a in values}
    return Combo(combo.kind, tuple(cast.get(id(a), a) for a in combo.accesses), combo.loc)


def _constrain(c: Contraction, con: Any, loc: Loc) -> None:
    if not isinstance(con, Constraint):
        raise misuse(f"a constraint is 'poly < bound' (e.g. i - k < N), got {con!r}", loc)
    c.constraints.append((con.poly, con.bound, loc))


def constraint(con: Constraint) -> None:
    """Add ``con`` to the contraction written last."""
    loc = user_loc()
    trace = current("E.constraint")
    if trace.last_contraction is None:
        raise misuse("E.constraint before any contraction is written", loc)
    _constrain(trace.last_contraction, con, loc)


# --------------------------------------------------------------------- functions and casts
def cast_to(x: Any, dtype: Any, loc: Loc | None = None) -> Tensor:
    fn, bits, _ = cast_spec(dtype, loc)
    args = [_operand_tree(x)] + ([("lit", str(bits))] if bits is not None else [])
    return eltwise(("call", fn, args), loc)
