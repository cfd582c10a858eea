"""Running a compiled CPU program on memory given by address: :class:`DirectCall`.

:meth:`.cpu_run.CpuCompiled.run` takes NumPy arrays by name and returns new
ones: per input a lookup or a check (dtype, shape), a contiguous view and its
address (a ``ctypes`` lookup of a microsecond or more), per result an aligned
allocation, and dictionaries in and out.  A caller that owns its memory and
calls the same program again and again with buffers of the same shapes (the
PyTorch backend, ``stripeml.torch``: tensors it allocates itself, a training
step's ~50 inputs and results) pays that at every call for nothing it needs.

A :class:`DirectCall` is made once per compiled program, after the program has
run once the ordinary way (its constant steps are computed, its kept
temporaries exist), and then takes the data addresses of the inputs and of
the caller's result buffers, in the function's parameter and output order,
sets them in a pointer array of temporaries and runs the kernels.  The caller
promises what ``run`` would otherwise check: each input is C-contiguous
memory of the shape and dtype of the signature compiled for, each result
buffer is C-contiguous, writable, not shared with an input or another
result, and zeroed where :attr:`DirectCall.outputs` says so (the results the
program does not write all over before reading, see
:func:`~stripeml.analysis.liveness.written_outputs`).  The function's
constants are set from the arrays it bound.  A program whose buffers are not
all plain C-contiguous ones has no direct call (``make`` returns ``None``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence

import numpy as np

from .cpu_run import CpuCompiled


class DirectCall:
    """``compiled`` run on inputs and results by address (see the module docstring)."""

    __slots__ = (
        "_compiled",
        "_consts",
        "_in_slots",
        "_keep",
        "_out_slots",
        "_special_io",
        "outputs",
    )

    def __init__(
        self,
        compiled: CpuCompiled,
        in_slots: tuple[int, ...],
        out_slots: tuple[int, ...],
        consts: tuple[tuple[int, int], ...],
        keep: list[np.ndarray],
    ) -> None:
        self._compiled = compiled
        self._in_slots = in_slots
        self._out_slots = out_slots
        self._consts = consts
        self._keep = keep  # the constants' arrays, whose addresses ``_consts`` holds
        buffers = compiled._buffers
        written = compiled._written
        if written is None:
            written = compiled._written = compiled._written_outputs()
        #: per result, in output order: (shape, NumPy dtype, whether it must start zeroed)
        self.outputs: tuple[tuple[tuple[int, ...], np.dtype, bool], ...] = tuple(
            (tuple(buffers[s].info.sizes), buffers[s].dtype, s not in written) for s in out_slots
        )
        # Parameters a special (run on the host, on NumPy storages) reads or
        # writes: (slot, bytes, dtype), their storage made from the address.
        io = set(in_slots) | set(out_slots) | {s for s, _ in consts}
        names = {buffers[s].info.name: s for s in io}
        touched: set[int] = set()
        for step in compiled.module.steps:
            if step.kernel is None and step.special is not None:
                sp = step.special
                touched.update(names[n] for n in (*sp.inputs, *sp.outputs) if n in names)
        self._special_io = tuple((s, buffers[s].nbytes, buffers[s].dtype) for s in sorted(touched))

    @staticmethod
    def make(
        compiled: object,
        in_names: Sequence[str],
        out_names: Sequence[str],
        constants: Mapping[str, np.ndarray],
    ) -> DirectCall | None:
        """The direct call of ``compiled`` (a :class:`CpuCompiled` that has run
        once) with these parameters and outputs in order, its ``constants`` (by
        name) bound; None where there is none (another backend, a buffer
        that is not C-contiguous, a program not run yet)."""
        if not isinstance(compiled, CpuCompiled) or not compiled._called:
            return None
        if compiled._const_steps and not compiled._primed:
            return None
        slot_of = {b.info.name: k for k, b in enumerate(compiled._buffers)}
        names = [*in_names, *out_names, *constants]
        if any(n not in slot_of for n in names):
            return None
        if any(not compiled._buffers[slot_of[n]].dense for n in names):
            return None
        if set(in_names) | set(constants) != compiled._in_names:
            return None
        if set(out_names) != compiled._out_names:
            return None
        keep: list[np.ndarray] = []
        consts = []
        for name, value in constants.items():
            buf = compiled._buffers[slot_of[name]]
            arr = np.asarray(value, dtype=buf.dtype)
            if not arr.flags.c_contiguous:  # (``ascontiguousarray`` makes 0-d 1-d)
                arr = arr.copy(order="C")
            if arr.shape != tuple(buf.info.sizes):
                return None
            keep.append(arr)
            consts.append((slot_of[name], buf.pointer(arr.reshape(-1))))
        return DirectCall(
            compiled,
            tuple(slot_of[n] for n in in_names),
            tuple(slot_of[n] for n in out_names),
            tuple(consts),
            keep,
        )

    def __call__(self, in_ptrs: Sequence[int], out_ptrs: Sequence[int]) -> None:
        """Run on the inputs at ``in_ptrs``, writing the results at ``out_ptrs``."""
        c = self._compiled
        temps = c._take_temps()
        try:
            frame = c._frames.get(id(temps))
            if frame is None:
                frame = c._new_frame(temps, c._kept_storages({}))
            pointers, storages = frame[1], frame[2]
            c._seen.unbind(id(temps))  # its pointers change: run() binds again
            for slot, p in zip(self._in_slots, in_ptrs):
                pointers[slot] = p
            for slot, p in zip(self._out_slots, out_ptrs):
                pointers[slot] = p
            for slot, p in self._consts:
                pointers[slot] = p
            if self._special_io:
                storages = storages.copy()  # (the frame's keeps only temporaries)
                for slot, nbytes, dtype in self._special_io:
                    storages[slot] = _array_at(pointers[slot] or 0, nbytes, dtype)
            c._run_steps(pointers, storages)
        finally:
            c._give_back_temps(temps)


def _array_at(address: int, nbytes: int, dtype: np.dtype) -> np.ndarray:
    """A flat writable array over ``nbytes`` bytes at ``address`` (not owned)."""
    if nbytes == 0 or not address:
        return np.empty(0, dtype)
    return np.frombuffer(memoryview((ctypes.c_char * nbytes).from_address(address)), dtype)
