"""The public entry point: ``stripeml.compile`` and the callables it returns.

``compile`` parses and checks the Tile source at once and resolves the target once
(:func:`stripeml.targets.resolve`: a frozen ``Target`` holding the hardware facts and
the built pipeline) and its backend (:func:`stripeml.runtime.backend.backend_for`).
Shapes bind at call time: each new signature (input shapes and dtypes) is bound,
lowered, run through ``target.passes`` and compiled by the backend once, then cached in
memory and, for backends with a disk cache, on disk.

``threads=`` (else the environment variable :data:`THREADS_VARIABLE`, read
here, at the API's boundary, and nowhere below) becomes the target's
``threads`` fact when the target resolves: the ``thread`` pass and the CPU
runtime see it through the frozen ``Target`` like any other fact.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import gc_pause
from ..errors import InternalError, ShapeError, StripeError
from ..ir.nodes import Program
from ..phases import phase
from ..runtime.backend import Backend, Compiled, backend_for
from ..runtime.host import bind_constants, out_of_memory
from ..runtime.memo import SignatureCache
from ..targets import Target, resolve
from ..targets.loader import check_threads, set_validation_memo
from .executable import Executable, Signature, _fmt_sig, _internal_errors, _nbytes, signature_of

if TYPE_CHECKING:
    from collections.abc import Callable

    # Loaded on first use: a warm start (the optimised program read from the disk
    # cache) lowers nothing and profiles nothing.
    from ..passes.manager import PipelineResult
    from ..runtime.cache_store import Remembered
    from ..runtime.kernel_cache import StoredProgram
    from ..tile.ast import Function as TileFunction

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


class _ValidatedPipelines:
    """The runtime's record of validated pipelines
    (:class:`stripeml.runtime.kernel_cache.ValidatedPipelines`), imported at the
    first target load: a target seen before loads without building its passes."""

    def __init__(self) -> None:
        self._store: Any = None

    def _get(self) -> Any:
        if self._store is None:
            from ..runtime.kernel_cache import ValidatedPipelines

            self._store = ValidatedPipelines()
        return self._store

    def seen(self, description: str) -> bool:
        return bool(self._get().seen(description))

    def add(self, description: str) -> None:
        self._get().add(description)


set_validation_memo(_ValidatedPipelines())


def target_for(target: str | os.PathLike[str] | Target, threads: int | None = None) -> Target:
    """The resolved target of a compile: ``threads`` (else :data:`THREADS_VARIABLE`,
    read once, here) replaces the file's ``threads`` fact before its pipeline is
    built (:func:`stripeml.targets.resolve`).  A ``Target`` object is already
    built: the environment does not change it, and ``threads`` must be its own."""
    threads = check_threads(threads, "threads=")
    if threads is None and not isinstance(target, Target):
        threads = threads_from_environment()
    return resolve(target, threads=threads)


def _parsed(source: str) -> TileFunction:
    """``source`` parsed and checked."""
    from ..tile.check import check
    from ..tile.parser import parse

    with phase("tile parse + check"):
        tree = parse(source)
        check(tree)
    return tree


class Function:
    """A compiled Tile function; call it with NumPy arrays.

    ``names`` (for frontends that wrote ``source``: every parameter's name and
    every output's, in order) defers parsing to the first compile that lowers:
    a warm start whose optimised program the disk cache holds (keyed by this
    exact source, with the compiler's sources) never parses it (ResNet-50's
    13,000 characters: 12 ms).  ``on_parse`` is then given the tree, once, when
    it is parsed (the frontend's own checks); names the source does not declare
    are an :class:`InternalError` then.  Without ``names`` the source is parsed
    and checked here, its errors raised at once.
    """

    def __init__(
        self,
        source: str,
        target: str | os.PathLike[str] | Target = "cpu",
        name: str = "main",
        constants: Mapping[str, Any] | None = None,
        threads: int | None = None,
        tuned: bool = True,
        *,
        names: tuple[Sequence[str], Sequence[str]] | None = None,
        on_parse: Callable[[TileFunction], None] | None = None,
    ) -> None:
        if not isinstance(source, str):
            raise StripeError(f"source must be a string of Tile code, got {type(source).__name__}")
        self.source = source
        self.name = name
        #: Whether compiles use the tuning database's choices (docs/tuning.md);
        #: ``stripeml tune`` compiles its "before" with ``False``.
        self.tuned = tuned
        self._ast: TileFunction | None = None
        self._on_parse = on_parse
        if names is None:
            self._ast = _parsed(source)
            every = tuple(p.name for p in self._ast.params)
            outputs = tuple(o.name for o in self._ast.outputs)
        else:
            every, outputs = tuple(names[0]), tuple(names[1])
        #: Every parameter's name, the constants' included, in order.
        self.every: tuple[str, ...] = every
        self.target: Target = target_for(target, threads)
        self.backend: Backend = backend_for(self.target)
        self.constants: dict[str, np.ndarray] = bind_constants(every, constants or {})
        #: The parameters a call passes (those not bound as constants), in order.
        self.params: tuple[str, ...] = tuple(p for p in every if p not in self.constants)
        self.outputs: tuple[str, ...] = outputs
        # compiled signatures, most recently used last, bounded in bytes (runtime/memo.py)
        self._cache: SignatureCache[Executable] = SignatureCache(_footprint)
        # The executable of the last call, weakly (the cache decides what lives):
        # a call with arrays of exactly its signature skips the lookup.
        self._last: weakref.ref[Executable] | None = None
        if self._ast is not None and on_parse is not None:
            self._ast_parsed(self._ast)

    @property
    def ast(self) -> TileFunction:
        """The parsed and checked Tile syntax tree (parsed when first asked for,
        where ``names`` deferred it)."""
        if self._ast is None:
            tree = _parsed(self.source)
            self._ast_parsed(tree)
            self._ast = tree
        return self._ast

    def _ast_parsed(self, tree: TileFunction) -> None:
        declared = (tuple(p.name for p in tree.params), tuple(o.name for o in tree.outputs))
        if declared != (self.every, self.outputs):
            raise InternalError(
                f"{self.name}: the source declares parameters {declared[0]} and outputs "
                f"{declared[1]}, its frontend said {self.every} and {self.outputs}"
            )
        check_tree, self._on_parse = self._on_parse, None
        if check_tree is not None:
            check_tree(tree)

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
                arr = as_array(v)
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
    def _executable(self, arrays: Sequence[np.ndarray], sig: Signature | None = None) -> Executable:
        sig = signature_of(arrays) if sig is None else sig
        exe = self._cache.get(sig)
        if exe is None:
            with _internal_errors(f"compiling {self.name} for {_fmt_sig(sig)}"), gc_pause.paused():
                exe = self._from_disk(sig)
                if exe is None:
                    if hasattr(self.backend, "prepare"):  # (runtime.kept_reserve)
                        self.backend.prepare(self.constants)
                    result = self._optimise(sig)
                    compiled = self._compile(result.program)
                    exe = Executable(self, result.program, result, compiled, result.timings)
                    self._to_disk(sig, exe)
            self._cache.put(sig, exe)
        return exe

    def _compile(self, program: Program | StoredProgram) -> Compiled:
        """``backend.compile`` (a :class:`StoredProgram` only where it ``compiles_stored``);
        out of memory there (a GPU backend allocates at load) is a :class:`ShapeError`."""
        try:
            return self.backend.compile(program)  # type: ignore[arg-type]
        except MemoryError:
            from ..runtime.kernel_cache import StoredProgram

            refs = program.summary.refs if isinstance(program, StoredProgram) else program.root.refs
            parts = [(f"'{r.into}' {r.shape.dtype}{r.shape.sizes}", _nbytes(r)) for r in refs]
            raise out_of_memory(f"compiling {self.name}", parts, "an allocation failed") from None

    def _optimise(self, sig: Signature) -> PipelineResult:
        """Bind, lower and run the target's pipeline (no backend compile)."""
        from ..passes import manager

        return manager.run_pipeline(
            self.lowered(sig), self.target.passes, verify_all=verify_all(), choices=self._choices()
        )

    def lowered(self, sig: Signature) -> Program:
        """The program of signature ``sig`` (of the parameters a call passes), lowered."""
        from ..tile.bind import bind
        from ..tile.lower import lower

        with phase("bind + lower"):
            binding = bind(self.ast, self._every_signature(sig))
            return lower(self.ast, binding, self.name, frozenset(self.constants))

    def _choices(self) -> dict[str, Any]:
        """The tuning database's choices for this target (``{}``: none, or not asked
        for; only backends with a disk cache are tuned)."""
        if not self.tuned or self.backend.describe() is None or not self.target.pipeline:
            return {}
        from ..runtime.tuning_db import choices_for

        with phase("tuning database"):
            return choices_for(self.target, self.backend.cache_dir)

    def _every_signature(self, sig: Signature) -> Signature:
        """``sig`` (of the parameters a call passes) with the constants' in place."""
        given = iter(sig)
        fixed = {k: signature_of([v])[0] for k, v in self.constants.items()}
        return tuple(fixed[p] if p in fixed else next(given) for p in self.every)

    # A backend with a disk cache (``describe()`` is not None) also caches the
    # optimised program per (source, signature, target), so a warm start skips
    # lowering and passes.
    def _disk_key(self, sig: Signature) -> str | None:
        described = self.backend.describe()
        if described is None:
            return None
        from ..runtime.kernel_cache import PROGRAM_FORMAT_VERSION, cache_key, compiler_fingerprint
        from ..runtime.tuning_db import choices_digest

        # the choices the program was optimised with: a tune changes the key
        target = self.target.fingerprint()
        digest = choices_digest(self._choices())
        if digest:
            target += f"\0tuned={digest}"
        every = self._every_signature(sig)
        consts = sorted(self.constants)  # which parameters are const (not their values)
        text = (
            f"{self.source}\0{self.name}\0{every!r}\0{consts}\0{target}\0{compiler_fingerprint()}"
            f"\0programs={PROGRAM_FORMAT_VERSION}"
        )
        return cache_key(text, described)

    def _from_disk(self, sig: Signature) -> Executable | None:
        key = self._disk_key(sig)
        if key is None:
            return None
        from ..ir.parser import parse as parse_ir
        from ..ir.printer import remember
        from ..runtime.kernel_cache import ProgramCache

        with phase("cache read"):
            found = ProgramCache(self.backend.cache_dir).get_stored(key)
        if found is None:
            return None
        if not isinstance(found, str):
            # the program itself is loaded only when asked for (exe.program), or by a
            # backend that needs it to compile
            whole = found if getattr(self.backend, "compiles_stored", False) else found.program
            return Executable(self, found, None, self._compile(whole), [], ir=found.text)
        with phase("parse IR"):
            program = parse_ir(found)
        remember(program, found)
        return Executable(self, program, None, self._compile(program), [], ir=found)

    def _to_disk(self, sig: Signature, exe: Executable) -> None:
        key = self._disk_key(sig)
        if key is not None:
            from ..runtime.kernel_cache import ProgramCache

            with phase("cache write"):  # (written once the first call is done)
                ProgramCache(self.backend.cache_dir).put_later(key, exe.ir, exe.program)

    def lower(self, *args: Any, **kwargs: Any) -> Executable:
        """Specialise for these inputs' shapes and dtypes without running."""
        return self._executable(self._arrays(args, kwargs))

    def __call__(
        self, *args: Any, out: Any = None, **kwargs: Any
    ) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run on NumPy arrays; ``out=`` (an array, or a tuple for several outputs)
        receives the results in place and is returned."""
        last = self._last() if self._last is not None and not kwargs else None
        if last is not None:  # the last call again: Executable.fast_call
            results = last.fast_call(args, out)
            if results is not None:
                return results
        arrays = last._exact_arrays(args) if last is not None else None
        exe, sig = last, None
        if last is None or arrays is None:
            arrays = self._arrays(args, kwargs)
            exe, sig = None, signature_of(arrays)
        with gc_pause.paused(sig is not None and self._cache.get(sig) is None):  # new: one compile
            if exe is None:
                exe = self._executable(arrays, sig)
                self._last = weakref.ref(exe)
            named = dict(zip(self.params, arrays))
            return self._results(exe.run_named(named, exe.out_arrays(out)))


def as_array(value: Any) -> np.ndarray:
    """``value`` as a NumPy array: an object with ``__dlpack__`` (a CPU torch
    tensor, say) through ``np.from_dlpack``, sharing its memory (no copy);
    anything else through ``np.asarray``.  A DLPack tensor NumPy cannot view (on
    another device) is an error saying so."""
    if isinstance(value, np.ndarray) or not hasattr(value, "__dlpack__"):
        return np.asarray(value)
    try:
        return np.from_dlpack(value)
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        raise ShapeError(
            f"a {type(value).__name__} that NumPy cannot view through DLPack ({exc}): "
            "stripeml's inputs are host memory (move the tensor to the CPU first)"
        ) from None


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
    """An executable's bytes in memory: its temporaries and results (bounding its arena)."""
    return sum(_nbytes(r) for r in exe.root_refs if r.dir != "in")


def reversed_axes(src: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
    """For frontends laying out constants (weights): a new contiguous ``(C, B, A)``
    array ``out[c, b, a] = src[a, b, c] * scale[a]`` (no factor without
    ``scale``) from an ``(A, B, C)`` one, in native code on the host (see
    :mod:`stripeml.runtime.native_layout`).  Read-only, and so is any view of it
    (a reshape): :func:`compile` binds it as a constant without copying it (a
    writable view, a transposed ``Gemm`` weight's reshape, was copied again,
    8 MB for ResNet-50's classifier, into fresh pages)."""
    from ..runtime import native_layout
    from ..runtime.provenance import note_derived

    out = native_layout.reversed_axes(src, scale)
    out.setflags(write=False)
    note_derived(out, "reversed_axes/1", src, scale)  # (runtime/provenance.py)
    return out


def host_array(shape: Sequence[int], dtype: Any, populate: bool = True) -> np.ndarray:
    """For frontends reading weights: a new uninitialised C-contiguous array for the
    caller to write whole at once (its pages mapped in one call; with
    ``populate=False`` when the caller calls :func:`populate_array`, from the
    thread that writes it), a large one without transparent huge pages
    (:func:`stripeml.runtime.host.fresh_array`)."""
    from ..runtime.host import fresh_array

    return fresh_array(shape, dtype, populate=populate)


def populate_array(arr: np.ndarray) -> None:
    """For frontends reading weights: map the pages of a :func:`host_array` made with
    ``populate=False`` in one call, before writing it whole."""
    from ..runtime.host import populate

    populate(arr)


def note_file_arrays(
    fd: int, before: os.stat_result, arrays: list[tuple[np.ndarray, int]], keep: bool = False
) -> None:
    """For frontends reading weights: each ``(array, offset)`` of ``arrays`` holds
    the bytes of the open file ``fd`` from ``offset`` on, read since ``os.fstat``
    gave ``before``; the disk cache then names them by the file's identity rather
    than by hashing them (:mod:`stripeml.runtime.provenance`), and with ``keep``
    keeps a copy of them for :func:`weights_copy` (:mod:`stripeml.runtime.weight_copies`)."""
    from ..runtime.provenance import note_file

    if note_file(fd, before, arrays) and keep:
        from ..runtime.kept_layouts import in_background
        from ..runtime.weight_copies import store_copy

        in_background(store_copy, before, list(arrays), after_compiles=True)


def weights_copy(st: os.stat_result) -> Any:
    """For frontends reading weights: the disk cache's copy of the weights of the
    model file whose ``os.fstat`` is ``st`` (its ``view(offset, n)``: that file's
    bytes, mapped read-only), or None (:mod:`stripeml.runtime.weight_copies`)."""
    from ..runtime.weight_copies import open_copy

    return open_copy(st)


#: The disk cache's small records for frontends, folder -> (entry magic, label):
#: the ONNX models that validated (``onnx/validated.py``), folded constants
#: (``onnx/folding.py``) and shorter lengths' masks (``onnx/lengths_memo.py``).
RECORDS = {
    "models": (b"STRPMLM\0", "model cache"),
    "folds": (b"STRPMLF\0", "fold cache"),
    "lengths": (b"STRPMLL\0", "length cache"),
}


def remembered(folder: str) -> Remembered:
    """The :class:`~stripeml.runtime.cache_store.Remembered` of ``folder``."""
    from ..runtime.cache_store import Remembered

    magic, label = RECORDS[folder]
    return Remembered(folder, magic, label)


@lru_cache(maxsize=1)
def interpreter_fingerprint() -> str:
    """What a Tile program's results on the interpreter depend on besides its
    source and inputs: the compiler's sources (frontend, IR, analysis, passes,
    targets) and the interpreter's, and the NumPy it computes with (its version
    and the CPU features its kernels dispatch on: a transcendental function's
    last bit may differ between them)."""
    import hashlib
    import importlib
    from pathlib import Path

    from ..runtime import kernel_cache

    try:
        umath = importlib.import_module("numpy._core._multiarray_umath")
    except ImportError:  # pragma: no cover - NumPy 1.x
        umath = importlib.import_module("numpy.core._multiarray_umath")
    features = getattr(umath, "__cpu_features__", {})
    numpy_text = f"numpy {np.__version__} {sorted(k for k, on in features.items() if on)}"
    h = hashlib.sha256(kernel_cache.compiler_fingerprint().encode())
    h.update(numpy_text.encode() + b"\0")
    for path in sorted((Path(kernel_cache.__file__).parent / "interp").glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def __getattr__(name: str) -> Any:
    """``ProfileRow`` and ``Work`` (:mod:`stripeml.analysis.roofline`), loaded when asked for."""
    if name in ("ProfileRow", "Work"):
        from ..analysis import roofline

        return getattr(roofline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
