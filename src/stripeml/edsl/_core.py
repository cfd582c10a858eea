"""The EDSL's objects and its tracer: Python operators -> Tile source text.

Nothing here checks the program: the Tile frontend does, and its errors are
re-raised naming the Python line that wrote the offending statement
(:func:`located`).  This module only refuses what cannot be written as Tile
at all (an access indexed by a float, a contraction of three operands, ...),
with an :class:`~stripeml.errors.EdslError` at the user's line.
"""

from __future__ import annotations

import ast
import linecache
import math
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from ..errors import EdslError
from ..tile.parser import BINARY_PREC

_HERE = os.path.dirname(os.path.abspath(__file__))

#: Tile's elementwise functions by arity (docs/tile-language.md section 5).
UNARY = ("exp log sqrt tanh sigmoid sin cos tan abs erf floor ceil round relu").split()
BINARY = ("pow", "max", "min")
STATEMENT_BUILTINS = ("reshape", "gather", "scatter", "scatter_nd", "topk")
#: Lower-case words an index must not be named (functions, keywords, builtin words).
_RESERVED = frozenset(
    [*UNARY, *BINARY, *STATEMENT_BUILTINS, "function", "default", "index", "as_bool", "dot4"]
    + [f"{k}{t}" for k in ("as_", "bitcast_", "view_") for t in ("float", "int", "uint")]
    + "none add mul largest smallest".split()
)

#: Binary operator precedence: the Tile parser's own table (C's order); unary 11,
#: primary 12.
PREC = BINARY_PREC

Loc = tuple[str, int]


# --------------------------------------------------------------------- locations
def user_loc() -> Loc:
    """``(file, line)`` of the innermost frame outside this package: the user's call."""
    f = sys._getframe(1)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _HERE:
        f = f.f_back  # type: ignore[assignment]
    if f is None:  # pragma: no cover - there is always a caller
        return ("<unknown>", 0)
    return (f.f_code.co_filename, f.f_lineno)


def misuse(message: str, loc: Loc | None = None) -> EdslError:
    """An :class:`EdslError` at the user's line (``loc``, else the current call)."""
    file, line = loc or user_loc()
    err = EdslError(f"{file}:{line}: {message}")
    err.python_file, err.python_line = file, line
    return err


def _assigned_names(loc: Loc) -> list[str] | None:
    """The names a one-line ``a, b = ...`` / ``a = ...`` at ``loc`` assigns, or None."""
    text = linecache.getline(loc[0], loc[1]).strip()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assign):
        return None
    targets = tree.body[0].targets
    if len(targets) != 1:
        return None
    t = targets[0]
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in t.elts):
        return [e.id for e in t.elts]  # type: ignore[attr-defined]
    return None


def _cased(name: str, upper: bool) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "", name).lstrip("_0123456789")
    if not name:
        return ""
    return (name[0].upper() if upper else name[0].lower()) + name[1:]


# --------------------------------------------------------------------- the trace
class _State(threading.local):
    stack: list[Trace]

    def __init__(self) -> None:
        self.stack = []


_STATE = _State()


def current(what: str) -> Trace:
    if not _STATE.stack:
        raise misuse(f"{what} is called outside a function traced by E.function")
    return _STATE.stack[-1]


@dataclass
class Contraction:
    output: Tensor
    agg: str  # + * > < =
    indices: tuple[Poly, ...]
    combo: Combo
    loc: Loc
    constraints: list[tuple[Poly, Poly, Loc]] = field(default_factory=list)


@dataclass
class GradNode:
    """``E.gradients(loss, wrt)``: its results are written, when the program is
    emitted, by the adjoint of the statements written before it."""

    loss: Tensor
    wrt: tuple[Tensor, ...]
    want: list[str]  # the names the results are assigned to ('' for none)
    loc: Loc
    results: tuple[Tensor, ...] = ()


class Trace:
    """One tracing of a Python function: the names it took and what it wrote, in order."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.nodes: list[Tensor | Contraction | GradNode] = []  # creation order = a valid order
        self.last_on_line: dict[Loc, Tensor] = {}
        self.last_contraction: Contraction | None = None
        self.counter = 0

    def fresh(self, want: str, upper: bool, fallback: str) -> str:
        base = _cased(want, upper) or fallback
        if not upper and base in _RESERVED:
            base += "_"
        name, n = base, 1
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        return name

    def temp(self) -> str:
        while True:
            self.counter += 1
            name = f"T{self.counter}"
            if name not in self.used:
                self.used.add(name)
                return name


# --------------------------------------------------------------------- rendering
# Expression trees are tuples: ("name", text) / ("lit", text) primaries,
# ("un", op, t), ("bin", op, l, r), ("call", f, [args]), ("sel", c, a, b),
# ("copy", tensor);
# elementwise trees may hold Tensor objects, resolved when the text is written.
Tree = tuple[Any, ...]


def render(t: Any, resolve: Callable[[Tensor], Tree] | None = None) -> tuple[str, int]:
    """``(text, precedence)`` of a tree, with only the parentheses Tile needs."""
    if isinstance(t, Tensor):
        assert resolve is not None
        return render(resolve(t), resolve)
    kind = t[0]
    if kind in ("name", "lit"):
        return t[1], 12
    if kind == "copy":
        return render(t[1], resolve)
    if kind == "un":
        text, p = render(t[2], resolve)
        return f"{t[1]}{text if p >= 12 else f'({text})'}", 11
    if kind == "bin":
        p = PREC[t[1]]
        lt, lp = render(t[2], resolve)
        rt, rp = render(t[3], resolve)
        lt = lt if lp >= p else f"({lt})"
        rt = rt if rp > p else f"({rt})"
        return f"{lt} {t[1]} {rt}", p
    if kind == "call":
        return f"{t[1]}({', '.join(render(a, resolve)[0] for a in t[2])})", 12
    if kind == "sel":
        ct, cp = render(t[1], resolve)
        at, _ = render(t[2], resolve)
        bt, _ = render(t[3], resolve)
        return f"{ct if cp >= 1 else f'({ct})'} ? {at} : {bt}", 0
    raise AssertionError(t)  # pragma: no cover


def text_of(t: Any, resolve: Callable[[Tensor], Tree] | None = None) -> str:
    return render(t, resolve)[0]


def scalar_tree(v: Any) -> Tree | None:
    """A Python (or NumPy) scalar as a Tile literal tree (weak: no dtype of its own)."""
    if isinstance(v, np.generic) and v.ndim == 0:
        v = v.item()
    if isinstance(v, bool):
        return ("call", "as_bool", [("lit", "1" if v else "0")])
    if isinstance(v, int):
        return ("lit", str(v)) if v >= 0 else ("un", "-", ("lit", str(-v)))
    if isinstance(v, float):
        if math.isnan(v):
            return ("bin", "/", ("lit", "0.0"), ("lit", "0.0"))
        if math.isinf(v):
            return ("lit", "1e400") if v > 0 else ("un", "-", ("lit", "1e400"))
        text = repr(abs(v))
        if not any(c in text for c in ".eE"):
            text += ".0"
        return ("lit", text) if math.copysign(1.0, v) > 0 else ("un", "-", ("lit", text))
    return None


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
    found = _assigned_names(user_loc())
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
    found = _assigned_names(loc)
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
_CASTS = {"f": "as_float", "i": "as_int", "u": "as_uint"}
_SHORT = re.compile(r"^(f|i|u)(8|16|32|64)$")


def cast_spec(dtype: Any, loc: Loc | None = None) -> tuple[str, int | None, str]:
    """``(function, bits, canonical name)`` for ``"f16"``, ``"int32"``, ``np.uint8``, ``"bool"``..."""
    m = _SHORT.match(dtype) if isinstance(dtype, str) else None
    if m:
        kind, bits = m.group(1), int(m.group(2))
    else:
        try:
            dt = np.dtype(dtype)
        except TypeError:
            raise misuse(f"{dtype!r} is not a dtype", loc) from None
        if dt.kind == "b":
            return ("as_bool", None, "bool")
        kind, bits = dt.kind, dt.itemsize * 8
    fn = _CASTS.get(kind)
    allowed = (16, 32, 64) if kind == "f" else (8, 16, 32, 64)
    if fn is None or bits not in allowed:
        raise misuse(f"no Tile cast to {dtype!r} (float16/32/64, int/uint8..64, bool)", loc)
    return (fn, bits, f"{'f' if kind == 'f' else kind}{bits}")


def cast_to(x: Any, dtype: Any, loc: Loc | None = None) -> Tensor:
    fn, bits, _ = cast_spec(dtype, loc)
    args = [_operand_tree(x)] + ([("lit", str(bits))] if bits is not None else [])
    return eltwise(("call", fn, args), loc)


def call(fn: str, *args: Any) -> Tensor:
    return eltwise(("call", fn, [_operand_tree(a) for a in args]))


def builtin(fn: str, tensors: Sequence[Any], rest: Sequence[Any]) -> Tensor:
    """A statement builtin (``reshape``, ``gather`` ...): always a statement of its own."""
    loc = user_loc()
    trace = current(f"E.{fn}")
    for x in tensors:
        if not isinstance(x, Tensor):
            raise misuse(f"E.{fn}: {x!r} is not a tensor", loc)
        _operand_tree(x)
    extra: list[Tree] = []
    for r in rest:
        if isinstance(r, str):
            extra.append(("name", r))
        elif isinstance(r, Poly):
            extra.append(r.tree)
        else:
            lit = scalar_tree(r)
            if lit is None or not isinstance(r, (int, np.integer)):
                raise misuse(f"E.{fn}: {r!r} is not an integer or a dimension expression", loc)
            extra.append(lit)
    node = Tensor(trace, "builtin", None, loc)
    node.tree = ("call", fn, [*tensors, *extra])
    trace.last_on_line[loc] = node
    return node


# --------------------------------------------------------------------- gradients
def gradients(loss: Tensor, wrt: Sequence[Tensor]) -> list[Tensor]:
    """``[d sum(loss) / d w for w in wrt]``: tensors of the traced function (each
    of its input's shape), computed by the adjoint of the statements written so
    far (:func:`stripeml.autodiff.adjoint_statements`).  ``loss`` is usually a
    scalar; any other tensor has an implicit all-ones cotangent (the gradient
    of the sum of its elements).  ``wrt``: inputs of the traced function."""
    loc = user_loc()
    trace = current("E.gradients")
    if not isinstance(loss, Tensor) or loss.trace is not trace:
        raise misuse(
            f"E.gradients: the loss must be a tensor of this traced function, got {loss!r}", loc
        )
    if loss.kind == "param":
        raise misuse(f"E.gradients: the loss {loss.name} is an input, not computed from one", loc)
    _operand_tree(loss)
    if isinstance(wrt, Tensor) or not isinstance(wrt, (list, tuple)):
        raise misuse("E.gradients(loss, wrt): wrt is a list or tuple of input tensors", loc)
    if not wrt:
        raise misuse("E.gradients: wrt is empty; name at least one input", loc)
    for w in wrt:
        if not isinstance(w, Tensor) or w.trace is not trace or w.kind != "param":
            raise misuse(
                f"E.gradients differentiates with respect to inputs of the traced function; "
                f"{w!r} is not one",
                loc,
            )
    if len({id(w) for w in wrt}) != len(wrt):
        raise misuse("E.gradients: wrt names an input twice", loc)
    found = _assigned_names(loc)
    want = found if found is not None and len(found) == len(wrt) else [""] * len(wrt)
    node = GradNode(loss, tuple(wrt), want, loc)
    trace.nodes.append(node)
    node.results = tuple(Tensor(trace, "gradient", None, loc) for _ in wrt)
    return list(node.results)
