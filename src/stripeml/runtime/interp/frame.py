"""State shared by the execution paths: options, frames, resolved views."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...ir.affine import Affine
from ...ir.dtypes import to_numpy
from ...ir.nodes import Refinement
from .memory import Accumulator, RefState
from .points import Points
from .traffic import Traffic

MODES = ("auto", "fast", "general")


@dataclass(frozen=True)
class Options:
    """How to run a program.

    ``mode`` picks the kernel fast path: ``auto`` uses it when it pays off,
    ``fast`` whenever the pattern fits, ``general`` never.  ``chunk_points``
    bounds the number of points executed at once (memory).  ``traffic``, when
    set, counts the bytes moved per memory location (:mod:`.traffic`).
    ``arena``: allocations with an ``offset`` share memory by offset
    (:mod:`.arena`).
    """

    mode: str = "auto"
    chunk_points: int = 1 << 21
    traffic: Traffic | None = None
    arena: bool = False


@dataclass
class Frame:
    """A chunk of points of one block with its visible buffers and scalars."""

    points: Points
    refs: dict[str, RefState]
    scalars: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class View:
    """A view ref of a block, resolved against the parent chunk."""

    ref: Refinement
    parent: RefState
    flat: Affine  # flat element offset of the origin relative to the parent's origin
    sink: Accumulator | None


def flat_offset(ref: Refinement) -> Affine:
    """``sum_d stride_d * access_d``: where the view's origin is in its parent."""
    total = Affine()
    for acc, stride in zip(ref.access, ref.shape.strides):
        total = total + acc * stride
    return total


def alloc_origin(sizes: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Offset of element 0 in a storage of ``extent`` elements (negative strides)."""
    return sum((s - 1) * -st for s, st in zip(sizes, strides) if st < 0 and s > 0)


def write(state: RefState, offsets: np.ndarray, values: np.ndarray) -> None:
    """Store ``values`` at ``offsets``: through the aggregation, or a plain write."""
    if state.sink is not None:
        state.sink.store(offsets, values)
    else:
        state.storage[offsets] = values


def constant(value: object, dtype: str) -> np.ndarray:
    """A ``const`` statement's value: a 0-d array of ``dtype`` (cast like ``astype``)."""
    with np.errstate(all="ignore"):
        return np.asarray(value).astype(to_numpy(dtype))
