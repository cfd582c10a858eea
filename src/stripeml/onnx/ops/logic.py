"""Comparisons, logic and selection: ``Equal``, ``Less`` ..., ``And``, ``Or``,
``Xor``, ``Not``, ``Where``, ``IsNaN``, ``IsInf``."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import broadcast_shape, scalar
from .elementwise import binary, float_input, register_as, same_dtype

_COMPARE = {"Equal": "==", "Less": "<", "Greater": ">", "LessOrEqual": "<=", "GreaterOrEqual": ">="}


def _compare(symbol: str) -> Callable[[Builder, Node], list[Value | None]]:
    return lambda b, n: [binary(b, n, "{a} " + symbol + " {b}", np.dtype(bool))]


for _name, _symbol in _COMPARE.items():
    _kinds = "numeric or bool" if _name == "Equal" else "numeric"
    register_as(
        _name,
        f"{_name}: ``A {_symbol} B``, bool, broadcasting ({_kinds} inputs).",
        _compare(_symbol),
    )


_LOGIC = {"And": "&&", "Or": "||", "Xor": "!="}


def _bool_input(n: Node, i: int) -> Value:
    v = n.input(i)
    if v.dtype.kind != "b":
        raise n.error(f"input {i} must be bool, got {v.dtype}")
    return v


def _logic(symbol: str) -> Callable[[Builder, Node], list[Value | None]]:
    def fn(b: Builder, n: Node) -> list[Value | None]:
        _bool_input(n, 0)
        _bool_input(n, 1)
        return [binary(b, n, "{a} " + symbol + " {b}", np.dtype(bool))]

    return fn


for _name, _symbol in _LOGIC.items():
    register_as(
        _name, f"{_name}: logical {_name.lower()} of bool tensors, broadcasting.", _logic(_symbol)
    )


@op("Not")
def not_(b: Builder, n: Node) -> list[Value | None]:
    """Not: logical negation of a bool tensor."""
    x = _bool_input(n, 0)
    return [b.eltwise(f"!{b.ref(x)}", x.shape, x.dtype)]


@op("Where")
def where(b: Builder, n: Node) -> list[Value | None]:
    """Where: ``C ? X : Y`` with three-way broadcasting."""
    c, x, y = _bool_input(n, 0), n.input(1), n.input(2)
    dt = same_dtype(n, [x, y])
    shape = broadcast_shape(n, c.shape, x.shape, y.shape)
    return [b.eltwise(f"{b.ref(c)} ? {b.ref(x)} : {b.ref(y)}", shape, dt)]


@op("IsNaN")
def isnan(b: Builder, n: Node) -> list[Value | None]:
    """IsNaN: float inputs."""
    x = float_input(n)
    return [b.eltwise(f"{b.ref(x)} != {b.ref(x)}", x.shape, np.dtype(bool))]


@op("IsInf")
def isinf(b: Builder, n: Node) -> list[Value | None]:
    """IsInf: float inputs; ``detect_positive`` and ``detect_negative``."""
    x = float_input(n)
    pos = int(n.attr("detect_positive", 1))
    neg = int(n.attr("detect_negative", 1))
    X, inf = b.ref(x), scalar(b, math.inf, x.dtype)
    if pos and neg:
        expr = f"abs({X}) == {inf}"
    elif pos:
        expr = f"{X} == {inf}"
    elif neg:
        expr = f"-{X} == {inf}"
    else:
        expr = f"{X} != {X} && {X} == {X}"  # always false
    return [b.eltwise(expr, x.shape, np.dtype(bool))]
