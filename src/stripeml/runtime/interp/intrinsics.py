"""Scalar intrinsics of Stripe evaluated on NumPy arrays (one value per point).

Every function takes arrays (or 0-d arrays) that broadcast against each other
and returns an array of the declared dtype.  Floating-point warnings are
suppressed: ``exp(1000)`` is ``inf`` and ``0/0`` is ``nan`` as in NumPy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...errors import ExecutionError
from ...ir.dtypes import float_to_int, from_numpy, to_numpy


def ieee_pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``pow`` as C's (IEEE 754) ``pow``, which the compiled backends call.

    NumPy's ``power`` takes ``sqrt`` for an exponent of 0.5 given as a scalar
    (or any array of one value), and ``sqrt(-0.0)`` is -0.0, ``sqrt(-inf)``
    nan, where ``pow`` gives +0.0 and +inf; other fast paths (0, 1, -1, 2)
    agree with ``pow``."""
    r = np.power(x, y)
    if np.asarray(x).dtype.kind != "f":
        return r
    half = np.asarray(y) == 0.5
    if not half.any():
        return r
    fixed = np.where(x == 0, 0.0, np.where(np.isneginf(x), np.inf, r)).astype(r.dtype)
    return np.where(half, fixed, r)


_BINARY: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "pow": ieee_pow,
    "cmp_lt": np.less,
    "cmp_le": np.less_equal,
    "cmp_gt": np.greater,
    "cmp_ge": np.greater_equal,
    "cmp_eq": np.equal,
    "cmp_ne": np.not_equal,
    "and": np.logical_and,
    "or": np.logical_or,
    # On bool these are logical and/or/xor (NumPy's bitwise ops on bool arrays).
    "bit_and": np.bitwise_and,
    "bit_or": np.bitwise_or,
    "bit_xor": np.bitwise_xor,
    # NumPy defines the amounts the IR does: >= the width (or negative) shifts every
    # bit out, to 0 or (right shift of a negative signed value) -1.
    "shl": np.left_shift,
    "shr": np.right_shift,
}

_UNARY: dict[str, Callable[..., np.ndarray]] = {
    "neg": np.negative,
    "abs": np.absolute,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.rint,  # half to even
    "not": np.logical_not,
    "bit_not": np.invert,  # logical not on bool
}

# Arithmetic NumPy refuses on bool (``-b``, ``a - b``): computed in int8, then
# cast back, which keeps "non-zero is true".
_BOOL_VIA_INT = {"add", "sub", "mul", "div", "mod", "neg", "abs"}


def apply_intrinsic(op: str, args: Sequence[np.ndarray], dtype: str) -> np.ndarray:
    """Evaluate intrinsic ``op`` on ``args`` and return an array of ``dtype``."""
    out_dt = to_numpy(dtype)
    vals = [np.asarray(a) for a in args]
    if op in _BOOL_VIA_INT and vals and vals[0].dtype == np.bool_:
        vals = [v.astype(np.int8) for v in vals]
    with np.errstate(all="ignore"):
        result = _evaluate(op, vals, out_dt)
        return np.asarray(result).astype(out_dt, copy=False)


def _evaluate(op: str, vals: list[np.ndarray], out_dt: np.dtype) -> np.ndarray:
    if op in _BINARY:
        return _BINARY[op](vals[0], vals[1])
    if op in _UNARY:
        return _UNARY[op](vals[0])
    if op == "ident":
        return vals[0]
    if op == "cast":
        if vals[0].dtype.kind == "f" and out_dt.kind in "iu":
            return float_to_int(vals[0], from_numpy(out_dt) or "")  # defined out of range
        return vals[0].astype(out_dt)
    if op == "bitcast":
        x = vals[0]
        # Same width (the verifier's rule): a view of the bits, copied to own its memory.
        return np.array(x, order="C").view(out_dt)
    if op == "div":
        a, b = vals
        if a.dtype.kind == "f":
            return np.true_divide(a, b)
        # NumPy's integer floor division already gives 0 for a zero divisor.
        return np.floor_divide(a, b)
    if op == "mod":
        return np.mod(vals[0], vals[1])
    if op == "relu":
        x = vals[0]
        return np.maximum(x, np.zeros((), x.dtype))
    if op == "sigmoid":
        x = vals[0]
        one = np.ones((), x.dtype)
        return one / (one + np.exp(-x))
    if op == "erf":
        return erf(vals[0])
    if op == "select":
        return np.where(vals[0], vals[1], vals[2])
    if op == "dot4":
        return dot4(vals[0], vals[1])
    raise ExecutionError(f"unknown intrinsic {op!r}")


def dot4(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``dot4``: the four little-endian bytes of each int32 of ``a`` (as uint8)
    times those of ``b`` (as int8), summed in int32."""
    a, b = np.broadcast_arrays(np.asarray(a, np.int32), np.asarray(b, np.int32))
    ua = np.ascontiguousarray(a).astype("<i4").view(np.uint8).reshape(*a.shape, 4)
    sb = np.ascontiguousarray(b).astype("<i4").view(np.int8).reshape(*b.shape, 4)
    return (ua.astype(np.int32) * sb.astype(np.int32)).sum(axis=-1, dtype=np.int32)


# Cephes (ndtr.c) rational approximations: erf on |x| <= 1, erfc beyond.
_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
      7.00332514112805075473e3, 5.55923013010394962768e4)  # fmt: skip
_U = (1.0, 3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
      2.26290000613890934246e4, 4.92673942608635921086e4)  # fmt: skip
_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
      4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
      9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)  # fmt: skip
_Q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
      9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
      1.65666309194161350182e3, 5.57535340817727675546e2)  # fmt: skip
_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
      6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0)  # fmt: skip
_S = (1.0, 2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
      1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)  # fmt: skip


def _poly(x: np.ndarray, coeffs: tuple[float, ...]) -> np.ndarray:
    acc = np.full_like(x, coeffs[0])
    for c in coeffs[1:]:
        acc = acc * x + c
    return acc


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, vectorised (NumPy has none); computed in float64."""
    x64 = np.asarray(x, dtype=np.float64)
    ax = np.abs(x64)
    with np.errstate(all="ignore"):
        z = np.minimum(ax, 1.0) ** 2
        small = x64 * _poly(z, _T) / _poly(z, _U)
        # Past |x| = 27 erfc underflows to 0; clipping also turns inf into 1.
        big = np.clip(ax, 1.0, 27.0)
        near = _poly(big, _P) / _poly(big, _Q)
        far = _poly(big, _R) / _poly(big, _S)
        erfc = np.exp(-big * big) * np.where(big < 8.0, near, far)
        large = np.copysign(1.0 - erfc, x64)
    return np.where(ax <= 1.0, small, np.where(np.isnan(x64), x64, large))
