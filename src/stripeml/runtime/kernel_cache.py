"""The on-disk cache of compiled CPU kernels.

A compiled program is stored under a key that hashes everything its object
code depends on (:func:`cache_key`): the Stripe program text, the codegen
options and target description, the stripeml version, a fingerprint of the
code generator's source files (so editing the generator never serves stale
code during development) and the cache format version.

Location: ``$STRIPEML_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/stripeml``,
else ``~/.cache/stripeml``; entries live in its ``cpu/`` subfolder, one file
per key.  The environment is read here (the runtime), never in passes.

File format (all integers little-endian)::

    magic    8 bytes  b"STRPMLK\\0"
    version  u32      FORMAT_VERSION
    length   u64      payload length in bytes
    digest   32 bytes sha256 of the payload
    payload  u64 metadata length, metadata (UTF-8 JSON), object code

The JSON holds the :class:`~stripeml.codegen.cpu_abi.CpuModule`: the LLVM IR
text (so ``exe.code`` works on a warm start), the buffers and the steps, with
``special`` statements as their one-line Stripe text.  A file whose header,
length or digest does not match is reported with ``warnings.warn``, removed and
treated as a miss.  Writes go to a temporary file in the same folder and are
published with ``os.replace``, so readers see a whole entry or none and
concurrent writers of one key simply race to publish identical bytes.  If the
folder cannot be created or written, the cache turns itself off (one warning
per folder and process).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import warnings
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from ..codegen.cpu_abi import BufferInfo, CpuModule, HostCopy, KernelInfo, Step
from ..ir.nodes import Special
from ..ir.parser import parse
from ..ir.printer import format_stmt

MAGIC = b"STRPMLK\0"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIQ32s")
_META_LEN = struct.Struct("<Q")
_SUFFIX = ".kernel"
_WARNED_UNWRITABLE: set[Path] = set()  # folders already reported in this process


@dataclass(frozen=True, slots=True)
class Entry:
    """One cached compilation: native object code plus the module's metadata."""

    object_code: bytes
    module: CpuModule


def default_cache_dir() -> Path:
    """``$STRIPEML_CACHE_DIR``, else ``$XDG_CACHE_HOME/stripeml``, else ``~/.cache/stripeml``."""
    explicit = os.environ.get("STRIPEML_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "stripeml"


@lru_cache(maxsize=1)
def codegen_fingerprint() -> str:
    """sha256 of the CPU code generator's source files (whichever exist)."""
    from .. import codegen

    folder = Path(codegen.__file__).parent
    h = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """sha256 of the frontend, IR, analysis and pass sources: what turns Tile
    into an optimised Stripe program (keys of the program cache)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for folder in ("tile", "ir", "analysis", "passes", "targets"):
        for path in sorted((root / folder).glob("*.py")):
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def cache_key(program_text: str, options: str) -> str:
    """The key of a program compiled with ``options`` (codegen options + target)."""
    from .. import __version__

    parts = (
        f"format={FORMAT_VERSION}",
        f"stripeml={__version__}",
        f"codegen={codegen_fingerprint()}",
        options,
        program_text,
    )
    h = hashlib.sha256()
    for part in parts:  # length-prefixed, so no two part lists hash alike
        data = part.encode()
        h.update(struct.pack("<Q", len(data)) + data)
    return h.hexdigest()


class KernelCache:
    """``get``/``put`` of :class:`Entry` by key in one folder; never raises on I/O."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        root = Path(directory) if directory is not None else default_cache_dir()
        self.directory = root / "cpu"
        self.enabled = True

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{_SUFFIX}"

    def get(self, key: str) -> Entry | None:
        """The entry for ``key``; None when absent, unreadable or corrupt."""
        if not self.enabled:
            return None
        path = self.path(key)
        try:
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            warnings.warn(
                f"stripeml kernel cache: cannot read {path}: {exc}", RuntimeWarning, stacklevel=2
            )
            return None
        try:
            return decode(data)
        except ValueError as exc:
            warnings.warn(
                f"stripeml kernel cache: ignoring corrupt entry {path} ({exc}); it will be rebuilt",
                RuntimeWarning,
                stacklevel=2,
            )
            _remove(path)
            return None

    def put(self, key: str, entry: Entry) -> bool:
        """Store ``entry`` atomically; False (and the cache off) when the folder is unwritable."""
        if not self.enabled:
            return False
        data = encode(entry)
        tmp_name = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(
                prefix=f".{key[:16]}.", suffix=".tmp", dir=self.directory
            )
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp_name, self.path(key))
            return True
        except OSError as exc:
            if tmp_name is not None:
                _remove(Path(tmp_name))
            self.enabled = False
            if self.directory not in _WARNED_UNWRITABLE:
                _WARNED_UNWRITABLE.add(self.directory)
                warnings.warn(
                    f"stripeml kernel cache: cannot write to {self.directory} ({exc}); "
                    "continuing without a disk cache",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return False


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


# -- encoding ---------------------------------------------------------------


def encode(entry: Entry) -> bytes:
    """The file bytes of ``entry`` (header + payload)."""
    meta = json.dumps(_module_to_json(entry.module), separators=(",", ":")).encode()
    payload = _META_LEN.pack(len(meta)) + meta + entry.object_code
    digest = hashlib.sha256(payload).digest()
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(payload), digest) + payload


def decode(data: bytes) -> Entry:
    """The entry in ``data``; ValueError saying what is wrong when it is not a valid file."""
    if len(data) < _HEADER.size:
        raise ValueError(f"truncated header ({len(data)} bytes)")
    magic, version, length, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError("bad magic")
    if version != FORMAT_VERSION:
        raise ValueError(f"format version {version}, expected {FORMAT_VERSION}")
    payload = data[_HEADER.size :]
    if len(payload) != length:
        raise ValueError(f"payload is {len(payload)} bytes, header says {length}")
    if hashlib.sha256(payload).digest() != digest:
        raise ValueError("checksum mismatch")
    (meta_len,) = _META_LEN.unpack_from(payload)
    start = _META_LEN.size
    if start + meta_len > len(payload):
        raise ValueError("metadata runs past the payload")
    try:
        meta = json.loads(payload[start : start + meta_len].decode())
        module = _module_from_json(meta)
    except (UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"bad metadata: {exc}") from exc
    return Entry(bytes(payload[start + meta_len :]), module)


def _module_to_json(module: CpuModule) -> dict:
    return {
        "llvm_ir": module.llvm_ir,
        "buffers": [asdict(b) for b in module.buffers],
        "steps": [_step_to_json(s) for s in module.steps],
    }


def _step_to_json(step: Step) -> dict:
    if step.kernel is not None:
        return {"kernel": asdict(step.kernel)}
    if step.copy is not None:
        return {"copy": asdict(step.copy)}
    assert step.special is not None  # a step runs a kernel, a copy or a special
    return {"special": format_stmt(step.special)}


def _module_from_json(meta: dict) -> CpuModule:
    buffers = tuple(
        BufferInfo(b["name"], b["dtype"], tuple(b["sizes"]), tuple(b["strides"]), b["kind"])
        for b in meta["buffers"]
    )
    steps = []
    for s in meta["steps"]:
        if "kernel" in s:
            steps.append(Step(kernel=KernelInfo(**s["kernel"])))
        elif "copy" in s:
            c = s["copy"]
            tuples = {k: tuple(v) for k, v in c.items() if isinstance(v, list)}
            steps.append(Step(copy=HostCopy(**{**c, **tuples})))
        else:
            steps.append(Step(special=_parse_special(s["special"])))
    return CpuModule(meta["llvm_ir"], buffers, tuple(steps))


def _parse_special(text: str) -> Special:
    """A special statement back from its one-line Stripe text."""
    from ..errors import StripeError

    try:
        root = parse(f"block [] #program () {{\n  {text}\n}}\n").root
    except StripeError as exc:
        raise ValueError(f"bad special {text!r}: {exc}") from exc
    if len(root.stmts) != 1 or not isinstance(root.stmts[0], Special):
        raise ValueError(f"not a special statement: {text!r}")
    return root.stmts[0]


class ProgramCache:
    """Optimised Stripe program texts by key (``programs/`` beside ``cpu/``),
    so a warm start skips lowering and the passes.  A file is the sha256 of the
    text on the first line, then the text; a mismatch is a miss."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        root = Path(directory) if directory is not None else default_cache_dir()
        self.directory = root / "programs"

    def get(self, key: str) -> str | None:
        try:
            data = (self.directory / f"{key}.stripe").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        digest, _, text = data.partition("\n")
        if hashlib.sha256(text.encode()).hexdigest() != digest:
            return None
        return text

    def put(self, key: str, text: str) -> None:
        tmp_name = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(
                prefix=f".{key[:16]}.", suffix=".tmp", dir=self.directory
            )
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(hashlib.sha256(text.encode()).hexdigest() + "\n" + text)
            os.replace(tmp_name, self.directory / f"{key}.stripe")
        except OSError:
            if tmp_name is not None:
                _remove(Path(tmp_name))
