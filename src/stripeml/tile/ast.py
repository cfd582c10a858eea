"""The Tile language's syntax tree (what the parser produces, what checks and
lowering consume).  Nodes are immutable; every node carries the 1-based source
position of its first character.

Index polynomials, size expressions and elementwise expressions share the
:data:`Expr` node types; which names and operators are legal in each is decided
by the checks, not by the grammar, so errors can say precisely what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True, slots=True)
class Pos:
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Name:
    """An identifier: a tensor or dimension (upper-case) or an index (lower-case)."""

    name: str
    pos: Pos


@dataclass(frozen=True, slots=True)
class IntLit:
    value: int
    pos: Pos


@dataclass(frozen=True, slots=True)
class FloatLit:
    value: float
    pos: Pos


@dataclass(frozen=True, slots=True)
class Unary:
    """``op`` is ``-``, ``!`` or ``~``."""

    op: str
    operand: Expr
    pos: Pos


@dataclass(frozen=True, slots=True)
class Binary:
    """``op`` in ``+ - * / % << >> < > <= >= == != & ^ | && ||``."""

    op: str
    lhs: Expr
    rhs: Expr
    pos: Pos


@dataclass(frozen=True, slots=True)
class Ternary:
    """``cond ? then : other``."""

    cond: Expr
    then: Expr
    other: Expr
    pos: Pos


@dataclass(frozen=True, slots=True)
class Call:
    """``func(args...)``: a built-in function or cast."""

    func: str
    args: tuple[Expr, ...]
    pos: Pos


Expr = Union[Name, IntLit, FloatLit, Unary, Binary, Ternary, Call]


@dataclass(frozen=True, slots=True)
class Access:
    """``Tensor[poly, ...]`` inside a contraction."""

    tensor: str
    indices: tuple[Expr, ...]
    pos: Pos


@dataclass(frozen=True, slots=True)
class TileConstraint:
    """``poly < bound``: means ``0 <= poly < bound``."""

    poly: Expr
    bound: Expr
    pos: Pos


AGG_OPS = {"+": "add", "*": "mul", ">": "max", "<": "min", "=": "assign"}
# combo: "none" (one operand), "mul", "add", "eq", "dot4" (two: dot4(a, b)),
# "cond" (three: a == b ? (c))
COMBO_OPS = ("none", "mul", "add", "eq", "dot4", "cond")


@dataclass(frozen=True, slots=True)
class Contraction:
    """``Out[polys : sizes] = AGG(COMBO), constraints..., default D;``"""

    output: str
    out_indices: tuple[Expr, ...]
    sizes: tuple[Expr, ...]
    agg: str  # one of AGG_OPS values
    combo: str  # one of COMBO_OPS
    operands: tuple[Access, ...]
    constraints: tuple[TileConstraint, ...]
    default: Name | None
    pos: Pos
    text: str  # the statement's source text, whitespace collapsed


@dataclass(frozen=True, slots=True)
class Assignment:
    """``Out = expr;`` (elementwise with broadcasting)."""

    output: str
    expr: Expr
    pos: Pos
    text: str


@dataclass(frozen=True, slots=True)
class Builtin:
    """``Out = func(args...);`` for a statement builtin (``reshape``, ``gather``).

    These are whole-tensor operations that are not elementwise; they lower to
    root-level ``special`` statements.  ``args`` are as written (the checks
    decide what is legal: tensor names, size expressions, an integer axis).
    """

    output: str
    func: str
    args: tuple[Expr, ...]
    pos: Pos
    text: str
    func_pos: Pos


Statement = Union[Contraction, Assignment, Builtin]


@dataclass(frozen=True, slots=True)
class Param:
    """A function parameter ``A[M, K]``; ``dims`` is ``None`` when not given.

    Each dim is a :class:`Name` (a dimension to bind) or an :class:`IntLit`
    (a fixed size the input must have).
    """

    name: str
    dims: tuple[Name | IntLit, ...] | None
    pos: Pos


@dataclass(frozen=True, slots=True)
class OutputDecl:
    name: str
    pos: Pos


@dataclass(frozen=True, slots=True)
class Function:
    params: tuple[Param, ...]
    outputs: tuple[OutputDecl, ...]
    stmts: tuple[Statement, ...]
    source: str
