"""Constness: which root statements compute the same values at every run.

A program parameter marked ``const`` (``in W ... const``) holds the same
values at every run.  A root statement (kernel block or special) is
**constant** when every buffer it reads is constant and every buffer it
writes is a temporary; a temporary is constant when all its writers are
constant statements and no statement reads it before its last writer (a
reader that ran earlier would see the previous run's values instead of the
zeros a fresh run starts with).  A backend may run the constant statements
once, on the first run, and keep their temporaries from then on: every later
run then computes what a full run computes.

Requires: verified IR.  Guarantees: a fixpoint (every constant statement's
inputs are constant, and only constant statements write constant
temporaries); statements writing a program result are never constant.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.nodes import Block, Program, Special, Statement

__all__ = ["Constness", "constness"]


@dataclass(frozen=True, slots=True)
class Constness:
    """``statements``: positions among the root's statements of the constant ones;
    ``temporaries``: the temporaries they compute (constant at every later run)."""

    statements: frozenset[int]
    temporaries: frozenset[str]


def _reads_writes(s: Statement) -> tuple[frozenset[str], frozenset[str]]:
    if isinstance(s, Special):
        return frozenset(s.inputs), frozenset(s.outputs)
    if isinstance(s, Block):
        reads = {r.from_ for r in s.refs if r.dir in ("in", "inout") and r.from_}
        writes = {r.from_ for r in s.refs if r.dir in ("out", "inout") and r.from_}
        return frozenset(reads), frozenset(writes)
    return frozenset(), frozenset()


def constness(program: Program) -> Constness:
    """The constant statements and temporaries of ``program`` (module docstring).

    The greatest fixpoint: start from every statement that writes only
    temporaries, and drop, until nothing changes, statements that read a
    buffer that is not constant.  Data flows forward (a temporary read before
    its last writer is excluded at the start), so there are no cycles.
    """
    root = program.root
    params = {r.into for r in root.refs if r.const}
    access = [_reads_writes(s) for s in root.stmts]
    writers: dict[str, set[int]] = {}
    users: dict[str, list[int]] = {}  # the statements reading or writing a buffer
    for k, (reads, writes) in enumerate(access):
        for name in writes:
            writers.setdefault(name, set()).add(k)
        for name in reads | writes:
            users.setdefault(name, []).append(k)
    temps = set()
    for r in root.refs:
        if r.dir != "none" or r.into not in writers:
            continue
        last = max(writers[r.into])
        early = [k for k in users[r.into] if k < last and r.into in access[k][0]]
        if all(k in writers[r.into] for k in early):
            temps.add(r.into)
    stmts = {k for k, (_, writes) in enumerate(access) if writes and writes <= temps}
    # The greatest fixpoint by a worklist (each statement and buffer leaves once,
    # so the time is linear; re-checking every statement per round was quadratic
    # in a chain of temporaries, which loses one link per round).
    bufs = params | {t for t in temps if writers[t] <= stmts}
    dropped = [k for k in stmts if not (access[k][0] <= bufs and access[k][1] <= bufs)]
    while dropped:
        k = dropped.pop()
        if k not in stmts:
            continue
        stmts.discard(k)
        for name in access[k][1]:
            if name in bufs and name not in params:
                bufs.discard(name)  # a writer is not constant: neither is the buffer
                dropped += [u for u in users[name] if u in stmts]
    return Constness(frozenset(stmts), frozenset(bufs - params))
