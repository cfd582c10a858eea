"""Shared bits of the target tests: writing TOML files, a probe pass, fake sysfs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

HEADER = 'backend = "interp"\n\n[[memory]]\nname = "DRAM"\nsize = "1 GiB"\n'


def write(tmp_path: Path, text: str, name: str = "chip.toml") -> Path:
    """``text`` as a TOML file under ``tmp_path``."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@dataclass(frozen=True)
class Probe:
    """A do-nothing pass with options of every kind (not in the real registry)."""

    size: int = 0
    fraction: float = 0.5
    memory: str = "DRAM"
    flag: bool = False
    sizes: tuple[int, ...] = ()
    name: ClassVar[str] = "probe"

    def __post_init__(self) -> None:
        if not 0 < self.fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")

    def run(self, program):
        return program


def fake_sysfs(root: Path, caches: list[tuple[int, str, str, str]]) -> Path:
    """A sysfs ``cache`` directory: one ``indexN`` per (level, type, size, line)."""
    root.mkdir(parents=True, exist_ok=True)
    for k, (level, kind, size, line) in enumerate(caches):
        d = root / f"index{k}"
        d.mkdir()
        for name, value in (
            ("level", level),
            ("type", kind),
            ("size", size),
            ("coherency_line_size", line),
        ):
            if value is not None:
                (d / name).write_text(f"{value}\n")
    return root


def cpuinfo_vector_width() -> int | None:
    """f32 lanes of this x86 machine's widest vector unit from the kernel's own
    ``/proc/cpuinfo`` flags (not from LLVM, which stripeml asks): ``None`` where
    there is no such file or it is not an x86 CPU."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            if "avx512f" in flags:
                return 16
            return 8 if flags & {"avx", "avx2"} else 4
    return None
