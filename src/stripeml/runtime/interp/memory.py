"""Buffers of the interpreter: views into flat storage and aggregation scopes.

Every buffer is a flat 1-D NumPy array (its *storage*).  A view visible in a
block is a :class:`RefState`: the storage plus, for every point of the block,
the flat offset of the view's origin.  Root refs own one storage each; a
``none`` refinement allocates ``points * extent`` elements, one slice per point.

Stores to a view of an aggregation scope go to an :class:`Accumulator`: the
values stored to one element during the scope are combined with the
aggregation, and :meth:`Accumulator.commit` writes the combined values to the
storage when the scope ends.  Loads during the scope read the storage, i.e. the
values from before the scope.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ExecutionError
from ...ir.nodes import Refinement

_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@dataclass
class RefState:
    """A buffer as seen by the points of one block (or one chunk of them)."""

    ref: Refinement
    storage: np.ndarray  # flat
    base: np.ndarray  # int64 (points,): flat offset of the view origin per point
    sink: Accumulator | None  # None: stores are plain writes (allocations, root refs)


def identity(agg: str, dtype: np.dtype) -> object:
    """The neutral element of ``agg`` in ``dtype``."""
    if agg == "mul":
        return 1
    if agg in ("max", "min"):
        if dtype.kind == "f":
            return -np.inf if agg == "max" else np.inf
        if dtype.kind == "b":
            return agg == "min"
        info = np.iinfo(dtype)
        return info.min if agg == "max" else info.max
    # add: -0.0 for floats, so that a sum of negative zeros is -0.0 as in NumPy
    # (-0.0 + x == x for every x, +0.0 included; the compiled backends do the same).
    return -0.0 if dtype.kind == "f" else 0


class Accumulator:
    """Combines the stores of one aggregation scope into one storage.

    ``inout`` scopes start from the storage's prior values; ``out`` scopes
    start from the neutral element and replace only the elements stored.
    """

    def __init__(self, storage: np.ndarray, agg: str, inout: bool, name: str) -> None:
        self.storage = storage
        self.agg = agg
        self.name = name
        self.touched = np.zeros(storage.size, dtype=np.bool_)
        self.count = 0  # elements touched so far (assign only)
        if inout and agg != "assign":
            self.values = storage.copy()
        elif agg == "assign":
            self.values = np.zeros_like(storage)
        else:
            self.values = np.full(storage.size, identity(agg, storage.dtype), storage.dtype)

    def race(self) -> ExecutionError:
        return ExecutionError(
            f"race on assign output {self.name!r}: an element is stored more than once"
        )

    def store(self, offsets: np.ndarray, values: np.ndarray) -> None:
        """Combine ``values[i]`` into element ``offsets[i]`` (1-D, same length)."""
        n = offsets.size
        if n == 0:
            return
        values = np.broadcast_to(np.asarray(values, dtype=self.storage.dtype), (n,))
        if self.agg == "assign":
            self._check_assign(offsets)
            self.values[offsets] = values
            return
        _UFUNCS[self.agg].at(self.values, offsets, values)
        self.touched[offsets] = True

    def _check_assign(self, offsets: np.ndarray) -> None:
        n = offsets.size
        if self.touched[offsets].any():
            raise self.race()
        if n == 1 or bool((np.diff(offsets) > 0).all()):
            # Increasing offsets (a box walked in order) are distinct: no sort needed.
            self.touched[offsets] = True
            self.count += n
            return
        if n * 16 < self.touched.size:
            if np.unique(offsets).size != n:
                raise self.race()
            self.touched[offsets] = True
            self.count += n
            return
        self.touched[offsets] = True
        count = int(np.count_nonzero(self.touched))
        if count != self.count + n:
            raise self.race()
        self.count = count

    def store_box(
        self, start: int, shape: tuple[int, ...], steps: tuple[int, ...], values: np.ndarray
    ) -> None:
        """Store ``values`` (of ``shape``) at ``start + sum(i_d * steps[d])``."""
        if 0 in shape:
            return
        if not injective(shape, steps):
            self.store(
                box_offsets(start, shape, steps).ravel(), np.broadcast_to(values, shape).ravel()
            )
            return
        vals = np.broadcast_to(np.asarray(values, dtype=self.storage.dtype), shape)
        acc = _strided(self.values, start, shape, steps)
        touched = _strided(self.touched, start, shape, steps)
        if self.agg == "assign":
            if touched.any():
                raise self.race()
            acc[...] = vals
            self.count += int(np.prod(shape))
        else:
            ufunc = _UFUNCS[self.agg]
            ufunc(acc, vals, out=acc)
        touched[...] = True

    def commit(self) -> None:
        """End of the scope: write the combined values of the stored elements."""
        np.copyto(self.storage, self.values, where=self.touched)


def box_offsets(start: int, shape: tuple[int, ...], steps: tuple[int, ...]) -> np.ndarray:
    """Flat offsets ``start + sum(i_d * steps[d])`` over a box, as an array of ``shape``."""
    out = np.full((1,) * len(shape), start, dtype=np.int64)
    for d, (n, s) in enumerate(zip(shape, steps)):
        axis = np.arange(n, dtype=np.int64) * s
        out = out + axis.reshape((1,) * d + (n,) + (1,) * (len(shape) - d - 1))
    return np.broadcast_to(out, shape)


def injective(shape: tuple[int, ...], steps: tuple[int, ...]) -> bool:
    """Whether distinct box points map to distinct offsets (sufficient test)."""
    span = 0
    for n, s in sorted(((n, abs(s)) for n, s in zip(shape, steps) if n > 1), key=lambda t: t[1]):
        if s <= span:
            return False
        span += (n - 1) * s
    return True


def _strided(flat: np.ndarray, start: int, shape: tuple[int, ...], steps: tuple[int, ...]):
    item = flat.itemsize
    return np.lib.stride_tricks.as_strided(
        flat[start:], shape=shape, strides=tuple(s * item for s in steps), writeable=True
    )
