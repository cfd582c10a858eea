"""ATen elementwise operators, reductions and constants -> ONNX-style nodes.

Rules of :data:`~.lower.RULES` for arithmetic and comparisons (in PyTorch's
promoted type), activations, casts, reductions (``mean sum amax amin max min
any all``), softmax and the constant makers (``full zeros ones arange`` ...).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..onnx.builder import Value
from .lower import (
    RULES,
    Lowering,
    Meta,
    Rule,
    Unsupported,
    _arg,
    _axis,
    _dtype,
    _shape,
    np_dtype,
    rule,
)

_UNARY = {
    "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log",
    "sqrt": "Sqrt", "abs": "Abs", "neg": "Neg", "erf": "Erf", "sin": "Sin", "cos": "Cos",
    "reciprocal": "Reciprocal", "floor": "Floor", "ceil": "Ceil", "sign": "Sign",
    "logical_not": "Not", "hardswish": "HardSwish", "isnan": "IsNaN",
}  # fmt: skip
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "maximum": "Max",
           "minimum": "Min", "pow": "Pow", "logical_and": "And", "logical_or": "Or"}  # fmt: skip
_COMPARE = {"eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater",
            "ge": "GreaterOrEqual", "ne": "Equal"}  # fmt: skip


def _unary(op: str) -> Rule:
    def write(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
        return L.one(op, L.cast(args[0], _dtype(meta)) if op != "IsNaN" else args[0])

    return write


def _binary(name: str, op: str) -> Rule:
    def write(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
        dtype = _dtype(meta)
        a, c = L.tensor(args[0], dtype), args[1]
        if name == "div" and kw.get("rounding_mode") is not None:
            raise Unsupported("div", f"rounding_mode={kw['rounding_mode']!r}")
        if name == "pow" and not isinstance(c, Value) and float(c) == 2.0:
            return L.one("Mul", a, a)
        alpha = _arg(args, kw, 2, "alpha", 1)
        if alpha != 1 and name in ("add", "sub"):
            c = L.one("Mul", L.tensor(c, dtype), L.const(alpha, dtype))
        return L.one(op, a, L.tensor(c, dtype))

    return write


def promoted(a: Any, c: Any) -> np.dtype:
    """The dtype PyTorch computes ``a`` and ``c`` (Values or Python numbers) in:
    its type promotion, where an integer tensor with a Python float is float32
    and a 0-d tensor does not widen a dimensioned one of its category (NumPy's
    rules differ on both)."""
    import torch

    def probe(x: Any) -> Any:
        if not isinstance(x, Value):
            return x
        return torch.from_numpy(np.zeros((1,) * min(x.rank, 1), x.dtype))

    return np_dtype(torch.result_type(probe(a), probe(c)))


def _compare(name: str, op: str) -> Rule:
    def write(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
        a, c = args[0], args[1]
        common = promoted(a, c)
        out = L.one(op, L.tensor(a, common), L.tensor(c, common))
        return L.one("Not", out) if name == "ne" else out

    return write


for _n, _o in _UNARY.items():
    RULES[_n] = _unary(_o)
for _n, _o in _BINARY.items():
    RULES[_n] = _binary(_n, _o)
for _n, _o in _COMPARE.items():
    RULES[_n] = _compare(_n, _o)


@rule("rsqrt")
def _rsqrt(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("Reciprocal", L.one("Sqrt", L.cast(args[0], _dtype(meta))))


@rule("remainder", "fmod")
def _remainder(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    """``remainder``: the sign of the divisor (Python's ``%``); ``fmod``: of the dividend."""
    dtype = _dtype(meta)
    a, c = L.tensor(args[0], dtype), L.tensor(args[1], dtype)
    if kw["__op__"] == "fmod":
        return L.one("Mod", a, c, fmod=1)
    if dtype.kind in "iu":
        return L.one("Mod", a, c, fmod=0)
    return L.one("Sub", a, L.one("Mul", L.one("Floor", L.one("Div", a, c)), c))


@rule("bitwise_not")
def _bitwise_not(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("Not" if args[0].dtype == np.bool_ else "BitwiseNot", args[0])


@rule("bitwise_and", "bitwise_or", "bitwise_xor", "logical_xor")
def _bitwise(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    """``&``, ``|``, ``^``: the logical operators on booleans, bitwise on integers."""
    name, dtype = kw["__op__"], _dtype(meta)
    kind = name.split("_", 1)[1]
    if name == "logical_xor":
        dtype = np.dtype(np.bool_)
        a, c = L.tensor(args[0], dtype), L.tensor(args[1], dtype)  # nonzero: True
    else:
        a, c = L.tensor(args[0], dtype), L.tensor(args[1], dtype)
    if dtype == np.bool_:
        return L.one(kind.capitalize(), a, c)
    if dtype.kind not in "iu":
        raise Unsupported(name, f"element type {dtype}")
    return L.one("Bitwise" + kind.capitalize(), a, c)


@rule("gelu")
def _gelu(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("Gelu", args[0], approximate=str(_arg(args, kw, 1, "approximate", "none")))


@rule("silu")
def _silu(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("Mul", args[0], L.one("Sigmoid", args[0]))


@rule("leaky_relu")
def _leaky(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("LeakyRelu", args[0], alpha=float(_arg(args, kw, 1, "negative_slope", 0.01)))


@rule("hardsigmoid")
def _hardsigmoid(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("HardSigmoid", args[0], alpha=1.0 / 6.0, beta=0.5)


@rule("clamp", "hardtanh", "clamp_min", "clamp_max")
def _clamp(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x, dtype, name = args[0], _dtype(meta), kw["__op__"]
    lo, hi = _arg(args, kw, 1, "min"), _arg(args, kw, 2, "max")
    if name == "hardtanh":
        lo = -1.0 if lo is None else lo
        hi = 1.0 if hi is None else hi
    elif name == "clamp_max":
        lo, hi = None, args[1]
    if isinstance(lo, Value) or isinstance(hi, Value):
        # tensor bounds (clamp.Tensor): Clip takes scalars only; PyTorch's
        # clamp is min(max(x, lo), hi), which broadcasts
        y = L.cast(x, dtype)
        if lo is not None:
            y = L.one("Max", y, L.tensor(lo, dtype))
        if hi is not None:
            y = L.one("Min", y, L.tensor(hi, dtype))
        return y
    return L.one(
        "Clip",
        L.cast(x, dtype),
        None if lo is None else L.tensor(lo, dtype),
        None if hi is None else L.tensor(hi, dtype),
    )


@rule("where")
def _where(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    dtype = _dtype(meta)
    return L.one("Where", args[0], L.tensor(args[1], dtype), L.tensor(args[2], dtype))


@rule("_to_copy", "convert_element_type", "to")
def _to_copy(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.cast(args[0], _dtype(meta))


def _reduce(op: str) -> Rule:
    def write(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
        x = L.cast(args[0], _dtype(meta)) if op != "ReduceMax" else args[0]
        dims = _arg(args, kw, 1, "dim", None)
        if isinstance(dims, int):
            dims = [dims]
        if not dims:
            dims = list(range(x.rank))
        keep = int(bool(_arg(args, kw, 2, "keepdim", False)))
        if x.rank == 0:
            return x
        axes = sorted({_axis(int(d), x.rank) for d in dims})
        return L.one(op, x, L.ints(axes), keepdims=keep)

    return write


@rule("max", "min")
def _max_min(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    """``max()``/``min()`` (everything), ``.dim`` (values; the indices are not
    produced) and ``.other`` (elementwise, as ``maximum``/``minimum``)."""
    name = kw["__op__"]
    other = args[1] if len(args) > 1 else kw.get("other", kw.get("dim"))
    if isinstance(other, Value):
        dtype = _dtype(meta)
        return L.one(
            "Max" if name == "max" else "Min", L.cast(args[0], dtype), L.cast(other, dtype)
        )
    y = _reduce("ReduceMax" if name == "max" else "ReduceMin")(L, args, kw, meta)
    return y if other is None else (y, None)


RULES["mean"] = _reduce("ReduceMean")
RULES["sum"] = _reduce("ReduceSum")
RULES["amax"] = _reduce("ReduceMax")
RULES["amin"] = _reduce("ReduceMin")


@rule("_softmax", "softmax")
def _softmax(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("Softmax", args[0], axis=int(args[1]))


@rule("_log_softmax", "log_softmax")
def _log_softmax(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("LogSoftmax", args[0], axis=int(args[1]))


def _const_rule(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    name = kw["__op__"]
    shape, dtype = _shape(meta), _dtype(meta)
    if name in ("zeros", "zeros_like", "new_zeros"):
        return L.const(np.zeros(shape, dtype))
    if name in ("ones", "ones_like", "new_ones"):
        return L.const(np.ones(shape, dtype))
    if name in ("full", "full_like", "new_full", "fill"):
        return L.const(np.full(shape, args[1], dtype))
    if name == "scalar_tensor":
        return L.const(np.asarray(args[0], dtype))
    if name == "arange":
        nums = [a for a in args if isinstance(a, (int, float))]
        start, end, step = (
            (0, nums[0], 1) if len(nums) == 1 else (*nums[:2], nums[2] if len(nums) > 2 else 1)
        )
        return L.const(np.arange(start, end, step).astype(dtype))
    raise Unsupported(name)


for _n in ("zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full",
           "full_like", "new_full", "scalar_tensor", "arange"):  # fmt: skip
    RULES[_n] = _const_rule


def _any_all(op: str) -> Rule:
    def write(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
        x = L.cast(args[0], np.dtype(np.float32))
        r = _reduce(op)(L, [x, *args[1:]], kw, _F32(meta))
        return L.cast(r, np.dtype(np.bool_))

    return write


class _F32:
    """``meta`` as float32 (the reduction of ``any``/``all`` runs on 0/1 floats)."""

    def __init__(self, meta: Meta):
        import torch

        self.shape, self.dtype = meta.shape, torch.float32


RULES["any"] = _any_all("ReduceMax")
RULES["all"] = _any_all("ReduceMin")
