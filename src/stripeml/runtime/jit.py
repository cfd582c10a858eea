"""llvmlite plumbing for the CPU backend: host target, O3 pipeline, objects, MCJIT.

Everything that touches LLVM goes through this module:

* :func:`host` describes the machine (triple, CPU name, feature string, LLVM
  version; the CPU comes from :func:`stripeml.targets.host.detect_cpu`, which
  also decides the target's ``auto`` facts); the kernel cache keys on
  :func:`target_description`.
* :func:`optimize` parses LLVM IR text and runs the new pass manager's O3
  pipeline with loop and SLP vectorisation on, for the host CPU.
* :func:`emit_object` turns an optimised module into ELF object code (bytes,
  what the disk cache stores).
* :func:`load_object` puts object code into a fresh MCJIT engine and returns a
  :class:`LoadedObject` that resolves kernel addresses.  The engine owns the
  executable memory: it lives exactly as long as the ``LoadedObject`` (the
  compiled program holds it), and is freed with it.

Target machine choices.  One host ``TargetMachine`` (CPU name and features from
LLVM's host detection, opt level 3) optimises and emits every module.  It uses
``reloc="default"`` (static on Linux) and ``codemodel="jitdefault"`` (the large
code model on 64-bit hosts), the combination MCJIT's RuntimeDyld links without
GOT or PLT stubs: code and constant pools may land anywhere in the address
space.  ``jit=True`` because the objects are only ever loaded in-process.
Each engine takes ownership of its target machine, so every engine gets its
own (cheap) copy with the same settings.

LLVM's global context is not thread-safe; one re-entrant lock serialises
every call into it.  ``STATS`` counts parses, optimisations, emissions and
loads of program code so tests can tell a cache hit (no parse, no optimise)
from a miss; the runtime's own support code (the native thread pool, compiled
once per process) passes ``count=False``.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING

import llvmlite
import llvmlite.binding as llvm

from ..errors import InternalError
from ..phases import phase
from ..targets.host import detect_cpu
from . import llvm_worker, perf_map

#: How many times each LLVM step ran in this process (tests read it).
STATS: Counter[str] = Counter()

_LOCK = threading.RLock()
#: The default optimisation level (modules that do not ask for another).
OPT_LEVEL = 3
_OPT_LEVEL = OPT_LEVEL
_RELOC = "default"
_CODEMODEL = "jitdefault"

#: The C type of every kernel: ``void kernel(void **buffers, int64 start, int64 end)``.
KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
if TYPE_CHECKING:
    # A kernel as Python calls it: (the buffer pointer array, first, end of the range).
    Kernel = Callable[[ctypes.Array[ctypes.c_void_p], int, int], None]


@dataclass(frozen=True, slots=True)
class Host:
    """What LLVM knows about the machine it runs on."""

    triple: str
    cpu: str
    features: str  # LLVM's "+avx2,-avx512f,..." string, sorted
    llvm_version: str

    def has(self, feature: str) -> bool:
        return f"+{feature}" in self.features.split(",")


@lru_cache(maxsize=1)
def host() -> Host:
    """Initialise the native target (once) and describe the host."""
    with _LOCK:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        cpu = detect_cpu()  # the same description the target's `auto` facts come from
        version = ".".join(map(str, llvm.llvm_version_info))
        return Host(cpu.triple, cpu.name, cpu.feature_string, version)


def target_description() -> str:
    """The host and the LLVM settings as one string: part of the kernel-cache key."""
    h = host()
    return (
        f"llvm={h.llvm_version} llvmlite={llvmlite.__version__} triple={h.triple} "
        f"cpu={h.cpu} features={h.features} opt={_OPT_LEVEL} reloc={_RELOC} "
        f"codemodel={_CODEMODEL} vectorize=loop,slp"
    )


def _new_target_machine(opt: int = _OPT_LEVEL) -> llvm.TargetMachine:
    h = host()
    return llvm_worker.machine(h.triple, h.cpu, h.features, opt, _RELOC, _CODEMODEL)


def machine_settings() -> tuple[str, str, str, str, str]:
    """``(triple, cpu, features, reloc, codemodel)``: what a helper process
    (:mod:`.llvm_pool`) needs to emit the objects this process would."""
    h = host()
    return (h.triple, h.cpu, h.features, _RELOC, _CODEMODEL)


@cache
def target_machine(opt: int = _OPT_LEVEL) -> llvm.TargetMachine:
    """The process-wide host target machine that optimises and emits the modules
    of optimisation level ``opt``."""
    with _LOCK:
        return _new_target_machine(opt)


def parse(ir_text: str, count: bool = True, opt: int = _OPT_LEVEL) -> llvm.ModuleRef:
    """Parse and verify LLVM IR for the host; LLVM's message becomes an InternalError."""
    tm = target_machine(opt)
    with _LOCK, phase("llvm parse"):
        STATS["parse"] += count
        try:
            return llvm_worker.parse(ir_text, tm)
        except RuntimeError as exc:
            raise InternalError(f"the generated LLVM IR is invalid: {exc}") from exc


def optimize(ir_text: str, count: bool = True, opt: int = _OPT_LEVEL) -> llvm.ModuleRef:
    """Parse ``ir_text`` and run the ``O<opt>`` pipeline (loop + SLP vectorisation
    from O2) on it."""
    module = parse(ir_text, count, opt)
    tm = target_machine(opt)
    with _LOCK, phase("llvm optimise"):
        STATS["optimize"] += count
        llvm_worker.optimise(module, tm, opt)
    return module


def emit_object(module: llvm.ModuleRef, count: bool = True, opt: int = _OPT_LEVEL) -> bytes:
    """Native object code (ELF on Linux) for an optimised module."""
    tm = target_machine(opt)
    with _LOCK, phase("llvm emit"):
        STATS["emit"] += count
        return llvm_worker.emit(module, tm)


def compile_ir(ir_text: str, count: bool = True, opt: int = _OPT_LEVEL) -> bytes:
    """``emit_object(optimize(ir_text))`` at optimisation level ``opt``."""
    return emit_object(optimize(ir_text, count, opt), count, opt)


class LoadedObject:
    """Object code linked into its own MCJIT engine; frees the code when collected.
    ``object_code`` is one object or several, linked together (a wrapper in
    one may call a body in another).

    ``bodies``: the symbol each object after the first defines (a kernel body,
    :mod:`stripeml.codegen.llvm`).  A body another engine of this process holds
    already is not linked again: its address is given to the linker
    (``llvm.add_symbol``) and this object keeps that engine alive.  A second
    input shape of a model links the bodies it shares with the first (a
    transformer's at another sequence length: 15 of 17) without loading them.
    A body is named by its code (its symbol hashes its canonical kernel), so it
    is the same code wherever it was loaded; an engine resolves the symbols its
    own objects define before any given from outside, so a body loaded again
    (its engine gone) is its own."""

    def __init__(
        self,
        object_code: bytes | Sequence[bytes],
        count: bool = True,
        bodies: Sequence[str] = (),
        labels: Mapping[str, str] | None = None,
    ) -> None:
        objects = [object_code] if isinstance(object_code, bytes) else list(object_code)
        with _LOCK:
            STATS["load"] += count
            self._uses: list[LoadedObject] = []  # engines holding bodies this one calls
            self._held: dict[str, int] = {}  # their bodies' addresses
            linked: list[str] = []  # the bodies this engine loads itself
            if bodies:
                keep = objects[:1]
                for symbol, obj in zip(bodies, objects[1:]):
                    held = _BODIES.get(symbol)
                    engine = held[0]() if held is not None else None
                    if engine is None or held is None:
                        keep.append(obj)
                        linked.append(symbol)
                        continue
                    llvm.add_symbol(symbol, held[1])
                    self._held[symbol] = held[1]
                    if all(engine is not e for e in self._uses):
                        self._uses.append(engine)
                objects = keep
            objects = [o for o in objects if o]  # (a program with no code of its own)
            # MCJIT needs a module to start from; an empty one with the host triple.
            empty = llvm.parse_assembly("")
            empty.triple = host().triple
            self._engine = llvm.create_mcjit_compiler(empty, _new_target_machine())
            self._object_code = objects  # keep the bytes alive as long as the engine
            self._objects = [llvm.ObjectFileRef.from_data(o) for o in objects]
            for obj in self._objects:
                self._engine.add_object_file(obj)
            self._engine.finalize_object()
            mine = weakref.ref(self)
            for symbol in linked:
                addr = self._engine.get_function_address(symbol)
                if addr:
                    _BODIES[symbol] = (mine, addr)
            if perf_map.enabled():
                perf_map.record(objects, self._engine.get_function_address, labels)

    def address(self, symbol: str) -> int:
        """The address of ``symbol`` (a body another engine holds included); an
        InternalError when neither has it."""
        with _LOCK:
            addr = self._engine.get_function_address(symbol) or self._held.get(symbol, 0)
        if not addr:
            raise InternalError(f"kernel symbol {symbol!r} is missing from the object code")
        return addr

    def kernel(self, symbol: str) -> Kernel:
        """The kernel ``symbol`` as a ctypes function (calls release the GIL)."""
        return KERNEL_TYPE(self.address(symbol))


#: The kernel bodies linked in this process: symbol -> (the engine holding it,
#: weakly; its address).  An entry whose engine is gone is replaced by the next
#: engine that loads the body.
_BODIES: dict[str, tuple[weakref.ref[LoadedObject], int]] = {}


def load_object(
    object_code: bytes | Sequence[bytes],
    count: bool = True,
    bodies: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
) -> LoadedObject:
    """Link ``object_code`` into a fresh engine (no parsing, no optimisation);
    ``bodies``: the symbols of the objects after the first (see
    :class:`LoadedObject`: those another engine holds are not loaded again);
    ``labels``: symbol -> a name for ``STRIPEML_PERF_MAP``'s map
    (:mod:`.perf_map`), which lists the functions of what it loads."""
    return LoadedObject(object_code, count, bodies, labels)
