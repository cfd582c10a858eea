"""Types of elementwise expressions: shapes (NumPy broadcasting) and dtypes
(NumPy promotion with Python-style weak scalars).

Literals and dimension names are *weak*: they carry a Python value, not a
dtype, and take the dtype of the tensor they meet (``X * 0.5`` stays float32),
as NumPy 2 does for Python scalars.  Integer ``/`` is floor division.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from ..errors import ShapeError, TileTypeError
from ..ir import dtypes
from . import ast
from .exprs import BINARY_FUNCTIONS, INT64_MIN, UNARY_FUNCTIONS, format_expr, literal_int
from .weak_fold import Weak, fold, fold_call, fold_unary

# Functions whose result is floating point (ints promote to float64, as in NumPy).
FLOAT_FUNCS = UNARY_FUNCTIONS - {"abs", "relu"}
SAME_FUNCS = frozenset({"abs", "relu"})
BINARY_FUNCS = BINARY_FUNCTIONS
CASTS = {"as_float": "f", "as_int": "i", "as_uint": "u", "as_bool": "bool"}
#: Bit casts: the operand's bits reinterpreted (the width must be the operand's).
BITCASTS = {"bitcast_float": "f", "bitcast_int": "i", "bitcast_uint": "u"}
CMP_OPS = {
    "<": "cmp_lt",
    ">": "cmp_gt",
    "<=": "cmp_le",
    ">=": "cmp_ge",
    "==": "cmp_eq",
    "!=": "cmp_ne",
}
ARITH_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod"}
LOGIC_OPS = {"&&": "and", "||": "or"}
#: Bitwise operators: integer operands (``& | ^`` and unary ``~`` also bool).
BITWISE_OPS = {"&": "bit_and", "|": "bit_or", "^": "bit_xor", "<<": "shl", ">>": "shr"}
SHIFT_OPS = frozenset({"<<", ">>"})


@dataclass(frozen=True)
class TensorInfo:
    """Shape and dtype of a bound tensor."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class Typed:
    """An expression with a dtype: it reads a tensor (or is built from one)."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class WeakConst:
    """A weak constant: a Python value with no dtype yet (literals, dimensions)."""

    shape: tuple[int, ...]
    const: Weak


# The type of an elementwise expression.
EType = Typed | WeakConst


def loc(pos: ast.Pos, stmt: object) -> str:
    text = getattr(stmt, "text", "")
    return f"{pos.line}:{pos.column}: " + (f"in '{text}': " if text else "")


def type_error(pos: ast.Pos, stmt: object, message: str) -> TileTypeError:
    """A :class:`TileTypeError` located at ``pos`` (``bind`` adds the source line
    and a caret)."""
    err = TileTypeError(f"{loc(pos, stmt)}{message}")
    err.line, err.column = pos.line, pos.column
    return err


#: What a weak integer constant (a literal, or what the compiler folds from
#: literals and dimensions) may be: a value 64 bits hold, signed or unsigned.
WEAK_INT_MIN, WEAK_INT_MAX = INT64_MIN, (1 << 64) - 1


def int_range(dtype: str) -> tuple[int, int]:
    """The values of an integer (or bool) dtype."""
    if dtype == "bool":
        return 0, 1
    info = np.iinfo(dtypes.to_numpy(dtype))
    return int(info.min), int(info.max)


def is_weak_int(t: EType) -> bool:
    return isinstance(t, WeakConst) and isinstance(t.const, int) and not isinstance(t.const, bool)


def check_fits(t: EType, dtype: str, e: ast.Expr, stmt: object) -> None:
    """A weak integer ``t`` (the value of ``e``) that becomes ``dtype`` must be
    one of its values: NumPy 2 raises ``OverflowError`` for ``uint8_array + 300``
    rather than wrap, and so does Tile, at the constant."""
    if not is_weak_int(t) or not dtypes.is_int(dtype):
        return
    assert isinstance(t, WeakConst)
    lo, hi = int_range(dtype)
    if not lo <= int(t.const) <= hi:
        raise type_error(
            e.pos,
            stmt,
            f"the constant {_quote(e, t)} does not fit {dtype} ({lo} .. {hi}), the dtype "
            "it takes from the tensor it meets; cast the tensor first (as_int(X, 64), "
            "as_float(X, 64))",
        )


def _quote(e: ast.Expr, t: WeakConst) -> str:
    text = format_expr(e)
    return text if text == str(t.const) else f"'{text}' (= {t.const})"


def checked_weak(value: Weak, e: ast.Expr, stmt: object) -> WeakConst:
    """A folded constant, which must be a value 64 bits hold when it is an integer."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not WEAK_INT_MIN <= value <= WEAK_INT_MAX:
            raise type_error(
                e.pos,
                stmt,
                f"the constant expression '{format_expr(e)}' is {_digits(value)}, which 64 "
                f"bits cannot hold (integer constants lie in {WEAK_INT_MIN} .. {WEAK_INT_MAX})",
            )
    return WeakConst((), value)


def _digits(value: int) -> str:
    # Past 128 bits (39 digits) the size is all a reader needs.
    if value.bit_length() <= 128:
        return str(value)
    return "more than 2**128 in magnitude"


def compare_out_of_range(op: str, a: EType, b: EType) -> bool | None:
    """The value of ``a op b`` when one side is a weak integer outside the other
    (integer or bool) side's dtype: every element compares the same way (NumPy 2
    compares Python ints exactly, it does not wrap them); else ``None``."""
    for typed, weak, flip in ((a, b, False), (b, a, True)):
        integral = isinstance(typed, Typed) and (
            dtypes.is_int(typed.dtype) or typed.dtype == "bool"
        )
        if integral and is_weak_int(weak):
            assert isinstance(typed, Typed)
            assert isinstance(weak, WeakConst)
            lo, hi = int_range(typed.dtype)
            w = int(weak.const)
            if lo <= w <= hi:
                return None
            # Stand-in for every tensor value: lo or hi compares like all of them.
            x = lo if w > hi else hi
            lhs, rhs = (w, x) if flip else (x, w)
            result = fold(CMP_OPS[op], lhs, rhs)
            assert isinstance(result, bool)
            return result
    return None


def join(a: EType, b: EType) -> str:
    """The common dtype of two operands, at least one of them typed (two weak
    operands fold to a weak constant before anyone asks)."""
    if isinstance(a, Typed):
        return _promote(a.dtype, b)
    assert isinstance(b, Typed), "two weak operands have no common dtype"
    return _promote(b.dtype, a)


def _promote(dtype: str, other: EType) -> str:
    if isinstance(other, WeakConst):
        res = np.result_type(dtypes.to_numpy(dtype), other.const)
    else:
        res = np.result_type(dtypes.to_numpy(dtype), dtypes.to_numpy(other.dtype))
    name = dtypes.from_numpy(res)
    assert name is not None
    return name


def float_of(t: Typed) -> str:
    return t.dtype if dtypes.is_float(t.dtype) else "f64"


def default_dtype(value: Weak) -> str:
    if isinstance(value, bool):
        return "bool"
    return "i64" if isinstance(value, int) else "f64"


def broadcast(
    a: tuple[int, ...], b: tuple[int, ...], pos: ast.Pos, stmt: object
) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in np.broadcast_shapes(a, b))
    except ValueError:
        raise ShapeError(f"{loc(pos, stmt)}shapes {a} and {b} do not broadcast") from None


def expr_type(
    expr: ast.Expr,
    dims: Mapping[str, int],
    tensors: Mapping[str, TensorInfo],
    stmt: object,
) -> tuple[tuple[int, ...], str]:
    """Shape and dtype of a whole elementwise statement's value."""
    t = type_of(expr, dims, tensors, stmt)
    if isinstance(t, Typed):
        return t.shape, t.dtype
    dtype = default_dtype(t.const)
    check_fits(t, dtype, expr, stmt)
    return t.shape, dtype


def type_of(
    expr: ast.Expr, dims: Mapping[str, int], tensors: Mapping[str, TensorInfo], stmt: object
) -> EType:
    """Type an expression (constant-folding weak sub-expressions)."""
    if isinstance(expr, ast.IntLit):
        return WeakConst((), expr.value)
    if isinstance(expr, ast.FloatLit):
        return WeakConst((), expr.value)
    if isinstance(expr, ast.Name):
        if expr.name in tensors:
            info = tensors[expr.name]
            return Typed(info.shape, info.dtype)
        if expr.name in dims:
            return WeakConst((), dims[expr.name])
        raise TileTypeError(f"{loc(expr.pos, stmt)}unknown name '{expr.name}'")
    if isinstance(expr, ast.Unary):
        t = type_of(expr.operand, dims, tensors, stmt)
        if expr.op == "~":
            _bitwise_operand("~", t, expr.operand, stmt)
            if isinstance(t, WeakConst):
                return replace(
                    checked_weak(fold_unary("bit_not", t.const), expr, stmt), shape=t.shape
                )
            return t
        if expr.op == "!":
            if isinstance(t, WeakConst):
                return WeakConst(t.shape, fold_unary("not", t.const))
            return Typed(t.shape, "bool")
        if isinstance(t, WeakConst) and not isinstance(t.const, bool):
            # (a comparison folded to a constant keeps its tensor's shape)
            return replace(checked_weak(fold_unary("neg", t.const), expr, stmt), shape=t.shape)
        if isinstance(t, WeakConst) or t.dtype == "bool":
            raise TileTypeError(f"{loc(expr.pos, stmt)}cannot negate a bool value")
        return t
    if isinstance(expr, ast.Binary):
        a = type_of(expr.lhs, dims, tensors, stmt)
        b = type_of(expr.rhs, dims, tensors, stmt)
        shape = broadcast(a.shape, b.shape, expr.pos, stmt)
        if expr.op in BITWISE_OPS:
            return _bitwise_type(expr, a, b, shape, stmt)
        op = ARITH_OPS.get(expr.op) or CMP_OPS.get(expr.op) or LOGIC_OPS[expr.op]
        if isinstance(a, WeakConst) and isinstance(b, WeakConst):
            return replace(checked_weak(fold(op, a.const, b.const), expr, stmt), shape=shape)
        if expr.op in CMP_OPS:
            fixed = compare_out_of_range(expr.op, a, b)
            return Typed(shape, "bool") if fixed is None else WeakConst(shape, fixed)
        if expr.op in LOGIC_OPS:
            return Typed(shape, "bool")
        dt = join(a, b)
        if dt == "bool" and expr.op in ("-", "/", "%"):
            if expr.op == "-":
                raise TileTypeError(f"{loc(expr.pos, stmt)}cannot subtract bool values")
            dt = "i64"
        check_fits(a, dt, expr.lhs, stmt)
        check_fits(b, dt, expr.rhs, stmt)
        return Typed(shape, dt)
    if isinstance(expr, ast.Ternary):
        c = type_of(expr.cond, dims, tensors, stmt)
        a = type_of(expr.then, dims, tensors, stmt)
        b = type_of(expr.other, dims, tensors, stmt)
        shape = broadcast(broadcast(c.shape, a.shape, expr.pos, stmt), b.shape, expr.pos, stmt)
        if isinstance(a, WeakConst) and isinstance(b, WeakConst):
            if isinstance(c, WeakConst):
                return WeakConst(shape, a.const if c.const else b.const)
            floats = isinstance(a.const, float) or isinstance(b.const, float)
            dt = "f64" if floats else default_dtype(b.const)
        else:
            dt = join(a, b)
        check_fits(a, dt, expr.then, stmt)
        check_fits(b, dt, expr.other, stmt)
        return Typed(shape, dt)
    if isinstance(expr, ast.Call):
        return _call_type(expr, dims, tensors, stmt)
    raise TileTypeError(f"unsupported expression {expr!r}")  # pragma: no cover


def _bitwise_operand(op: str, t: EType, e: ast.Expr, stmt: object) -> None:
    """An operand of a bitwise operator must be an integer, or a bool for ``& | ^ ~``
    (logical there, as NumPy's bitwise operators on bool arrays); a
    :class:`TileTypeError` at the operand otherwise."""
    if isinstance(t, WeakConst):
        value = t.const
        kind = "bool" if isinstance(value, bool) else "float" if isinstance(value, float) else "int"
        what = f"the constant {_quote(e, t)}"
    else:
        kind = "bool" if t.dtype == "bool" else "float" if dtypes.is_float(t.dtype) else "int"
        what = f"'{format_expr(e)}' is {t.dtype}:"
    if kind == "int" or (kind == "bool" and op not in SHIFT_OPS):
        return
    if isinstance(t, WeakConst):
        what = f"{what} is a {kind}:"
    if kind == "float":
        takes = "integer operands" if op in SHIFT_OPS else "integer (or bool) operands"
        raise type_error(
            e.pos,
            stmt,
            f"'{op}' takes {takes}, but {what} bitwise operations are not defined on "
            "floats (convert with as_int(x, bits) or as_uint(x, bits))",
        )
    raise type_error(
        e.pos,
        stmt,
        f"'{op}' shifts integers only, but {what} cast it to an integer first "
        "(as_int(x, bits) or as_uint(x, bits))",
    )


def _bitwise_type(
    expr: ast.Binary, a: EType, b: EType, shape: tuple[int, ...], stmt: object
) -> EType:
    """``& | ^ << >>``: integer operands (bools for ``& | ^``), promoted as NumPy
    promotes them, with weak constants taking the tensor's dtype."""
    _bitwise_operand(expr.op, a, expr.lhs, stmt)
    _bitwise_operand(expr.op, b, expr.rhs, stmt)
    op = BITWISE_OPS[expr.op]
    if isinstance(a, WeakConst) and isinstance(b, WeakConst):
        return replace(checked_weak(fold(op, a.const, b.const), expr, stmt), shape=shape)
    dt = join(a, b)
    if dtypes.is_float(dt):  # uint64 with a signed integer: NumPy gives float64
        ta, tb = (t.dtype if isinstance(t, Typed) else "a constant" for t in (a, b))
        raise type_error(
            expr.pos,
            stmt,
            f"'{expr.op}' on {ta} and {tb}: they have no common integer dtype (NumPy "
            f"promotes them to float64); convert one first (as_int(x, 64), as_uint(x, 64))",
        )
    check_fits(a, dt, expr.lhs, stmt)
    check_fits(b, dt, expr.rhs, stmt)
    return Typed(shape, dt)


def cast_target(call: ast.Call, stmt: object) -> str:
    kind = CASTS[call.func]
    if kind == "bool":
        return "bool"
    bits_arg = call.args[1]
    if not isinstance(bits_arg, ast.IntLit):
        raise TileTypeError(f"{loc(call.pos, stmt)}{call.func} needs an integer literal bit width")
    name = f"{kind}{bits_arg.value}"
    if name not in dtypes.DTYPES:
        raise TileTypeError(
            f"{loc(call.pos, stmt)}{call.func}: unsupported bit width {bits_arg.value}"
        )
    return name


def bitcast_types(
    call: ast.Call, dims: Mapping[str, int], tensors: Mapping[str, TensorInfo], stmt: object
) -> tuple[EType, str, str]:
    """For ``bitcast_float/int/uint(x, bits)``: x's type, the dtype it is read in (a
    weak constant's default: int64, float64, bool) and the target dtype, which must
    have as many bits; a :class:`TileTypeError` at the call otherwise."""
    t = type_of(call.args[0], dims, tensors, stmt)
    src = t.dtype if isinstance(t, Typed) else default_dtype(t.const)
    check_fits(t, src, call.args[0], stmt)
    bits_arg = call.args[1]
    if not isinstance(bits_arg, ast.IntLit):
        raise type_error(call.pos, stmt, f"{call.func} needs an integer literal bit width")
    target = f"{BITCASTS[call.func]}{bits_arg.value}"
    if target not in dtypes.DTYPES:
        raise type_error(call.pos, stmt, f"{call.func}: unsupported bit width {bits_arg.value}")
    if dtypes.bits(src) != bits_arg.value:
        what = f"'{format_expr(call.args[0])}'"
        what += f" is {src}" if isinstance(t, Typed) else f" is a constant, read as {src}"
        raise type_error(
            call.pos,
            stmt,
            f"{call.func}(x, {bits_arg.value}) reinterprets {bits_arg.value} bits, but {what} "
            f"({dtypes.bits(src)} bits); a bit cast keeps the width (use as_float, as_int "
            "or as_uint to convert the value)",
        )
    return t, src, target


def dot4_type(
    call: ast.Call, dims: Mapping[str, int], tensors: Mapping[str, TensorInfo], stmt: object
) -> Typed:
    """``dot4(a, b)``: both operands int32 (an integer constant takes int32 and must
    fit it), broadcast; the result is int32.  A :class:`TileTypeError` at the call
    names the operands' types otherwise: ``dot4`` reads the bytes of int32 words, and
    an implicit conversion would change which bytes it reads."""
    args = [type_of(a, dims, tensors, stmt) for a in call.args]
    wrong = [
        (a, t)
        for a, t in zip(call.args, args)
        if not (is_weak_int(t) or (isinstance(t, Typed) and t.dtype == "i32"))
    ]
    if wrong:
        what = "; ".join(
            f"'{format_expr(a)}' is {t.dtype}"
            if isinstance(t, Typed)
            else f"'{format_expr(a)}' is a {type(t.const).__name__} constant"
            for a, t in wrong
        )
        raise type_error(
            call.pos,
            stmt,
            f"dot4(a, b) takes two int32 operands (each holds four bytes: a's read as uint8, "
            f"b's as int8), but {what}; pack the bytes into int32 words first (view_int(X, 32) "
            "of a uint8 or int8 tensor)",
        )
    for a, t in zip(call.args, args):
        check_fits(t, "i32", a, stmt)
    return Typed(broadcast(args[0].shape, args[1].shape, call.pos, stmt), "i32")


def index_axis(
    call: ast.Call, dims: Mapping[str, int], tensors: Mapping[str, TensorInfo], stmt: object
) -> tuple[Typed, int]:
    """For ``index(X, axis)``: X's type and the axis made non-negative.

    Raises :class:`ShapeError` when the axis is out of range for X's rank.
    """
    arg = call.args[0]
    x = type_of(arg, dims, tensors, stmt)
    axis = literal_int(call.args[1])
    if not isinstance(arg, ast.Name) or not isinstance(x, Typed) or axis is None:
        raise TileTypeError(
            f"{loc(call.pos, stmt)}index(X, axis) needs a tensor X and an integer literal axis"
        )
    what = f"'{arg.name}' of shape {x.shape} in 'index'"
    return x, normalize_axis(axis, len(x.shape), what, call.args[1].pos, stmt)


def normalize_axis(axis: int, rank: int, what: str, pos: ast.Pos, stmt: object) -> int:
    """``axis`` in ``-rank .. rank-1`` made non-negative; :class:`ShapeError` otherwise."""
    if not -rank <= axis < rank:
        allowed = f"axes run from {-rank} to {rank - 1}" if rank else "it has no axes"
        raise ShapeError(f"{loc(pos, stmt)}axis {axis} is out of range for {what}: {allowed}")
    return axis % rank


def _call_type(
    call: ast.Call, dims: Mapping[str, int], tensors: Mapping[str, TensorInfo], stmt: object
) -> EType:
    f = call.func
    if f == "index":
        x, _ = index_axis(call, dims, tensors, stmt)
        return Typed(x.shape, "i64")
    if f in CASTS:
        t = type_of(call.args[0], dims, tensors, stmt)
        return Typed(t.shape, cast_target(call, stmt))
    if f in BITCASTS:
        t, _, target = bitcast_types(call, dims, tensors, stmt)
        return Typed(t.shape, target)
    if f == "dot4":
        return dot4_type(call, dims, tensors, stmt)
    args = [type_of(a, dims, tensors, stmt) for a in call.args]
    if f in FLOAT_FUNCS or f in SAME_FUNCS:
        t = args[0]
        if isinstance(t, WeakConst):
            return replace(checked_weak(fold_call(f, t.const), call, stmt), shape=t.shape)
        return Typed(t.shape, float_of(t) if f in FLOAT_FUNCS else t.dtype)
    if f in BINARY_FUNCS:
        a, b = args
        shape = broadcast(a.shape, b.shape, call.pos, stmt)
        if isinstance(a, WeakConst) and isinstance(b, WeakConst):
            return replace(checked_weak(fold(f, a.const, b.const), call, stmt), shape=shape)
        dt = join(a, b)
        check_fits(a, dt, call.args[0], stmt)
        check_fits(b, dt, call.args[1], stmt)
        return Typed(shape, dt)
    raise TileTypeError(f"{loc(call.pos, stmt)}unknown function '{f}'")
