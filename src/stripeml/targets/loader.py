"""Target files' TOML: validate it, resolve ``auto`` and ``$refs``, build the pipeline.

:func:`target_from_toml` turns the text of one file into a :class:`Target`
(finding and caching files is :mod:`.files`).  The format is documented in
``docs/targets.md``.  Every problem raises :class:`~stripeml.errors.TargetError`
naming the file, the key (``memory[1].size``, ``pipeline[2].options.fraction``)
and what is wrong.  ``auto`` values come from :class:`~.host.HostFacts`;
pipeline entries are built with :func:`stripeml.passes.make_pass`, so each
pass validates its own options.

``threads=`` (what ``stripeml.compile(..., threads=)`` passes down) replaces
the file's ``threads`` fact before the pipeline is built, so ``$threads``
references follow.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from ..errors import OptionError, StripeError, TargetError
from .host import GiB, HostFacts, KiB, MiB
from .target import BACKENDS, GPU_BACKENDS, Memory, PassSpec, Target

TARGETS_DIR = Path(__file__).resolve().parent


class ValidationMemo(Protocol):
    """Pipelines validated before (:func:`set_validation_memo`), by their
    description: the passes, resolved options and locations, as text."""

    def seen(self, description: str) -> bool: ...

    def add(self, description: str) -> None: ...


_MEMO: ValidationMemo | None = None
_OWN_PASSES = __name__.rsplit(".", 2)[0] + ".passes."  # "stripeml.passes."


def set_validation_memo(memo: ValidationMemo | None) -> None:
    """Remember validated pipelines in ``memo`` (``None``: validate every load).

    A pipeline the memo has seen is not built at load: its entries are
    :class:`~.target.PassSpec` with ``deferred=True``, built on first use, so
    loading a target does not import the passes (about 40 ms of a warm start).
    The memo must key on the compiler's sources as well, as the runtime's
    (:class:`stripeml.runtime.kernel_cache.ValidatedPipelines`, set by
    ``stripeml.api``) does: a changed pass must be validated again.  The
    structure of the file (keys, types, ``$references``) is checked at every
    load either way."""
    global _MEMO
    _MEMO = memo


_TOP_KEYS = (
    "name",
    "description",
    "backend",
    "threads",
    "vector_width",
    "vector_registers",
    "fma",
    "int8_dot",
    "max_threads_per_group",
    "subgroup_size",
    "shared_memory",
    "compute_units",
    "work_item_strip",
    "peak_gflops",
    "memory",
    "pipeline",
)
_MEMORY_KEYS = ("name", "size", "line", "bandwidth_gbs")
_PIPELINE_KEYS = ("pass", "options")
_GPU_COUNTS = ("max_threads_per_group", "subgroup_size", "compute_units")
_DEFAULT_LINE = 64
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CACHE_NAME = re.compile(r"L([1-9])\Z")
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*\Z")
_UNITS = {
    "": 1,
    "b": 1,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_MEMORY_FACTS = ("size", "line", "bandwidth_gbs")
#: Locations every target has without declaring them: the registers that ``fuse``
#: and ``unroll`` keep accumulators in.
IMPLICIT_LOCATIONS = ("REGISTER",)


def check_threads(threads: object, what: str = "threads") -> int | None:
    """``threads`` as a thread count (``None`` stays ``None``): an integer >= 1,
    else a :class:`TargetError` saying what ``what`` got."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise TargetError(f"{what} must be a positive integer (a thread count), got {threads!r}")
    return threads


def target_from_toml(
    text: str,
    *,
    source: str = "<target>",
    host: HostFacts | None = None,
    default_name: str = "target",
    threads: int | None = None,
) -> Target:
    """A :class:`Target` from TOML text; ``source`` names it in error messages;
    ``threads`` replaces the ``threads`` fact (``None``: the file's)."""
    threads = check_threads(threads)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TargetError(f"{source}: not valid TOML: {exc}") from None
    return _Reader(source, host or HostFacts(), threads).target(data, default_name)


def parse_size(value: object) -> int:
    """Bytes from ``4096``, ``"32 KiB"``, ``"1.5 MiB"`` or ``"16 GB"`` (SI units are 10^n).

    Raises ``ValueError`` saying what is wrong.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"must be a number of bytes or a string like '32 KiB', got {_kind(value)}")
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE.match(value)
        unit = _UNITS.get(m[2].lower()) if m else None
        if m is None or unit is None:
            raise ValueError(
                f"'{value}' is not a size (write bytes, or a number with B, KiB, MiB, GiB, "
                "TiB, kB, MB, GB or TB)"
            )
        exact = float(m[1]) * unit
        if exact != int(exact):
            raise ValueError(f"'{value}' is not a whole number of bytes")
        n = int(exact)
    if n < 0:
        raise ValueError(f"must not be negative, got {n}")
    return n


# --------------------------------------------------------------------------
# Validation


class _Reader:
    """Turns the TOML data of one file into a :class:`Target`, or a precise error."""

    def __init__(self, source: str, host: HostFacts, threads: int | None = None) -> None:
        self.source = source
        self.host = host
        self.threads = threads  # replaces the file's fact (validated all the same)

    def fail(self, key: str, what: str) -> TargetError:
        return TargetError(f"{self.source}: {key}: {what}")

    def target(self, data: Mapping[str, object], default_name: str) -> Target:
        self.no_unknown_keys(data, _TOP_KEYS, "")
        name = self.string(data, "name", "name", default=default_name)
        backend = self.string(data, "backend", "backend")
        if backend not in BACKENDS:
            raise self.fail(
                "backend", f"unknown backend '{backend}' (one of {', '.join(BACKENDS)})"
            )
        given = self.threads
        facts = {
            "threads": self.count(
                data.get("threads", 1),
                "threads",
                auto=lambda: self.host.threads if given is None else given,
            ),
            "vector_width": self.count(
                data.get("vector_width", 1), "vector_width", auto=lambda: self.host.vector_width
            ),
            "vector_registers": self.count(
                data.get("vector_registers", 16),
                "vector_registers",
                auto=lambda: self.host.vector_registers,
            ),
        }
        if given is not None:
            facts["threads"] = given  # before the references and the pipeline
        fma = data.get("fma", False)
        if fma == "auto":
            fma = self.host.fma
        if not isinstance(fma, bool):
            raise self.fail("fma", f'expected true, false or "auto", got {fma!r}')
        int8_dot = data.get("int8_dot", False)
        if int8_dot == "auto":
            int8_dot = self.host.int8_dot
        if not isinstance(int8_dot, bool):
            raise self.fail("int8_dot", f'expected true, false or "auto", got {int8_dot!r}')
        for key in _GPU_COUNTS:
            if key in data:
                facts[key] = self.count(data[key], key)
        if backend in GPU_BACKENDS and "max_threads_per_group" not in data:
            raise self.fail(
                "max_threads_per_group",
                f"missing (a '{backend}' target must say how many work-items a group may have)",
            )
        strip = data.get("work_item_strip", 0)
        if isinstance(strip, bool) or not isinstance(strip, int) or strip < 0:
            raise self.fail(
                "work_item_strip", f"must be a non-negative integer, got {_kind(strip)}"
            )
        if "shared_memory" in data:
            facts["shared_memory"] = self.size(data["shared_memory"], "shared_memory")
        memories = self.memories(data.get("memory"))
        peak = data.get("peak_gflops", "auto")
        if peak == "auto":  # measured later, only when a roofline figure is asked for
            peak = None
        elif isinstance(peak, bool) or not isinstance(peak, (int, float)) or not peak > 0:
            raise self.fail(
                "peak_gflops", f'must be a positive number (GFLOP/s) or "auto", got {_kind(peak)}'
            )
        refs: dict[str, object] = dict(facts)
        for m in memories:
            refs.update({f"{m.name}.size": m.size_bytes, f"{m.name}.line": m.line_bytes})
            if m.bandwidth_gbs is not None:
                refs[f"{m.name}.bandwidth_gbs"] = m.bandwidth_gbs
        return Target(
            name=name,
            backend=backend,
            threads=facts["threads"],
            vector_width=facts["vector_width"],
            vector_registers=facts["vector_registers"],
            memories=memories,
            pipeline=self.pipeline(data.get("pipeline", []), refs, memories),
            max_threads_per_group=facts.get("max_threads_per_group"),
            subgroup_size=facts.get("subgroup_size"),
            shared_memory_bytes=facts.get("shared_memory"),
            compute_units=facts.get("compute_units"),
            work_item_strip=strip,
            fma=fma,
            int8_dot=int8_dot,
            description=self.string(data, "description", "description", default=""),
            source=self.source,
            peak_gflops=None if peak is None else float(peak),
            host=self.host,
        )

    # -- memories ------------------------------------------------------------

    def memories(self, entries: object) -> tuple[Memory, ...]:
        if entries is None:
            raise self.fail("memory", "a target needs at least one [[memory]] level (its DRAM)")
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise self.fail(
                "memory", f"must be an array of tables ([[memory]]), got {_kind(entries)}"
            )
        if not entries:
            raise self.fail("memory", "a target needs at least one [[memory]] level (its DRAM)")
        out: list[Memory] = []
        explicit: list[bool] = []
        for i, entry in enumerate(entries):
            at = f"memory[{i}]"
            self.no_unknown_keys(entry, _MEMORY_KEYS, at)
            name = self.string(entry, "name", f"{at}.name")
            if not _NAME.match(name):
                raise self.fail(
                    f"{at}.name", f"'{name}' is not a location name (letters, digits, _)"
                )
            if name in (m.name for m in out):
                raise self.fail(f"{at}.name", f"memory '{name}' is declared twice")
            if "size" not in entry:
                raise self.fail(f"{at}.size", f"missing (memory '{name}' needs a size or 'auto')")
            size = self.size(entry["size"], f"{at}.size", auto=self.auto_size(name, f"{at}.size"))
            line = self.size(
                entry.get("line", _DEFAULT_LINE), f"{at}.line", auto=self.auto_line(name)
            )
            if line == 0:
                raise self.fail(f"{at}.line", "must be positive")
            bandwidth = entry.get("bandwidth_gbs")
            if bandwidth is not None:
                if isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, float)):
                    raise self.fail(
                        f"{at}.bandwidth_gbs", f"must be a number, got {_kind(bandwidth)}"
                    )
                if bandwidth <= 0:
                    raise self.fail(f"{at}.bandwidth_gbs", f"must be positive, got {bandwidth}")
                bandwidth = float(bandwidth)
            is_explicit = entry["size"] != "auto"
            if out and is_explicit and explicit[-1] and size > out[-1].size_bytes:
                raise self.fail(
                    f"{at}.size",
                    f"memories run from the largest (slowest) to the smallest (fastest), but "
                    f"'{name}' ({size} bytes) is larger than '{out[-1].name}' "
                    f"({out[-1].size_bytes} bytes) before it",
                )
            out.append(Memory(name, size, line, bandwidth))
            explicit.append(is_explicit)
        return tuple(out)

    def auto_size(self, name: str, key: str):
        def detect() -> int:
            if name == "DRAM":
                return self.host.dram_bytes
            m = _CACHE_NAME.match(name)
            if m is None:
                raise self.fail(
                    key,
                    f"'auto' is detected only for memories named DRAM, L1, L2, L3 ...; "
                    f"give memory '{name}' a size",
                )
            return self.host.cache(int(m[1])).size_bytes

        return detect

    def auto_line(self, name: str):
        m = _CACHE_NAME.match(name)
        if m is None:
            return lambda: self.host.line_bytes
        return lambda: self.host.cache(int(m[1])).line_bytes

    # -- pipeline ------------------------------------------------------------

    def pipeline(
        self, entries: object, refs: Mapping[str, object], memories: tuple[Memory, ...]
    ) -> tuple[PassSpec, ...]:
        """Each entry's pass, built (and so validated) once, here; the locations its
        options name must be the target's memories (or :data:`IMPLICIT_LOCATIONS`)
        and its selectors' tags declared (``passes.registry.check_names``)."""
        locations = (*(m.name for m in memories), *IMPLICIT_LOCATIONS)

        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise self.fail(
                "pipeline", f"must be an array of tables ([[pipeline]]), got {_kind(entries)}"
            )
        resolved = []
        for i, entry in enumerate(entries):
            at = f"pipeline[{i}]"
            self.no_unknown_keys(entry, _PIPELINE_KEYS, at)
            name = self.string(entry, "pass", f"{at}.pass")
            raw = entry.get("options", {})
            if not isinstance(raw, dict):
                raise self.fail(f"{at}.options", f"must be a table, got {_kind(raw)}")
            options = tuple(
                (key, self.option(value, refs, f"{at}.options.{key}")) for key, value in raw.items()
            )
            resolved.append((name, options))
        memo = _MEMO
        described = repr((tuple(resolved), locations))
        if memo is not None and memo.seen(described):
            return tuple(PassSpec(name, options, deferred=True) for name, options in resolved)
        specs = self.built_pipeline(resolved, locations)
        # only the compiler's own passes: one a program registered may be absent
        # from the next process (its sources are not in the memo's key either)
        own = all(type(s.pass_).__module__.startswith(_OWN_PASSES) for s in specs)
        if memo is not None and own:
            memo.add(described)
        return specs

    def built_pipeline(
        self, resolved: list[tuple[str, tuple[tuple[str, object], ...]]], locations: tuple[str, ...]
    ) -> tuple[PassSpec, ...]:
        """Each entry built and checked: the pass exists, takes these options, and
        names only these locations and declared tags."""
        from ..passes.registry import check_names, make_pass, pass_class

        specs = []
        for i, (name, options) in enumerate(resolved):
            at = f"pipeline[{i}]"
            try:
                pass_class(name)
            except StripeError as exc:
                raise self.fail(f"{at}.pass", str(exc)) from None
            try:
                built = make_pass(name, **dict(options))
                check_names(built, locations)
            except OptionError as exc:
                raise self.fail(f"{at}.options.{exc.option}", str(exc)) from None
            except (TypeError, ValueError) as exc:  # a pass's own __post_init__ checks
                raise self.fail(f"{at}.options", f"pass '{name}': {exc}") from None
            specs.append(PassSpec(name, options, built))
        return tuple(specs)

    def option(self, value: object, refs: Mapping[str, object], key: str) -> object:
        """An option value with ``$references`` substituted; arrays become tuples."""
        if isinstance(value, list):
            return tuple(self.option(v, refs, f"{key}[{j}]") for j, v in enumerate(value))
        if isinstance(value, dict):
            raise self.fail(key, "a pass option cannot be a table")
        if isinstance(value, str) and value.startswith("$"):
            ref = value[1:]
            if ref not in refs:
                known = ", ".join(f"${r}" for r in refs)
                raise self.fail(key, f"unknown reference '{value}' (this target defines {known})")
            return refs[ref]
        if not isinstance(value, (bool, int, float, str)):
            raise self.fail(
                key, f"a pass option must be a boolean, number, string or array, got {_kind(value)}"
            )
        return value

    # -- scalars -------------------------------------------------------------

    def no_unknown_keys(self, table: Mapping[str, object], known: tuple[str, ...], at: str) -> None:
        for key in table:
            if key not in known:
                where = f"{at}.{key}" if at else key
                raise self.fail(where, f"unknown key (expected one of: {', '.join(known)})")

    def string(
        self, table: Mapping[str, object], key: str, at: str, default: str | None = None
    ) -> str:
        if key not in table:
            if default is None:
                raise self.fail(at, "missing")
            return default
        value = table[key]
        if not isinstance(value, str) or not value:
            raise self.fail(at, f"must be a non-empty string, got {_kind(value)}")
        return value

    def count(self, value: object, at: str, auto=None) -> int:
        """A positive integer, or ``"auto"`` where ``auto`` detects it."""
        if value == "auto" and auto is not None:
            return auto()
        if isinstance(value, bool) or not isinstance(value, int):
            hint = " or 'auto'" if auto is not None else ""
            raise self.fail(at, f"must be a positive integer{hint}, got {_kind(value)}")
        if value < 1:
            raise self.fail(at, f"must be a positive integer, got {value}")
        return value

    def size(self, value: object, at: str, auto=None) -> int:
        """Bytes (``parse_size``), or ``"auto"`` where ``auto`` detects them."""
        if value == "auto" and auto is not None:
            return auto()
        try:
            return parse_size(value)
        except ValueError as exc:
            raise self.fail(at, str(exc)) from None


def _kind(value: object) -> str:
    """How a TOML value is described in messages: ``string 'abc'``, ``integer -3``."""
    names = {
        bool: "boolean",
        int: "integer",
        float: "float",
        str: "string",
        list: "array",
        dict: "table",
    }
    kind = names.get(type(value), type(value).__name__)
    if isinstance(value, (list, dict)):
        return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"
    return f"{kind} {value!r}"
