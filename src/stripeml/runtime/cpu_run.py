"""Running a program the CPU backend compiled: :class:`CpuCompiled` holds its
kernels, buffers and temporaries, and runs the steps in order
(:class:`.cpu_steps.StepRunner`, splitting kernels over the native thread pool);
see :mod:`.cpu` for the whole backend (its module docstring describes threads,
temporaries and constant statements)."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from .. import gc_pause
from ..codegen.cpu_abi import CpuModule
from ..ir.nodes import Program, Refinement
from . import cpu_replay, jit, kept_layouts, shared_constants
from .arenas import writable_c, zeroed_arena, zeroed_arena_at
from .chunking import CHUNKS_PER_THREAD, MIN_WORK_PER_CHUNK
from .cpu_steps import StepRunner
from .host import RootBuffer, check_names, checked
from .kept_pages import promote_huge
from .kernel_cache import StoredProgram
from .program_facts import Liveness, learn_later, program_constness
from .seen_inputs import SeenInputs

if TYPE_CHECKING:
    from .kept_reserve import Reserve

#: A first call longer than this (a model's, not a test's few microseconds) has the
#: program's facts worked out on a thread in the next gap between calls
#: (:func:`.program_facts.learn_later`), not by its second call.
LEARN_S = 0.02


class CpuCompiled(StepRunner):
    """A program compiled for the host: native kernels plus the steps that run them.

    ``code`` is the LLVM IR as the generator produced it (before optimisation);
    it comes from the disk cache on a warm start.  The MCJIT engine that owns
    the kernels' machine code lives as long as this object.

    ``program``: the Stripe program the module was generated from (its root
    refinements, in ``module.buffers`` order); the placed temporaries' offsets
    come from it.  Without it every temporary gets its own array.  A
    :class:`~.kernel_cache.StoredProgram` (a warm start's) is asked for its
    summary; its program is loaded only when another program of the process
    plans to share constant layouts with this one, or the runtime's analyses
    are not in the disk cache.
    """

    def __init__(
        self,
        module: CpuModule,
        loaded: jit.LoadedObject,
        threads: int,
        program: Program | StoredProgram | None = None,
        min_chunk_work: int = MIN_WORK_PER_CHUNK,
        chunks_per_thread: int = CHUNKS_PER_THREAD,
        code: str | None = None,
        facts: Liveness | None = None,
        reserve: Reserve | None = None,
    ) -> None:
        self.module = module
        self._reserve = reserve  # pages mapped for the kept temporaries (kept_reserve)
        self.code = module.llvm_ir if code is None else code
        self.threads = threads
        self.min_chunk_work = min_chunk_work
        self.chunks_per_thread = chunks_per_thread
        self._loaded = loaded  # keeps the executable memory alive
        refs: tuple[Refinement | None, ...] = (None,) * len(module.buffers)
        root_refs: tuple[Refinement, ...] = ()
        if isinstance(program, StoredProgram):
            root_refs = program.summary.refs
            constant, kept = program.summary.constant, program.summary.kept
        elif program is not None:
            root_refs = program.root.refs
            const = program_constness(program)  # the program cache's summary asks too
            constant, kept = const.statements, const.temporaries
        else:
            constant, kept = frozenset(), frozenset()
        if [r.into for r in root_refs] == [b.name for b in module.buffers]:
            refs = root_refs
        self._program = program
        #: The constant parameters' names.
        self._const_params = frozenset(r.into for r in root_refs if r.const)
        self._buffers = tuple(RootBuffer.of(b, r) for b, r in zip(module.buffers, refs))
        self._seen = SeenInputs(len(self._buffers))  # a model's weights, call after call
        # The same for the ``out=`` arrays written in place: the same array passed
        # again (a benchmark's, a serving loop's) skips the checks and the pointer
        # lookup (``ndarray.ctypes``: about 1.3 us), held from its second call on.
        self._out_seen = SeenInputs(len(self._buffers))
        self._in_names = frozenset(b.info.name for b in self._buffers if b.info.kind == "in")
        self._out_names = frozenset(b.info.name for b in self._buffers if b.info.kind == "out")
        # Steps computing from constant parameters alone run once, at the first call;
        # the temporaries they write are kept (shared by every call) from then on.
        self._const_steps = constant
        self._kept = {k: b for k, b in enumerate(self._buffers) if b.info.name in kept}
        self._kept_storage: dict[int, np.ndarray] | None = None
        self._reuse: shared_constants.Reuse | None = None
        # What a call made on 4 KiB pages (the kept temporaries, a fresh arena), given
        # huge pages when that call is done (kept_pages.promote_huge: ``promoting``).
        self._promote: list[np.ndarray] = []
        self.promoting: threading.Thread | None = None
        # The constant parameters of the first call, while the kept temporaries'
        # value ids are deferred (:func:`shared_constants.defer`), else None.
        self._deferred: dict[str, object] | None = None
        self._temps = tuple(
            b for b in self._buffers if b.info.kind not in ("in", "out") and b.info.name not in kept
        )
        arenas: dict[str, int] = {}
        for b in self._temps:
            if b.offset is not None:
                arenas[b.location] = max(arenas.get(b.location, 0), b.offset + b.nbytes)
        #: Bytes of each location's arena (the placed temporaries), per concurrent call.
        self.arena_bytes: dict[str, int] = arenas
        # Positions in ``self._temps`` of the temporaries zeroed again before a reuse
        # (computed at the first reuse: most compiled programs never need it).
        self._rezero: tuple[int, ...] | None = None
        # Slots of the outputs written all over before any read: a fresh array for
        # them is not zeroed.  Computed at the second call, like ``_rezero`` at the
        # first reuse: the analysis needs isl, which a warm start (loaded from the
        # disk cache, one call) must not import; the first call zeroes them all.
        self._written: frozenset[int] | None = None
        self._called = False
        # Both analyses, from the disk cache when an earlier process stored them.
        if facts is None and isinstance(program, Program):
            facts = Liveness(program, None, None)
        self._facts = facts
        # The kept temporaries mapped from the disk cache when an earlier process
        # stored them for the same constants (kept_layouts); their steps never run.
        self._layouts: kept_layouts.LayoutStore | None = None
        if self._kept and facts is not None and facts.key is not None:
            self._layouts = kept_layouts.LayoutStore(facts.key, facts.directory, self._kept)
        self._mapped = False
        self._kernels = {
            s.kernel.symbol: loaded.kernel(s.kernel.symbol)
            for s in module.steps
            if s.kernel is not None
        }
        self._addresses = {sym: loaded.address(sym) for sym in self._kernels}
        # The steps as run, per (threads, min_chunk_work, chunks_per_thread, constant).
        self._plans: dict[tuple[int, int, int, bool], list[tuple]] = {}
        self._batch_plans: dict[tuple[int, int, int, bool], list] = {}
        self._bound_arrays: list[np.ndarray] = []
        self._spare_temps: list[list[np.ndarray]] = []
        # Per set of temporaries (by id; the set is kept alive here): its pointer array.
        self._frames: dict[int, tuple[list[np.ndarray], ctypes.Array[ctypes.c_void_p], list]] = {}
        # The parameters, by slot: (slot, buffer, is an input, name).
        self._io = tuple(
            (k, b, b.info.kind == "in", b.info.name)
            for k, b in enumerate(self._buffers)
            if b.info.kind in ("in", "out")
        )
        self._out_order = tuple(b.info.name for b in self._buffers if b.info.kind == "out")
        # Per output, in that order: its slot and buffer.
        self._out_slots = tuple((k, b) for k, b in enumerate(self._buffers) if b.info.kind == "out")
        self._lock = threading.Lock()
        # The last call whose every parameter was found held (see replay), or None.
        self._fast: cpu_replay.Replay | None = None
        self._prime_lock = threading.Lock()
        self._primed = False
        self._called = False  # whether a call has returned (run)
        # When a dict, each run adds every step's wall time under its block name.
        self.step_seconds: dict[str, float] | None = None

    def run(
        self,
        inputs: Mapping[str, np.ndarray],
        outputs: Mapping[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """Run on ``inputs`` (exact dtype and shape per ``in`` buffer) and return the outputs.

        ``outputs`` may provide arrays for (some of) the results: they are
        written in place and returned.  Program temporaries are reused across
        calls (fresh pages are slow to touch): placed ones are views of one
        arena per location, one set per concurrent call (see the module
        docstring).  Output arrays must not alias inputs.
        """
        if not self._called:
            # The first call is the compile's last step (its constant steps, fresh
            # pages): background work waits for it as for a compile (the huge
            # pages of another program's first call, kept_pages.promote_huge).
            start = time.perf_counter()
            with gc_pause.paused():
                results = self._run(inputs, outputs)
            self._called = True
            facts = self._facts
            if facts is not None and not facts.known and time.perf_counter() - start > LEARN_S:
                learn_later(facts)  # a model's: its second call need not work them out
            return results
        return self._run(inputs, outputs)

    def _run(
        self,
        inputs: Mapping[str, np.ndarray],
        outputs: Mapping[str, np.ndarray] | None,
    ) -> dict[str, np.ndarray]:
        outputs = dict(outputs or {})
        self._check_names(inputs, outputs)
        temps = self._take_temps()
        frame = self._frames.get(id(temps))
        if frame is None:
            frame = self._new_frame(temps, self._kept_storages(inputs))
        pointers, storages = frame[1], frame[2].copy()
        # Read-only inputs passed again (a model's weights) that this frame holds
        # already (SeenInputs.settle): one identity test each, at C speed, instead
        # of a lookup and two ctypes stores each (104 weights in ShuffleNet).
        seen = self._seen
        rest = seen.bound(id(temps), inputs)
        io = self._io if rest is None else rest
        hits: list[int] | None = [] if rest is None else None
        results: dict[str, np.ndarray] = {}
        # Whether every parameter was found held (inputs by SeenInputs, ``out=`` by
        # their SeenInputs) or is a fresh dense output: then the next call may replay this one.
        replayable = self.step_seconds is None and not (self._const_steps and not self._primed)
        fresh: list[int] = []
        copy_back: list[tuple[str, RootBuffer, np.ndarray]] = []
        written = self._written
        if written is None:
            if self._called:
                written = self._written = self._written_outputs()
            else:
                self._called = True
                written = frozenset()
        for slot, buf, is_in, name in io:
            if is_in:
                value = inputs[name]
                hit = seen.get(slot, value)
                if hit is not None:
                    pointers[slot] = hit[0]
                    storages[slot] = hit[1]
                    if hits is not None and not value.flags.writeable:
                        hits.append(slot)
                    continue
                replayable = False
                arr = checked(buf, value, "input")
                if buf.dense:
                    storage = np.ascontiguousarray(arr).reshape(-1)
                    seen.put(slot, value, arr, storage, buf.pointer)
                else:
                    storage = buf.storage()
                    buf.logical(storage)[...] = arr
            else:
                target = outputs.get(name)
                if target is not None:
                    hit = self._out_seen.get(slot, target)
                    if hit is not None and target.flags.writeable:
                        results[name] = target
                        pointers[slot], storages[slot] = hit
                        continue
                    replayable = False
                    target = checked(buf, target, "output")
                if target is not None and buf.dense and writable_c(target):
                    storage = target.reshape(-1)
                    results[name] = target
                    pointers[slot] = buf.pointer(storage)
                    storages[slot] = storage
                    # (the pointer is looked up again once, when the array is held)
                    self._out_seen.put(slot, target, target, storage, buf.pointer)
                    continue
                elif target is None and buf.dense:
                    # Fresh results start at zero, as on the interpreter: elements a
                    # program never stores read 0.  Those the program writes all
                    # over before reading are not zeroed (a memset of recycled
                    # memory per result per call).  64-byte aligned, like the
                    # arena: threads splitting a small result by whole vectors
                    # then never share a cache line.
                    raw, address = zeroed_arena_at(buf.nbytes, zeroed=slot not in written)
                    storage = raw.view(buf.dtype)
                    results[name] = storage.reshape(buf.info.sizes)
                    pointers[slot] = address + buf.origin * storage.itemsize
                    storages[slot] = storage
                    fresh.append(slot)
                    continue  # the address is known: no second (slow) ctypes lookup
                else:
                    replayable = False
                    storage = buf.storage()
                    if target is not None:
                        # Elements the program never stores keep the caller's values.
                        buf.logical(storage)[...] = target
                        results[name] = target
                    copy_back.append((name, buf, storage))
            pointers[slot] = buf.pointer(storage)
            storages[slot] = storage
        if hits:  # read-only inputs found again: this frame holds them from now on
            for k in hits:
                frame[2][k] = storages[k]
            names = tuple(self._buffers[k].info.name for k in hits)
            taken = set(hits)
            seen.settle(
                id(temps),
                names,
                tuple(inputs[n] for n in names),
                lambda: tuple(e for e in self._io if e[0] not in taken),
            )
        record = None
        if replayable and written is self._written:
            record = cpu_replay.record(
                self, temps, pointers, storages, inputs, results, written, fresh
            )
        try:
            if self._const_steps and not self._primed:
                self._prime(pointers, storages)
            self._run_steps(pointers, storages)
        except BaseException:
            record = None
            raise
        finally:
            self._give_back_temps(temps, record)
        for name, buf, storage in copy_back:
            if name in results:
                results[name][...] = buf.logical(storage)
            else:
                results[name] = np.array(buf.logical(storage), order="C")  # own memory
        return {name: results[name] for name in self._out_order}

    def replay(
        self, inputs: Mapping[str, object], outs: tuple[object, ...]
    ) -> tuple[np.ndarray, ...] | None:
        """The last call again, when it may be (:func:`.cpu_replay.replay`), else
        ``None`` with nothing run, checked or raised."""
        return cpu_replay.replay(self, inputs, outs)

    # -- helpers -------------------------------------------------------------

    def _check_names(self, inputs: Mapping[str, object], outputs: Mapping[str, object]) -> None:
        if inputs.keys() == self._in_names and outputs.keys() <= self._out_names:
            return  # exactly the inputs, known outputs: nothing to report
        check_names(self._buffers, inputs, outputs)

    @property
    def temp_bytes(self) -> dict[str, int]:
        """Bytes of temporaries one call needs per location: the arena plus the
        temporaries without an offset (``analysis.memory.peak_bytes`` of the root)."""
        out = dict(self.arena_bytes)
        for b in self._temps:
            if b.offset is None:
                out[b.location] = out.get(b.location, 0) + b.nbytes
        return out

    def _new_frame(
        self, temps: list[np.ndarray], kept: dict[int, np.ndarray]
    ) -> tuple[list[np.ndarray], ctypes.Array[ctypes.c_void_p], list]:
        """The pointer array of a set of temporaries, their slots (and the kept
        temporaries') filled once, a pointer costing microseconds and a model
        having hundreds of temporaries; and the storages by slot, the
        parameters' left for each call to set."""
        pointers = (ctypes.c_void_p * max(1, len(self._buffers)))()
        storages: list = [None] * len(self._buffers)
        spare = iter(temps)
        for slot, buf in enumerate(self._buffers):
            if buf.info.kind in ("in", "out"):
                continue
            storage = kept[slot] if slot in kept else next(spare)
            pointers[slot] = buf.pointer(storage)
            storages[slot] = storage
        frame = (temps, pointers, storages)
        with self._lock:
            self._frames[id(temps)] = frame
        return frame

    def _take_temps(self) -> list[np.ndarray]:
        """Storage of the temporaries for one call: a spare set, or a fresh one."""
        with self._lock:
            self._fast = None  # this call sets the frame's parameters: nothing to replay
            spare = self._spare_temps.pop() if self._spare_temps else None
            if spare is not None and self._rezero is None:
                self._rezero = self._initial_reads()
        if spare is not None:
            for k in self._rezero or ():
                spare[k].fill(0)
            return spare
        # on 4 KiB pages for this call, huge pages after it (kept_pages: a fresh huge
        # page's first touch may stall the call)
        arenas = {loc: zeroed_arena(n, fresh=True) for loc, n in self.arena_bytes.items()}
        with self._lock:
            self._promote += [a.base if a.base is not None else a for a in arenas.values()]
        return [
            b.storage() if b.offset is None else b.view(arenas[b.location]) for b in self._temps
        ]

    def _written_outputs(self) -> frozenset[int]:
        """Slots of the outputs the program writes all over before reading
        (:func:`~stripeml.analysis.liveness.written_outputs`): fresh ones need no
        zeroing.  None of them without the program to analyse."""
        if self._facts is None:
            return frozenset()
        names = self._facts.get()[1]
        return frozenset(k for k, b in enumerate(self._buffers) if b.info.name in names)

    def _initial_reads(self) -> tuple[int, ...]:
        """Positions of the temporaries whose initial (zero) contents may be read."""
        if not self._temps:
            return ()
        if self._facts is None:  # nothing to analyse: keep the values of the last call
            return ()
        names = self._facts.get()[0]
        return tuple(k for k, b in enumerate(self._temps) if b.info.name in names)

    def _give_back_temps(
        self, temps: list[np.ndarray], record: cpu_replay.Replay | None = None
    ) -> None:
        """``temps`` free for the next call; what this call made on 4 KiB pages (its
        arena, the kept layouts) gets huge pages now, its work done.  ``record``:
        the call just made, which the next may replay (set with the spare, under
        the lock: a call taking ``temps`` meanwhile has changed their pointers)."""
        with self._lock:
            self._spare_temps.append(temps)
            if record is not None:
                self._fast = record
            promote, self._promote = self._promote, []
        if promote:
            self.promoting = promote_huge(promote)

    def _kept_storages(self, inputs: Mapping[str, object]) -> dict[int, np.ndarray]:
        """The kept temporaries' storage, made at the first call: those another
        program of the process computed the same way are its arrays
        (:mod:`.shared_constants`), the others are this program's own."""
        if self._kept_storage is None:
            with self._lock:
                if self._kept_storage is None and self._kept and shared_constants.idle():
                    # nothing to share with: no value ids now (registered when
                    # another program asks, shared_constants.flush)
                    params = self._const_params
                    self._deferred = {k: v for k, v in inputs.items() if k in params}
                    mapped = self._layouts.load(self._deferred) if self._layouts else None
                    if mapped is not None:
                        self._kept_storage, self._mapped = mapped, True
                    else:
                        self._kept_storage = self._fresh_kept({})
                if self._kept_storage is None:
                    reuse = shared_constants.plan_reuse(
                        self._whole_program(), self._buffers, self._const_steps, self._kept, inputs
                    )
                    self._reuse = reuse
                    self._kept_storage = self._fresh_kept(reuse.shared if reuse is not None else {})
                reserve, self._reserve = self._reserve, None
                if reserve is not None:
                    reserve.close()
        return self._kept_storage

    def _fresh_kept(self, shared: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """The kept temporaries' storage: ``shared``'s arrays, else zeroed bytes of
        the reserve (``kept_reserve``) while they fit, else pages of their own
        (each to be given huge pages after the call: ``_promote``)."""
        out: dict[int, np.ndarray] = {}
        reserve = self._reserve
        for k, b in self._kept.items():
            got = shared.get(k)
            if got is None and reserve is not None:
                got = reserve.take(b.nbytes, b.dtype)
            if got is None:
                got = b.kept_storage()
                self._promote.append(got)
            out[k] = got
        used = self._reserve.used() if self._reserve is not None else None
        if used is not None:
            self._promote.append(used)
        return out

    def _prime(self, pointers: ctypes.Array[ctypes.c_void_p], storages: list[np.ndarray]) -> None:
        """Run the constant steps, in program order, once for this compiled program
        (they read only constant parameters and the temporaries they write)."""
        with self._prime_lock:
            if not self._primed:
                if not self._mapped:
                    self._run_steps(pointers, storages, constant=True)
                    if self._layouts is not None and self._kept_storage is not None:
                        # (looked up at load; written once the first call is done)
                        kept_layouts.in_background(
                            self._layouts.store, self._kept_storage, after_compiles=True
                        )
                if self._reuse is not None and self._kept_storage is not None:
                    shared_constants.register(self._reuse, self._kept_storage)
                elif self._deferred is not None:
                    shared_constants.defer(self)
                self._primed = True

    def register_deferred(self) -> None:
        """Offer the kept temporaries, computed at the first call without value ids
        (:func:`shared_constants.defer`), to the registry: their ids now, from the
        constant parameters of that call."""
        given, self._deferred = self._deferred, None
        if given is None or self._kept_storage is None:
            return
        reuse = shared_constants.plan_reuse(
            self._whole_program(), self._buffers, self._const_steps, self._kept, given
        )
        if reuse is not None:  # (its ids name only the arrays not found registered)
            shared_constants.register(reuse, self._kept_storage)

    def _whole_program(self) -> Program | None:
        """The program (a stored one loaded now)."""
        program = self._program
        return program.program if isinstance(program, StoredProgram) else program
