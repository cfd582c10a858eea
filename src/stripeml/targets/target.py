"""What a target is once its file is loaded: plain, frozen, hashable data.

A :class:`Target` holds the hardware facts of one machine (threads, vector
width, memory levels, GPU limits) and its pass pipeline, with every ``auto``
value and ``$reference`` already resolved.  Each pipeline entry is a
:class:`PassSpec`: the pass name and options as the file wrote them, and the
pass object built from them, once, when the file was loaded (building it is
what validates the options).  :mod:`.loader` builds targets from TOML files
(``docs/targets.md``); :data:`INTERP` is the bare interpreter, which has no
file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..passes.registry import Pass
    from .host import HostFacts

#: The backends a target file may name (``backend = "..."``).
BACKENDS = ("interp", "cpu", "opencl", "cuda")

#: Backends that run on a GPU-like device and need its work-group facts.
GPU_BACKENDS = ("opencl", "cuda")

OptionValue = object  # bool | int | float | str | tuple of those (TOML arrays)


@dataclass(frozen=True)
class Memory:
    """One memory level; its ``name`` is the location refinements use (``@L2``)."""

    name: str
    size_bytes: int
    line_bytes: int
    bandwidth_gbs: float | None = None


@dataclass(frozen=True)
class PassSpec:
    """One pipeline entry: a registered pass name, its options in file order, and
    the pass object built from them (built here when not given).

    ``deferred`` entries are built on first use of :attr:`pass_` instead: the
    loader defers those of a pipeline it has seen validated before with the same
    resolved options and compiler sources (:func:`.loader.set_validation_memo`),
    so a warm start whose program comes from the disk cache never imports the
    passes at all."""

    name: str
    options: tuple[tuple[str, OptionValue], ...] = ()
    built: Pass | None = field(default=None, compare=False, repr=False)
    deferred: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.built is None and not self.deferred:
            object.__setattr__(self, "built", self._build())

    def _build(self) -> Pass:
        from ..passes.registry import make_pass  # the registry imports every pass

        return make_pass(self.name, **dict(self.options))

    @property
    def pass_(self) -> Pass:
        """The pass object (built now if it was deferred)."""
        if self.built is None:
            from ..errors import StripeError, TargetError

            try:
                built = self._build()
            except (StripeError, TypeError, ValueError) as exc:  # a forged memo entry
                raise TargetError(f"pipeline entry {self.describe()}: {exc}") from None
            object.__setattr__(self, "built", built)
            return built
        return self.built

    def describe(self) -> str:
        """``autotile(memory='L1', fraction=0.25)``."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.options)
        return f"{self.name}({args})"


#: Target fields compiled code does not depend on (or that :meth:`Target.fingerprint`
#: writes otherwise).
_NOT_IN_FINGERPRINT = ("pipeline", "source", "peak_gflops", "host")


@dataclass(frozen=True)
class Target:
    """A machine and its pipeline (see ``docs/targets.md``).

    ``memories`` run from the slowest/largest (``DRAM``) to the fastest (every
    target file declares at least DRAM; :data:`INTERP` declares none).  The
    GPU facts are ``None`` on targets that do not set them;
    ``work_item_strip`` is the accumulators one GPU work-item keeps along a
    vectorised strip (0: one output per work-item).  ``source`` is the file it
    came from (for messages; not part of equality).

    ``peak_gflops`` is the file's float32 compute ceiling for roofline figures
    (``None``: not given; the DRAM level's ``bandwidth_gbs`` is the memory
    one), and ``host`` the :class:`~.host.HostFacts` its ``auto`` values came
    from, which measure the ceilings a ``cpu`` file does not give, when asked
    (:func:`stripeml.runtime.peaks.target_peaks`).  Neither changes compiled
    code: they are left out of :meth:`fingerprint`, and ``host`` out of equality.
    """

    name: str
    backend: str
    threads: int
    vector_width: int
    memories: tuple[Memory, ...]
    pipeline: tuple[PassSpec, ...] = ()
    max_threads_per_group: int | None = None
    subgroup_size: int | None = None
    shared_memory_bytes: int | None = None
    compute_units: int | None = None
    work_item_strip: int = 0
    # Fuse a multiply feeding an add into one FMA (one rounding instead of two).
    fma: bool = False
    # An integer dot-product instruction (uint8 x int8 -> int32) for ``dot4``.
    int8_dot: bool = False
    # Vector registers of the ISA: the code generator's bound on a register tile.
    vector_registers: int = 16
    description: str = ""
    source: str = field(default="", compare=False)
    peak_gflops: float | None = None
    host: HostFacts | None = field(default=None, compare=False, repr=False)

    @property
    def passes(self) -> tuple[Pass, ...]:
        """The pipeline's pass objects, in order (built once, with the target)."""
        return tuple(spec.pass_ for spec in self.pipeline)

    @property
    def dram_gbps(self) -> float | None:
        """The DRAM level's ``bandwidth_gbs`` (the file's memory ceiling), if given."""
        for m in self.memories:
            if m.name == "DRAM":
                return m.bandwidth_gbs
        return None

    def memory(self, name: str) -> Memory:
        """The memory level called ``name`` (``KeyError`` if the target has none)."""
        for m in self.memories:
            if m.name == name:
                return m
        raise KeyError(name)

    @property
    def memory_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.memories)

    def describe_pipeline(self) -> str:
        """The pipeline on one line: ``fuse() -> dce()``."""
        return " -> ".join(s.describe() for s in self.pipeline) or "(no passes)"

    def fingerprint(self) -> str:
        """Every fact and pass option as text: what a compiled program depends on
        besides its source (part of the disk cache's key)."""
        facts = {k: v for k, v in self.__dict__.items() if k not in _NOT_IN_FINGERPRINT}
        # each entry as the file resolved it: the pass objects' defaults come from
        # the pass sources, which the program cache's key hashes beside this
        # (``compiler_fingerprint``), so a deferred pipeline need not be built here
        passes = ", ".join(spec.describe() for spec in self.pipeline)
        return f"{facts!r}; passes=[{passes}]"


#: ``target="interp"``: the reference interpreter with no passes and no file.
INTERP = Target(
    name="interp",
    backend="interp",
    threads=1,
    vector_width=1,
    memories=(),  # it models no memory levels
    description="The reference interpreter: the program as lowered, no passes",
)
