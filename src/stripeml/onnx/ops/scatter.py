"""Scatter and top-k operators: ScatterElements (and Scatter, its opset 9-10
name), ScatterND, TensorScatter, MaxUnpool and TopK.

What an affine contraction cannot write (an element's position taken from a
runtime index, duplicates that reduce, a sort) goes through Tile's statement
builtins, each one root ``special`` of the Stripe program
(``docs/stripe-ir.md``, section 2.6):

* ``scatter(X, I, U, axis, r)`` (ScatterElements; TensorScatter and MaxUnpool
  are written with it) and ``scatter_nd(X, I, U, r)`` (ScatterND): a copy of
  the data with every update applied in row-major order of the indices,
  ``r`` one of ``none`` (the last update of an element wins, as the
  reference's loop), ``add``, ``mul``, ``max``, ``min``; negative indices
  count from the end, an index out of range is an ``ExecutionError`` when the
  model runs;
* ``topk(X, K, axis, largest|smallest)``: TopK's int64 indices (ties by the
  lower index, NaN above every number, as ``onnx.reference``); the values
  are the data at those indices, gathered from the flattened data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...ir.stmt_rules import REDUCTIONS
from ..builder import Builder, NeedsHost, Node, Value
from ..registry import op
from ._util import axis, checked_shape, ints
from .shape import broadcast_to, empty, reshape


def _strides(shape: Sequence[int]) -> list[int]:
    """Row-major strides, in elements."""
    return [math.prod(shape[k + 1 :]) for k in range(len(shape))]


def _indices(n: Node, i: Value, what: str = "indices") -> None:
    if i.dtype.kind not in "iu":
        raise n.error(f"{what} must be integers, got {i.dtype}")


def _reduction(n: Node) -> str:
    red = str(n.attr("reduction", "none"))
    if red not in REDUCTIONS:
        raise n.error(f"reduction {red!r} is not one of {', '.join(REDUCTIONS)}")
    return red


def _same_dtype(n: Node, x: Value, u: Value) -> None:
    if u.dtype != x.dtype:
        raise n.error(f"updates have element type {u.dtype}, the data {x.dtype}")


def _nothing_to_write(n: Node, x: Value, u: Value) -> bool:
    """No update element (the result is the data); an error for updates into
    data with no elements (every index would be out of range)."""
    if u.size == 0:
        return True
    if x.size == 0:
        raise n.error(f"updates {u.shape} into data {x.shape}, which has no elements")
    return False


def scatter_along(b: Builder, x: Value, i: Value, u: Value, ax: int, red: str = "none") -> Value:
    """``x`` with ``u[p]`` at ``x[p with p[ax] = i[p]]`` (ScatterElements), shapes checked."""
    text = f"{{out}} = scatter({b.ref(x)}, {b.ref(i)}, {b.ref(u)}, {ax}, {red})"
    return b.statement(text, x.shape, x.dtype)


@op("ScatterElements", "Scatter")
def scatter_elements(b: Builder, n: Node) -> list[Value | None]:
    """ScatterElements: any axis, negative indices, reduction none/add/mul/max/min.

    Also Scatter (its opset 9-10 name).  Tile's `scatter`; an index out of
    range is an error when the model runs."""
    x, i, u = n.input(0), n.input(1), n.input(2)
    _indices(n, i)
    _same_dtype(n, x, u)
    if x.rank < 1 or i.rank != x.rank:
        raise n.error(f"indices {i.shape} and data {x.shape} must have one rank, at least 1")
    if u.shape != i.shape:
        raise n.error(f"updates {u.shape} and indices {i.shape} differ in shape")
    ax = axis(n, int(n.attr("axis", 0)), x.rank)
    for k in range(x.rank):
        if k != ax and i.shape[k] > x.shape[k]:
            raise n.error(f"indices {i.shape} exceed the data {x.shape} on axis {k}")
    red = _reduction(n)
    if _nothing_to_write(n, x, u):
        return [x]
    return [scatter_along(b, x, i, u, ax, red)]


@op("ScatterND")
def scatter_nd(b: Builder, n: Node) -> list[Value | None]:
    """ScatterND: index tuples of any length, negative indices, reduction none/add/mul/max/min.

    Tile's `scatter_nd`; an index out of range is an error when the model runs."""
    x, i, u = n.input(0), n.input(1), n.input(2)
    _indices(n, i)
    _same_dtype(n, x, u)
    if i.rank < 1 or i.shape[-1] > x.rank:
        raise n.error(f"indices {i.shape} must hold tuples of at most {x.rank} indices")
    want = i.shape[:-1] + x.shape[i.shape[-1] :]
    if u.shape != want:
        raise n.error(f"updates {u.shape} should have shape {want} (indices {i.shape})")
    red = _reduction(n)
    if _nothing_to_write(n, x, u):
        return [x]
    text = f"{{out}} = scatter_nd({b.ref(x)}, {b.ref(i)}, {b.ref(u)}, {red})"
    return [b.statement(text, x.shape, x.dtype)]


@op("TensorScatter")
def tensor_scatter(b: Builder, n: Node) -> list[Value | None]:
    """TensorScatter: `mode` linear or circular, any sequence `axis`, optional `write_indices`.

    Tile's `scatter` of positions computed elementwise (a linear write past the
    cache's end is an error when the model runs)."""
    past, upd = n.input(0), n.input(1)
    _same_dtype(n, past, upd)
    if past.rank < 2 or upd.rank != past.rank:
        raise n.error(f"cache {past.shape} and update {upd.shape} need one rank, at least 2")
    ax = axis(n, int(n.attr("axis", -2)), past.rank)
    if ax == 0:
        raise n.error("axis is the batch dimension 0; the sequence axis must come after it")
    for k in range(past.rank):
        if (upd.shape[k] > past.shape[k]) if k == ax else (upd.shape[k] != past.shape[k]):
            raise n.error(f"update {upd.shape} does not fit the cache {past.shape} (axis {ax})")
    mode = str(n.attr("mode", "linear"))
    if mode not in ("linear", "circular"):
        raise n.error(f"mode {mode!r} is neither 'linear' nor 'circular'")
    if _nothing_to_write(n, past, upd):
        return [past]
    pos = f"index({b.ref(upd)}, {ax})"
    w = n.opt(2)
    if w is not None:
        _indices(n, w, "write_indices")
        if w.shape != (past.shape[0],):
            raise n.error(f"write_indices {w.shape} should have shape ({past.shape[0]},)")
        per_batch = reshape(b, w, (past.shape[0],) + (1,) * (past.rank - 1))
        pos = f"as_int({b.ref(per_batch)}, 64) + {pos}"
    if mode == "circular":
        pos = f"({pos}) % {past.shape[ax]}"
    where = b.eltwise(pos, upd.shape, np.int64)
    return [scatter_along(b, past, where, upd, ax)]


@op("MaxUnpool", static=(2,))
def max_unpool(b: Builder, n: Node) -> list[Value | None]:
    """MaxUnpool: any spatial rank, `output_shape` known when compiling.

    Each value at its flat index in a zero tensor of the inferred shape (Tile's
    `scatter`; of duplicate indices the last wins), placed at the origin of
    `output_shape` when given, as the reference does."""
    x, i = n.input(0), n.input(1)
    _indices(n, i)
    if x.rank < 3 or i.shape != x.shape:
        raise n.error(
            f"needs (N, C, D1, ...) data and indices of its shape, got {x.shape}, {i.shape}"
        )
    spatial = x.rank - 2
    kernel = ints(n, "kernel_shape")
    strides = ints(n, "strides") or [1] * spatial
    pads = ints(n, "pads") or [0] * (2 * spatial)
    if len(kernel) != spatial or len(strides) != spatial or len(pads) != 2 * spatial:
        raise n.error(
            f"kernel_shape {kernel}, strides {strides} and pads {pads} do not fit "
            f"{spatial} spatial dimensions"
        )
    inferred = x.shape[:2] + tuple(
        (x.shape[2 + d] - 1) * strides[d] - pads[d] - pads[spatial + d] + kernel[d]
        for d in range(spatial)
    )
    inferred = checked_shape(n, inferred, "inferred output shape")
    given = n.const_input(2, "output_shape")
    shape = inferred
    if given is not None:
        shape = checked_shape(n, [int(s) for s in np.asarray(given).reshape(-1)], "output_shape")
        if len(shape) != x.rank or any(s < f for s, f in zip(shape, inferred)):
            raise n.error(f"output_shape {shape} is smaller than the inferred shape {inferred}")
    e = empty(shape, x.dtype)
    if e is not None:
        return [e]
    zero = Value("", (), x.dtype, np.zeros((), x.dtype))
    total = math.prod(inferred)
    if x.size == 0 or total == 0:
        return [broadcast_to(b, zero, shape)]
    flat = scatter_along(
        b,
        broadcast_to(b, zero, (total,)),
        reshape(b, i, (i.size,)),
        reshape(b, x, (x.size,)),
        0,
    )
    y = reshape(b, flat, inferred)
    if shape == inferred:
        return [y]
    idx = [f"i{k}" for k in range(x.rank)]
    sizes = ", ".join(str(s) for s in shape)
    text = f"{{out}}[{', '.join(idx)} : {sizes}] = =({b.ref(y)}[{', '.join(idx)}])"
    return [b.contraction(text, shape, x.dtype)]


def take_along(b: Builder, x: Value, idx: Value, ax: int) -> Value:
    """``x``'s elements at the (in range, non-negative) positions ``idx`` along
    ``ax`` (NumPy's ``take_along_axis``, ``idx`` of ``x``'s shape off the axis):
    a gather from the flattened ``x``."""
    if x.rank == 1:
        return b.statement(f"{{out}} = gather({b.ref(x)}, {b.ref(idx)}, 0)", idx.shape, x.dtype)
    strides = _strides(x.shape)
    name = b.ref(idx)
    terms = [name if strides[ax] == 1 else f"{name} * {strides[ax]}"]
    for k in range(x.rank):
        if k != ax and idx.shape[k] > 1:
            term = f"index({name}, {k})"
            terms.append(term if strides[k] == 1 else f"{term} * {strides[k]}")
    pos = b.eltwise(" + ".join(terms), idx.shape, np.int64)
    flat = reshape(b, x, (x.size,))
    return b.statement(f"{{out}} = gather({b.ref(flat)}, {pos.name}, 0)", idx.shape, x.dtype)


def _topk_on_host(n: Node, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """TopK with a k computed at run time, on the host: onnx's reference
    evaluator (the definition itself)."""
    from .dynamic import _reference

    return _reference(n, inputs)


@op("TopK", static=(1,))
def topk(b: Builder, n: Node) -> list[Value | None]:
    """TopK: any axis, `largest`, sorted; ties and NaN as the reference; a `k` computed at run time runs on the host.

    Ties go to the lower index, NaN ranks above every number.  Tile's `topk`
    gives the indices, then a `gather` from the flattened data the values."""
    x = n.input(0)
    if n.opset < 10:
        k = int(n.attr("k", -1))
    else:
        given = n.input(1)
        if given.const is None:  # computed at run time: the output's size too
            raise NeedsHost(n, _topk_on_host, [x.narrow or x.dtype, np.dtype(np.int64)])
        arr = n.const_input(1, "K")
        if arr is None:
            raise n.error("input 1 (K) is required")
        flat = np.asarray(arr).reshape(-1)
        if flat.size != 1:
            raise n.error(f"K must hold one value, got shape {np.asarray(arr).shape}")
        k = int(flat[0])
    if x.rank < 1:
        raise n.error("needs data of rank 1 or more, got a scalar")
    ax = axis(n, int(n.attr("axis", -1)), x.rank)
    if not 0 <= k <= x.shape[ax]:
        raise n.error(f"k = {k} is not between 0 and the size {x.shape[ax]} of axis {ax}")
    shape = x.shape[:ax] + (k,) + x.shape[ax + 1 :]
    if 0 in shape:
        return [empty(shape, x.dtype), empty(shape, np.dtype(np.int64))]
    order = "largest" if int(n.attr("largest", 1)) else "smallest"
    idx = b.statement(f"{{out}} = topk({b.ref(x)}, {k}, {ax}, {order})", shape, np.int64)
    return [take_along(b, x, idx, ax), idx]
