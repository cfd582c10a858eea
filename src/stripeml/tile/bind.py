"""Shape binding: dimension values and every tensor's shape and dtype for one
call signature.

``compile`` checks a program once; each new signature of input shapes and
dtypes is bound here before lowering.  Everything that can only be known from
the actual inputs (ranks, dimension values, broadcasting, sizes) is checked
here and reported as :class:`~stripeml.errors.ShapeError`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError, TileTypeError, format_bytes, source_excerpt
from ..ir import dtypes
from . import ast
from .exprs import (
    INT64_MAX,
    INT64_MIN,
    VIEW_BITS,
    eval_size,
    format_expr,
    literal_int,
    poly_to_affine,
)
from .types import TensorInfo, expr_type, normalize_axis

#: The most bytes one tensor, and all of a program's tensors together, may
#: span (4 EiB): far past any machine, and small enough that every size,
#: stride, byte offset and padded tile the compiler derives stays in int64.
MAX_BYTES = 1 << 62

Signature = tuple[tuple[tuple[int, ...], str], ...]


@dataclass(frozen=True)
class Binding:
    """Dimension values and tensor infos for one signature."""

    dims: dict[str, int]
    tensors: dict[str, TensorInfo]


def where(stmt_or_pos: ast.Pos, text: str = "") -> str:
    loc = f"{stmt_or_pos.line}:{stmt_or_pos.column}: "
    return loc + (f"in '{text}': " if text else "")


#: ``str(dtype)`` by dtype: NumPy's ``str`` of a dtype runs Python code (microseconds,
#: paid by every call of a compiled function); a dtype hashes in C.
_DTYPE_NAMES: dict[np.dtype, str] = {}


def _dtype_name(dtype: np.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = str(dtype)
        if len(_DTYPE_NAMES) < 256:  # a few numeric dtypes in practice; never unbounded
            _DTYPE_NAMES[dtype] = name
    return name


def signature_of(arrays: Sequence[np.ndarray]) -> Signature:
    return tuple((tuple(int(s) for s in a.shape), _dtype_name(a.dtype)) for a in arrays)


#: The last binding made, with its function and signature: a frontend's check of a
#: program it generated binds it, and lowering binds it again for the same
#: signature (BERT-base: 6-7 ms each, at every sequence length).  Holds that
#: one syntax tree; callers get copies of the dictionaries.
_LAST: tuple[ast.Function, Signature, Binding] | None = None


def bind(fn: ast.Function, sig: Signature) -> Binding:
    """Bind the parameters' shapes/dtypes and infer every tensor's shape and dtype."""
    global _LAST
    last, key = _LAST, tuple(sig)
    if last is None or last[0] is not fn or last[1] != key:
        last = (fn, key, _bind(fn, sig))
        _LAST = last
    return Binding(dict(last[2].dims), dict(last[2].tensors))


def _bind(fn: ast.Function, sig: Signature) -> Binding:
    if len(sig) != len(fn.params):
        raise ShapeError(
            f"expected {len(fn.params)} input(s) ({', '.join(p.name for p in fn.params)}), "
            f"got {len(sig)}"
        )
    dims: dict[str, int] = {}
    origin: dict[str, str] = {}
    tensors: dict[str, TensorInfo] = {}
    for p, (shape, np_dtype) in zip(fn.params, sig):
        dt = dtypes.from_numpy(np_dtype)
        if dt is None:
            raise ShapeError(f"input '{p.name}' has unsupported dtype {np_dtype}")
        if p.dims is not None:
            if len(p.dims) != len(shape):
                raise ShapeError(
                    f"{where(p.pos)}input '{p.name}' is declared with rank {len(p.dims)} "
                    f"but has shape {shape} (rank {len(shape)})"
                )
            for d, size in zip(p.dims, shape):
                if isinstance(d, ast.IntLit):
                    if d.value != size:
                        raise ShapeError(
                            f"{where(p.pos)}input '{p.name}' must have size {d.value} in that "
                            f"dimension, got shape {shape}"
                        )
                    continue
                if d.name in dims and dims[d.name] != size:
                    raise ShapeError(
                        f"{where(p.pos)}dimension {d.name} is bound to {dims[d.name]} by "
                        f"'{origin[d.name]}' and to {size} by '{p.name}' (shape {shape})"
                    )
                dims[d.name] = size
                origin[d.name] = p.name
        tensors[p.name] = TensorInfo(tuple(shape), dt)

    total = 0
    for p in fn.params:
        total = _checkformat_bytes(p.name, tensors[p.name], total, where(p.pos))
    for stmt in fn.stmts:
        try:
            if isinstance(stmt, ast.Contraction):
                tensors[stmt.output] = _bind_contraction(stmt, dims, tensors)
            elif isinstance(stmt, ast.Builtin):
                tensors[stmt.output] = _bind_builtin(stmt, dims, tensors)
            else:
                shape, dt = expr_type(stmt.expr, dims, tensors, stmt)
                tensors[stmt.output] = TensorInfo(shape, dt)
        except TileTypeError as err:
            raise _with_caret(err, fn.source) from None
        total = _checkformat_bytes(
            stmt.output, tensors[stmt.output], total, where(stmt.pos, stmt.text)
        )
    return Binding(dims, tensors)


def _with_caret(err: TileTypeError, source: str) -> TileTypeError:
    """``err`` with its source line and a caret, when it has a location and no
    excerpt yet (the checks add theirs; typing errors only know the position)."""
    excerpt = (
        ""
        if err.line is None or err.column is None
        else source_excerpt(err.line, err.column, source)
    )
    if not excerpt or "\n" in str(err):
        return err
    located = TileTypeError(f"{err}\n{excerpt}")
    located.line, located.column = err.line, err.column
    return located


def _checkformat_bytes(name: str, info: TensorInfo, total: int, at: str) -> int:
    """``total`` plus the bytes ``info`` spans; :class:`ShapeError` past :data:`MAX_BYTES`.

    Counted in exact integers, so a size that would wrap int64 cannot slip by;
    a size-0 dimension does not hide the others (they still make strides).
    """
    span = math.prod(max(n, 1) for n in info.shape) * dtypes.itemsize(info.dtype)
    if span > MAX_BYTES:
        raise ShapeError(
            f"{at}'{name}' of shape {info.shape} and dtype {info.dtype} would take "
            f"{format_bytes(span)}; a tensor may take at most {format_bytes(MAX_BYTES)}"
        )
    if total + span > MAX_BYTES:
        raise ShapeError(
            f"{at}with '{name}' ({format_bytes(span)}) the program's tensors take "
            f"{format_bytes(total + span)}; together they may take at most {format_bytes(MAX_BYTES)}"
        )
    return total + span


def _size(e: ast.Expr, dims: dict[str, int], what: str, stmt: ast.Statement) -> int:
    """A size expression's value: >= 0 (0 makes an empty tensor) and an int64."""
    size = eval_size(e, dims)
    if size < 0:
        raise ShapeError(
            f"{where(stmt.pos, stmt.text)}{what} evaluates to {size}; sizes must be positive "
            "(or 0 for an empty tensor)"
        )
    if size > INT64_MAX:
        raise ShapeError(
            f"{where(stmt.pos, stmt.text)}{what} evaluates to {_int(size)}, more than int64 "
            f"holds ({INT64_MAX})"
        )
    return size


def _int(n: int) -> str:
    return str(n) if n.bit_length() <= 128 else "more than 2**128"


def _check_int64(stmt: ast.Contraction, dims: dict[str, int]) -> None:
    """Every coefficient and constant of the index polynomials, and every
    constraint bound, is an int64 (the IR's affines are)."""
    polys = [*stmt.out_indices, *(e for a in stmt.operands for e in a.indices)]
    polys += [c.poly for c in stmt.constraints]
    for e in polys:
        coeffs, const = poly_to_affine(e, dims)
        for v in (*coeffs.values(), const):
            if not INT64_MIN <= v <= INT64_MAX:
                raise ShapeError(
                    f"{where(e.pos, stmt.text)}the index polynomial '{format_expr(e)}' has "
                    f"the constant {_int(v)} once dimensions bind, outside int64"
                )
    for c in stmt.constraints:
        bound = eval_size(c.bound, dims)
        if not INT64_MIN <= bound <= INT64_MAX:
            raise ShapeError(
                f"{where(c.bound.pos, stmt.text)}the constraint bound '{format_expr(c.bound)}' "
                f"evaluates to {_int(bound)}, outside int64"
            )


def _bind_contraction(
    stmt: ast.Contraction, dims: dict[str, int], tensors: dict[str, TensorInfo]
) -> TensorInfo:
    sizes = [_size(e, dims, f"output size of '{stmt.output}'", stmt) for e in stmt.sizes]
    _check_int64(stmt, dims)
    for acc in stmt.operands:
        info = tensors[acc.tensor]
        if len(acc.indices) != len(info.shape):
            raise ShapeError(
                f"{where(acc.pos, stmt.text)}'{acc.tensor}' has rank {len(info.shape)} "
                f"(shape {info.shape}) but is accessed with {len(acc.indices)} indices"
            )
    ops = [tensors[a.tensor].dtype for a in stmt.operands]
    if stmt.combo == "eq":
        dt = "bool"
    elif stmt.combo == "cond":
        dt = ops[2]
    elif stmt.combo == "dot4":
        dt = _dot4_dtype(stmt, tensors)
    else:
        dt = promote(*ops)
    if stmt.default is not None:
        d = tensors[stmt.default.name]
        if d.shape != tuple(sizes):
            raise ShapeError(
                f"{where(stmt.default.pos, stmt.text)}default '{stmt.default.name}' has shape "
                f"{d.shape} but the output has shape {tuple(sizes)}"
            )
        if d.dtype != dt:
            # No implicit cast: the output's dtype comes from the operands, and a
            # default of another dtype would be silently rounded or widened.
            err = TileTypeError(
                f"{where(stmt.default.pos, stmt.text)}default '{stmt.default.name}' has dtype "
                f"{d.dtype} but '{stmt.output}' has dtype {dt} (from its operands); cast the "
                f"default first ({_cast_hint(stmt.default.name, dt)})"
            )
            err.line, err.column = stmt.default.pos.line, stmt.default.pos.column
            raise err
    return TensorInfo(tuple(sizes), dt)


def _dot4_dtype(stmt: ast.Contraction, tensors: dict[str, TensorInfo]) -> str:
    """``dot4(A[..], B[..])`` reads the bytes of int32 words: both operands must be
    int32 (no implicit conversion: it would change the bytes); the result is int32."""
    for acc in stmt.operands:
        dt = tensors[acc.tensor].dtype
        if dt != "i32":
            err = TileTypeError(
                f"{where(acc.pos, stmt.text)}dot4 takes two int32 operands (each holds four "
                f"bytes: the first's read as uint8, the second's as int8), but '{acc.tensor}' "
                f"has dtype {dt}; pack the bytes into int32 words first (view_int({acc.tensor}, "
                "32) of a uint8 or int8 tensor)"
            )
            err.line, err.column = acc.pos.line, acc.pos.column
            raise err
    return "i32"


def _tensor_name(e: ast.Expr) -> str:
    assert isinstance(e, ast.Name), e  # the checker's tensor_arg requires a tensor name
    return e.name


def _bind_builtin(
    stmt: ast.Builtin, dims: dict[str, int], tensors: dict[str, TensorInfo]
) -> TensorInfo:
    """Shape and dtype of a statement builtin (arguments already checked)."""
    x_name = _tensor_name(stmt.args[0])
    x = tensors[x_name]
    if stmt.func == "reshape":
        what = f"size '{{}}' of the reshape of '{x_name}'"
        sizes = [_size(e, dims, what.format(format_expr(e)), stmt) for e in stmt.args[1:]]
        # Exact products: an int64 product could wrap around to the right count.
        count, want = math.prod(sizes), math.prod(x.shape)
        if count != want and 0 in sizes:
            e = stmt.args[1 + sizes.index(0)]
            raise ShapeError(
                f"{where(stmt.pos, stmt.text)}{what.format(format_expr(e))} evaluates to 0; "
                f"sizes must be positive (or 0 for an empty tensor), and '{x_name}' of shape "
                f"{x.shape} has {want} elements"
            )
        if count != want:
            raise ShapeError(
                f"{where(stmt.pos, stmt.text)}cannot reshape '{x_name}' of shape {x.shape} "
                f"({want} elements) to {tuple(sizes)} ({count} elements): the element "
                "counts differ"
            )
        return TensorInfo(tuple(sizes), x.dtype)
    if stmt.func in VIEW_BITS:
        return _bind_view(stmt, x_name, x)
    if stmt.func in ("scatter", "scatter_nd"):
        return _bind_scatter(stmt, x_name, x, tensors)
    if stmt.func == "topk":
        return _bind_topk(stmt, x_name, x, dims)
    i_name = _tensor_name(stmt.args[1])
    idx = tensors[i_name]
    axis = literal_int(stmt.args[2])
    assert axis is not None  # the checks require an integer literal
    axis = normalize_axis(
        axis, len(x.shape), f"'{x_name}' of shape {x.shape} in 'gather'", stmt.args[2].pos, stmt
    )
    if not dtypes.is_int(idx.dtype):
        raise TileTypeError(
            f"{where(stmt.args[1].pos, stmt.text)}the indices '{i_name}' of 'gather' have "
            f"dtype {idx.dtype}; they must be integers (convert with as_int({i_name}, 64))"
        )
    return TensorInfo(x.shape[:axis] + idx.shape + x.shape[axis + 1 :], x.dtype)


def _bind_view(stmt: ast.Builtin, x_name: str, x: TensorInfo) -> TensorInfo:
    """``view_int/uint/float(X, bits)``: ``X``'s bytes read as the new dtype (NumPy's
    ``X.view(dtype)``): the last dimension scales by the ratio of the widths and
    must come out whole; a rank-0 ``X`` keeps its width; no ``bool`` either way."""
    kind, _ = VIEW_BITS[stmt.func]
    bits_arg = stmt.args[1]
    assert isinstance(bits_arg, ast.IntLit)  # the checks require an allowed literal
    target = f"{kind}{bits_arg.value}"
    at = where(stmt.pos, stmt.text)
    if x.dtype == "bool":
        err = TileTypeError(
            f"{at}'{x_name}' is bool, which {stmt.func} cannot view: a bool holds only 0 or "
            f"1 (convert it first: as_uint({x_name}, 8))"
        )
        err.line, err.column = stmt.args[0].pos.line, stmt.args[0].pos.column
        raise err
    have, want = dtypes.bits(x.dtype), bits_arg.value
    if have == want:
        return TensorInfo(x.shape, target)
    if not x.shape:
        raise ShapeError(
            f"{at}'{x_name}' is a rank-0 {x.dtype} ({have} bits), which {stmt.func}(X, "
            f"{want}) cannot view: a view of another width scales the last dimension, and "
            f"'{x_name}' has none (reshape it to rank 1 first)"
        )
    last = x.shape[-1] * have
    if last % want:
        raise ShapeError(
            f"{at}the last dimension of '{x_name}' (shape {x.shape}, {x.dtype}) holds "
            f"{last // 8} bytes, not a whole number of {target} elements ({want // 8} bytes "
            "each)"
        )
    return TensorInfo(x.shape[:-1] + (last // want,), target)


def _bind_scatter(
    stmt: ast.Builtin, x_name: str, x: TensorInfo, tensors: dict[str, TensorInfo]
) -> TensorInfo:
    """``scatter(X, I, U, axis[, r])``: ``I`` integers of ``X``'s rank, within ``X``
    off the axis, ``U`` of ``I``'s shape; ``scatter_nd(X, I, U[, r])``: ``I``
    holds index tuples of ``k = I.shape[-1] <= rank`` in its last axis, ``U`` has
    shape ``I.shape[:-1] + X.shape[k:]``.  ``U`` has ``X``'s dtype; so does the
    result, of ``X``'s shape."""
    func = stmt.func
    i_name, u_name = _tensor_name(stmt.args[1]), _tensor_name(stmt.args[2])
    idx, upd = tensors[i_name], tensors[u_name]
    if not dtypes.is_int(idx.dtype):
        raise TileTypeError(
            f"{where(stmt.args[1].pos, stmt.text)}the indices '{i_name}' of '{func}' have "
            f"dtype {idx.dtype}; they must be integers (convert with as_int({i_name}, 64))"
        )
    if upd.dtype != x.dtype:
        raise TileTypeError(
            f"{where(stmt.args[2].pos, stmt.text)}the updates '{u_name}' of '{func}' have "
            f"dtype {upd.dtype}, not the dtype {x.dtype} of '{x_name}' (convert them first)"
        )
    at = where(stmt.pos, stmt.text)
    if func == "scatter":
        axis = literal_int(stmt.args[3])
        assert axis is not None  # the checks require an integer literal
        rank = len(x.shape)
        what = f"'{x_name}' of shape {x.shape} in 'scatter'"
        axis = normalize_axis(axis, rank, what, stmt.args[3].pos, stmt)
        if len(idx.shape) != rank:
            raise ShapeError(
                f"{at}the indices '{i_name}' of shape {idx.shape} must have the rank {rank} "
                f"of '{x_name}' (shape {x.shape})"
            )
        over = [d for d in range(rank) if d != axis and idx.shape[d] > x.shape[d]]
        if over:
            raise ShapeError(
                f"{at}the indices '{i_name}' of shape {idx.shape} are larger than '{x_name}' "
                f"of shape {x.shape} on axis {over[0]} (only the scatter axis {axis} may be)"
            )
        want = idx.shape
    else:
        if not idx.shape or idx.shape[-1] > len(x.shape):
            raise ShapeError(
                f"{at}the indices '{i_name}' of shape {idx.shape} must hold index tuples of "
                f"at most {len(x.shape)} entries (the rank of '{x_name}') in their last axis"
            )
        want = idx.shape[:-1] + x.shape[idx.shape[-1] :]
    if upd.shape != want:
        raise ShapeError(
            f"{at}the updates '{u_name}' have shape {upd.shape}; {func} of indices of shape "
            f"{idx.shape} into '{x_name}' of shape {x.shape} needs {want}"
        )
    return x


def _bind_topk(stmt: ast.Builtin, x_name: str, x: TensorInfo, dims: dict[str, int]) -> TensorInfo:
    """``topk(X, K, axis[, order])``: the int64 positions of ``K`` elements along
    the axis, ``0 <= K <= X.shape[axis]``."""
    axis = literal_int(stmt.args[2])
    assert axis is not None  # the checks require an integer literal
    what = f"'{x_name}' of shape {x.shape} in 'topk'"
    axis = normalize_axis(axis, len(x.shape), what, stmt.args[2].pos, stmt)
    k = _size(stmt.args[1], dims, f"the count '{format_expr(stmt.args[1])}' of 'topk'", stmt)
    if k > x.shape[axis]:
        raise ShapeError(
            f"{where(stmt.pos, stmt.text)}topk of {k} elements from axis {axis} of "
            f"'{x_name}' (shape {x.shape}), which has {x.shape[axis]}"
        )
    return TensorInfo(x.shape[:axis] + (k,) + x.shape[axis + 1 :], "i64")


def _cast_hint(name: str, dtype: str) -> str:
    """How to write ``name`` cast to ``dtype`` in Tile."""
    if dtype == "bool":
        return f"as_bool({name})"
    func = {"f": "as_float", "i": "as_int", "u": "as_uint"}[dtype[0]]
    return f"D2 = {func}({name}, {dtypes.itemsize(dtype) * 8}); then default D2"


def promote(*names: str) -> str:
    """NumPy promotion of Stripe dtypes (all strong)."""
    dt = np.result_type(*[dtypes.to_numpy(n) for n in names])
    out = dtypes.from_numpy(dt)
    if out is None:  # pragma: no cover - every promotion of supported dtypes is supported
        raise ShapeError(f"cannot promote {names}")
    return out
