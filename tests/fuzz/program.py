"""A Tile program as data: what the generator makes, the reference evaluates,
the minimiser shrinks and a regression file stores.

Expressions are small frozen trees (:class:`Lit`, :class:`Name`,
:class:`Unary`, :class:`Binary`, :class:`Ternary`, :class:`Call`) printed fully
parenthesised, so the text means exactly the tree whatever the precedence
rules; contractions are :class:`~.contraction.Spec`.  :func:`to_json` /
:func:`from_json` round-trip a program and its inputs exactly (floats through
``repr``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Union

import numpy as np

from .contraction import Access, Spec, eval_int


@dataclass(frozen=True)
class Lit:
    value: int | float

    def tile(self) -> str:
        if isinstance(self.value, float):
            text = repr(abs(self.value))
            if "." not in text and "e" not in text:
                text += ".0"
            return f"(-{text})" if math.copysign(1.0, self.value) < 0 else text
        return f"(-{-self.value})" if self.value < 0 else str(self.value)


@dataclass(frozen=True)
class Name:
    """A tensor or a dimension (a weak integer)."""

    name: str

    def tile(self) -> str:
        return self.name


@dataclass(frozen=True)
class Unary:
    op: str  # "-" or "!"
    arg: Expr

    def tile(self) -> str:
        return f"({self.op}{self.arg.tile()})"


@dataclass(frozen=True)
class Binary:
    op: str  # + - * / % < > <= >= == != && ||
    lhs: Expr
    rhs: Expr

    def tile(self) -> str:
        return f"({self.lhs.tile()} {self.op} {self.rhs.tile()})"


@dataclass(frozen=True)
class Ternary:
    cond: Expr
    then: Expr
    other: Expr

    def tile(self) -> str:
        return f"({self.cond.tile()} ? {self.then.tile()} : {self.other.tile()})"


@dataclass(frozen=True)
class Call:
    """A function, a cast (``as_int(x, 32)``: the bits are a :class:`Lit`) or
    ``index(X, axis)``."""

    func: str
    args: tuple[Expr, ...]

    def tile(self) -> str:
        return f"{self.func}({', '.join(a.tile() for a in self.args)})"


Expr = Union[Lit, Name, Unary, Binary, Ternary, Call]


@dataclass(frozen=True)
class Param:
    """An input: its dims (names, or literal sizes), dtype (a NumPy name) and,
    for integers fed to ``gather``, the range its values are drawn from."""

    name: str
    dims: tuple[str, ...]
    dtype: str
    values: tuple[int, int] | None = None

    def tile(self) -> str:
        return f"{self.name}[{', '.join(self.dims)}]"


@dataclass(frozen=True)
class Eltwise:
    out: str
    expr: Expr

    def tile(self) -> str:
        return f"{self.out} = {self.expr.tile()};"


@dataclass(frozen=True)
class Contract:
    spec: Spec

    @property
    def out(self) -> str:
        return self.spec.out.tensor

    def tile(self) -> str:
        return self.spec.statement()


@dataclass(frozen=True)
class Reshape:
    out: str
    src: str
    sizes: tuple[str, ...]

    def tile(self) -> str:
        return f"{self.out} = reshape({', '.join((self.src, *self.sizes))});"


@dataclass(frozen=True)
class Gather:
    out: str
    src: str
    idx: str
    axis: int

    def tile(self) -> str:
        return f"{self.out} = gather({self.src}, {self.idx}, {self.axis});"


Statement = Union[Eltwise, Contract, Reshape, Gather]


@dataclass(frozen=True)
class Program:
    params: tuple[Param, ...]
    stmts: tuple[Statement, ...]
    outputs: tuple[str, ...]
    dims: dict[str, int] = field(default_factory=dict, compare=False)

    def source(self) -> str:
        params = ", ".join(p.tile() for p in self.params)
        body = "".join(f"    {s.tile()}\n" for s in self.stmts)
        return f"function ({params}) -> ({', '.join(self.outputs)}) {{\n{body}}}\n"

    def shape_of(self, param: Param) -> tuple[int, ...]:
        return tuple(eval_int(d, self.dims) for d in param.dims)


# --------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------


def _expr_to_json(e: Expr) -> object:
    if isinstance(e, Lit):
        return {"lit": repr(e.value)}
    if isinstance(e, Name):
        return {"name": e.name}
    if isinstance(e, Unary):
        return {"unary": e.op, "arg": _expr_to_json(e.arg)}
    if isinstance(e, Binary):
        return {"binary": e.op, "lhs": _expr_to_json(e.lhs), "rhs": _expr_to_json(e.rhs)}
    if isinstance(e, Ternary):
        return {"ternary": [_expr_to_json(x) for x in (e.cond, e.then, e.other)]}
    return {"call": e.func, "args": [_expr_to_json(a) for a in e.args]}


def _expr_from_json(d: dict) -> Expr:
    if "lit" in d:
        text = d["lit"]
        return Lit(float(text) if any(c in text for c in ".enai") else int(text))
    if "name" in d:
        return Name(d["name"])
    if "unary" in d:
        return Unary(d["unary"], _expr_from_json(d["arg"]))
    if "binary" in d:
        return Binary(d["binary"], _expr_from_json(d["lhs"]), _expr_from_json(d["rhs"]))
    if "ternary" in d:
        c, t, o = (_expr_from_json(x) for x in d["ternary"])
        return Ternary(c, t, o)
    return Call(d["call"], tuple(_expr_from_json(a) for a in d["args"]))


def _stmt_to_json(s: Statement) -> dict:
    if isinstance(s, Eltwise):
        return {"eltwise": s.out, "expr": _expr_to_json(s.expr)}
    if isinstance(s, Reshape):
        return {"reshape": s.out, "src": s.src, "sizes": list(s.sizes)}
    if isinstance(s, Gather):
        return {"gather": s.out, "src": s.src, "idx": s.idx, "axis": s.axis}
    sp = s.spec
    return {
        "contraction": sp.out.tensor,
        "params": [[n, list(d)] for n, d in sp.params],
        "out": list(sp.out.polys),
        "sizes": list(sp.sizes),
        "agg": sp.agg,
        "combo": sp.combo,
        "operands": [[a.tensor, list(a.polys)] for a in sp.operands],
        "constraints": [list(c) for c in sp.constraints],
        "default": sp.default,
    }


def _stmt_from_json(d: dict) -> Statement:
    if "eltwise" in d:
        return Eltwise(d["eltwise"], _expr_from_json(d["expr"]))
    if "reshape" in d:
        return Reshape(d["reshape"], d["src"], tuple(d["sizes"]))
    if "gather" in d:
        return Gather(d["gather"], d["src"], d["idx"], d["axis"])
    return Contract(
        Spec(
            tuple((n, tuple(ds)) for n, ds in d["params"]),
            Access(d["contraction"], tuple(d["out"])),
            tuple(d["sizes"]),
            d["agg"],
            d["combo"],
            tuple(Access(t, tuple(p)) for t, p in d["operands"]),
            tuple((p, b) for p, b in d["constraints"]),
            d["default"],
        )
    )


def array_to_json(a: np.ndarray) -> dict:
    return {
        "dtype": str(a.dtype),
        "shape": list(a.shape),
        "data": [repr(x) for x in a.ravel().tolist()],
    }


def array_from_json(d: dict) -> np.ndarray:
    dt = np.dtype(d["dtype"])
    if dt.kind == "b":
        values: list = [x == "True" for x in d["data"]]
    elif dt.kind == "f":
        values = [float(x) for x in d["data"]]
    else:
        values = [int(x) for x in d["data"]]
    return np.array(values, dtype=dt).reshape(d["shape"])


def to_json(program: Program, inputs: dict[str, np.ndarray]) -> dict:
    return {
        "params": [
            {"name": p.name, "dims": list(p.dims), "dtype": p.dtype, "values": p.values}
            for p in program.params
        ],
        "dims": program.dims,
        "stmts": [_stmt_to_json(s) for s in program.stmts],
        "outputs": list(program.outputs),
        "inputs": {k: array_to_json(v) for k, v in inputs.items()},
    }


def from_json(d: dict) -> tuple[Program, dict[str, np.ndarray]]:
    params = tuple(
        Param(p["name"], tuple(p["dims"]), p["dtype"], tuple(p["values"]) if p["values"] else None)
        for p in d["params"]
    )
    program = Program(
        params,
        tuple(_stmt_from_json(s) for s in d["stmts"]),
        tuple(d["outputs"]),
        dict(d["dims"]),
    )
    return program, {k: array_from_json(v) for k, v in d["inputs"].items()}
