"""Constant folding of Tile's weak scalars (literals and dimension names): the
operators and functions of :mod:`.types` evaluated on Python values, as the
interpreter computes them (Python's exact integers; NumPy's float64)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

Weak = int | float | bool


def fold_unary(op: str, a: Weak) -> Weak:
    """Evaluate ``neg``, ``not`` or ``bit_not`` on a weak constant (``~`` is exact on
    integers, ``-a - 1``, and logical on a bool)."""
    if op == "bit_not":
        return (not a) if isinstance(a, bool) else ~int(a)
    return -a if op == "neg" else not a


#: Past this amount a left shift of a non-zero constant is beyond any 64-bit value.
_SHIFT_LIMIT = 128


def _fold_shift(op: str, a: int, b: int) -> int:
    """``a << b`` / ``a >> b`` on weak integers: exact (Python's) for ``b >= 0``; a
    negative amount shifts every bit out (0, or -1 for ``a >> b`` with ``a < 0``), as
    NumPy's shifts read it (as unsigned: larger than any width)."""
    if b < 0:
        return -1 if op == "shr" and a < 0 else 0
    if op == "shr":
        return a >> b
    if a and b > _SHIFT_LIMIT:
        return 1 << (_SHIFT_LIMIT + 1)  # only its size matters (checked_weak rejects it)
    return a << b


def fold(op: str, a: Weak, b: Weak) -> Weak:
    """Evaluate a binary operator on weak constants (Python semantics, floor ``/`` on ints)."""
    ints = isinstance(a, int) and isinstance(b, int)
    if op == "pow":
        return _fold_pow(a, b, ints)
    table: dict[str, Callable[[], Weak]] = {
        "add": lambda: a + b,
        "sub": lambda: a - b,
        "mul": lambda: a * b,
        "div": lambda: (
            (a // b if b else 0)
            if ints
            else (a / b if b else math.copysign(math.inf, a) if a else math.nan)
        ),
        "mod": lambda: (a % b if b else 0) if ints else _fold_fmod(float(a), float(b)),
        "cmp_lt": lambda: a < b,
        "cmp_gt": lambda: a > b,
        "cmp_le": lambda: a <= b,
        "cmp_ge": lambda: a >= b,
        "cmp_eq": lambda: a == b,
        "cmp_ne": lambda: a != b,
        "and": lambda: bool(a) and bool(b),
        "or": lambda: bool(a) or bool(b),
        "max": lambda: max(a, b),
        "min": lambda: min(a, b),
        # Integers (exact, two's complement of any width) or bools (bool & bool is bool).
        "bit_and": lambda: a & b,  # type: ignore[operator]
        "bit_or": lambda: a | b,  # type: ignore[operator]
        "bit_xor": lambda: a ^ b,  # type: ignore[operator]
        "shl": lambda: _fold_shift("shl", int(a), int(b)),
        "shr": lambda: _fold_shift("shr", int(a), int(b)),
    }
    return table[op]()


def _fold_fmod(a: float, b: float) -> float:
    """Float ``%`` as NumPy's ``remainder`` (the divisor's sign; NaN for a zero divisor)."""
    with np.errstate(all="ignore"):
        return float(np.remainder(np.float64(a), np.float64(b)))


def _fold_pow(a: Weak, b: Weak, ints: bool) -> Weak:
    """``pow`` of two weak constants: exact for integers (a result past 64 bits
    is not computed: 2**(10**18) would never finish), NumPy's float64 ``power``
    otherwise (inf on overflow, nan for a negative base; C's pow at 0.5, as the interpreter)."""
    if ints and int(b) >= 0:
        if abs(int(a)) > 1 and int(b) > 128:
            return 1 << 129  # at least 2**b: only its size matters (checked_weak rejects it)
        return int(a) ** int(b)
    if float(b) == 0.5 and (a == 0 or a == -math.inf):
        return math.inf if a else 0.0  # C's pow, not NumPy's sqrt fast path (-0.0, nan)
    with np.errstate(all="ignore"):
        return float(np.power(np.float64(a), np.float64(b)))


def fold_call(f: str, x: Weak) -> Weak:
    """A unary function of a weak constant, as the interpreter computes it on a
    float64 (NumPy: ``sin(inf)`` is nan, ``floor(nan)`` nan, ``exp(1000)`` inf)."""
    if f in ("abs", "relu") and isinstance(x, bool):
        return x  # as on a bool tensor: abs and relu keep bools
    if f in ("abs", "relu") and isinstance(x, int):
        return abs(x) if f == "abs" else max(x, 0)
    v = float(x)
    table: dict[str, Callable[[float], float]] = {
        "exp": np.exp,
        "log": np.log,
        "sqrt": np.sqrt,
        "tanh": np.tanh,
        "sigmoid": lambda u: float(1.0 / (1.0 + np.exp(np.float64(-u)))),
        "sin": np.sin,
        "cos": np.cos,
        "tan": np.tan,
        "erf": math.erf,
        "floor": np.floor,
        "ceil": np.ceil,
        "round": np.rint,  # half to even
        "abs": np.absolute,
        "relu": lambda u: float(np.maximum(u, 0.0)),
    }
    with np.errstate(all="ignore"):
        return float(table[f](v))
