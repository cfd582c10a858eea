"""Values with error bounds, the pieces the reference's evaluator is built from.

A :class:`Val` is an array in its dtype (or a weak Python scalar) and a bound
on its error; the helpers round a float64 result into a dtype (growing the
bound), join dtypes by NumPy promotion with weak scalars, convert a value to
a dtype (a weak integer out of range is the language's error, as in NumPy 2),
fold two weak constants, and measure how far a function moves over an input
interval.  The accuracy the backends promise for each function is here too.
See ``reference.py`` for the model.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .numerics import unit

if TYPE_CHECKING:
    from .reference import Reference

# Accuracy the backends promise for each function: input perturbation (argument
# reduction) and output error, in roundings of the dtype.
C_IN = {"floor": 0, "ceil": 0, "round": 0, "sqrt": 0}
C_OUT = {"floor": 0, "ceil": 0, "round": 0, "sqrt": 1}
C_IN_DEFAULT, C_OUT_DEFAULT = 2, 4

FLOAT_FUNCS = "exp log sqrt tanh sigmoid sin cos tan erf floor ceil round".split()
CASTS = {"as_float": "float", "as_int": "int", "as_uint": "uint"}
ERF = np.vectorize(math.erf, otypes=[np.float64])


class MustFail(Exception):
    """The language defines this program as an error (``kind``: the expected class).

    ``dead_ok`` is set when the failing statement is dead (no output element
    depends on what it computes): a compiler may then drop it, and a result
    equal to ``dead_ok`` is accepted instead of the error.
    """

    def __init__(self, kind: str, why: str, event: str = "") -> None:
        super().__init__(why)
        self.kind = kind  # an error class name; "StripeError": any but InternalError
        self.events: set[str] = {event} if event else set()
        self.dead_ok: Reference | None = None


_collected: list[MustFail] | None = None


@contextmanager
def collecting_static_errors():
    """Within this, :func:`static_error` records instead of raising (the list is
    yielded): a program with a compile-time error fails with it whatever its
    statements would do when run, so evaluation goes on to find it."""
    global _collected
    outer, _collected = _collected, []
    try:
        yield _collected
    finally:
        _collected = outer


def static_error(e: MustFail) -> None:
    """A compile-time error (a type or '=' error), raised unless being collected."""
    if _collected is None:
        raise e
    _collected.append(e)


@dataclass
class Val:
    """A value: an array in its dtype (or a weak Python scalar) and its error bound."""

    arr: np.ndarray | None
    err: np.ndarray
    weak: int | float | bool | None = None

    @property
    def dtype(self) -> np.dtype:
        assert self.arr is not None
        return self.arr.dtype

    def operand(self):
        """What NumPy should see: the array, or the Python scalar (weak)."""
        return self.weak if self.arr is None else self.arr

    def f64(self) -> np.ndarray:
        return np.asarray(self.operand(), dtype=np.float64)


def sanitize(err: np.ndarray) -> np.ndarray:
    err = np.asarray(err, dtype=np.float64)
    return np.where(np.isnan(err), math.inf, np.abs(err))


def rounded(r64: np.ndarray, dt: np.dtype, err: np.ndarray, c: float = 1.0) -> Val:
    """``r64`` rounded to ``dt``; the bound gains ``c`` roundings (inf where it overflowed)."""
    with np.errstate(all="ignore"):
        r = np.asarray(r64).astype(dt)
        grow = c * unit(dt) * np.where(np.isfinite(r64), np.abs(r64), 0.0)
        err = sanitize(err + grow)
        err = np.where(np.isfinite(r64) & ~np.isfinite(r.astype(np.float64)), math.inf, err)
    return Val(r, err)


def join(*vals: Val) -> np.dtype:
    return np.result_type(*(v.operand() for v in vals))


def as_dtype(v: Val, dt: np.dtype) -> np.ndarray:
    if v.arr is None and dt.kind in "iu" and not isinstance(v.weak, bool):
        info = np.iinfo(dt)
        if not info.min <= v.weak <= info.max:
            # NumPy 2 raises for a Python int that does not fit the array's dtype;
            # the language rejects it when the program is compiled (a TileTypeError).
            static_error(
                MustFail(
                    "TileTypeError", f"the literal {v.weak} does not fit {dt}", "weak_out_of_range"
                )
            )
            # Evaluation goes on (for the compile-time errors of later statements)
            # with the literal wrapped to the dtype.
            span = int(info.max) - int(info.min) + 1
            return np.asarray((v.weak - int(info.min)) % span + int(info.min), dt)
    with np.errstate(all="ignore"):
        return np.asarray(v.operand()).astype(dt) if v.arr is not None else np.asarray(v.weak, dt)


def fold(op: str, a, b):
    """Two weak constants (docs: Python semantics, floor ``/`` on integers, x / 0 defined)."""
    ints = isinstance(a, int) and isinstance(b, int)
    if op == "/":
        if ints:
            return a // b if b else 0
        return a / b if b else (math.copysign(math.inf, a) if a else math.nan)
    if op == "%":
        return a % b if b else 0
    return {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "<": lambda: a < b,
        ">": lambda: a > b,
        "<=": lambda: a <= b,
        ">=": lambda: a >= b,
        "==": lambda: a == b,
        "!=": lambda: a != b,
        "&&": lambda: bool(a) and bool(b),
        "||": lambda: bool(a) or bool(b),
        "max": lambda: max(a, b),
        "min": lambda: min(a, b),
        "pow": lambda: a**b,
    }[op]()


def scale(x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``|x| * e``, where an exact operand (``e == 0``) adds nothing even if ``x`` is inf."""
    with np.errstate(all="ignore"):
        return np.where(e > 0, np.abs(x) * e, 0.0)


def finite_abs(r: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(r), np.abs(r), 0.0)


def deviation(moved: np.ndarray, r: np.ndarray) -> np.ndarray:
    """How far a perturbed result is from ``r``: NaN appearing or vanishing is unbounded."""
    with np.errstate(all="ignore"):
        d = np.abs(moved - r)
        same = (moved == r) | (np.isnan(moved) & np.isnan(r))
    return np.where(same, 0.0, np.where(np.isnan(d), math.inf, d))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


FUNCS = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "sigmoid": sigmoid,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "erf": ERF,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.rint,  # half to even
}
