"""The scalar intrinsics of Stripe: names, arity and typing rules.

This table is the single vocabulary shared by the verifier, the interpreter
and the code generators.  Typing rules (checked by the verifier):

* ``arith``/``math``/``minmax``: all inputs and the result have one dtype.
* ``cmp``: inputs share a dtype, the result is ``bool``.
* ``logic``: ``bool`` in, ``bool`` out.
* ``select``: ``select(cond: bool, a: T, b: T) -> T``.
* ``cast``: any dtype in, the declared dtype out.
* ``bitwise``: all inputs and the result have one integer dtype; ``bit_and``,
  ``bit_or``, ``bit_xor`` and ``bit_not`` also take ``bool`` (logical
  and/or/xor/not), the shifts ``shl``/``shr`` integers only.  The shift amount
  (the second input, of the same dtype) is read as unsigned: an amount of the
  width or more (a negative signed amount included) shifts every bit out, so
  ``shl`` gives 0 and ``shr`` the sign fill (0, or -1 for a negative signed
  value), as NumPy's ``left_shift``/``right_shift`` and ONNX ``BitShift``.
  ``shr`` is logical on unsigned dtypes and arithmetic on signed ones.
* ``bitcast``: the bits of the input reinterpreted as the declared dtype, of the
  same width (``bool`` may be the source, as a byte of 0 or 1, not the target).
* ``dot4``: ``dot4(a: i32, b: i32) -> i32``, the dot product of ``a``'s four
  bytes read as unsigned (uint8) with ``b``'s four bytes read as signed (int8),
  byte ``t`` with byte ``t`` (little-endian: byte 0 is the low byte), summed
  exactly in int32: the integer dot product of quantised models (uint8
  activations, int8 weights; x86's ``vpdpbusd``, CUDA's ``dp4a``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IntrinsicInfo:
    name: str
    arity: int
    kind: str  # arith | math | minmax | cmp | logic | select | cast | bitwise | bitcast | dot4
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
    IntrinsicInfo("bitcast", 1, "bitcast"),
    IntrinsicInfo("bit_and", 2, "bitwise"),
    IntrinsicInfo("bit_or", 2, "bitwise"),
    IntrinsicInfo("bit_xor", 2, "bitwise"),
    IntrinsicInfo("bit_not", 1, "bitwise"),
    # shl/shr: amounts >= the width shift every bit out; shr is arithmetic on signed.
    IntrinsicInfo("shl", 2, "bitwise"),
    IntrinsicInfo("shr", 2, "bitwise"),
    # dot4: four uint8 bytes of a times four int8 bytes of b, summed in int32.
    IntrinsicInfo("dot4", 2, "dot4"),
]

#: The bitwise intrinsics that also take ``bool`` (logical and/or/xor/not).
BOOL_BITWISE = frozenset({"bit_and", "bit_or", "bit_xor", "bit_not"})
#: The shifts: integer operands only.
SHIFTS = frozenset({"shl", "shr"})

INTRINSICS: dict[str, IntrinsicInfo] = {i.name: i for i in _TABLE}
