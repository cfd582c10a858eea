"""Linux ``perf`` symbols for the code this process loads (``STRIPEML_PERF_MAP=1``).

Kernels are linked into MCJIT engines in anonymous memory, so ``perf report``
shows their samples as bare ``[JIT]`` addresses.  With the variable set, every
object the runtime loads (:class:`.jit.LoadedObject`) appends its functions to
``/tmp/perf-<pid>.map``, the file ``perf`` reads for just-in-time code: one
line per function, ``<start> <size> <name>`` in hexadecimal.  Names are the
object's symbols; a kernel's (its wrapper and, for a linked body ``sk_<hash>``,
the body) is followed by its Stripe block's name in brackets, the name
``Executable.profile`` shows.  Sizes come from the object's ELF symbol table
(``st_size``); addresses from the engine that loaded it.

The file is appended to and never removed (``perf`` reads it after the
process ends); a process that loads a program at every new shape adds lines
each time.  Off by default: nothing is written and nothing parsed.
"""

from __future__ import annotations

import os
import struct
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence

_LOCK = threading.Lock()
_SHT_SYMTAB = 2
_STT_FUNC = 2


def enabled() -> bool:
    """Whether ``STRIPEML_PERF_MAP`` asks for the map (``1``, ``true`` or ``yes``)."""
    return sys.platform.startswith("linux") and os.environ.get(
        "STRIPEML_PERF_MAP", ""
    ).strip().lower() in ("1", "true", "yes")


def path() -> str:
    """This process's map file."""
    return f"/tmp/perf-{os.getpid()}.map"


def functions(obj: bytes) -> Iterator[tuple[str, int]]:
    """The defined functions of a 64-bit little-endian ELF object, as ``(name,
    size)``; nothing for anything else (or a malformed object)."""
    if len(obj) < 64 or obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        return
    (shoff,) = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(obj):
        return
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + k * shentsize) for k in range(shnum)]
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != _SHT_SYMTAB or entsize < 24 or link >= shnum:
            continue
        names_at, names_size = sections[link][4], sections[link][5]
        for at in range(offset, min(offset + size, len(obj) - 23), entsize):
            name_off, info, _, shndx, _, fsize = struct.unpack_from("<IBBHQQ", obj, at)
            if info & 0xF != _STT_FUNC or shndx == 0 or not 0 <= name_off < names_size:
                continue
            start = names_at + name_off
            end = obj.find(b"\0", start, names_at + names_size)
            if end > start:
                yield obj[start:end].decode("ascii", "replace"), fsize


def record(
    objects: Sequence[bytes],
    address: Callable[[str], int],
    labels: Mapping[str, str] | None = None,
) -> None:
    """Append the functions of ``objects`` (those ``address`` finds: the engine's
    symbol lookup, 0 for none) to the map; ``labels``: a text to show after a
    symbol's name.  Errors writing the file are ignored (the map is an aid)."""
    lines = []
    for obj in objects:
        for name, size in functions(obj):
            start = address(name)
            if start and size:
                label = (labels or {}).get(name)
                shown = f"{name} [{label}]" if label and label != name else name
                lines.append(f"{start:x} {size:x} {shown}\n")
    if not lines:
        return
    with _LOCK:
        try:
            with open(path(), "a", encoding="ascii", errors="replace") as f:
                f.writelines(lines)
        except OSError:
            pass
