"""Small helpers shared by the op modules."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import DTypeLike

from ..builder import MAX_ELEMENTS, Builder, Node, OnnxError, Value


def broadcast_shape(node: Node, *shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting of ``shapes``; an error naming the node otherwise."""
    try:
        return tuple(int(s) for s in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise node.error(
            f"shapes {', '.join(str(tuple(s)) for s in shapes)} do not broadcast"
        ) from None


def checked_shape(node: Node, dims: Sequence[int], what: str = "shape") -> tuple[int, ...]:
    """``dims`` as a shape, checked before anything of that shape is allocated: no
    negative dimension, at most ``MAX_ELEMENTS`` elements."""
    shape = tuple(int(d) for d in dims)
    if any(d < 0 for d in shape):
        raise node.error(f"{what} {shape} has a negative dimension")
    count = int(np.prod(shape, dtype=object))
    if count > MAX_ELEMENTS:
        raise node.error(f"{what} {shape} has {count} elements, more than {MAX_ELEMENTS}")
    return shape


def indices(n: int, prefix: str = "i") -> list[str]:
    """``n`` distinct Tile index names."""
    return [f"{prefix}{k}" for k in range(n)]


def axis(node: Node, ax: int, rank: int, what: str = "axis") -> int:
    """Normalise a possibly negative axis, checking it is in range."""
    if not -rank <= ax < max(rank, 1):
        raise node.error(f"{what} {ax} is out of range for rank {rank}")
    return ax % rank if rank else 0


def literal(value: float | int | bool, dtype: DTypeLike) -> str:
    """A Tile literal for a scalar of ``dtype`` (exact for ints; for floats the
    shortest repr that reads back to the same float64).  Infinities and NaN
    have no literal: use :func:`scalar` instead."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return "1" if value else "0"
    if dtype.kind in "iu":
        i = int(value)
        return str(i) if i >= 0 else f"({i})"
    v = float(value)
    if not math.isfinite(v):
        raise OnnxError(f"no Tile literal for {v}")
    text = repr(v)
    if "e" not in text and "." not in text:
        text += ".0"
    return text if v >= 0 else f"({text})"


def scalar(b: Builder, value: float | int | bool, dtype: DTypeLike) -> str:
    """A rank-0 tensor of ``dtype`` holding ``value``: a literal where one is
    exact, otherwise a constant parameter.  Unlike a bare literal, the result
    has ``dtype`` (weak literals take the other operand's type)."""
    dtype = np.dtype(dtype)
    return b.ref(Value("", (), dtype, np.array(value, dtype=dtype)))


def cast(expr: str, dtype: np.dtype) -> str:
    """A Tile cast of ``expr`` to ``dtype``."""
    dtype = np.dtype(dtype)
    bits = dtype.itemsize * 8
    if dtype.kind == "f":
        return f"as_float({expr}, {bits})"
    if dtype.kind == "i":
        return f"as_int({expr}, {bits})"
    if dtype.kind == "u":
        return f"as_uint({expr}, {bits})"
    if dtype.kind == "b":
        return f"as_bool({expr})"
    raise OnnxError(f"cannot cast to {dtype}")


def ints(node: Node, key: str, default: Sequence[int] | None = None) -> list[int]:
    v = node.attr(key, default)
    return [] if v is None else [int(x) for x in v]


def column_blocks(w: np.ndarray, blk: int) -> np.ndarray:
    """Constant weights ``(..., N)`` as ``(N / blk, ..., blk)``, contiguous: each
    block of ``blk`` output columns one dense panel for the CPU register tiles
    (the contraction then reads ``W[cb, ..., c]`` for column ``blk * cb + c``)."""
    *lead, n = w.shape
    blocks = w.reshape(*lead, n // blk, blk)
    return np.ascontiguousarray(np.moveaxis(blocks, -2, 0))


#: The most elements of known integers that Gather takes at import (shape vectors).
KNOWN_GATHER = 4096


def known_take(b: Builder, n: Node, x: Value, i: Value, ax: int) -> Value | None:
    """Gather's result when its data are known integers (at most
    :data:`KNOWN_GATHER`) and its indices are known, taken here as Concat joins
    known values, not compiled and run on the interpreter (1-4 ms each: 31 in
    BERT-base, again at every new sequence length); else None.  An index out of
    range is the node's error."""
    known = [v.const is not None and not b.tile_name(v) for v in (x, i)]
    if not all(known) or x.dtype.kind not in "biu" or x.size > KNOWN_GATHER:
        return None
    at = np.asarray(i.const).astype(np.int64)
    dim = x.shape[ax]
    bad = (at < -dim) | (at >= dim)
    if np.any(bad):
        raise n.error(f"index {int(at[bad][0])} is out of range for an axis of size {dim}")
    taken = np.take(np.asarray(x.const), np.where(at < 0, at + dim, at), axis=ax)
    shape = x.shape[:ax] + i.shape + x.shape[ax + 1 :]
    return Value("", tuple(shape), x.dtype, taken.astype(x.dtype, copy=False))
