"""Running a whole program: root buffers in, root ``out`` buffers back."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...errors import ShapeError
from ...ir.dtypes import itemsize, to_numpy
from ...ir.nodes import Program, Refinement, TensorShape
from ..host import check_memory
from .arena import root_storages
from .executor import exec_stmts
from .frame import MODES, Frame, Options, alloc_origin
from .memory import RefState
from .points import Points
from .traffic import Traffic


def run(
    program: Program,
    inputs: Mapping[str, np.ndarray],
    outputs: Mapping[str, np.ndarray] | None = None,
    *,
    mode: str = "auto",
    chunk_points: int = 1 << 21,
    traffic: Traffic | None = None,
    arena: bool = False,
) -> dict[str, np.ndarray]:
    """Execute ``program`` with NumPy and return its ``out`` buffers by name.

    ``inputs`` maps every root ``in`` ref to an array of exactly its dtype and
    shape (else :class:`~stripeml.errors.ShapeError`).  Outputs are fresh
    zero-filled arrays unless ``outputs`` provides (some of) them: those are
    written in place (elements the program never stores keep their values)
    and returned.  ``mode`` selects the kernel fast path (``auto``, ``fast``,
    ``general``); ``chunk_points`` bounds how many points run at once.
    ``traffic``, when given, counts the bytes moved per memory location.
    ``arena``: allocations with an ``offset`` share one block of memory per
    location by offset instead of each having its own (:mod:`.arena`).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    opts = Options(mode=mode, chunk_points=max(1, int(chunk_points)), traffic=traffic, arena=arena)
    outputs = dict(outputs or {})
    root = program.root
    names = {r.into for r in root.refs}
    for name in inputs:
        if name not in names or root.ref(name).dir != "in":
            raise ShapeError(f"unknown input {name!r}")
    for name in outputs:
        if name not in names or root.ref(name).dir != "out":
            raise ShapeError(f"unknown output {name!r}")
    refs: dict[str, RefState] = {}
    # Temporaries and the outputs not given: what the caller's arrays do not bound.
    check_memory(
        f"running {root.name or 'the program'}",
        [
            (f"buffer {r.into!r}", r.shape.extent * itemsize(r.shape.dtype))
            for r in root.refs
            if r.dir == "none" or (r.dir == "out" and r.into not in outputs)
        ],
    )
    shared = root_storages(root.refs) if arena else {}
    for ref in root.refs:
        if ref.into in shared:
            storage, origin = shared[ref.into], alloc_origin(ref.shape.sizes, ref.shape.strides)
        else:
            storage, origin = _allocate(ref.shape)
        if ref.dir == "in":
            if ref.into not in inputs:
                raise ShapeError(f"missing input {ref.into!r}")
            _logical(storage, origin, ref.shape)[...] = _checked(ref, inputs[ref.into], "input")
        elif ref.dir == "out" and ref.into in outputs:
            _logical(storage, origin, ref.shape)[...] = _checked(ref, outputs[ref.into], "output")
        refs[ref.into] = RefState(ref, storage, np.full(1, origin, dtype=np.int64), None)
        if traffic is not None:
            traffic.place(storage, ref.location)
    # Floating-point warnings are NumPy's business, not the program's: inf and
    # nan results are values like any other.
    with np.errstate(all="ignore"):
        exec_stmts(root.stmts, Frame(Points(), refs), opts)
    result: dict[str, np.ndarray] = {}
    for ref in program.outputs:
        state = refs[ref.into]
        view = _logical(state.storage, int(state.base[0]), ref.shape)
        if ref.into in outputs:
            target = outputs[ref.into]
            target[...] = view
            result[ref.into] = target
        else:
            result[ref.into] = view.copy()  # C order; keeps rank 0
    return result


def _checked(ref: Refinement, value: object, what: str) -> np.ndarray:
    arr = np.asarray(value)
    want = to_numpy(ref.shape.dtype)
    if arr.dtype != want:
        raise ShapeError(f"{what} {ref.into!r}: dtype {arr.dtype} does not match {want}")
    if arr.shape != ref.shape.sizes:
        raise ShapeError(f"{what} {ref.into!r}: shape {arr.shape} does not match {ref.shape.sizes}")
    return arr


def _allocate(shape: TensorShape) -> tuple[np.ndarray, int]:
    """Zeroed flat storage for ``shape`` and the offset of its element 0."""
    storage = np.zeros(shape.extent, dtype=to_numpy(shape.dtype))
    return storage, alloc_origin(shape.sizes, shape.strides)


def _logical(storage: np.ndarray, origin: int, shape: TensorShape) -> np.ndarray:
    """The buffer as an array of its logical shape (a strided view of the storage)."""
    if storage.size == 0:
        return np.zeros(shape.sizes, dtype=storage.dtype)
    item = storage.itemsize
    return np.lib.stride_tricks.as_strided(
        storage[origin:], shape=shape.sizes, strides=tuple(s * item for s in shape.strides)
    )


def run_with_report(
    program: Program,
    inputs: Mapping[str, np.ndarray],
    outputs: Mapping[str, np.ndarray] | None = None,
    *,
    mode: str = "auto",
    chunk_points: int = 1 << 21,
    arena: bool = False,
) -> tuple[dict[str, np.ndarray], Traffic]:
    """:func:`run`, and the bytes moved per memory location (:class:`.Traffic`)."""
    traffic = Traffic()
    result = run(
        program, inputs, outputs, mode=mode, chunk_points=chunk_points, traffic=traffic, arena=arena
    )
    return result, traffic
