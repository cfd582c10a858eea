"""Host-side helpers shared by the compiled backends (``cpu``, ``opencl``,
``cuda``): the layout of a root buffer in host memory, argument checks,
root-level ``special`` statements, which every backend runs on the host with
the interpreter's implementation, the memory check made before big
allocations (:func:`check_memory`), and the split of a caller's ``out=``
arrays by whether they overlap an input (:func:`separate_outputs`)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from ..codegen.cpu_abi import BufferInfo
from ..errors import ShapeError, StripeError, format_bytes
from ..ir.dtypes import to_numpy
from ..ir.nodes import Refinement, Special, TensorShape


@dataclass(frozen=True)
class RootBuffer:
    """A root buffer's layout on the host, precomputed once per compiled program
    (the CPU backend's buffers, and the GPU backends' host copies)."""

    info: BufferInfo
    dtype: np.dtype
    dense: bool  # C-contiguous layout: a NumPy array can be passed as is
    origin: int  # element 0's offset in a storage of ``extent`` elements
    extent: int
    ref: Refinement = field(repr=False)  # for the interpreter's specials
    location: str = "DRAM"
    offset: int | None = None  # a temporary's byte offset in its location's arena

    @staticmethod
    def of(info: BufferInfo, placed: Refinement | None = None) -> RootBuffer:
        """The layout of ``info``; ``placed``: the program's root refinement of a
        temporary, whose location and offset say where it lives."""
        shape = TensorShape(info.dtype, info.sizes, info.strides)
        dense_strides = TensorShape.dense(info.dtype, info.sizes).strides
        dense = all(st == d for n, st, d in zip(info.sizes, info.strides, dense_strides) if n > 1)
        origin = sum((n - 1) * -st for n, st in zip(info.sizes, info.strides) if st < 0 and n > 0)
        ref = Refinement(info.kind, info.name, shape)
        dtype = to_numpy(info.dtype)
        if placed is not None and info.kind not in ("in", "out"):
            return RootBuffer(
                info, dtype, dense, origin, shape.extent, ref, placed.location, placed.offset
            )
        return RootBuffer(info, dtype, dense, origin, shape.extent, ref)

    @property
    def nbytes(self) -> int:
        return self.extent * self.dtype.itemsize

    def storage(self, at_least: int = 0) -> np.ndarray:
        """Fresh flat storage, zeroed like the interpreter's (of at least
        ``at_least`` elements: a device buffer is never empty).  NumPy's own,
        huge pages and all (not :func:`fresh_array`): the constant layouts a
        program keeps are read at every call, where 4 KiB pages cost (ResNet-50's
        steady run 0.12 -> 0.14 s here)."""
        if self.dense and self.extent >= at_least:
            return np.zeros(self.info.sizes, self.dtype).reshape(-1)
        return np.zeros(max(self.extent, at_least), self.dtype)

    def kept_storage(self) -> np.ndarray:
        """:meth:`storage` for a temporary a program keeps (a constant layout),
        written by the first call: on 4 KiB pages mapped at once
        (:func:`.kept_pages.kept_array`), given huge pages after that call."""
        from .kept_pages import kept_array

        return kept_array(self.extent, self.dtype)

    def view(self, arena: np.ndarray) -> np.ndarray:
        """Flat storage at ``offset`` in ``arena`` (bytes of its location)."""
        start = self.offset or 0
        return arena[start : start + self.nbytes].view(self.dtype)

    def logical(self, storage: np.ndarray) -> np.ndarray:
        """The logical array (a view) of ``storage``."""
        if self.extent == 0:
            return np.zeros(self.info.sizes, self.dtype)
        if self.dense:
            return storage[: self.extent].reshape(self.info.sizes)
        item = storage.itemsize
        return np.lib.stride_tricks.as_strided(
            storage[self.origin :],
            shape=self.info.sizes,
            strides=tuple(s * item for s in self.info.strides),
        )

    def pointer(self, storage: np.ndarray) -> int:
        return storage.ctypes.data + self.origin * storage.itemsize


@cache
def memory_bytes() -> int:
    """Physical memory of this machine (``HostFacts().dram_bytes``), read once."""
    from ..targets.host import HostFacts

    return HostFacts().dram_bytes


def check_memory(what: str, parts: Sequence[tuple[str, int]]) -> None:
    """Raise :class:`ShapeError` when ``parts`` (``(description, bytes)``)
    together need more than this machine's physical memory.

    Called before allocating, so a result that can never fit fails at once,
    without touching a page, instead of as a ``MemoryError`` (or worse, the
    out-of-memory killer) halfway through a run.
    """
    have = memory_bytes()
    if sum(n for _, n in parts) > have:
        raise out_of_memory(
            what, parts, f"this machine has {format_bytes(have)} of physical memory"
        )


def out_of_memory(what: str, parts: Sequence[tuple[str, int]], why: str) -> ShapeError:
    """The error for ``what`` needing ``parts`` (the biggest named first)."""
    need = sum(n for _, n in parts)
    shown = sorted((p for p in parts if p[1]), key=lambda p: -p[1])
    listed = "; ".join(f"{d}: {format_bytes(n)}" for d, n in shown[:4])
    more = f"; and {len(shown) - 4} more" if len(shown) > 4 else ""
    return ShapeError(
        f"{what} needs at least {format_bytes(need)} of memory ({listed}{more}), but {why}"
    )


def separate_outputs(
    inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Split ``out=`` arrays into those a backend may write in place and those
    that share memory with an input: ``(given, aliased)``.

    A kernel reads its inputs while it writes its outputs (a transpose reads
    ``x[j, i]`` after writing ``x[i, j]``), so an output that overlaps an input
    is computed into a fresh copy of itself (elements the program never stores
    keep the caller's values) and copied back after the run, as NumPy's ufuncs
    do with ``out=``.  Two outputs that share memory cannot both hold their
    results: that is a :class:`ShapeError` naming both.
    """
    names = list(outputs)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if overlaps(outputs[a], outputs[b]):
                raise ShapeError(
                    f"out= arrays for '{a}' and '{b}' share memory; each output needs an "
                    "array of its own"
                )
    given: dict[str, np.ndarray] = {}
    aliased: dict[str, np.ndarray] = {}
    for name, arr in outputs.items():
        if any(overlaps(arr, x) for x in inputs.values() if isinstance(x, np.ndarray)):
            aliased[name] = arr
            given[name] = arr.copy()
        else:
            given[name] = arr
    return given, aliased


# Effort np.shares_memory may spend before giving up (NumPy documents any
# positive int; its stubs list only the two named modes, hence ``Any``).
_SHARE_WORK: Any = 100_000


def overlaps(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays share at least one byte.

    The bounds test is O(1); only when the bounds overlap does the exact test
    run, with a work limit (strided views can make it exponential); past the
    limit the arrays are taken to overlap, which costs a copy, never a wrong
    answer.
    """
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=_SHARE_WORK))
    except np.exceptions.TooHardError:
        return True


def check_names(
    buffers: Sequence[RootBuffer], inputs: Mapping[str, object], outputs: Mapping[str, object]
) -> None:
    """Every input given, and only known inputs and outputs."""
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


def checked(buf: RootBuffer, value: object, what: str) -> np.ndarray:
    """``value`` as an array of exactly ``buf``'s dtype and shape."""
    arr = np.asarray(value)
    if arr.dtype != buf.dtype:
        raise ShapeError(f"{what} {buf.info.name!r}: dtype {arr.dtype} does not match {buf.dtype}")
    if arr.shape != buf.info.sizes:
        raise ShapeError(
            f"{what} {buf.info.name!r}: shape {arr.shape} does not match {buf.info.sizes}"
        )
    return arr


def run_root_special(
    special: Special, buffers: Sequence[RootBuffer], storages: Sequence[np.ndarray]
) -> None:
    """Run a root-level special on host storages, with the interpreter's semantics.

    ``copy``, ``reshape`` and ``gather`` run directly on NumPy views of the
    buffers (a root special runs once, on whole buffers): one ``copyto``
    instead of the interpreter's element-offset gather and scatter, about 1 ms
    per 200k-element reshape; ``scatter``, ``scatter_nd`` and ``topk`` run the
    interpreter's whole-array functions (:func:`.interp.specials.apply_whole`)
    on those views, so every backend checks indices and breaks ties the same
    way.  Anything else, or views the direct path cannot write safely, take
    the interpreter's implementation.
    """
    if _direct_special(special, buffers, storages):
        return
    from .interp.frame import write
    from .interp.memory import RefState
    from .interp.specials import run_special

    refs = {
        b.info.name: RefState(b.ref, s, np.full(1, b.origin, dtype=np.int64), None)
        for b, s in zip(buffers, storages)
    }
    with np.errstate(all="ignore"):
        run_special(special, refs, write)


# The specials :func:`_direct_special` runs; the last three through the
# interpreter's whole-array functions (``interp.specials.WHOLE``, which a test
# keeps equal to ``_WHOLE``), imported only when one runs.
_WHOLE = ("scatter", "scatter_nd", "topk")
_DIRECT = ("copy", "reshape", "bitview", "gather", *_WHOLE)


#: Each buffer list's name -> position map, kept with the list (its id is only
#: unique while it lives): a program's specials look up two names among its
#: hundreds of buffers on every run (ResNet-18 int8: 20 bitviews over 222
#: buffers, about 40 us each as a scan; a lookup is under a microsecond).
_POSITIONS: dict[int, tuple[Sequence[RootBuffer], dict[str, int]]] = {}


def _positions(buffers: Sequence[RootBuffer]) -> dict[str, int]:
    hit = _POSITIONS.get(id(buffers))
    if hit is not None and hit[0] is buffers:
        return hit[1]
    where: dict[str, int] = {}
    for k, b in enumerate(buffers):
        where[b.info.name] = k  # the last of a name, as the scan found it
    if len(_POSITIONS) >= 64:
        _POSITIONS.pop(next(iter(_POSITIONS)))
    _POSITIONS[id(buffers)] = (buffers, where)
    return where


def _direct_special(
    special: Special, buffers: Sequence[RootBuffer], storages: Sequence[np.ndarray]
) -> bool:
    """Run ``copy``/``reshape``/``gather`` and the :data:`~.interp.specials.WHOLE`
    specials on array views; ``False`` to fall back."""
    if special.op not in _DIRECT or len(special.outputs) != 1:
        return False
    wanted = (*special.inputs, special.outputs[0])
    where = _positions(buffers)
    found: dict[str, tuple[RootBuffer, np.ndarray]] = {}
    for name in wanted:
        k = where.get(name)
        if k is not None and k < len(storages):
            found[name] = (buffers[k], storages[k])
    if len(found) != len(set(wanted)) or special.outputs[0] in special.inputs:
        return False
    out_buf, out_storage = found[special.outputs[0]]
    sizes = tuple(out_buf.info.sizes)
    # Every output element must have storage of its own (no stride-0 dimension).
    if any(n > 1 and st == 0 for n, st in zip(sizes, out_buf.info.strides)):
        return False
    if any(s.size == 0 for _, s in found.values()):
        return False
    ins = [b.logical(s) for b, s in (found[name] for name in special.inputs)]
    if special.op == "copy" and len(ins) == 1 and ins[0].shape == sizes:
        result = ins[0]
    elif special.op == "reshape" and len(ins) == 1 and ins[0].size == int(np.prod(sizes)):
        result = ins[0].reshape(sizes)
    elif special.op == "bitview" and len(ins) == 1:
        out = out_buf.logical(out_storage)
        if _same_bytes(ins[0], out):  # ``place`` gave the view its source's bytes
            return True
        from .interp.specials import bitview

        result = bitview(ins[0].reshape(-1), out_buf.dtype).reshape(sizes)
    elif special.op == "gather" and len(ins) == 2:
        if _gather_into(ins[0], ins[1], special.int_param("axis"), out_buf.logical(out_storage)):
            return True
        from .interp.specials import _gather

        result = _gather(ins[0][None], ins[1][None], special.int_param("axis"))[0]
        if result.shape != sizes:
            return False
    elif special.op in _WHOLE:
        from .interp.specials import apply_whole

        result = apply_whole(special, ins)
        if result.shape != sizes:
            return False
    else:
        return False
    with np.errstate(all="ignore"):
        np.copyto(out_buf.logical(out_storage), result, casting="unsafe")
    return True


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same memory, both dense in row-major order."""
    return (
        a.nbytes == b.nbytes
        and a.flags.c_contiguous
        and b.flags.c_contiguous
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


def _gather_into(x: np.ndarray, idx: np.ndarray, axis: int, out: np.ndarray) -> bool:
    """``np.take(x, idx, axis)`` written straight into ``out`` when ``out`` is a
    C-contiguous array of the result's shape and dtype (a BERT embedding lookup,
    512 rows of a 30522 x 768 table: 0.13 ms, where a fresh result array cost
    1.2 ms, most of it the page faults of new memory); ``False`` to take the
    general path, which also raises the errors for bad indices."""
    if idx.dtype.kind not in "iu" or not -x.ndim <= axis < x.ndim:
        return False
    axis %= x.ndim
    dim = x.shape[axis]
    shape = x.shape[:axis] + idx.shape + x.shape[axis + 1 :]
    if out.shape != shape or out.dtype != x.dtype or not out.flags.c_contiguous:
        return False
    if idx.dtype.kind == "u" and idx.size and idx.max() >= dim:
        return False  # compared unconverted: a uint64 past int64 would wrap below
    flat = idx.astype(np.int64).ravel()
    flat = np.where(flat < 0, flat + dim, flat)
    if flat.size and (flat.min() < 0 or flat.max() >= dim):
        return False
    # Indices checked above, so mode="clip" changes nothing; with "raise" NumPy
    # would write through a temporary copy.
    np.take(x, flat.reshape(idx.shape), axis=axis, out=out, mode="clip")
    return True


#: Fresh arrays of at least this many bytes get no transparent huge pages
#: (NumPy asks the kernel for them from 4 MiB on).
LARGE_BYTES = 4 << 20


def fresh_array(
    shape: Sequence[int], dtype: Any, zeroed: bool = False, populate: bool = True
) -> np.ndarray:
    """A new C-contiguous array (zeros with ``zeroed``, else uninitialised) whose
    pages, when it is :data:`LARGE_BYTES` or more, are advised against
    transparent huge pages (Linux ``MADV_NOHUGEPAGE``, before anything touches
    them): a model's weights as read from its file and their layouts, which a
    compile reads once (to lay them out for the kernels).  NumPy advises huge
    pages for large arrays, and where the kernel compacts memory to find them
    at the first touch (``defrag`` = ``madvise``, its default on many
    distributions) a fragmented host stalls in that compaction: here, a warm
    ResNet-50 spent up to a second of system time in it.  Arrays read at every
    call keep NumPy's huge pages (:meth:`RootBuffer.storage`).  An uninitialised
    one of :data:`POPULATE_BYTES` or more is for a caller that writes all of it
    at once: the kernel maps its pages in one call (:func:`_advise`), or,
    with ``populate=False``, when the caller says so (:func:`populate`: from
    another thread, before it writes).  Elsewhere, or when the advice fails,
    the array is NumPy's as it is."""
    arr = (np.zeros if zeroed else np.empty)(shape, dtype)
    if arr.nbytes >= POPULATE_BYTES:
        _advise(arr.ctypes.data, arr.nbytes, arr.nbytes >= LARGE_BYTES, populate and not zeroed)
    return arr


def populate(arr: np.ndarray) -> None:
    """Have the kernel map the pages of the :func:`fresh_array` ``arr`` (made with
    ``populate=False``) in one call, before the caller writes all of it."""
    if arr.nbytes >= POPULATE_BYTES:
        _advise(arr.ctypes.data, arr.nbytes, False, True)


def _advise(address: int, nbytes: int, no_huge: bool, populate: bool) -> None:
    """Advise the whole pages of ``[address, address + nbytes)`` against huge pages
    (``no_huge``), then (``populate``: the caller writes all of it at once) have
    the kernel map them all now (``MADV_POPULATE_WRITE``, Linux 5.14 and later):
    one call instead of a page fault per 4 KiB page at the first write (ResNet-50's
    100 MB of weights read from its file: 25,600 faults, about 0.05 s of system
    time here, 0.03 s populated)."""
    madvise = _madvise()
    if madvise is None:
        return
    page = 4096
    start = -(-address // page) * page
    end = (address + nbytes) // page * page
    if end > start:
        if no_huge:
            madvise(start, end - start, _MADV_NOHUGEPAGE)  # an error leaves the advice unset
        if populate:
            madvise(start, end - start, _MADV_POPULATE_WRITE)  # older kernels: EINVAL, faults


_MADV_HUGEPAGE = 14  # Linux (mmap.MADV_HUGEPAGE)
_MADV_NOHUGEPAGE = 15  # Linux (mmap.MADV_NOHUGEPAGE)
_MADV_POPULATE_WRITE = 23  # Linux 5.14
_MADV_COLLAPSE = 25  # Linux 6.1


#: Fresh arrays of at least this many bytes are mapped at once (:func:`_advise`).
POPULATE_BYTES = 64 << 10


@cache
def _madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise`` on Linux, else None."""
    import sys

    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def bind_constants(params: Sequence[str], given: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Read-only copies of the constant parameters, in parameter order."""
    unknown = [k for k in given if k not in params]
    if unknown:
        raise StripeError(
            f"constants {', '.join(map(repr, unknown))} name no parameter "
            f"(parameters: {', '.join(params)})"
        )
    out: dict[str, np.ndarray] = {}
    for p in params:
        if p not in given:
            continue
        value = given[p]
        if isinstance(value, np.ndarray) and immutable(value) and value.flags.c_contiguous:
            arr = value  # nobody can change it: no copy needed
        else:
            try:
                arr = np.array(value, copy=True, order="C")
            except Exception as exc:  # noqa: BLE001 - any conversion failure is the caller's input
                raise StripeError(f"constant '{p}' is not array-like: {exc}") from None
            arr.setflags(write=False)
        if arr.dtype == object or arr.dtype.kind in "USVMmc":
            raise StripeError(f"constant '{p}' has unsupported dtype {arr.dtype}")
        out[p] = arr
    return out


#: Read-only arrays over memory no one writes (the disk cache's read-only
#: mappings of its own files, :mod:`.weight_copies`), by id: views of them are
#: immutable.
_SEALED: dict[int, weakref.ref] = {}


def seal(arr: np.ndarray) -> None:
    """Record that no one writes the read-only ``arr``'s memory (:func:`immutable`)."""
    key = id(arr)

    def gone(_: weakref.ref) -> None:
        _SEALED.pop(key, None)

    _SEALED[key] = weakref.ref(arr, gone)


def immutable(arr: np.ndarray) -> bool:
    """Whether no one can write ``arr``'s elements through it or any array it views."""
    base: object = arr
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        sealed = _SEALED.get(id(base))
        if sealed is not None and sealed() is base:
            return True
        base = base.base
    return base is None or isinstance(base, bytes)
