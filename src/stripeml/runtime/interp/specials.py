"""Special statements: whole-view operations (``copy``, ``reshape``, ``gather``).

A special runs once per point of its block on the full views of its refs.  All
points are handled at once: each input view is gathered into an array of shape
``(points, *sizes)``, the operation is applied with a leading point axis, and
the result is stored through the output ref (aggregation included).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import ExecutionError
from ...ir.dtypes import to_numpy
from ...ir.nodes import Special
from .memory import RefState, box_offsets

Writer = Callable[[RefState, np.ndarray, np.ndarray], None]


def element_offsets(state: RefState) -> np.ndarray:
    """Flat offsets of every element of the view at every point: ``(points, elems)``."""
    shape = state.ref.shape
    inner = box_offsets(0, shape.sizes, shape.strides).reshape(-1)
    return state.base[:, None] + inner[None, :]


def read_view(state: RefState) -> np.ndarray:
    """The view's elements at every point, shape ``(points, *sizes)``."""
    n = state.base.size
    return state.storage[element_offsets(state)].reshape((n, *state.ref.shape.sizes))


def run_special(stmt: Special, refs: dict[str, RefState], write: Writer) -> None:
    """Execute ``stmt`` for every point; ``write(state, offsets, values)`` stores."""
    ins = [read_view(refs[name]) for name in stmt.inputs]
    if len(stmt.outputs) != 1:
        raise ExecutionError(f"special {stmt.op!r} expects one output, got {len(stmt.outputs)}")
    out = refs[stmt.outputs[0]]
    n = out.base.size
    sizes = out.ref.shape.sizes
    if stmt.op == "copy":
        result = ins[0]
    elif stmt.op == "reshape":
        result = ins[0].reshape(n, -1).reshape((n, *sizes))
    elif stmt.op == "gather":
        result = _gather(ins[0], ins[1], stmt.int_param("axis"))
    else:
        raise ExecutionError(f"unknown special {stmt.op!r}")
    if result.shape != (n, *sizes):
        raise ExecutionError(
            f"special {stmt.op!r} produces shape {result.shape[1:]}, output view has {sizes}"
        )
    with np.errstate(all="ignore"):
        values = result.astype(to_numpy(out.ref.shape.dtype), copy=False)
    write(out, element_offsets(out).reshape(-1), values.reshape(-1))


def _gather(x: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    """``np.take(x[p], idx[p], axis)`` for every point ``p`` (leading axis)."""
    if idx.dtype.kind not in "iu":
        raise ExecutionError(f"gather indices must be integers, got {idx.dtype}")
    rank = x.ndim - 1
    if not -rank <= axis < rank:
        raise ExecutionError(f"gather axis {axis} out of range for rank {rank}")
    axis %= rank
    dim = x.shape[1 + axis]
    idx = idx.astype(np.int64)
    idx = np.where(idx < 0, idx + dim, idx)
    if idx.size and (idx.min() < 0 or idx.max() >= dim):
        raise ExecutionError(f"gather index out of range for axis of size {dim}")
    n = x.shape[0]
    pre, post = x.shape[1 : 1 + axis], x.shape[2 + axis :]
    irank = idx.ndim - 1
    out_rank = 1 + len(pre) + irank + len(post)

    def along(size: int, pos: int) -> np.ndarray:
        shape = [1] * out_rank
        shape[pos] = size
        return np.arange(size).reshape(shape)

    index = [along(n, 0)]
    index += [along(s, 1 + d) for d, s in enumerate(pre)]
    index.append(idx.reshape((n,) + (1,) * len(pre) + idx.shape[1:] + (1,) * len(post)))
    index += [along(s, 1 + len(pre) + irank + d) for d, s in enumerate(post)]
    return x[tuple(index)]
