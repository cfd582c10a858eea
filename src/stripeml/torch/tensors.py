"""Torch tensors <-> the NumPy arrays stripeml programs take, without copies where possible.

The rule for a graph input a program reads at run time (:func:`host_array`):

* a CPU tensor that is C-contiguous and of an element type the program holds as
  is (float32, float64, float16, the integers, bool) is handed over as its
  NumPy view (``Tensor.numpy()`` of the detached tensor: the same memory as
  ``np.from_dlpack`` gives, in a third of the time): the kernels read the
  tensor's own ``data_ptr()``;
* any other CPU tensor (non-contiguous: a transposed or sliced view, an
  expanded one; or bfloat16, which the program holds in float32) is converted
  **once**, here, into a new C-contiguous array of the type the program holds,
  which the kernels then read as is.

A **permutation** of a contiguous tensor (``t(W)`` of a parameter, which a
forward graph hands to the backward) is no exception to "converted once" when
the program is built for it: :func:`dense_layout` finds the order in which its
memory is contiguous, the program declares that input stored in that order
(a laid-out value, read through index remapping, see ``onnx/layout.py``), and
:func:`host_array` hands over the contiguous permuted view, not a copy.

Results come back with :func:`from_numpy`, sharing the result array's memory.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from ..onnx.narrow_types import wide_dtype
from .lower import np_dtype


def to_numpy(t: Any) -> np.ndarray:
    """A CPU tensor's NumPy view (no copy; bfloat16 as ``ml_dtypes.bfloat16``)."""
    import torch

    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np_dtype(t.dtype))
    return t.numpy()


def dense_layout(t: Any) -> tuple[int, ...] | None:
    """For a non-contiguous CPU tensor whose memory is a C-contiguous array in
    another axis order (a transposed or permuted view, of a type the program holds
    as is): that order, ``layout`` with ``t.permute(layout)`` contiguous; else
    ``None``."""
    import torch

    if t.dtype == torch.bfloat16 or t.is_contiguous() or t.dim() < 2:
        return None
    order = tuple(sorted(range(t.dim()), key=lambda d: (-t.stride(d), d)))
    return order if t.permute(order).is_contiguous() else None


def host_array(t: Any, layout: tuple[int, ...] | None = None) -> np.ndarray:
    """The array a program reads for the CPU tensor ``t`` (see the module
    docstring): a NumPy view of ``t`` when it is C-contiguous and of a type the
    program holds as is (of ``t.permute(layout)`` when the program reads ``t``
    stored in that order), else one C-contiguous copy in the type it holds."""
    import torch

    t = t.detach()
    if layout is not None:
        p = t.permute(layout)
        if p.is_contiguous():
            return p.numpy()
    if t.dtype == torch.bfloat16:
        held = wide_dtype(np_dtype(t.dtype))
        return np.ascontiguousarray(to_numpy(t), dtype=held)  # the one conversion
    if t.is_contiguous():
        return t.numpy()
    return np.ascontiguousarray(to_numpy(t))  # the one copy


def from_numpy(a: np.ndarray) -> Any:
    """A tensor sharing ``a``'s memory (``ml_dtypes.bfloat16`` as ``torch.bfloat16``)."""
    import torch

    if a.dtype.kind == "V" and a.dtype.name == "bfloat16":  # (.name costs 2 us)
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


class HeldArrays:
    """The arrays of one program's inputs that are parameters, kept between calls.

    A parameter (a leaf tensor that requires a gradient) comes back at every
    training step as the same tensor over the same memory, updated in place:
    its NumPy view from the last call is handed over again, so the runtime
    recognises the array (``SeenInputs``: no dtype and shape checks, no
    pointer lookup) and no new view is made.  Only views are kept (a converted
    copy would go stale), by weak reference to the tensor (the view goes when
    the tensor does); another tensor, or the same one over other memory,
    misses."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[int, tuple[Any, int, np.ndarray]] = {}

    def array(self, k: int, t: Any, layout: tuple[int, ...] | None) -> np.ndarray | None:
        """:func:`host_array` of graph input ``k`` (``t``); None when ``t`` is not
        on the CPU."""
        held = self._held.get(k)
        if held is not None and held[0]() is t and held[1] == t.data_ptr():
            return held[2]
        if t.device.type != "cpu":
            return None
        arr = host_array(t, layout)
        if t.is_leaf and t.requires_grad and arr.__array_interface__["data"][0] == t.data_ptr():
            held_ = self._held

            def forget(ref: Any, k: int = k) -> None:  # the tensor died: free its memory
                entry = held_.get(k)
                if entry is not None and entry[0] is ref:
                    del held_[k]

            self._held[k] = (weakref.ref(t, forget), t.data_ptr(), arr)
        return arr
