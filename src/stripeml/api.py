"""The public entry point: ``stripeml.compile`` and the callables it returns.

``compile`` parses and checks the Tile source at once and resolves the target
once (:func:`stripeml.targets.resolve`: a frozen ``Target`` holding the
hardware facts and the built pipeline) and its backend
(:func:`stripeml.runtime.backend.backend_for`).  Shapes bind at call time:
each new signature (input shapes and dtypes) is bound, lowered, run through
``target.passes`` and compiled by the backend once, then cached in memory
and, for backends with a disk cache, on disk.

``threads=`` (else the environment variable :data:`THREADS_VARIABLE`, read
here, at the API's boundary, and nowhere below) becomes the target's
``threads`` fact when the target resolves: the ``thread`` pass and the CPU
runtime see it through the frozen ``Target`` like any other fact.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from . import gc_pause
from .errors import InternalError, ShapeError, StripeError
from .ir.dtypes import itemsize
from .ir.nodes import Program, Refinement
from .ir.printer import format as format_ir
from .phases import phase
from .runtime import host
from .runtime.backend import Backend, Compiled, backend_for
from .runtime.host import bind_constants, check_memory, out_of_memory, separate_outputs
from .runtime.memo import SignatureCache
from .targets import Target, resolve
from .targets.loader import check_threads
from .tile import ast
from .tile.bind import Signature, bind, signature_of
from .tile.check import check
from .tile.parser import parse

if TYPE_CHECKING:
    # Loaded on first use: a warm start (the optimised program read from the disk
    # cache) lowers nothing and profiles nothing.
    from .analysis.roofline import ProfileRow, Work
    from .passes.manager import PipelineResult

#: ``STRIPEML_VERIFY=all`` verifies the whole program after every pass (the default
#: verifies incrementally: what a pass changed; see :mod:`stripeml.passes.manager`).
VERIFY_VARIABLE = "STRIPEML_VERIFY"


def verify_all() -> bool:
    """Whether ``$STRIPEML_VERIFY`` asks for the full verification after every pass
    (``all``); other values than ``all`` and ``changed`` (the default) are an error."""
    value = os.environ.get(VERIFY_VARIABLE, "").strip().lower()
    if value in ("", "changed"):
        return False
    if value == "all":
        return True
    raise StripeError(
        f"{VERIFY_VARIABLE}={value!r}: expected 'all' (verify the whole program after "
        "every pass) or 'changed' (the default: what each pass changed)"
    )


class Executable:
    """A program specialised for one signature on one target."""

    def __init__(
        self,
        fn: Function,
        program: Program,
        stages: PipelineResult | None,
        compiled: Compiled,
        timings: list[tuple[str, float]] | None = None,
        ir: str | None = None,
    ):
        self.function = fn
        self.program = program
        self._stages = stages  # their texts are printed when first asked for
        self._timings = list(timings or [])
        self._compiled = compiled
        self.ir = ir if ir is not None else format_ir(program)
        self.output_specs = tuple(
            (r.into, r.shape.sizes, np.dtype(_np_dtype(r.shape.dtype))) for r in program.outputs
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
        from .analysis.memory import peak_bytes

        return peak_bytes(self.program)

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

        from .analysis.roofline import NO_WORK, ProfileRow, bound_kind, peak_fraction
        from .runtime.peaks import target_peaks  # numpy and LLVM: only when profiling

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
        rows = []
        for name in per_run[0]:
            seconds = statistics.median(r.get(name, 0.0) for r in per_run)
            w = work.get(name, NO_WORK)
            rate = 1e-9 / seconds if seconds > 0 else 0.0
            fraction = bound = None
            if peaks.gflops is not None and peaks.gbps is not None:
                fraction = peak_fraction(w.flops, w.bytes, seconds, peaks.gflops, peaks.gbps)
                bound = bound_kind(w.flops, w.bytes, peaks.gflops, peaks.gbps)
            rows.append(
                ProfileRow(
                    name,
                    comments.get(name, ""),
                    seconds,
                    w.flops,
                    w.bytes,
                    w.flops * rate,
                    w.bytes * rate,
                    fraction,
                    bound,
                )
            )
        return sorted(rows, key=lambda r: -r.seconds)

    @property
    def work(self) -> dict[str, Work]:
        """FLOPs and DRAM bytes of each root statement by its profile name
        (:func:`stripeml.analysis.roofline.program_work`; computed once)."""
        if self._work is None:
            from .analysis.roofline import program_work

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
        if not self._always_fits:
            needs = [(d, n) for name, d, n in self._needs() if name not in given]
            check_memory(f"running {self.function.name}", needs)
        # A plain try (not _internal_errors): this runs at every call, and a
        # generator-based context manager costs microseconds.
        try:
            results = self._compiled.run(inputs, given)
        except StripeError:
            raise
        except MemoryError:
            needs = [(d, n) for name, d, n in self._needs() if name not in given]
            raise out_of_memory(
                f"running {self.function.name}", needs, "an allocation failed"
            ) from None
        except Exception as exc:  # noqa: BLE001 - the point is to catch every bug
            raise InternalError(
                f"internal error while running {self.function.name}: {type(exc).__name__}: {exc}"
            ) from exc
        for name, target in aliased.items():
            target[...] = results[name]
            results[name] = target
        return results

    def _needs(self) -> list[tuple[str | None, str, int]]:
        """``(output name or None, description, bytes)`` of what a run allocates
        at least: each output the caller does not provide, and the temporaries
        (``peak_bytes``).  Computed once."""
        if self._memory is None:
            self._memory = [
                (r.into, f"output '{r.into}' {r.shape.dtype}{r.shape.sizes}", _nbytes(r))
                for r in self.program.outputs
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

    def __call__(
        self, *args: Any, out: Any = None, **kwargs: Any
    ) -> np.ndarray | tuple[np.ndarray, ...]:
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
        if len(args) != len(expected):
            return None
        for a, (shape, dtype) in zip(args, expected):
            if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
                return None
        return args

    @property
    def signature(self) -> Signature:
        """Shapes and dtypes of the inputs a call passes (constants excluded)."""
        if self._signature is None:
            self._signature = tuple(
                (r.shape.sizes, str(_np_dtype(r.shape.dtype)))
                for r in self.program.inputs
                if not r.const
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
        raise InternalError(f"internal error while {what}: {type(exc).__name__}: {exc}") from exc


def _nbytes(ref: Refinement) -> int:
    return ref.shape.extent * itemsize(ref.shape.dtype)


def _np_dtype(name: str) -> np.dtype:
    from .ir.dtypes import to_numpy

    return to_numpy(name)


def _fmt_sig(sig: Signature) -> str:
    return ", ".join(f"{'x'.join(map(str, s)) or 'scalar'}:{d}" for s, d in sig)


#: The environment variable giving the thread count when ``threads=`` is not given.
THREADS_VARIABLE = "STRIPEML_NUM_THREADS"


def threads_from_environment() -> int | None:
    """The thread count :data:`THREADS_VARIABLE` asks for (``None``: unset or
    empty); a :class:`StripeError` naming the variable when it is not a
    positive integer."""
    text = os.environ.get(THREADS_VARIABLE, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise StripeError(
            f"{THREADS_VARIABLE}={text!r}: must be a positive integer (the threads compiled "
            "code runs on), or unset for the target's own count"
        )
    return value


def target_for(target: str | os.PathLike[str] | Target, threads: int | None = None) -> Target:
    """The resolved target of a compile: ``threads`` (else :data:`THREADS_VARIABLE`,
    read once, here) replaces the file's ``threads`` fact before its pipeline is
    built (:func:`stripeml.targets.resolve`).  A ``Target`` object is already
    built: the environment does not change it, and ``threads`` must be its own."""
    threads = check_threads(threads, "threads=")
    if threads is None and not isinstance(target, Target):
        threads = threads_from_environment()
    return resolve(target, threads=threads)


class Function:
    """A compiled Tile function; call it with NumPy arrays."""

    def __init__(
        self,
        source: str,
        target: str | os.PathLike[str] | Target = "cpu",
        name: str = "main",
        constants: Mapping[str, Any] | None = None,
        threads: int | None = None,
    ) -> None:
        if not isinstance(source, str):
            raise StripeError(f"source must be a string of Tile code, got {type(source).__name__}")
        self.source = source
        self.name = name
        with phase("tile parse + check"):
            self.ast: ast.Function = parse(source)
            check(self.ast)
        self.target: Target = target_for(target, threads)
        self.backend: Backend = backend_for(self.target)
        every = tuple(p.name for p in self.ast.params)
        self.constants: dict[str, np.ndarray] = bind_constants(every, constants or {})
        #: The parameters a call passes (those not bound as constants), in order.
        self.params: tuple[str, ...] = tuple(p for p in every if p not in self.constants)
        self.outputs: tuple[str, ...] = tuple(o.name for o in self.ast.outputs)
        # compiled signatures, most recently used last, bounded in bytes (runtime/memo.py)
        self._cache: SignatureCache[Executable] = SignatureCache(_footprint)
        # The executable of the last call, weakly (the cache decides what lives):
        # a call with arrays of exactly its signature skips the lookup.
        self._last: weakref.ref[Executable] | None = None

    def __repr__(self) -> str:
        return f"<stripeml.Function {self.name}({', '.join(self.params)}) -> ({', '.join(self.outputs)}) target={self.target.name!r}>"

    # -- argument handling -------------------------------------------------
    def _arrays(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[np.ndarray]:
        if len(args) > len(self.params):
            raise ShapeError(
                f"{self.name} takes {len(self.params)} input(s) ({', '.join(self.params)}), got {len(args)}"
            )
        values: dict[str, Any] = dict(zip(self.params, args))
        for k, v in kwargs.items():
            if k not in self.params:
                raise ShapeError(
                    f"{self.name} has no input named '{k}' (inputs: {', '.join(self.params)})"
                )
            if k in values:
                raise ShapeError(f"input '{k}' given twice (positionally and by name)")
            values[k] = v
        missing = [p for p in self.params if p not in values]
        if missing:
            raise ShapeError(f"{self.name}: missing input(s) {', '.join(missing)}")
        out = []
        for p in self.params:
            v = values[p]
            try:
                arr = np.asarray(v)
            except Exception as exc:  # noqa: BLE001 - any conversion failure is the caller's input
                raise ShapeError(f"input '{p}' is not array-like: {exc}") from None
            if arr.dtype == object or arr.dtype.kind in "USVMmc":
                raise ShapeError(f"input '{p}' has unsupported dtype {arr.dtype}")
            out.append(arr)
        return out

    def _results(self, named: Mapping[str, np.ndarray]) -> np.ndarray | tuple[np.ndarray, ...]:
        outs = tuple(named[o] for o in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    # -- compilation -------------------------------------------------------
    def _executable(self, arrays: Sequence[np.ndarray]) -> Executable:
        sig = signature_of(arrays)
        exe = self._cache.get(sig)
        if exe is None:
            with _internal_errors(f"compiling {self.name} for {_fmt_sig(sig)}"), gc_pause.paused():
                exe = self._from_disk(sig)
                if exe is None:
                    result = self._optimise(sig)
                    compiled = self._compile(result.program)
                    exe = Executable(self, result.program, result, compiled, result.timings)
                    self._to_disk(sig, exe)
            self._cache.put(sig, exe)
        return exe

    def _compile(self, program: Program) -> Compiled:
        """``backend.compile``; running out of memory there (a GPU backend
        allocates its buffers when it loads a program) is a :class:`ShapeError`."""
        try:
            return self.backend.compile(program)
        except MemoryError:
            parts = [
                (f"'{r.into}' {r.shape.dtype}{r.shape.sizes}", _nbytes(r))
                for r in program.root.refs
            ]
            raise out_of_memory(f"compiling {self.name}", parts, "an allocation failed") from None

    def _optimise(self, sig: Signature) -> PipelineResult:
        """Bind, lower and run the target's pipeline (no backend compile)."""
        from .passes import manager
        from .tile.lower import lower

        with phase("bind + lower"):
            binding = bind(self.ast, self._every_signature(sig))
            program = lower(self.ast, binding, self.name, frozenset(self.constants))
        return manager.run_pipeline(program, self.target.passes, verify_all=verify_all())

    def _every_signature(self, sig: Signature) -> Signature:
        """``sig`` (of the parameters a call passes) with the constants' in place."""
        given = iter(sig)
        fixed = {k: signature_of([v])[0] for k, v in self.constants.items()}
        return tuple(fixed[p.name] if p.name in fixed else next(given) for p in self.ast.params)

    # A backend with a disk cache (``describe()`` is not None) also caches the
    # optimised program per (source, signature, target), so a warm start skips
    # lowering and passes.
    def _disk_key(self, sig: Signature) -> str | None:
        described = self.backend.describe()
        if described is None:
            return None
        from .runtime.kernel_cache import cache_key, compiler_fingerprint

        target = self.target.fingerprint()
        every = self._every_signature(sig)
        consts = sorted(self.constants)  # which parameters are const (not their values)
        text = (
            f"{self.source}\0{self.name}\0{every!r}\0{consts}\0{target}\0{compiler_fingerprint()}"
        )
        return cache_key(text, described)

    def _from_disk(self, sig: Signature) -> Executable | None:
        key = self._disk_key(sig)
        if key is None:
            return None
        from .ir.parser import parse as parse_ir
        from .ir.printer import remember
        from .runtime.kernel_cache import ProgramCache

        with phase("cache read"):
            found = ProgramCache(self.backend.cache_dir).get_program(key)
        if found is None:
            return None
        text, program = found
        if program is None:
            with phase("parse IR"):
                program = parse_ir(text)
        remember(program, text)
        return Executable(self, program, None, self._compile(program), [], ir=text)

    def _to_disk(self, sig: Signature, exe: Executable) -> None:
        key = self._disk_key(sig)
        if key is not None:
            from .runtime.kernel_cache import ProgramCache

            with phase("cache write"):
                ProgramCache(self.backend.cache_dir).put(key, exe.ir, exe.program)

    def lower(self, *args: Any, **kwargs: Any) -> Executable:
        """Specialise for these inputs' shapes and dtypes without running."""
        return self._executable(self._arrays(args, kwargs))

    def __call__(
        self, *args: Any, out: Any = None, **kwargs: Any
    ) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run on NumPy arrays; ``out=`` (an array, or a tuple for several outputs)
        receives the results in place and is returned."""
        last = self._last() if self._last is not None and not kwargs else None
        arrays = last._exact_arrays(args) if last is not None else None
        if last is None or arrays is None:
            arrays = self._arrays(args, kwargs)
            exe = self._executable(arrays)
            self._last = weakref.ref(exe)
        else:
            exe = last
        named = dict(zip(self.params, arrays))
        return self._results(exe.run_named(named, exe.out_arrays(out)))


def compile(  # noqa: A001
    source: str,
    target: str | os.PathLike[str] | Target = "cpu",
    *,
    name: str = "main",
    constants: Mapping[str, Any] | None = None,
    threads: int | None = None,
) -> Function:
    """Parse and check Tile ``source`` and resolve ``target`` (default ``"cpu"``:
    native code for this machine); return a callable compiled per signature.

    ``threads`` is how many threads compiled code runs on (``None``: the
    environment variable ``STRIPEML_NUM_THREADS``, else the target's own
    ``threads``, all CPUs of the process for ``cpu``); it becomes the target's
    ``threads`` fact, so the ``thread`` pass and the CPU runtime both see it.

    ``constants`` binds parameters to values now (a model's weights, say): calls
    pass only the other parameters, and what the program computes from constants
    alone (a weight laid out for the register tiles) a backend may compute once.
    The arrays are copied, so later changes to them do not reach the function.
    """
    return Function(source, target, name, constants, threads)


def _footprint(exe: Executable) -> int:
    """What an executable is counted at in memory: the bytes of its program's
    temporaries and results (an upper bound of its arena and constant layouts)."""
    return sum(_nbytes(r) for r in exe.program.root.refs if r.dir != "in")


def __getattr__(name: str) -> Any:
    """``ProfileRow`` and ``Work`` (:mod:`stripeml.analysis.roofline`), loaded when asked for."""
    if name in ("ProfileRow", "Work"):
        from .analysis import roofline

        return getattr(roofline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
