"""Torch tensors <-> the NumPy arrays stripeml programs take, without copies where possible.

The rule for a graph input a program reads at run time (:func:`host_array`):

* a CPU tensor that is C-contiguous and of an element type the program holds as
  is (float32, float64, float16, the integers, bool) is handed over through
  DLPack (``np.from_dlpack``): the array is a view of the tensor's memory, and
  the kernels read the tensor's own ``data_ptr()``;
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
    docstring): a DLPack view of ``t`` when it is C-contiguous and of a type the
    program holds as is (of ``t.permute(layout)`` when the program reads ``t``
    stored in that order), else one C-contiguous copy in the type it holds."""
    import torch

    t = t.detach()
    if layout is not None:
        p = t.permute(layout)
        if p.is_contiguous():
            return np.from_dlpack(p)
    if t.dtype == torch.bfloat16:
        held = wide_dtype(np_dtype(t.dtype))
        return np.ascontiguousarray(to_numpy(t), dtype=held)  # the one conversion
    if t.is_contiguous():
        return np.from_dlpack(t)
    return np.ascontiguousarray(to_numpy(t))  # the one copy


def from_numpy(a: np.ndarray) -> Any:
    """A tensor sharing ``a``'s memory (``ml_dtypes.bfloat16`` as ``torch.bfloat16``)."""
    import torch

    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)
