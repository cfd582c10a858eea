"""The on-disk caches of compiled CPU kernels and optimised program texts.

A compiled program is stored under a key that hashes everything its object
code depends on (:func:`cache_key`): the Stripe program text, the codegen
options and target description, the stripeml version, a fingerprint of the
code generator's source files (so editing the generator never serves stale
code during development) and the cache format version.

Location, trust and secret key: :mod:`.cache_root` (the root is
``$STRIPEML_CACHE_DIR``, else ``$XDG_CACHE_HOME/stripeml``, else
``~/.cache/stripeml``; private, refused when others could write to it).
Kernels live in its ``cpu/`` subfolder, program texts in ``programs/``, one
file per key, in the authenticated layout of :mod:`.cache_store`: a header
(magic, version, length, an HMAC-SHA256 tag under the root's key that binds
the content to the key) and the payload, for a kernel::

    u64 metadata length, metadata (UTF-8 JSON), object code

The JSON holds the :class:`~stripeml.codegen.cpu_abi.CpuModule`: the LLVM IR
text (so ``exe.code`` works on a warm start), the buffers and the steps, with
``special`` statements as their one-line Stripe text.  A file whose header,
length or tag does not match is reported with ``warnings.warn``, removed and
treated as a miss; the tag is checked before the metadata is parsed or the
object code loaded.  Writes go to a private temporary file in the same folder
and are published with ``os.replace``, so readers see a whole entry or none and
concurrent writers of one key simply race to publish identical bytes.  A use
touches an entry's mtime and each write evicts the least recently used entries
down to the size limit (``$STRIPEML_CACHE_LIMIT``, default 4 GiB).  If the
folder cannot be created or written, the cache turns itself off (one warning
per folder and process).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import ClassVar

from ..codegen.cpu_abi import Body, BufferInfo, CpuModule, KernelInfo, Step
from ..ir import affine as ir_affine
from ..ir import nodes as ir_nodes
from ..ir.nodes import Program, Refinement, Special
from ..ir.parser import parse
from ..ir.printer import format_stmt, remember
from . import pending_writes
from .cache_root import CacheRoot, default_cache_dir
from .cache_store import EntryFolder, check_envelope, pack
from .program_facts import program_constness, program_peak_bytes

__all__ = [  # default_cache_dir is re-exported: callers found it here first
    "Entry",
    "KernelCache",
    "ProgramCache",
    "ProgramSummary",
    "StoredProgram",
    "cache_key",
    "codegen_fingerprint",
    "compiler_fingerprint",
    "decode",
    "default_cache_dir",
    "encode",
]

MAGIC = b"STRPMLK\0"
PROGRAM_MAGIC = b"STRPMLP\0"
#: 5: steps call the bodies through their gathers (no wrappers' module: a
#: body's entry reads its runtime bounds from its argument array);
#: 4: a program text entry holds its length and the pickled program after it;
#: 3: a program's entry names the kernel bodies it links (``bodies/``);
#: 2: entries authenticated with an HMAC (1 carried a plain sha256).
FORMAT_VERSION = 5
#: The format of ``programs/`` entries (part of their keys, so a stripeml reading
#: another format never looks such an entry up): 5: the text, the summary
#: (:class:`ProgramSummary`) and the pickled program, each but the last after its
#: length; 4 and before: the kernels' format of the time.
PROGRAM_FORMAT_VERSION = 5
_META_LEN = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class Entry:
    """One cached compilation: native object code plus the module's metadata."""

    object_code: bytes
    module: CpuModule


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
    """``get``/``put`` of :class:`Entry` by key under one root; never raises on I/O."""

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, folder: str = "cpu"
    ) -> None:
        self.root = CacheRoot(directory)
        self.entries = EntryFolder(self.root, folder, MAGIC, FORMAT_VERSION, "kernel cache")
        self.directory = self.entries.directory

    def path(self, key: str) -> Path:
        return self.entries.path(key)

    def get(self, key: str) -> Entry | None:
        """The entry for ``key`` (one :func:`.pending_writes.put_later` has yet to
        write, too); None
        when absent, refused, unreadable, corrupt or forged."""
        found = pending_writes.unwritten(self.path(key))
        if found is not None:
            return found
        data = self.entries.load(key)
        if data is None:
            return None
        try:
            return decode(data)
        except ValueError as exc:  # authentic yet undecodable: written by a broken stripeml
            self.entries.reject(self.path(key), str(exc))
            return None

    def put(self, key: str, entry: Entry) -> bool:
        """Store ``entry`` atomically; False (and the cache off) when the root is
        refused or unwritable."""
        return self.entries.store(key, encode(entry))


# -- encoding ---------------------------------------------------------------


def encode(entry: Entry) -> bytes:
    """The file bytes of ``entry`` with a blank tag (the cache signs them when storing)."""
    meta = json.dumps(_module_to_json(entry.module), separators=(",", ":")).encode()
    return pack(MAGIC, FORMAT_VERSION, _META_LEN.pack(len(meta)) + meta + entry.object_code)


def decode(data: bytes) -> Entry:
    """The entry in ``data``; ValueError saying what is wrong when it is not a valid file.

    This does not authenticate ``data``: :meth:`KernelCache.get` checks the tag first.
    """
    payload = check_envelope(data, MAGIC, FORMAT_VERSION)
    if len(payload) < _META_LEN.size:
        raise ValueError("no metadata length")
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
        "buffers": [_flat(b) for b in module.buffers],
        "steps": [_step_to_json(s) for s in module.steps],
        "bodies": [
            {"symbol": b.symbol, "opt": b.opt, "info": _flat(b.info)} for b in module.bodies
        ],
    }


#: Each record class's field names, in order.
_FIELDS: dict[type, tuple[str, ...]] = {}


def _flat(info: BufferInfo | KernelInfo) -> dict:
    """``asdict(info)`` for the flat records here (fields of strings, numbers and
    tuples of numbers, which JSON writes as ``asdict``'s lists): BERT-base's 300
    steps and 600 buffers took ``asdict``'s deep copy 7 ms per compile, 0.5 ms
    this way."""
    names = _FIELDS.get(type(info))
    if names is None:
        names = _FIELDS[type(info)] = tuple(f.name for f in fields(info))
    return {name: getattr(info, name) for name in names}


def _step_to_json(step: Step) -> dict:
    if step.kernel is not None:
        return {"kernel": _flat(step.kernel)}
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
            steps.append(Step(kernel=_kernel_info(s["kernel"])))
        else:
            steps.append(Step(special=_parse_special(s["special"])))
    bodies = tuple(
        Body(b["symbol"], None, _kernel_info(b["info"]), int(b["opt"]))
        for b in meta.get("bodies", ())
    )
    return CpuModule(meta["llvm_ir"], buffers, tuple(steps), bodies)


def _kernel_info(fields: dict) -> KernelInfo:
    """A :class:`KernelInfo` back from its JSON (whose tuples are lists)."""
    return KernelInfo(**{**fields, "gather": tuple(fields.get("gather", ()))})


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


@dataclass(frozen=True)
class ProgramSummary:
    """What running an optimised program needs of it besides its compiled code,
    so a warm start need not load the program itself: the root's refinements
    (parameters, results and temporaries, in order: their shapes, which
    parameters are constant, where ``place`` put each temporary), the constant
    root statements and the temporaries they keep
    (:func:`stripeml.analysis.constness.constness`) and the bytes its
    allocations need per location (:func:`stripeml.analysis.memory.peak_bytes`)."""

    refs: tuple[Refinement, ...]
    constant: frozenset[int]
    kept: frozenset[str]
    peak: tuple[tuple[str, int], ...]

    @staticmethod
    def of(program: Program) -> ProgramSummary:
        const = program_constness(program)
        return ProgramSummary(
            program.root.refs,
            const.statements,
            const.temporaries,
            tuple(program_peak_bytes(program).items()),
        )

    def _state(self) -> tuple:
        """The summary as plain values and IR nodes (what :class:`_NodeUnpickler` reads)."""
        return (self.refs, sorted(self.constant), sorted(self.kept), list(self.peak))

    @staticmethod
    def _from_state(state: object) -> ProgramSummary:
        """The summary of :meth:`_state`; ValueError when ``state`` is not one."""
        if not isinstance(state, tuple) or len(state) != 4:
            raise ValueError(f"not a program summary: {type(state).__name__}")
        refs, statements, temporaries, needs = state
        try:
            summary = ProgramSummary(
                tuple(refs),
                frozenset(int(k) for k in statements),
                frozenset(str(t) for t in temporaries),
                tuple((str(loc), int(n)) for loc, n in needs),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not a program summary: {exc}") from None
        if not all(isinstance(r, Refinement) for r in summary.refs):
            raise ValueError("not a program summary: a root refinement is not a Refinement")
        return summary


class StoredProgram:
    """An optimised program read from the disk cache: its ``text`` and
    ``summary`` at once, the program itself (:attr:`program`) unpickled when
    something first asks for it (profiling, the passes' stages, another program
    sharing its constant layouts), not at a warm start (ResNet-50: 14,500 IR
    nodes, about 0.02 s).  An authentic entry whose program does not unpickle
    (written by a broken stripeml) is reported and removed, and the program is
    parsed from the text instead."""

    def __init__(
        self,
        text: str,
        summary: ProgramSummary,
        pickled: bytes | None,
        on_bad: Callable[[str], None],
    ) -> None:
        self.text = text
        self.summary = summary
        self._pickled = pickled
        self._on_bad = on_bad
        self._program: Program | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether :attr:`program` was asked for (and so is in memory)."""
        return self._program is not None

    @property
    def program(self) -> Program:
        """The program (unpickled, or parsed from the text, at the first use)."""
        if self._program is None:
            with self._lock:
                if self._program is None:
                    self._program = self._load()
        return self._program

    def _load(self) -> Program:
        program: Program | None = None
        if self._pickled is not None:
            try:
                program = _unpickle_program(self._pickled)
            except (ValueError, pickle.UnpicklingError, EOFError) as exc:
                self._on_bad(str(exc))
            self._pickled = None
        if program is None:
            program = parse(self.text)
        remember(program, self.text)
        return program


def _unpickle_program(data: bytes | memoryview) -> Program:
    program = _NodeUnpickler(io.BytesIO(data)).load()
    if not isinstance(program, Program):
        raise ValueError(f"not a program: {type(program).__name__}")
    return program


class ProgramCache:
    """Optimised Stripe programs by key (``programs/`` beside ``cpu/``), so a warm
    start skips lowering and the passes.  An entry holds, in the authenticated
    layout of :mod:`.cache_store` (format :data:`PROGRAM_FORMAT_VERSION`), the
    program's text (u64 length, UTF-8), then, when the program was given, its
    :class:`ProgramSummary` (u64 length, pickled) and the program itself
    pickled (loading it takes 0.02 s where parsing ResNet-50's text takes
    0.08).  Only the IR's own node classes may be unpickled
    (:class:`_NodeUnpickler`); an entry is trusted exactly as far as the kernel
    entries beside it, whose machine code runs (its tag is checked first).  A
    missing, corrupt or forged entry is a miss (the last two warned about and
    removed)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.root = CacheRoot(directory)
        self.entries = EntryFolder(
            self.root, "programs", PROGRAM_MAGIC, PROGRAM_FORMAT_VERSION, "program cache"
        )
        self.directory = self.entries.directory

    def put_later(self, key: str, text: str, program: Program) -> None:
        """:meth:`put` on a thread of its own, once the compile and the program's
        first call are done (:func:`.kept_layouts.in_background`,
        ``after_compiles``: the program's pickle and file were 0.02-0.03 s of
        ResNet-50's cold compile); a read of ``key`` meanwhile waits for it."""
        pending_writes.write_later(self.entries.path(key), self.put, key, text, program)

    def get(self, key: str) -> str | None:
        """The program text stored under ``key``."""
        found = self.get_program(key)
        return None if found is None else found[0]

    def get_program(self, key: str) -> tuple[str, Program | None] | None:
        """``(text, program)`` stored under ``key`` (``program`` None when the entry
        has only the text)."""
        found = self._read(key)
        if found is None:
            return None
        text, _, pickled = found
        if pickled is None:
            return text, None
        try:
            return text, _unpickle_program(pickled)
        except (ValueError, pickle.UnpicklingError, EOFError) as exc:
            self.entries.reject(self.entries.path(key), str(exc))  # authentic yet unreadable
            return None

    def get_stored(self, key: str) -> StoredProgram | str | None:
        """The entry under ``key`` as a :class:`StoredProgram` (the program not yet
        unpickled), or its text alone when it holds no program."""
        found = self._read(key)
        if found is None:
            return None
        text, summary, pickled = found
        if summary is None or pickled is None:
            return text
        path = self.entries.path(key)
        return StoredProgram(text, summary, pickled, lambda why: self.entries.reject(path, why))

    def _read(self, key: str) -> tuple[str, ProgramSummary | None, bytes | None] | None:
        """The entry's text, summary and pickled program (both None: text only)."""
        pending_writes.finish(self.entries.path(key))  # a write of this entry: done first
        data = self.entries.load(key)
        if data is None:
            return None
        payload = memoryview(check_envelope(data, PROGRAM_MAGIC, PROGRAM_FORMAT_VERSION))
        try:
            (size,) = _META_LEN.unpack_from(payload)
            end = _META_LEN.size + size
            if end > len(payload):
                raise ValueError("the text runs past the entry")
            text = bytes(payload[_META_LEN.size : end]).decode("utf-8")
            if end == len(payload):
                return text, None, None
            (size,) = _META_LEN.unpack_from(payload, end)
            start = end + _META_LEN.size
            end = start + size
            if end >= len(payload):
                raise ValueError("the summary runs past the entry")
            state = _NodeUnpickler(io.BytesIO(payload[start:end])).load()
            summary = ProgramSummary._from_state(state)
        except (
            struct.error,
            UnicodeDecodeError,
            ValueError,
            pickle.UnpicklingError,
            EOFError,
        ) as exc:
            self.entries.reject(self.entries.path(key), str(exc))  # authentic yet unreadable
            return None
        return text, summary, bytes(payload[end:])

    def put(self, key: str, text: str, program: Program | None = None) -> bool:
        """Store ``text`` (and ``program``, its parse, with its summary); False when
        the root is refused or unwritable."""
        raw = text.encode()
        payload = _META_LEN.pack(len(raw)) + raw
        if program is not None:
            summary = ProgramSummary.of(program)._state()
            state = pickle.dumps(summary, protocol=pickle.HIGHEST_PROTOCOL)
            payload += _META_LEN.pack(len(state)) + state
            payload += pickle.dumps(program, protocol=pickle.HIGHEST_PROTOCOL)
        return self.entries.store(key, pack(PROGRAM_MAGIC, PROGRAM_FORMAT_VERSION, payload))


#: The magic of a validated-pipeline entry (``pipelines/``).
PIPELINE_MAGIC = b"STRPMLV\0"


class ValidatedPipelines:
    """Target pipelines that validated before, kept as authenticated entries in
    ``pipelines/`` under the default cache root (read at each use, so
    ``$STRIPEML_CACHE_DIR`` may change): what lets a target load without
    building (or importing) its passes (:func:`stripeml.targets.loader.set_validation_memo`).

    An entry's name hashes the pipeline's description with
    :func:`compiler_fingerprint`, so a changed pass or target source validates
    again; its payload is the description itself, compared in full.  An
    untrusted root remembers nothing, and a forged entry only defers an error:
    a deferred pass that does not build raises a ``TargetError`` at first use."""

    def _folder(self) -> EntryFolder:
        return EntryFolder(
            CacheRoot(None), "pipelines", PIPELINE_MAGIC, FORMAT_VERSION, "pipeline cache"
        )

    @staticmethod
    def _name(description: str) -> str:
        text = f"pipeline\0{compiler_fingerprint()}\0{description}"
        return hashlib.sha256(text.encode()).hexdigest()

    def seen(self, description: str) -> bool:
        data = self._folder().load(self._name(description))
        if data is None:
            return False
        try:
            payload = check_envelope(data, PIPELINE_MAGIC, FORMAT_VERSION)
        except ValueError:
            return False
        return bytes(payload) == description.encode()

    def add(self, description: str) -> None:
        folder = self._folder()
        folder.store(
            self._name(description), pack(PIPELINE_MAGIC, FORMAT_VERSION, description.encode())
        )


class _NodeUnpickler(pickle.Unpickler):
    """Unpickles Stripe IR nodes and nothing else (no other class, no function)."""

    ALLOWED: ClassVar[dict[str, ModuleType]] = {
        "stripeml.ir.nodes": ir_nodes,
        "stripeml.ir.affine": ir_affine,
    }

    def find_class(self, module: str, name: str) -> type:
        found = getattr(self.ALLOWED.get(module), name, None)
        if not isinstance(found, type) or found.__module__ != module:
            raise pickle.UnpicklingError(f"{module}.{name} is not an IR node")
        return found
