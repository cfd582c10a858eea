"""What the CPU runtime learns about a compiled program at its second call, kept
in the disk cache beside the program's entry.

The runtime reuses a call's temporaries at the next call, and must then zero
again those whose initial contents the program may read; it also hands fresh
outputs to the kernels without zeroing when the program writes them all over
before reading them.  Both answers come from the program with isl
(:func:`stripeml.analysis.liveness.initial_reads` and
:func:`~stripeml.analysis.liveness.written_outputs`): for ResNet-50 about 0.08
s, plus 0.025 s of imports a warm start otherwise skips, paid by the second
call.  They depend on the program alone, so they are stored under the
program's cache key (the same root, authenticated like every entry) and a
later process reads them instead.

A fact that is missing, unreadable, forged or names buffers the program does
not have is computed again; a cache that cannot be written keeps nothing.

The final program's constness and peak bytes, which the runtime, the program
cache's summary and the executable's memory check each ask for at a compile,
are computed once for the last program asked about (:func:`program_constness`,
:func:`program_peak_bytes`).
"""

from __future__ import annotations

import json
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..ir.nodes import Program
from .cache_root import CacheRoot
from .cache_store import EntryFolder, check_envelope, pack

if TYPE_CHECKING:
    from ..analysis.constness import Constness

MAGIC = b"STRPMLL\0"
VERSION = 1


class Liveness:
    """:func:`~stripeml.analysis.liveness.initial_reads` and
    :func:`~stripeml.analysis.liveness.written_outputs` of ``program``, from the
    cache under ``key`` (in ``directory``, the program entry's root) when there,
    else computed and stored.  ``key`` None: computed, never stored.

    ``program`` may be a function giving it, called only if the facts must be
    computed; ``names`` (its root's buffers) then check what the cache gives."""

    def __init__(
        self,
        program: Program | Callable[[], Program],
        key: str | None,
        directory: str | os.PathLike[str] | None,
        names: frozenset[str] | None = None,
    ) -> None:
        self._program = program
        self.key = key
        self.directory = directory
        self._names = names
        self._found: tuple[frozenset[str], frozenset[str]] | None = None
        self._lock = threading.Lock()  # the call that needs them, or learn_later's thread

    @property
    def program(self) -> Program:
        if not isinstance(self._program, Program):
            self._program = self._program()
        return self._program

    def _entries(self) -> EntryFolder:
        return EntryFolder(CacheRoot(self.directory), "facts", MAGIC, VERSION, "program facts")

    @property
    def known(self) -> bool:
        """Whether :meth:`get` has its answer (read or computed)."""
        return self._found is not None

    def get(self) -> tuple[frozenset[str], frozenset[str]]:
        """``(initial reads, written outputs)``, by buffer name."""
        if self._found is None:
            with self._lock:
                if self._found is None:
                    self._found = self._read() or self._compute()
        return self._found

    def _read(self) -> tuple[frozenset[str], frozenset[str]] | None:
        if self.key is None:
            return None
        data = self._entries().load(self.key)
        if data is None:
            return None
        try:
            text = json.loads(bytes(check_envelope(data, MAGIC, VERSION)).decode())
            reads, written = frozenset(text["initial_reads"]), frozenset(text["written_outputs"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return None
        names = self._names
        if names is None:
            names = frozenset(r.into for r in self.program.root.refs)
        if not (reads <= names and written <= names):
            return None
        return reads, written

    def _compute(self) -> tuple[frozenset[str], frozenset[str]]:
        from ..analysis.liveness import initial_reads, written_outputs

        found = (initial_reads(self.program), written_outputs(self.program))
        if self.key is not None:
            text = {"initial_reads": sorted(found[0]), "written_outputs": sorted(found[1])}
            self._entries().store(self.key, pack(MAGIC, VERSION, json.dumps(text).encode()))
        return found


#: How long :func:`learn_later`'s thread waits for a gap between calls before it
#: leaves a program's facts to its second call (calls back to back).
LEARN_WAIT_S = 1.0
_later: queue.SimpleQueue[weakref.ref[Liveness]] = queue.SimpleQueue()
_learner: list[threading.Thread] = []
_learner_lock = threading.Lock()


def learn_later(facts: Liveness) -> None:
    """Have ``facts`` known before the program's second call, which would otherwise
    work them out (BERT-base: about 0.05 s of isl; ResNet-50 0.08 s): one thread
    of the process takes them in turn, each once no compile runs and in a gap
    between calls (:func:`.kept_pages.wait_quiet`), so that it never takes a
    CPU from a compile or a call's threads; with no gap within :data:`LEARN_WAIT_S`, the second call does it
    as before.  Held weakly: a program dropped meanwhile is skipped."""
    _later.put(weakref.ref(facts))
    with _learner_lock:
        if not _learner or not _learner[0].is_alive():
            t = threading.Thread(target=_learn, name="stripeml-program-facts", daemon=True)
            _learner[:] = [t]
            t.start()


def _learn() -> None:
    from .kept_pages import wait_quiet

    while True:
        facts = _later.get()()
        if facts is None or facts.known:
            continue
        if not wait_quiet(LEARN_WAIT_S):
            continue
        try:
            facts.get()
        except Exception:  # noqa: BLE001 - the second call works them out again, and reports
            continue


#: The constness and peak bytes of the last program asked about (by identity): the
#: CPU runtime's constants, this cache's summary and the executable's memory
#: check each ask for the same new program's (BERT-base: 3-4 ms each, at every
#: compile).  Holds that one program, as ``ir.printer`` holds the last one printed.
_FACTS: tuple[Program, dict[str, object]] | None = None


def _facts_of(program: Program) -> dict[str, object]:
    global _FACTS
    last = _FACTS
    if last is None or last[0] is not program:
        last = _FACTS = (program, {})
    return last[1]


def program_constness(program: Program) -> Constness:
    """:func:`stripeml.analysis.constness.constness` of ``program``, computed once
    for the last program asked about."""
    from ..analysis.constness import Constness, constness

    facts = _facts_of(program)
    got = facts.get("constness")
    if got is None:
        got = facts["constness"] = constness(program)
    assert isinstance(got, Constness)
    return got


def program_peak_bytes(program: Program) -> dict[str, int]:
    """:func:`stripeml.analysis.memory.peak_bytes` of ``program`` (a new dict),
    computed once for the last program asked about."""
    from ..analysis.memory import peak_bytes

    facts = _facts_of(program)
    got = facts.get("peak")
    if got is None:
        got = facts["peak"] = tuple(peak_bytes(program).items())
    assert isinstance(got, tuple)
    return dict(got)
