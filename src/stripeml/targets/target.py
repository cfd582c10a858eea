"""What a target is once its file is loaded: plain, frozen, hashable data.

A :class:`Target` holds the hardware facts of one machine (threads, vector
width, memory levels, GPU limits) and its pass pipeline as
:class:`PassSpec` entries, with every ``auto`` value and ``$reference``
already resolved.  :mod:`.loader` builds one from a TOML file
(``docs/targets.md``); :meth:`Target.passes` builds the pass objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The backends a target file may name (``backend = "..."``).
BACKENDS = ("interp", "cpu", "opencl", "cuda")

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
    """One pipeline entry: a registered pass name and its options, in file order."""

    name: str
    options: tuple[tuple[str, OptionValue], ...] = ()

    def build(self) -> object:
        """The pass object (``stripeml.passes.make_pass(name, **options)``)."""
        from ..passes import make_pass

        return make_pass(self.name, **dict(self.options))

    def describe(self) -> str:
        """``autotile(memory='L1', fraction=0.25)``."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.options)
        return f"{self.name}({args})"


@dataclass(frozen=True)
class Target:
    """A machine and its pipeline (see ``docs/targets.md``).

    ``memories`` run from the slowest/largest (``DRAM``) to the fastest.  The
    GPU facts are ``None`` on targets that do not set them.  ``source`` is the
    file it came from (for messages; not part of equality).
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
    # Fuse a multiply feeding an add into one FMA (one rounding instead of two).
    fma: bool = False
    description: str = ""
    source: str = field(default="", compare=False)

    def passes(self) -> list:
        """The pipeline's pass objects, in order."""
        return [spec.build() for spec in self.pipeline]

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
