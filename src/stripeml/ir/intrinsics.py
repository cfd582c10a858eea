"""The scalar intrinsics of Stripe: names, arity and typing rules.

This table is the single vocabulary shared by the verifier, the interpreter
and the code generators.  Typing rules (checked by the verifier):

* ``arith``/``math``/``minmax``: all inputs and the result have one dtype.
* ``cmp``: inputs share a dtype, the result is ``bool``.
* ``logic``: ``bool`` in, ``bool`` out.
* ``select``: ``select(cond: bool, a: T, b: T) -> T``.
* ``cast``: any dtype in, the declared dtype out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IntrinsicInfo:
    name: str
    arity: int
    kind: str  # arith | math | minmax | cmp | logic | select | cast
    float_only: bool = False


_TABLE = [
    IntrinsicInfo("add", 2, "arith"),
    IntrinsicInfo("sub", 2, "arith"),
    IntrinsicInfo("mul", 2, "arith"),
    # div: true division on floats, floor division on integers.
    IntrinsicInfo("div", 2, "arith"),
    # mod: floor modulo (Python/NumPy sign convention).
    IntrinsicInfo("mod", 2, "arith"),
    IntrinsicInfo("neg", 1, "arith"),
    IntrinsicInfo("abs", 1, "arith"),
    IntrinsicInfo("ident", 1, "arith"),
    IntrinsicInfo("max", 2, "minmax"),
    IntrinsicInfo("min", 2, "minmax"),
    IntrinsicInfo("relu", 1, "minmax"),
    IntrinsicInfo("exp", 1, "math", True),
    IntrinsicInfo("log", 1, "math", True),
    IntrinsicInfo("sqrt", 1, "math", True),
    IntrinsicInfo("tanh", 1, "math", True),
    IntrinsicInfo("sigmoid", 1, "math", True),
    IntrinsicInfo("sin", 1, "math", True),
    IntrinsicInfo("cos", 1, "math", True),
    IntrinsicInfo("tan", 1, "math", True),
    IntrinsicInfo("erf", 1, "math", True),
    IntrinsicInfo("floor", 1, "math", True),
    IntrinsicInfo("ceil", 1, "math", True),
    IntrinsicInfo("round", 1, "math", True),
    IntrinsicInfo("pow", 2, "math", True),
    IntrinsicInfo("cmp_lt", 2, "cmp"),
    IntrinsicInfo("cmp_le", 2, "cmp"),
    IntrinsicInfo("cmp_gt", 2, "cmp"),
    IntrinsicInfo("cmp_ge", 2, "cmp"),
    IntrinsicInfo("cmp_eq", 2, "cmp"),
    IntrinsicInfo("cmp_ne", 2, "cmp"),
    IntrinsicInfo("and", 2, "logic"),
    IntrinsicInfo("or", 2, "logic"),
    IntrinsicInfo("not", 1, "logic"),
    IntrinsicInfo("select", 3, "select"),
    IntrinsicInfo("cast", 1, "cast"),
]

INTRINSICS: dict[str, IntrinsicInfo] = {i.name: i for i in _TABLE}
