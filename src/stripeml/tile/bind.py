"""Shape binding: dimension values and every tensor's shape and dtype for one
call signature.

``compile`` checks a program once; each new signature of input shapes and
dtypes is bound here before lowering.  Everything that can only be known from
the actual inputs (ranks, dimension values, broadcasting, sizes) is checked
here and reported as :class:`~stripeml.errors.ShapeError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError, TileTypeError
from ..ir import dtypes
from . import ast
from .exprs import eval_size, format_expr, literal_int
from .types import TensorInfo, expr_type, normalize_axis

Signature = tuple[tuple[tuple[int, ...], str], ...]


@dataclass(frozen=True)
class Binding:
    """Dimension values and tensor infos for one signature."""

    dims: dict[str, int]
    tensors: dict[str, TensorInfo]


def where(stmt_or_pos: ast.Pos, text: str = "") -> str:
    loc = f"{stmt_or_pos.line}:{stmt_or_pos.column}: "
    return loc + (f"in '{text}': " if text else "")


def signature_of(arrays: Sequence[np.ndarray]) -> Signature:
    return tuple((tuple(int(s) for s in a.shape), str(a.dtype)) for a in arrays)


def bind(fn: ast.Function, sig: Signature) -> Binding:
    """Bind the parameters' shapes/dtypes and infer every tensor's shape and dtype."""
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

    for stmt in fn.stmts:
        if isinstance(stmt, ast.Contraction):
            tensors[stmt.output] = _bind_contraction(stmt, dims, tensors)
        elif isinstance(stmt, ast.Builtin):
            tensors[stmt.output] = _bind_builtin(stmt, dims, tensors)
        else:
            shape, dt = expr_type(stmt.expr, dims, tensors, stmt)
            tensors[stmt.output] = TensorInfo(shape, dt)
    return Binding(dims, tensors)


def _bind_contraction(
    stmt: ast.Contraction, dims: dict[str, int], tensors: dict[str, TensorInfo]
) -> TensorInfo:
    sizes = []
    for e in stmt.sizes:
        size = eval_size(e, dims)
        if size <= 0:
            raise ShapeError(
                f"{where(stmt.pos, stmt.text)}output size of '{stmt.output}' evaluates to "
                f"{size}; sizes must be positive"
            )
        sizes.append(size)
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
    else:
        dt = promote(*ops)
    if stmt.default is not None:
        d = tensors[stmt.default.name]
        if d.shape != tuple(sizes):
            raise ShapeError(
                f"{where(stmt.default.pos, stmt.text)}default '{stmt.default.name}' has shape "
                f"{d.shape} but the output has shape {tuple(sizes)}"
            )
    return TensorInfo(tuple(sizes), dt)


def _tensor_name(e: ast.Expr) -> str:
    assert isinstance(e, ast.Name), e  # the checker's tensor_arg requires a tensor name
    return e.name


def _bind_builtin(
    stmt: ast.Builtin, dims: dict[str, int], tensors: dict[str, TensorInfo]
) -> TensorInfo:
    """Shape and dtype of ``reshape`` / ``gather`` (arguments already checked)."""
    x_name = _tensor_name(stmt.args[0])
    x = tensors[x_name]
    if stmt.func == "reshape":
        sizes = []
        for e in stmt.args[1:]:
            size = eval_size(e, dims)
            if size <= 0:
                raise ShapeError(
                    f"{where(stmt.pos, stmt.text)}size '{format_expr(e)}' of the reshape of "
                    f"'{x_name}' evaluates to {size}; sizes must be positive"
                )
            sizes.append(size)
        count, want = int(np.prod(sizes, dtype=np.int64)), int(np.prod(x.shape, dtype=np.int64))
        if count != want:
            raise ShapeError(
                f"{where(stmt.pos, stmt.text)}cannot reshape '{x_name}' of shape {x.shape} "
                f"({want} elements) to {tuple(sizes)} ({count} elements): the element "
                "counts differ"
            )
        return TensorInfo(tuple(sizes), x.dtype)
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


def promote(*names: str) -> str:
    """NumPy promotion of Stripe dtypes (all strong)."""
    dt = np.result_type(*[dtypes.to_numpy(n) for n in names])
    out = dtypes.from_numpy(dt)
    if out is None:  # pragma: no cover - every promotion of supported dtypes is supported
        raise ShapeError(f"cannot promote {names}")
    return out
