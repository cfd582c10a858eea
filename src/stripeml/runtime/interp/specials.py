"""Special statements: whole-view operations (``copy``, ``reshape``, ``gather``,
``scatter``, ``scatter_nd``, ``topk``).

A special runs once per point of its block on the full views of its refs.  All
points are handled at once: each input view is gathered into an array of shape
``(points, *sizes)``, the operation is applied with a leading point axis (the
scatters and ``topk`` point by point, through :func:`apply_whole`, which the
CPU and GPU runtimes also call on whole root buffers), and the result is
stored through the output ref (aggregation included).

Indices are checked here, once, for every backend: an index outside
``[-size, size)`` of its axis raises :class:`~stripeml.errors.ExecutionError`
naming the special, the index, its position and the axis.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ...errors import ExecutionError
from ...ir.dtypes import to_numpy
from ...ir.nodes import Special
from ...ir.stmt_rules import REDUCTIONS, SPECIALS, TOPK_ORDERS
from .memory import RefState, box_offsets, injective

Writer = Callable[[RefState, np.ndarray, np.ndarray], None]


def element_offsets(state: RefState) -> np.ndarray:
    """Flat offsets of every element of the view at every point: ``(points, elems)``."""
    shape = state.ref.shape
    inner = box_offsets(0, shape.sizes, shape.strides).reshape(-1)
    return state.base[:, None] + inner[None, :]


def _one_view(state: RefState, writeable: bool) -> np.ndarray | None:
    """The view of a one-point ``state`` as a strided array over its storage, when
    every element lies in the storage (strides not negative); else None.  For a
    write, only a view whose elements are distinct (no two share an offset)."""
    sizes, strides = state.ref.shape.sizes, state.ref.shape.strides
    storage = state.storage
    if state.base.size != 1 or storage.ndim != 1 or any(st < 0 for st in strides):
        return None
    if not all(k > 0 for k in sizes) or (writeable and not injective(sizes, strides)):
        return None
    start = int(state.base[0])
    last = start + sum((k - 1) * st for k, st in zip(sizes, strides))
    if start < 0 or last >= storage.size:
        return None
    item = storage.strides[0]  # bytes per element of the flat storage
    return np.lib.stride_tricks.as_strided(
        storage[start:], sizes, tuple(st * item for st in strides), writeable=writeable
    )


def read_view(state: RefState) -> np.ndarray:
    """The view's elements at every point, shape ``(points, *sizes)``.  A view of
    one point whose elements all lie in its storage is read as a strided view
    of it (a folded ``Gather`` of BERT's 512 x 768 position table: no 393,216
    offsets made and looked up); the same elements either way."""
    n = state.base.size
    sizes = state.ref.shape.sizes
    view = _one_view(state, writeable=False)
    if view is not None:
        return view.reshape((1, *sizes)).copy()
    return state.storage[element_offsets(state)].reshape((n, *sizes))


def bitview(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x``'s bytes in row-major order read as ``dtype`` along the last axis
    (NumPy's ``view``; the byte order is the machine's, as the compiled
    backends store values)."""
    return np.ascontiguousarray(x).view(dtype)


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
    elif stmt.op == "bitview":
        result = bitview(ins[0].reshape(n, -1), to_numpy(out.ref.shape.dtype)).reshape((n, *sizes))
    elif stmt.op == "gather":
        result = _gather(ins[0], ins[1], stmt.int_param("axis"))
    elif stmt.op in WHOLE:
        parts = [apply_whole(stmt, [a[p] for a in ins]) for p in range(n)]
        result = np.stack(parts) if parts else np.zeros((0, *sizes), ins[0].dtype)
    else:
        raise ExecutionError(f"unknown special {stmt.op!r}")
    if result.shape != (n, *sizes):
        raise ExecutionError(
            f"special {stmt.op!r} produces shape {result.shape[1:]}, output view has {sizes}"
        )
    with np.errstate(all="ignore"):
        values = result.astype(to_numpy(out.ref.shape.dtype), copy=False)
    view = _one_view(out, writeable=True) if out.sink is None else None
    if view is not None:  # a plain write of distinct elements: the same stores
        view[...] = values.reshape(sizes)
        return
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
    # Checked in the indices' own dtype (as :func:`_wrapped`): a uint64 index
    # past int64 must not wrap to a negative one, which would count from the end.
    bad = idx >= dim if idx.dtype.kind == "u" else (idx < -dim) | (idx >= dim)
    if bad.any():
        at = tuple(int(v) for v in np.argwhere(bad)[0])
        raise ExecutionError(
            f"gather index {int(idx[at])} at position {at[1:]} of the indices is out of "
            f"range for axis {axis} of size {dim} (valid: {-dim} to {dim - 1})"
        )
    idx = idx.astype(np.int64)
    idx = np.where(idx < 0, idx + dim, idx)
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


# -- scatter, scatter_nd, topk: one point at a time ----------------------------------

#: The specials :func:`apply_whole` runs (on the arrays of one point).
WHOLE = ("scatter", "scatter_nd", "topk")


def apply_whole(stmt: Special, ins: list[np.ndarray]) -> np.ndarray:
    """``stmt`` (one of :data:`WHOLE`) on the input arrays of one point; a new
    C-contiguous result array (never a view of an input)."""
    info = SPECIALS[stmt.op]
    if len(ins) != info.n_inputs:
        raise ExecutionError(f"special {stmt.op!r} takes {info.n_inputs} inputs, got {len(ins)}")
    if stmt.op == "topk":
        order = info.word(stmt, "order")
        return topk(ins[0], stmt.int_param("axis"), stmt.int_param("k"), order)
    reduce = info.word(stmt, "reduce")
    if stmt.op == "scatter":
        return scatter(ins[0], ins[1], ins[2], stmt.int_param("axis"), reduce)
    return scatter_nd(ins[0], ins[1], ins[2], reduce)


def _strides(shape: tuple[int, ...]) -> list[int]:
    """Row-major strides, in elements."""
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return out[::-1]


def _wrapped(
    idx: np.ndarray, dim: int, op: str, axis: int, tail: tuple[int, ...] = ()
) -> np.ndarray:
    """``idx`` (indices into ``axis`` of ``op``'s source) as int64, negative
    entries counted from ``dim``; an :class:`ExecutionError` names the first
    entry outside ``[-dim, dim)`` and its position in the indices tensor (that
    in ``idx``, then ``tail``)."""
    if idx.dtype.kind not in "iu":
        raise ExecutionError(f"{op} indices must be integers, got {idx.dtype}")
    # Compared in the indices' own dtype (exact in NumPy 2): a uint64 past
    # int64 must not wrap to a negative index when cast.
    bad = idx >= dim if idx.dtype.kind == "u" else (idx < -dim) | (idx >= dim)
    if bad.any():
        at = tuple(int(v) for v in np.argwhere(bad)[0])
        raise ExecutionError(
            f"{op} index {int(idx[at])} at position {at + tail} of the indices is out of "
            f"range for axis {axis} of size {dim} (valid: {-dim} to {dim - 1})"
        )
    wide = idx.astype(np.int64)
    return np.where(wide < 0, wide + dim, wide)


_REDUCE_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _combine(out: np.ndarray, pos: np.ndarray, values: np.ndarray, reduce: str) -> None:
    """``out[pos[j]] = reduce(out[pos[j]], values[j])`` for ``j`` in order (1-D
    arrays): with ``none`` the last update of an element wins, the others
    apply every update in turn (``ufunc.at``: unbuffered, so duplicates count)."""
    if reduce == "none":
        # The last occurrence of each position, found as the first of the reversed list.
        _, first = np.unique(pos[::-1], return_index=True)
        last = pos.size - 1 - first
        out[pos[last]] = values[last]
        return
    ufunc = _REDUCE_UFUNCS.get(reduce)
    if ufunc is None:
        raise ExecutionError(
            f"unknown scatter reduction {reduce!r} (known: {', '.join(REDUCTIONS)})"
        )
    with np.errstate(all="ignore"):
        ufunc.at(out, pos, values)


def scatter(x: np.ndarray, idx: np.ndarray, upd: np.ndarray, axis: int, reduce: str) -> np.ndarray:
    """A copy of ``x`` where ``upd[p]`` lands on ``x[p with p[axis] = idx[p]]``
    for every position ``p`` of ``idx`` (ONNX ScatterElements)."""
    rank = x.ndim
    if not -rank <= axis < rank:
        raise ExecutionError(f"scatter axis {axis} out of range for rank {rank}")
    axis %= rank
    if idx.ndim != rank or upd.shape != idx.shape:
        raise ExecutionError(
            f"scatter indices {idx.shape} and updates {upd.shape} must have one shape of "
            f"the source's rank {rank}"
        )
    if any(d != axis and i > s for d, (i, s) in enumerate(zip(idx.shape, x.shape))):
        raise ExecutionError(f"scatter indices {idx.shape} exceed the source {x.shape}")
    along = _wrapped(idx, x.shape[axis], "scatter", axis)
    flat = np.zeros(idx.shape, np.int64)
    for d, stride in enumerate(_strides(x.shape)):
        if d == axis:
            flat = flat + along * stride
        else:
            shape = [1] * rank
            shape[d] = idx.shape[d]
            flat = flat + np.arange(idx.shape[d], dtype=np.int64).reshape(shape) * stride
    out = np.array(x, order="C", copy=True)
    _combine(out.reshape(-1), flat.reshape(-1), upd.reshape(-1).astype(x.dtype), reduce)
    return out


def scatter_nd(x: np.ndarray, idx: np.ndarray, upd: np.ndarray, reduce: str) -> np.ndarray:
    """A copy of ``x`` where ``upd[q]`` lands on the slice ``x[idx[q]]`` for every
    index tuple ``idx[q]`` (the last axis of ``idx``; ONNX ScatterND)."""
    if idx.ndim < 1 or idx.shape[-1] > x.ndim:
        raise ExecutionError(f"scatter_nd indices {idx.shape} do not index the source {x.shape}")
    k = idx.shape[-1]
    lead = idx.shape[:-1]
    if upd.shape != lead + x.shape[k:]:
        raise ExecutionError(
            f"scatter_nd updates {upd.shape} are not {lead + x.shape[k:]} (indices {idx.shape}, "
            f"source {x.shape})"
        )
    count = math.prod(lead)
    base = np.zeros(count, np.int64)
    strides = _strides(x.shape)
    for j in range(k):
        col = _wrapped(idx[..., j], x.shape[j], "scatter_nd", j, (j,))
        base += col.reshape(count) * strides[j]
    inner = math.prod(x.shape[k:])
    pos = (base[:, None] + np.arange(inner, dtype=np.int64)[None, :]).reshape(-1)
    out = np.array(x, order="C", copy=True)
    _combine(out.reshape(-1), pos, upd.reshape(-1).astype(x.dtype), reduce)
    return out


def topk(x: np.ndarray, axis: int, k: int, order: str) -> np.ndarray:
    """The int64 positions along ``axis`` of the ``k`` largest (``order``
    ``largest``) or smallest elements of ``x``, best first; equal elements by
    lower position, NaN above every number (first when largest, last when
    smallest), as ``onnx.reference``'s TopK (a stable sort on the value, then
    on the position)."""
    rank = x.ndim
    if not -rank <= axis < rank:
        raise ExecutionError(f"topk axis {axis} out of range for rank {rank}")
    axis %= rank
    dim = x.shape[axis]
    if not 0 <= k <= dim:
        raise ExecutionError(f"topk k={k} is not in [0, {dim}] (the size of axis {axis})")
    if order not in TOPK_ORDERS:
        raise ExecutionError(f"unknown topk order {order!r} (known: {', '.join(TOPK_ORDERS)})")
    shape = [1] * rank
    shape[axis] = dim
    pos = np.broadcast_to(np.arange(dim, dtype=np.int64).reshape(shape), x.shape)
    largest = order == "largest"
    # Ascending by value, then by -position (largest) or position (smallest);
    # reversed for largest: descending values, ties by ascending position.
    ranked = np.lexsort((-pos if largest else pos, x), axis=axis)
    if largest:
        ranked = np.flip(ranked, axis)
    return np.ascontiguousarray(np.take(ranked, np.arange(k), axis=axis), dtype=np.int64)
