"""Constant layouts shared by the compiled programs of one model.

A program's constant statements (``analysis.constness``: they read only
constant parameters, a model's weights, and the temporaries such statements
write) run once, at its first call, and the temporaries they write are kept:
the weights laid out for the register tiles.  Every input shape of a model is
a program of its own, and a transformer served at sequence lengths 64 and 128
lays its weights out the same way twice: 0.5 s and 434 MB again for BERT-base.

So each kept temporary gets a *value id* that names how it was computed: a
constant parameter is the array bound to it (by identity: the same object
means the same values, as ``stripeml.compile`` binds read-only copies); a
kept temporary starts as zeros of its layout, and each constant statement
that writes it makes a new id from the statement's canonical form
(:mod:`stripeml.analysis.canonical` for kernels; a special's text with its
buffers numbered) and the ids of every buffer the statement touches, in
order.  Equal ids are equal values.  A process-wide registry maps the final id
of each kept temporary to its array while any compiled program holds it (weak
references; an entry also holds the parameter arrays its id names, so their
identities stay unique).  A program finding a temporary's id there takes that
array and skips the statements that only wrote it, unless a statement it must
still run would read an earlier value of it or write into it (then it keeps
its own copy).  Nothing here changes a result: a shared array holds exactly
what the skipped statements would have written.

The value ids cost a canonical form per constant statement (ResNet-50: 65
kernels, 13 ms of a 0.3 s warm start), and the first program of a process has
no one to share with.  So while nothing is registered or deferred
(:func:`idle`), a program computes its kept temporaries without ids and, once
they are computed, is :func:`defer`-red: the next program that plans its reuse
first has every deferred program (still alive) work out its ids and register
its arrays (:func:`plan_reuse`), so what it may share is the same as before.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from ..ir.nodes import Block, Program, Special
from ..ir.printer import format_stmt
from .host import RootBuffer

__all__ = ["Reuse", "defer", "flush", "idle", "plan_reuse", "register"]

ValueId = tuple


class _Registry:
    def __init__(self) -> None:
        self._entries: dict[ValueId, tuple[weakref.ref, tuple]] = {}
        self._lock = threading.Lock()

    def get(self, key: ValueId) -> np.ndarray | None:
        with self._lock:
            found = self._entries.get(key)
        return None if found is None else found[0]()

    def put(self, key: ValueId, array: np.ndarray, keep: tuple) -> None:
        def gone(_: weakref.ref, key: ValueId = key) -> None:
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None and entry[0]() is None:
                    del self._entries[key]

        with self._lock:
            found = self._entries.get(key)
            if found is None or found[0]() is None:
                self._entries[key] = (weakref.ref(array, gone), keep)

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for ref, _ in self._entries.values() if ref() is not None)


REGISTRY = _Registry()


class Deferred(Protocol):
    """A compiled program whose kept temporaries are computed but not registered."""

    def register_deferred(self) -> None: ...


# The programs deferred (weakly: one that is gone has nothing to offer).
_DEFERRED: weakref.WeakSet[Deferred] = weakref.WeakSet()
_DEFERRED_LOCK = threading.Lock()


def idle() -> bool:
    """Whether no program could share anything now: nothing registered, nothing
    deferred (a new program then plans no reuse, only :func:`defer`-s)."""
    with _DEFERRED_LOCK:
        if len(_DEFERRED):
            return False
    return len(REGISTRY) == 0


def defer(owner: Deferred) -> None:
    """Register ``owner``'s kept temporaries (computed now) when another program
    first asks (:func:`flush`), not now."""
    with _DEFERRED_LOCK:
        _DEFERRED.add(owner)


def flush() -> None:
    """Have every deferred program still alive register its kept temporaries."""
    with _DEFERRED_LOCK:
        owners = list(_DEFERRED)
        _DEFERRED.clear()
    for owner in owners:
        owner.register_deferred()


@dataclass
class Reuse:
    """What a program takes from the registry: ``shared`` kept temporaries (buffer
    slot -> array), the constant statements it may ``skip``, and the final value
    id of each of its own kept temporaries (registered once they are computed)."""

    shared: dict[int, np.ndarray]
    skip: frozenset[int]
    ids: dict[int, ValueId]
    keep: tuple


def _step(program: Program, k: int) -> tuple[str, tuple[str, ...], frozenset[str]] | None:
    """(canonical text hash, buffers touched in order, buffers written) of root
    statement ``k``, or None when it is neither a kernel nor a special."""
    root = program.root
    stmt = root.stmts[k]
    if isinstance(stmt, Block):
        from ..analysis.canonical import canonical_kernel  # not at a warm start (idle)

        canon = canonical_kernel(root, stmt)
        writes = frozenset(r.from_ for r in stmt.refs if r.dir in ("out", "inout") and r.from_)
        # the offsets too: kernels reading different rows of a buffer share a body
        text, bufs = f"{canon.text}\n{canon.offsets}", canon.buffers
    elif isinstance(stmt, Special):
        bufs = (*stmt.inputs, *stmt.outputs)
        names = {b: f"b{n}" for n, b in enumerate(dict.fromkeys(bufs))}
        renamed = replace(
            stmt,
            inputs=tuple(names[b] for b in stmt.inputs),
            outputs=tuple(names[b] for b in stmt.outputs),
        )
        text, writes = format_stmt(renamed), frozenset(stmt.outputs)
        bufs = tuple(names)
    else:
        return None
    return hashlib.sha256(text.encode()).hexdigest()[:32], tuple(bufs), writes


def plan_reuse(
    program: Program | None,
    buffers: Sequence[RootBuffer],
    constant: frozenset[int],
    kept: Mapping[int, RootBuffer],
    inputs: Mapping[str, object],
) -> Reuse | None:
    """How a program with these constant statements and kept temporaries (by
    buffer slot) can use the registry, given its first call's ``inputs``; None
    when it has nothing to share or something unexpected touches its constants.
    The deferred programs register first (:func:`flush`)."""
    if program is None or not constant or not kept:
        return None
    flush()
    slot = {b.info.name: k for k, b in enumerate(buffers)}
    ids: dict[str, ValueId] = {}
    values: dict[str, object] = {}
    for buf in buffers:
        name = buf.info.name
        if buf.info.kind == "in" and name in inputs:
            values[name] = inputs[name]
            ids[name] = ("param", id(values[name]), buf.dtype.str, buf.info.sizes)
    keep: dict[str, object] = {}  # the parameters the ids name (kept alive with them)
    for buf in kept.values():
        info = buf.info
        ids[info.name] = ("zero", buf.dtype.str, info.sizes, info.strides, buf.extent, buf.origin)
    steps: dict[int, tuple[frozenset[str], frozenset[str]]] = {}
    for k in sorted(constant):
        found = _step(program, k)
        if found is None:
            return None
        digest, bufs, writes = found
        if any(b not in ids for b in bufs) or any(
            buffers[slot[b]].info.kind == "in" for b in writes
        ):
            return None  # a constant statement touching what is neither constant nor kept
        before = tuple(ids[b] for b in bufs)
        keep.update((b, values[b]) for b in bufs if b in values)
        for j, b in enumerate(bufs):
            if b in writes:
                ids[b] = ("step", digest, before, j)
        steps[k] = (frozenset(bufs) - writes, writes)
    final = {k: ids[buf.info.name] for k, buf in kept.items()}
    shared: dict[int, np.ndarray] = {}
    for k, key in final.items():
        arr = REGISTRY.get(key)
        if arr is not None:
            shared[k] = arr
    names = {buf.info.name: k for k, buf in kept.items()}
    changed = True
    while changed:  # keep a copy of a shared temporary a statement that runs still needs
        changed = False
        run = [k for k, (_, w) in steps.items() if any(names[b] not in shared for b in w)]
        for k in run:
            reads, writes = steps[k]
            for b in writes | reads:
                s = names.get(b)
                if s is None or s not in shared:
                    continue
                later = any(b in steps[m][1] for m in steps if m >= k)
                if b in writes or later:
                    del shared[s]
                    changed = True
    skip = frozenset(k for k, (_, w) in steps.items() if all(names[b] in shared for b in w))
    own = {k: v for k, v in final.items() if k not in shared}
    return Reuse(shared, skip, own, tuple(keep.values()))


def register(reuse: Reuse, storages: Mapping[int, np.ndarray]) -> None:
    """Offer a program's own kept temporaries, computed now, to later programs."""
    for k, key in reuse.ids.items():
        REGISTRY.put(key, storages[k], reuse.keep)
