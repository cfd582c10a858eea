"""``target="cpu"``: Stripe -> LLVM IR -> native code, run on a thread pool.

:class:`CpuBackend` compiles a program once per signature:

1. key = :func:`~stripeml.runtime.kernel_cache.cache_key` of the program text
   and the codegen options + host description;
2. on a disk-cache hit, the stored object code is linked straight into an
   MCJIT engine: no code generation, no LLVM parsing or optimisation;
3. on a miss, :func:`generate_module` (the code generator) builds the LLVM IR
   and its metadata (:mod:`stripeml.codegen.cpu_abi`): one body per distinct
   kernel (kernels equal up to names share one, :mod:`stripeml.analysis.canonical`)
   and a module of wrappers, one per kernel step, that call them.  Bodies
   already in the cache's ``bodies/`` folder (from any program) are not
   generated again; the others are optimised (O3, copies O1) and emitted on
   every core (:mod:`.llvm_pool`), and the cache stores each body and the
   program's entry (the wrappers' object and the bodies it links).

:class:`CpuCompiled` runs the steps in order.  A kernel whose metadata says it
is ``splittable`` and whose ``work`` is worth it runs as contiguous chunks of
its parallel index on the process's native thread pool
(:mod:`.native_pool`: worker threads that live in native code and claim
chunks with an atomic compare-and-swap; the calling thread claims chunks too,
so a hand-off costs microseconds, not the 0.1-0.2 ms of a Python pool).
Each run of consecutive kernels goes to native code in one call
(:class:`.native_pool.Batch`: ``stripeml_pool_batch`` calls each kernel whole
or splits it on the pool; on one thread, a pool of no workers), so no Python
runs between kernels;
while profiling (``step_seconds``) each batch stamps the clock after each kernel.
Root-level ``special`` statements run on the host (:func:`.host.run_root_special`:
``copy``/``reshape``/``gather`` as NumPy copies, ``scatter``/``scatter_nd``/``topk``
with the interpreter's whole-array functions on the buffers, others with the
interpreter's implementations).

**Temporaries** (the root's ``none`` buffers) are allocated once per concurrent
call and reused by later calls.  Those the ``place`` pass gave an ``offset``
(the CPU pipeline places every root temporary) are views into one zeroed,
64-byte aligned byte arena per location, of ``max(offset + size)`` bytes, so
buffers never live at the same time share memory; the others get arrays of
their own.  A reused temporary starts with whatever the previous call left in
its bytes, possibly another buffer's data: that is harmless for the buffers
every statement writes before reading, and the few whose initial contents
may be read (``Place.initial_reads``: elements read before any statement wrote
them) are zeroed again before each reuse, so every call sees what the
interpreter sees.  Fresh results start at zero too, except those the program
writes all over before reading (``analysis.liveness.written_outputs``).

Inside :func:`.omp_team.team` the kernels are split over another library's
OpenMP team (PyTorch's) instead of the native pool's workers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar

from ..codegen.cpu_abi import Body, CpuModule, KernelInfo, Step
from ..ir.nodes import Block, Program
from ..ir.printer import format as format_ir
from ..phases import phase
from ..targets.host import detect_threads, detect_vector_width
from . import jit, kept_reserve, llvm_pool, native_pool, perf_map, shared_constants
from .kernel_cache import Entry, KernelCache, StoredProgram, cache_key
from .pending_writes import put_later
from .program_facts import Liveness

if TYPE_CHECKING:
    import numpy as np

    from ..codegen.llvm import Known
    from ..targets import Target

from .chunking import (  # re-exported: the backend's public names live in this module
    CHUNKS_PER_THREAD,
    FEW_CHUNKS,
    LONG_CHUNK_WORK,
    MIN_WORK_PER_CHUNK,
    chunk_bounds,
)
from .cpu_run import CpuCompiled

__all__ = [
    "BODY_FOLDER",
    "CHUNKS_PER_THREAD",
    "FEW_CHUNKS",
    "GLUE_OPT_LEVEL",
    "LONG_CHUNK_WORK",
    "MIN_WORK_PER_CHUNK",
    "CpuBackend",
    "CpuCompiled",
    "CpuOptions",
    "chunk_bounds",
    "generate_module",
]


def generate_module(
    program: Program,
    vector_width: int,
    fma: bool = False,
    known: Known | None = None,
    on_body: Callable[[Body], None] | None = None,
    vector_registers: int = 16,
    int8_dot: bool = False,
) -> CpuModule:
    """The code generator (imported lazily; tests replace this function).
    ``known``: finds the bodies compiled before (they are not generated again);
    ``on_body``: told of each body as it is generated."""
    from ..codegen.llvm import generate

    return generate(
        program,
        vector_width=vector_width,
        fma=fma,
        known=known,
        on_body=on_body,
        vector_registers=vector_registers,
        int8_dot=int8_dot,
    )


@dataclass(frozen=True)
class CpuOptions:
    """Everything the CPU backend is told: frozen, hashable, one per target.

    ``threads``: kernels run on this many threads (default: the CPUs this
    process may use).  ``vector_width``: f32 lanes of the generated vector code
    (default: the host's widest unit).  ``vector_registers``: how many the ISA
    has (a register tile holds at most 4 fewer accumulators).  ``fma``: contract a multiply feeding an
    add into an FMA.  ``int8_dot``: ``dot4`` aggregated by addition becomes the
    CPU's integer dot-product instruction.  ``min_chunk_work`` / ``chunks_per_thread``: when and how
    finely a kernel is split over threads (see :data:`MIN_WORK_PER_CHUNK`,
    :data:`CHUNKS_PER_THREAD`).  ``cache_dir``: the kernel cache root (``None``:
    read from the environment at each compile, see
    :func:`~stripeml.runtime.kernel_cache.default_cache_dir`).
    """

    threads: int = field(default_factory=detect_threads)
    vector_width: int = field(default_factory=detect_vector_width)
    fma: bool = False
    vector_registers: int = 16
    int8_dot: bool = False
    min_chunk_work: int = MIN_WORK_PER_CHUNK
    chunks_per_thread: int = CHUNKS_PER_THREAD
    cache_dir: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        if self.threads < 1 or self.vector_width < 1:
            raise ValueError(f"threads and vector_width must be >= 1, got {self}")

    @classmethod
    def from_target(cls, target: Target) -> CpuOptions:
        """The options a ``backend = "cpu"`` target file's facts give."""
        return cls(
            threads=target.threads,
            vector_width=target.vector_width,
            fma=target.fma,
            vector_registers=target.vector_registers,
            int8_dot=target.int8_dot,
        )


@dataclass(frozen=True)
class CpuBackend:
    """The host CPU through LLVM, configured by one :class:`CpuOptions`.

    The kernel cache keys on the final Stripe text and :meth:`describe`, so
    two pipelines that produce the same program share object code, and any
    pipeline change that changes the program gets its own entry.
    """

    options: CpuOptions = field(default_factory=CpuOptions)
    name: ClassVar[str] = "cpu"

    @property
    def cache_dir(self) -> str | os.PathLike[str] | None:
        return self.options.cache_dir

    def describe(self) -> str:
        """Everything besides the program that the object code depends on."""
        o = self.options
        return (
            f"cpu vector_width={o.vector_width} vector_registers={o.vector_registers} "
            f"fma={o.fma} int8_dot={o.int8_dot}; {jit.target_description()}"
        )

    #: :meth:`compile` takes a :class:`~.kernel_cache.StoredProgram` as well: a warm
    #: start then loads the object code without loading the program.
    compiles_stored: ClassVar[bool] = True

    def prepare(self, constants: Mapping[str, np.ndarray]) -> None:
        """A program with these constant parameters is about to be optimised and
        compiled in this thread: map pages for its layouts meanwhile (:mod:`.kept_reserve`)."""
        nbytes = sum(a.nbytes for a in constants.values())
        idle = nbytes >= kept_reserve.MIN_BYTES and shared_constants.idle()
        if idle and self.options.threads >= 2 and (os.cpu_count() or 1) >= 2:
            kept_reserve.start(nbytes * 3 // 2)  # (its layouts: 0.7-1.5x that)
        else:
            kept_reserve.claim()  # (an unclaimed one of an earlier compile is dropped)

    def compile(self, program: Program | StoredProgram) -> CpuCompiled:
        """Object code from the disk cache, or generated, optimised and stored.

        Two levels of cache: the program's entry (its metadata, naming the
        bodies it links, and the object of any code of its own) and one entry per distinct kernel
        body (``bodies/``), shared by every program that has that kernel.  A
        :class:`~.kernel_cache.StoredProgram` (read from the program cache) is
        loaded only if its object code must be generated again."""
        o = self.options
        reserve = kept_reserve.claim()
        cache = KernelCache(o.cache_dir)
        body_cache = KernelCache(o.cache_dir, BODY_FOLDER)
        described = self.describe()
        stored: StoredProgram | None = None
        whole: Program | None = None
        with phase("cache read"):
            if isinstance(program, StoredProgram):
                stored, text = program, program.text
            else:
                whole, text = program, format_ir(program)
            key = cache_key(text, described)
            entry = cache.get(key)
            bodies = _cached_bodies(body_cache, entry, described) if entry is not None else None
        if entry is None or bodies is None:
            if whole is None:
                assert stored is not None
                whole = stored.program
            entry, bodies = self._generate(whole, cache, key, body_cache, described)
        code = "\n".join([entry.module.llvm_ir, *(b.module.llvm_ir for b in bodies)]).lstrip("\n")
        with phase("load"):
            loaded = jit.load_object(
                [entry.object_code, *(b.object_code for b in bodies)],
                bodies=[b.symbol for b in entry.module.bodies],
                labels=_labels(entry.module) if perf_map.enabled() else None,
            )
        if whole is not None:
            facts = Liveness(whole, key, o.cache_dir)
        else:
            assert stored is not None
            facts = Liveness(
                lambda: stored.program,
                key,
                o.cache_dir,
                names=frozenset(r.into for r in stored.summary.refs),
            )
        return CpuCompiled(
            entry.module,
            loaded,
            o.threads,
            program=program,
            min_chunk_work=o.min_chunk_work,
            chunks_per_thread=o.chunks_per_thread,
            code=code,
            facts=facts,
            reserve=reserve,
        )

    def _generate(
        self,
        program: Program,
        cache: KernelCache,
        key: str,
        body_cache: KernelCache,
        described: str,
    ) -> tuple[Entry, list[Entry]]:
        """Generate the program's code, compile the bodies not in ``body_cache``
        (on every core, :mod:`.llvm_pool`) and store what was made."""
        o = self.options
        found: dict[str, Entry] = {}

        def known(symbol: str) -> KernelInfo | None:
            body = body_cache.get(_body_key(symbol, described))
            if body is None or len(body.module.steps) != 1 or body.module.steps[0].kernel is None:
                return None
            found[symbol] = body
            return body.module.steps[0].kernel

        kernels = sum(1 for s in program.root.stmts if isinstance(s, Block))
        at: dict[str, int] = {}  # body symbol -> its place in the stream
        with llvm_pool.Stream(kernels) as stream:  # bodies compile as they are generated
            # the thread pool's own code, which the first run needs: a helper compiles
            # it while this thread generates the bodies
            pool_code = native_pool.code_to_compile() if o.threads > 1 else None
            pool_at = stream.submit(pool_code[0], jit.OPT_LEVEL, count=False) if pool_code else -1

            def made(body: Body) -> None:
                at[body.symbol] = stream.submit(body.llvm_ir or "", body.opt)

            with phase("codegen"):
                module = generate_module(
                    program,
                    o.vector_width,
                    o.fma,
                    known=known,
                    on_body=made,
                    vector_registers=o.vector_registers,
                    int8_dot=o.int8_dot,
                )
            todo = [b for b in module.bodies if b.llvm_ir is not None]
            for b in todo:
                if b.symbol not in at:  # a generator that does not report its bodies
                    made(b)
            # steps the generator gave code of their own (none: they gather)
            glue = stream.submit(module.llvm_ir, GLUE_OPT_LEVEL) if module.llvm_ir else -1
            objects = stream.finish()
        with phase("cache write"):
            if pool_code is not None:  # (the first run looks it up: stored now)
                native_pool.store_code(*pool_code, objects[pool_at])
            writes: list[tuple[KernelCache, str, Entry]] = []
            for body in todo:
                obj = objects[at[body.symbol]]
                stored = Entry(obj, CpuModule(body.llvm_ir or "", (), (Step(kernel=body.info),)))
                writes.append((body_cache, _body_key(body.symbol, described), stored))
                found[body.symbol] = stored
            listed = tuple(replace(b, llvm_ir=None) for b in module.bodies)
            entry = Entry(objects[glue] if glue >= 0 else b"", replace(module, bodies=listed))
            # the program's entry now (an unwritable cache is reported to this
            # call, and nothing more is tried), its bodies' on a thread
            if cache.put(key, entry):
                put_later(writes)
        return entry, [found[b.symbol] for b in module.bodies]


#: The kernel bodies' folder in the cache root (beside ``cpu/``, the programs').
BODY_FOLDER = "bodies"
#: The optimisation level of a module of steps' own functions (a generator's that
#: gives steps no gather: the tests' hand-written kernels).  When the code generator
#: made one wrapper per step, O0: 12 ms for ResNet-50's 122 wrappers, O1 78 ms.
GLUE_OPT_LEVEL = 0


def _labels(module: CpuModule) -> dict[str, str]:
    """Symbol -> Stripe block name of a program's kernels, for :mod:`.perf_map`:
    a body's are those of the steps that call it (the first, and how many
    more: bodies are shared by kernels of one form)."""
    callers: dict[str, list[str]] = {}
    for s in module.steps:
        if s.kernel is not None:
            callers.setdefault(s.kernel.symbol, []).append(s.kernel.block_name)
    return {
        body: who[0] + (f" +{len(who) - 1} more" if len(who) > 1 else "")
        for body, who in callers.items()
    }


def _body_key(symbol: str, described: str) -> str:
    """The disk-cache key of a kernel body (its symbol hashes its canonical text)."""
    return cache_key(f"body {symbol}", described)


def _cached_bodies(cache: KernelCache, entry: Entry, described: str) -> list[Entry] | None:
    """The bodies ``entry`` links, from the cache; None if any is missing."""
    out = []
    for body in entry.module.bodies:
        found = cache.get(_body_key(body.symbol, described))
        if found is None:
            return None
        out.append(found)
    return out
