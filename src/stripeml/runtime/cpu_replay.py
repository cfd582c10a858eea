"""Replaying a compiled CPU program's last call (``docs/cpu-backend.md``, "The
cost of a call"): :func:`record`, called by :meth:`.cpu_run.CpuCompiled.run` for a
call whose every parameter it found held, and :func:`replay`, which runs that
call again without the argument checks when the next one passes the very same
arrays (:meth:`~stripeml.api.executable.Executable.fast_call`)."""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Mapping
from operator import is_
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from . import native_pool

if TYPE_CHECKING:
    from .cpu_run import CpuCompiled

__all__ = ["Replay", "record", "replay"]

_empty, _zeros = np.empty, np.zeros
_layout = operator.attrgetter("shape", "dtype", "strides")
_writeable = operator.attrgetter("flags.writeable")
_addressof, _char_at = ctypes.addressof, ctypes.c_char.from_buffer


class Replay(NamedTuple):
    """A call :func:`replay` may make again: its set of temporaries
    and their frame (pointer array, storages by slot), its inputs and outputs
    (fields below), per fresh result ``(output position, slot, bytes, dtype,
    sizes, origin)``, and the slots of the outputs written all over (not
    zeroed)."""

    temps: list[np.ndarray]
    pointers: ctypes.Array[ctypes.c_void_p]
    storages: list
    names: tuple[str, ...]  # the inputs, by name
    objs: tuple[object, ...]  # their arrays
    layouts: list[tuple]  # their (shape, dtype, strides)
    given: tuple  # the out= arrays, () for fresh results only, (None,) for a mix
    results: tuple[np.ndarray | None, ...]
    fresh: tuple[tuple[int, int, int, np.dtype, tuple[int, ...], int], ...]
    written: frozenset[int]
    specials: bool  # whether the program has steps the host runs (they need storages)
    ptrs: int  # the pointer array's address
    key: tuple[int, int, int]  # the threading options of the call
    out_layouts: list[tuple]  # the out= arrays' (shape, dtype, strides)


def replay(
    compiled: CpuCompiled, inputs: Mapping[str, object], outs: tuple[object, ...]
) -> tuple[np.ndarray, ...] | None:
    """The last call again, when it may be (``docs/cpu-backend.md``, "The cost
    of a call"): ``inputs`` has the very arrays of that call by name, of the
    same shapes, dtypes and strides, and ``outs`` (the ``out=`` arrays in
    output order, or ``()``) the very arrays it wrote in place, still
    writeable, or none where it made fresh results.  The frame of that call
    still holds their pointers, so only the fresh results are made here.
    The outputs in ``buffers`` order; ``None`` (nothing run, nothing checked
    or raised) for any other call, which takes :meth:`CpuCompiled.run`."""
    rec = compiled._fast
    if rec is None or compiled.step_seconds is not None:
        return None
    temps, pointers, storages, names, objs, layouts, given, held, fresh, written = rec[:10]
    specials, ptrs, key, out_layouts = rec[10:]
    # identities, then (shape, dtype, strides) each, at C speed (a model's
    # weights are inputs too: 15 in a 2-layer LSTM)
    values = list(map(inputs.get, names))
    if not all(map(is_, values, objs)) or list(map(_layout, values)) != layouts:
        return None
    if outs:
        if (
            len(outs) != len(given)
            or not all(map(is_, outs, given))
            or list(map(_layout, outs)) != out_layouts
            or not all(map(_writeable, outs))
        ):
            return None
    elif given:
        return None
    threads = compiled.threads
    if key != (threads, compiled.min_chunk_work, compiled.chunks_per_thread):
        return None
    lock = compiled._lock
    with lock:
        spare = compiled._spare_temps
        if compiled._fast is not rec or not spare or spare[-1] is not temps:
            return None
        spare.pop()
        rezero = compiled._rezero
        if rezero is None:
            rezero = compiled._rezero = compiled._initial_reads()
    for k in rezero:
        temps[k].fill(0)
    results = list(held)
    if fresh:
        if specials:
            storages = storages.copy()
        for i, slot, nbytes, dtype, sizes, origin in fresh:
            # (an address through ctypes.c_char.from_buffer: 0.5 us, not the
            # 1.3 of ``.ctypes.data``)
            raw = (_empty if slot in written else _zeros)(nbytes + 64, np.uint8)
            address = _addressof(_char_at(raw))  # type: ignore[arg-type]
            start = -address % 64
            result = results[i] = np.ndarray(sizes, dtype, raw, start)
            pointers[slot] = address + start + origin * result.itemsize
            if specials:
                storages[slot] = result.reshape(-1)
    done = False
    try:
        pool = native_pool.pool(threads - 1, team=threads > 1)
        if pool is None or specials:
            compiled._run_steps(pointers, storages)
        else:
            for batch in compiled._batches(False):
                if not pool.run_batch(batch, ptrs):
                    compiled._run_plain(batch.plan, pointers)
        done = True
    finally:
        if compiled._promote:
            compiled._give_back_temps(temps, rec if done else None)
        else:
            with lock:
                spare.append(temps)
                if done:
                    compiled._fast = rec
    return tuple(results)  # type: ignore[arg-type]  # (each set now)


def record(
    compiled: CpuCompiled,
    temps: list[np.ndarray],
    pointers: ctypes.Array[ctypes.c_void_p],
    storages: list,
    inputs: Mapping[str, np.ndarray],
    results: Mapping[str, np.ndarray],
    written: frozenset[int],
    fresh: list[int],
) -> Replay:
    """The call ``compiled``'s :meth:`~CpuCompiled.run` is about to make (every input found held, every
    output an ``out=`` array written in place or a fresh dense array: the
    slots ``fresh``), for :func:`replay`."""
    names = tuple(name for _, _, is_in, name in compiled._io if is_in)
    objs = tuple(inputs[n] for n in names)
    fresh_only = all(compiled._out_slots[i][0] in fresh for i in range(len(compiled._out_order)))
    given: tuple = ()
    held: list = [None] * len(compiled._out_order)
    made = []
    for i, name in enumerate(compiled._out_order):
        slot, buf = compiled._out_slots[i]
        if slot in fresh:
            made.append((i, slot, buf.nbytes, buf.dtype, buf.info.sizes, buf.origin))
        else:
            held[i] = results[name]
    if not fresh_only:
        if any(h is None for h in held):
            given = (None,)  # some fresh, some out=: never replayed with out=
        else:
            given = tuple(held)
    return Replay(
        temps,
        pointers,
        storages,
        names,
        objs,
        list(map(_layout, objs)),
        given,
        tuple(held),
        tuple(made),
        written,
        any(step[5] is not None for step in compiled._plan(False)),
        ctypes.addressof(pointers),
        (compiled.threads, compiled.min_chunk_work, compiled.chunks_per_thread),
        list(map(_layout, given)) if given and given[0] is not None else [],
    )
