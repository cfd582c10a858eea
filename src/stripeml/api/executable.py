"""What ``Function.lower`` returns: one program specialised for one signature
on one target, callable with NumPy arrays (``stripeml.api.Executable``), and the
small helpers the rest of ``stripeml.api`` shares with it.

A call with arrays of exactly the compiled shapes and dtypes takes a short
path (no signature strings, no conversions): see ``Executable.__call__`` and
``docs/cpu-backend.md``, "The cost of a call".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InternalError, ShapeError, StripeError
from ..exact_args import exact_arrays
from ..ir.dtypes import itemsize
from ..ir.nodes import Program, Refinement
from ..ir.printer import format as format_ir
from ..runtime import host
from ..runtime.backend import Compiled
from ..runtime.host import check_memory, out_of_memory, separate_outputs

if TYPE_CHECKING:
    # Loaded on first use: a warm start (the optimised program read from the disk
    # cache) lowers nothing and profiles nothing.
    from ..analysis.roofline import ProfileRow, Work
    from ..passes.manager import PipelineResult
    from ..runtime.kernel_cache import StoredProgram
    from . import Function


#: Per parameter its shape and dtype name (:data:`stripeml.tile.bind.Signature`).
Signature = tuple[tuple[tuple[int, ...], str], ...]

#: ``str(dtype)`` by dtype (NumPy's ``str`` of a dtype runs Python code).
_DTYPE_NAMES: dict[np.dtype, str] = {}


def signature_of(arrays: Sequence[np.ndarray]) -> Signature:
    """:func:`stripeml.tile.bind.signature_of`, here so that a call (and a warm
    start, which binds nothing) does not import the Tile frontend (its syntax
    tree, types and binder: 12 ms)."""
    out = []
    for a in arrays:
        name = _DTYPE_NAMES.get(a.dtype)
        if name is None:
            name = str(a.dtype)
            if len(_DTYPE_NAMES) < 256:  # a few numeric dtypes in practice; never unbounded
                _DTYPE_NAMES[a.dtype] = name
        out.append((tuple(int(s) for s in a.shape), name))
    return tuple(out)


class Executable:
    """A program specialised for one signature on one target.

    ``program`` may be a :class:`~stripeml.runtime.kernel_cache.StoredProgram`
    (a warm start's, read from the disk cache with ``ir`` its text): what a call
    needs comes from its summary, and :attr:`program` loads it when first asked
    for."""

    def __init__(
        self,
        fn: Function,
        program: Program | StoredProgram,
        stages: PipelineResult | None,
        compiled: Compiled,
        timings: list[tuple[str, float]] | None = None,
        ir: str | None = None,
    ):
        self.function = fn
        self._program: Program | None = None
        self._stored: StoredProgram | None = None
        if isinstance(program, Program):
            self._program = program
            #: The program's root refinements (parameters, results, temporaries).
            self.root_refs: tuple[Refinement, ...] = program.root.refs
        else:
            self._stored = program
            self.root_refs = program.summary.refs
        self._stages = stages  # their texts are printed when first asked for
        self._timings = list(timings or [])
        self._compiled = compiled
        self.ir = ir if ir is not None else format_ir(self.program)
        self.output_specs = tuple(
            (r.into, r.shape.sizes, np.dtype(_np_dtype(r.shape.dtype)))
            for r in self.root_refs
            if r.dir == "out"
        )
        self._memory: list[tuple[str | None, str, int]] | None = None
        self._work: dict[str, Work] | None = None
        self._signature: Signature | None = None
        # Per parameter (shape, dtype) a call must pass: checked without building
        # the signature's strings (see __call__).
        self._expected: tuple[tuple[tuple[int, ...], np.dtype], ...] | None = None
        # Whether everything a call can allocate fits in physical memory (then
        # run_named checks nothing); None until the first call.
        self._always_fits: bool | None = None
        # The backend's replay of its last call (CpuCompiled.replay) with, per result
        # in the function's output order, its position in the backend's: None
        # until the first fast_call, False where the backend has none.
        self._replay: tuple[Callable[..., Any], tuple[int, ...]] | bool | None = None

    @property
    def program(self) -> Program:
        """The optimised Stripe program (after a warm start, loaded from the disk
        cache when first asked for)."""
        if self._program is None:
            assert self._stored is not None
            self._program = self._stored.program
        return self._program

    @property
    def stages(self) -> list[tuple[str, str]]:
        """``[(pass name, IR text)]``: "lower", then each pass that changed the
        program.  After a warm start from the disk cache the pipeline is re-run
        (without compiling) the first time this is read."""
        if self._stages is None:
            self._stages = self.function._optimise(self.signature)
            self._timings = self._stages.timings
        return self._stages.stages

    @property
    def timings(self) -> list[tuple[str, float]]:
        """``[(pass name, seconds)]`` for every pass run (re-run like ``stages``
        after a warm start)."""
        if self._stages is None:
            self.stages  # noqa: B018 - computes both
        return self._timings

    @property
    def peak_bytes(self) -> dict[str, int]:
        """Memory the program's temporaries need per location (after ``place``,
        buffers that are never live together share bytes)."""
        if self._program is None and self._stored is not None:
            return dict(self._stored.summary.peak)
        from ..runtime.program_facts import program_peak_bytes

        return program_peak_bytes(self.program)  # the program cache's summary asks too

    @property
    def code(self) -> str:
        """The generated backend source ("" for the interpreter)."""
        return self._compiled.code

    def profile(self, *args: Any, repeat: int = 1, **kwargs: Any) -> list[ProfileRow]:
        """Run ``repeat`` times and return a :class:`ProfileRow` (kernel, source
        statement, median seconds per run, then FLOPs, bytes, GFLOP/s, GB/s and
        the share of the roofline bound) for every kernel, slowest first.

        Per kernel on the ``cpu`` backend (its runtime times each step; a
        ``special`` is ``special<k>``, ``k`` its position among the root's
        statements); other backends give one row for the whole program,
        ``"program"``, with the FLOPs and bytes of all its kernels added up.
        The ceilings come from the target (its file's ``peak_gflops`` and DRAM
        ``bandwidth_gbs``, or its host facts): on a ``cpu`` target that gives
        neither they are measured the first time any program asks, about a
        second once per machine, then read from the disk cache
        (``STRIPEML_MEASURE_PEAKS=0`` turns that off, and the fractions are
        ``None``)."""
        import statistics
        import time

        from ..analysis.roofline import NO_WORK, profile_rows
        from ..runtime.peaks import target_peaks  # numpy and LLVM: only when profiling

        compiled = self._compiled
        per_run: list[dict[str, float]] = []
        for _ in range(max(1, repeat)):
            if hasattr(compiled, "step_seconds"):
                compiled.step_seconds = {}
                try:
                    self(*args, **kwargs)
                    per_run.append(dict(compiled.step_seconds))
                finally:
                    compiled.step_seconds = None
            else:
                start = time.perf_counter()
                self(*args, **kwargs)
                per_run.append({"program": time.perf_counter() - start})
        work = self.work
        if "program" in per_run[0] and "program" not in work:
            total = NO_WORK
            for w in work.values():
                total = total + w
            work = {"program": total}
        comments = {b.name: b.comment for b in self.program.root.sub_blocks}
        peaks = target_peaks(self.function.target)
        timed = (
            (name, comments.get(name, ""), statistics.median(r.get(name, 0.0) for r in per_run))
            for name in per_run[0]
        )
        return profile_rows(timed, work, peaks.gflops, peaks.gbps)

    def explore(
        self,
        path: str | PathLike[str],
        *args: Any,
        progress: Callable[[str], None] | None = None,
        **kwargs: Any,
    ) -> Path:
        """Write the compiler explorer's HTML page to ``path`` and return the path:
        each pass's program and diff, where each buffer lives and when, each
        kernel against the roofline (docs/explorer.md; needs matplotlib, the
        ``explore`` extra).  The kernels run on ``args``/``kwargs`` as for a
        call, by default on seeded random arrays of the compiled signature;
        ``progress``: a callable given a line of text per step."""
        from ..explore import Subject, random_inputs, write_report

        self.stages  # noqa: B018 - after a warm start, runs the pipeline again
        assert self._stages is not None
        if args or kwargs:
            arrays = self.function._arrays(args, kwargs)
            if signature_of(arrays) != self.signature:
                raise ShapeError(f"this executable was built for {_fmt_sig(self.signature)}")
        else:
            arrays = random_inputs(self.signature)
        named = {**dict(zip(self.function.params, arrays)), **self.function.constants}
        subject = Subject(
            self.function.name,
            self.function.target,
            self._stages.programs,
            self.timings,
            named,
            lambda: self.profile(*arrays, repeat=3),
        )
        return write_report(path, subject, progress)

    @property
    def work(self) -> dict[str, Work]:
        """FLOPs and DRAM bytes of each root statement by its profile name
        (:func:`stripeml.analysis.roofline.program_work`; computed once)."""
        if self._work is None:
            from ..analysis.roofline import program_work

            self._work = program_work(self.program)
        return self._work

    def run_named(
        self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Run on the call's inputs by name (the function's constants are added)."""
        constants = self.function.constants
        if constants:
            inputs = {**inputs, **constants}
        given, aliased = separate_outputs(inputs, outputs) if outputs else ({}, {})
        if self._always_fits is None:
            self._always_fits = sum(n for _, _, n in self._needs()) <= host.memory_bytes()
        what = f"running {self.function.name}"
        if not self._always_fits:
            check_memory(what, self._needs_without(given))
        # A plain try (not _internal_errors): this runs at every call, and a
        # generator-based context manager costs microseconds.
        try:
            results = self._compiled.run(inputs, given)
        except StripeError:
            raise
        except MemoryError:
            raise out_of_memory(what, self._needs_without(given), "an allocation failed") from None
        except Exception as exc:  # noqa: BLE001 - the point is to catch every bug
            raise _internal_error(what, exc) from exc
        for name, target in aliased.items():
            target[...] = results[name]
            results[name] = target
        return results

    def _needs_without(self, given: Mapping[str, np.ndarray]) -> list[tuple[str, int]]:
        """``(description, bytes)`` of what a run allocates besides the outputs ``given``."""
        return [(d, n) for name, d, n in self._needs() if name not in given]

    def _needs(self) -> list[tuple[str | None, str, int]]:
        """``(output name or None, description, bytes)`` of what a run allocates
        at least: each output the caller does not provide, and the temporaries
        (``peak_bytes``).  Computed once."""
        if self._memory is None:
            self._memory = [
                (r.into, f"output '{r.into}' {r.shape.dtype}{r.shape.sizes}", _nbytes(r))
                for r in self.root_refs
                if r.dir == "out"
            ]
            self._memory += [(None, f"temporaries in {k}", n) for k, n in self.peak_bytes.items()]
        return self._memory

    def out_arrays(
        self, out: np.ndarray | Sequence[np.ndarray] | None
    ) -> dict[str, np.ndarray] | None:
        """Check ``out=`` (one array per output, exact shape and dtype, C-contiguous)."""
        if out is None:
            return None
        arrays = (out,) if isinstance(out, np.ndarray) else tuple(out)
        if len(arrays) != len(self.output_specs):
            raise ShapeError(f"out= needs {len(self.output_specs)} array(s), got {len(arrays)}")
        named = {}
        for arr, (name, shape, dtype) in zip(arrays, self.output_specs):
            if not isinstance(arr, np.ndarray) or arr.shape != tuple(shape) or arr.dtype != dtype:
                got = (
                    f"{arr.shape} {arr.dtype}"
                    if isinstance(arr, np.ndarray)
                    else type(arr).__name__
                )
                raise ShapeError(
                    f"out= for '{name}' must be an array of shape {tuple(shape)} and dtype {dtype}, got {got}"
                )
            if not arr.flags.c_contiguous or not arr.flags.writeable:
                raise ShapeError(f"out= for '{name}' must be a writeable C-contiguous array")
            named[name] = arr
        return named

    def fast_call(self, args: tuple[Any, ...], out: Any) -> Any:
        """The results of a call with positional ``args`` and ``out=`` that repeats
        the backend's last one (the very same arrays, shapes, dtypes and strides,
        an ``out=`` still writeable: every check of that call holds again), else
        ``None`` and nothing is run: the caller takes the full path, which checks
        everything (``docs/cpu-backend.md``, "The cost of a call")."""
        replay = self._replay
        if replay is None:
            replay = self._replay = self._replayer()
        if replay is False or not self._always_fits:
            return None
        fn = self.function
        params = fn.params
        if len(args) != len(params):
            return None
        if out is None:
            outs: tuple[Any, ...] = ()
        elif type(out) is np.ndarray:
            outs = (out,)
        elif type(out) is tuple and out:
            outs = out
        else:
            return None
        named = dict(zip(params, args))
        if fn.constants:
            named.update(fn.constants)
        try:
            results = replay[0](named, outs)  # type: ignore[index]
        except StripeError:
            raise
        except MemoryError:
            what = f"running {fn.name}"
            raise out_of_memory(what, self._needs_without({}), "an allocation failed") from None
        except Exception as exc:  # noqa: BLE001 - the point is to catch every bug
            raise _internal_error(f"running {fn.name}", exc) from exc
        if results is None:
            return None
        order = replay[1]  # type: ignore[index]
        if len(order) == 1:
            return results[order[0]]
        return tuple(results[k] for k in order)

    def _replayer(self) -> tuple[Callable[..., Any], tuple[int, ...]] | bool:
        """``(replay, order)`` for :meth:`fast_call`, or False: a backend without
        one, or whose outputs are not in the order of ``out=``."""
        compiled = self._compiled
        replay = getattr(compiled, "replay", None)
        backend = getattr(compiled, "_out_order", None)
        if replay is None or backend is None:
            return False
        if tuple(name for name, _, _ in self.output_specs) != tuple(backend):
            return False
        outputs = self.function.outputs
        if sorted(outputs) != sorted(backend):
            return False
        return replay, tuple(backend.index(o) for o in outputs)

    def __call__(
        self, *args: Any, out: Any = None, **kwargs: Any
    ) -> np.ndarray | tuple[np.ndarray, ...]:
        if not kwargs:
            results = self.fast_call(args, out)
            if results is not None:
                return results
        arrays = self._exact_arrays(args) if not kwargs else None
        if arrays is None:  # anything but arrays of exactly the compiled shapes and dtypes
            arrays = self.function._arrays(args, kwargs)
            sig = signature_of(arrays)
            if sig != self.signature:
                raise ShapeError(
                    f"this executable was built for {_fmt_sig(self.signature)}, got {_fmt_sig(sig)}"
                )
        named = dict(zip(self.function.params, arrays))
        return self.function._results(self.run_named(named, self.out_arrays(out)))

    def _exact_arrays(self, args: Sequence[Any]) -> Sequence[np.ndarray] | None:
        """``args`` when each is an ndarray of the shape and dtype compiled for
        (what ``_arrays`` then ``signature_of`` would accept, without their
        Python-level string work), else ``None``."""
        expected = self._expected
        if expected is None:
            expected = self._expected = tuple(
                (tuple(sizes), np.dtype(dtype)) for sizes, dtype in self.signature
            )
        return args if exact_arrays(args, expected) else None

    @property
    def signature(self) -> Signature:
        """Shapes and dtypes of the inputs a call passes (constants excluded)."""
        if self._signature is None:
            self._signature = tuple(
                (r.shape.sizes, str(_np_dtype(r.shape.dtype)))
                for r in self.root_refs
                if r.dir == "in" and not r.const
            )
        return self._signature


@contextmanager
def _internal_errors(what: str) -> Iterator[None]:
    """Re-raise anything that is not a StripeError as an InternalError."""
    try:
        yield
    except StripeError:
        raise
    except Exception as exc:  # noqa: BLE001 - the point is to catch every bug
        raise _internal_error(what, exc) from exc


def _internal_error(what: str, exc: Exception) -> InternalError:
    """The error a bug raising ``exc`` while ``what`` surfaces as."""
    return InternalError(f"internal error while {what}: {type(exc).__name__}: {exc}")


def _nbytes(ref: Refinement) -> int:
    return ref.shape.extent * itemsize(ref.shape.dtype)


def _np_dtype(name: str) -> np.dtype:
    from ..ir.dtypes import to_numpy

    return to_numpy(name)


def _fmt_sig(sig: Signature) -> str:
    return ", ".join(f"{'x'.join(map(str, s)) or 'scalar'}:{d}" for s, d in sig)
