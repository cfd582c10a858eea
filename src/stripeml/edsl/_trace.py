"""The EDSL's tracing state and text: where the user's line is, the errors that
name it, the trace of one traced function (its nodes and fresh names), and the
Tile text of elementwise trees.  Tensors and contractions live in ``_core``,
integer expressions in ``_poly``."""

from __future__ import annotations

import ast
import linecache
import math
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import EdslError
from ..tile.parser import BINARY_PREC

if TYPE_CHECKING:
    from ._core import Combo, Tensor
    from ._poly import Poly

_HERE = os.path.dirname(os.path.abspath(__file__))

#: Tile's elementwise functions by arity (docs/tile-language.md section 5).
UNARY = ("exp log sqrt tanh sigmoid sin cos tan abs erf floor ceil round relu").split()
BINARY = ("pow", "max", "min")
STATEMENT_BUILTINS = ("reshape", "gather", "scatter", "scatter_nd", "topk")
#: Lower-case words an index must not be named (functions, keywords, builtin words).
RESERVED = frozenset(
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


def assigned_names(loc: Loc) -> list[str] | None:
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


def cased(name: str, upper: bool) -> str:
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
        base = cased(want, upper) or fallback
        if not upper and base in RESERVED:
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
    if not isinstance(t, tuple):  # a Tensor: trees are tuples
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
