"""Host-side helpers shared by the compiled backends (``cpu``, ``opencl``,
``cuda``): argument checks and root-level ``special`` statements, which every
backend runs on the host with the interpreter's implementation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ShapeError


def check_names(
    buffers: Sequence[Any], inputs: Mapping[str, object], outputs: Mapping[str, object]
) -> None:
    """Every input given, and only known inputs and outputs (``buffers`` have ``.info``)."""
    kinds = {b.info.name: b.info.kind for b in buffers}
    for name in inputs:
        if kinds.get(name) != "in":
            raise ShapeError(f"unknown input {name!r}")
    for name in outputs:
        if kinds.get(name) != "out":
            raise ShapeError(f"unknown output {name!r}")
    for name, kind in kinds.items():
        if kind == "in" and name not in inputs:
            raise ShapeError(f"missing input {name!r}")


def checked(buf: Any, value: object, what: str) -> np.ndarray:
    """``value`` as an array of exactly ``buf``'s dtype and shape."""
    arr = np.asarray(value)
    if arr.dtype != buf.dtype:
        raise ShapeError(f"{what} {buf.info.name!r}: dtype {arr.dtype} does not match {buf.dtype}")
    if arr.shape != buf.info.sizes:
        raise ShapeError(
            f"{what} {buf.info.name!r}: shape {arr.shape} does not match {buf.info.sizes}"
        )
    return arr


def run_root_special(special: Any, buffers: Sequence[Any], storages: Sequence[np.ndarray]) -> None:
    """Run a root-level special on host storages (``buffers`` have ``.info``,
    ``.ref`` and ``.origin``), with the interpreter's implementation."""
    from .interp.frame import write
    from .interp.memory import RefState
    from .interp.specials import run_special

    refs = {
        b.info.name: RefState(b.ref, s, np.full(1, b.origin, dtype=np.int64), None)
        for b, s in zip(buffers, storages)
    }
    with np.errstate(all="ignore"):
        run_special(special, refs, write)
