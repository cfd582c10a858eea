"""The inputs a compiled CPU program saw before (``docs/cpu-backend.md``,
"Inputs seen before"): :class:`SeenInputs`, one per
:class:`~.cpu_run.CpuCompiled`."""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Mapping

import numpy as np

__all__ = ["SeenInputs"]


class SeenInputs:
    """Per input buffer, the C-contiguous array of the last call, passed as it
    was (``docs/cpu-backend.md``, "Inputs seen before").

    The first time an array comes, only a weak reference to it is kept.  When
    the next call passes the same array again (a model's weights, at every
    call), the array is kept with its shape, dtype, strides, pointer and 1-D
    view, and :meth:`get` returns ``(pointer, view)`` for later calls with it,
    which skip the checks and the pointer lookup.  The view held keeps NumPy
    from resizing the array (its data cannot move under the pointer), a change
    of shape, dtype or strides misses, and a different array replaces the
    entry.  An array passed once is not kept alive.

    Read-only arrays found again (a function's constants, a model's weights)
    can then be *settled* in a frame, the pointer array of one set of
    temporaries (:meth:`settle`): a later call on that frame that passes those
    very arrays (one identity test each, at C speed: :meth:`bound`) handles
    only the other parameters.  Any other array for one of them takes the
    whole path and settles again; the same set of arrays keeps its record, so
    frames of concurrent calls do not unsettle one another.
    """

    __slots__ = ("_frames", "_held", "_once", "_settled")

    def __init__(self, slots: int) -> None:
        self._held: list[tuple | None] = [None] * slots
        self._once: list[weakref.ref | None] = [None] * slots
        # the last settling: (the inputs' names, their arrays, the other parameters)
        self._settled: tuple[tuple[str, ...], tuple[object, ...], tuple] | None = None
        self._frames: dict[int, object] = {}  # frame (an id) -> the settling it holds

    def get(self, slot: int, value: object) -> tuple[int, np.ndarray] | None:
        hit = self._held[slot]
        if (
            hit is not None
            and hit[0] is value
            and value.shape == hit[1]
            and value.dtype is hit[2]
            and value.strides == hit[3]
        ):
            return hit[4], hit[5]
        return None

    def put(
        self,
        slot: int,
        value: object,
        arr: np.ndarray,
        storage: np.ndarray,
        pointer: Callable[[np.ndarray], int],
    ) -> None:
        """Remember ``arr`` (checked, given as ``value``) and its 1-D ``storage``."""
        self._held[slot] = None
        if arr is not value or not arr.flags.c_contiguous:
            return
        first = self._once[slot]
        if first is not None and first() is arr:
            self._held[slot] = (arr, arr.shape, arr.dtype, arr.strides, pointer(storage), storage)
        else:
            self._once[slot] = weakref.ref(arr)

    def bound(self, frame: int, inputs: Mapping[str, object]) -> tuple | None:
        """The parameters left to handle (the ``rest`` of :meth:`settle`) when the
        frame ``frame`` holds the last settling and ``inputs`` passes exactly its
        arrays; else None (the call handles every parameter)."""
        settled = self._settled
        if settled is None or self._frames.get(frame) is not settled:
            return None
        if all(map(operator.is_, map(inputs.__getitem__, settled[0]), settled[1])):
            return settled[2]
        return None

    def settle(
        self,
        frame: int,
        names: tuple[str, ...],
        values: tuple[object, ...],
        rest: Callable[[], tuple],
    ) -> None:
        """Record that the frame ``frame`` now holds the read-only arrays ``values``
        (the inputs ``names``, each found again by :meth:`get`) with their
        pointers and storages; ``rest()``: the other parameters, asked for only
        when the arrays are not those of the last settling."""
        old = self._settled
        if old is None or old[0] != names or not all(map(operator.is_, values, old[1])):
            old = self._settled = (names, values, rest())
        self._frames[frame] = old

    def unbind(self, frame: int) -> None:
        """The frame ``frame``'s pointers were changed by someone else: it holds no settling."""
        self._frames.pop(frame, None)
