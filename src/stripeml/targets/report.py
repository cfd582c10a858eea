"""Text for people: targets, and what a run moved through a target's memories.

Used by ``stripeml targets`` and ``stripeml ir --report``; every function
returns a string (lines without a trailing newline) and prints nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .target import Memory, Target

_UNITS = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def format_bytes(n: int) -> str:
    """``512 B``, ``32 KiB``, ``23.5 GiB`` (exact when it divides, else one decimal)."""
    for unit, name in _UNITS:
        if n >= unit:
            return f"{n // unit} {name}" if n % unit == 0 else f"{n / unit:.1f} {name}"
    return f"{n} B"


def summarize_target(target: Target) -> str:
    """One line: backend and memories (``cpu  DRAM 16 GiB, L2 1 MiB``)."""
    mems = ", ".join(f"{m.name} {format_bytes(m.size_bytes)}" for m in target.memories)
    return f"{target.backend:7} {mems}"


def _memory_line(m: Memory) -> str:
    text = f"{m.name:8} {format_bytes(m.size_bytes):>10}   line {m.line_bytes} B"
    if m.bandwidth_gbs is not None:
        text += f"   {m.bandwidth_gbs:g} GB/s"
    return text


def describe_target(target: Target) -> str:
    """Every fact of ``target`` and its pipeline, one per line."""
    rows: list[tuple[str, str]] = [("target", target.name)]
    if target.source:
        rows.append(("file", target.source))
    if target.description:
        rows.append(("description", target.description))
    rows += [
        ("backend", target.backend),
        ("threads", str(target.threads)),
        ("vector width", f"{target.vector_width} f32 lanes"),
    ]
    if target.peak_gflops is not None:
        rows.append(("peak", f"{target.peak_gflops:g} GFLOP/s f32"))
    gpu = [
        ("max threads/group", target.max_threads_per_group),
        ("subgroup", target.subgroup_size),
        ("shared memory", target.shared_memory_bytes),
        ("compute units", target.compute_units),
        ("work-item strip", target.work_item_strip or None),
    ]
    for label, value in gpu:
        if value is not None:
            rows.append((label, format_bytes(value) if label == "shared memory" else str(value)))
    for k, m in enumerate(target.memories):
        rows.append(("memory" if k == 0 else "", _memory_line(m)))
    for k, spec in enumerate(target.pipeline or ()):
        rows.append(("pipeline" if k == 0 else "", spec.describe()))
    if not target.pipeline:
        rows.append(("pipeline", "(no passes)"))
    return "\n".join(f"{label:18} {value}".rstrip() for label, value in rows)


def format_traffic(
    reads: Mapping[str, int],
    writes: Mapping[str, int],
    memories: Sequence[Memory] = (),
    peaks: Mapping[str, int] | None = None,
) -> str:
    """A table of bytes read/written per location (exact byte counts).

    Rows follow ``memories`` (a target's levels, slowest first, shown even when
    they moved nothing), then any other location that moved data.  With
    ``peaks`` (``analysis.memory.peak_bytes`` of a placed program), a second
    table gives the peak bytes per location against the memory's size.
    """
    sizes = {m.name: m.size_bytes for m in memories}
    names = list(dict.fromkeys([*sizes, *reads, *writes]))
    header = f"{'location':10} {'read (B)':>14} {'written (B)':>14} {'total (B)':>14} {'size':>10}"
    lines = [header]
    for name in names:
        r, w = reads.get(name, 0), writes.get(name, 0)
        size = format_bytes(sizes[name]) if name in sizes else "-"
        lines.append(f"{name:10} {r:>14} {w:>14} {r + w:>14} {size:>10}")
    r_all, w_all = sum(reads.values()), sum(writes.values())
    lines.append(f"{'all':10} {r_all:>14} {w_all:>14} {r_all + w_all:>14}")
    if peaks:
        lines.append("")
        lines.append(f"{'location':10} {'peak (B)':>14} {'size':>10}  of the memory")
        for name, peak in peaks.items():
            limit = sizes.get(name)
            note = ""
            if limit:
                note = f"{100 * peak / limit:.1f}%" + (
                    "  EXCEEDS THE MEMORY" if peak > limit else ""
                )
            shown = format_bytes(limit) if limit is not None else "-"
            lines.append(f"{name:10} {peak:>14} {shown:>10}  {note}".rstrip())
    return "\n".join(lines)
