"""Repeated layers through the pipeline once, then copied.

A transformer's layers lower to one run of root statements repeated: BERT-base's
12 layers are 12 copies of 46 statements over other buffers (``T30`` in one
layer, ``T96`` in the next).  The passes decide each copy alike, so running them
over all 12 does the same work 12 times: most of a second sequence length's
compile.  :func:`find_repeats` finds such a run, :func:`reduce` keeps three of
its repeats (the first, one from the middle and the last, whose neighbours are
a repeat before and a repeat after, as every middle repeat's are), the pass
manager runs the passes over that smaller program, and :func:`expand` copies
the middle repeat's result back for every middle repeat, each with its own
buffer and kernel names.

**When the repeats are found**: :mod:`._repeats`.

**What the passes may do.**  Only passes that declare ``layer_local`` run on
the smaller program (:func:`.registry.layer_local`): each decides a statement
from the statement, the statements around it and where the buffers it touches
are used, so a middle repeat between two repeats comes out of them the same up
to names.  The pipeline from the first pass that does not declare it
(``place``, which lays out every temporary of the program at once) runs over
the whole program.  :func:`expand` checks what it relies on and gives up
(``None``: the pass manager then runs the whole pipeline over the whole
program) when the result does not split cleanly: the middle repeat's
statements must be one run touching only its own buffers, the buffers it reads
from the repeat before, shared buffers and buffers the passes made for it;
nothing before that run may touch its buffers, nothing after it but what the
last repeat read of it; names the passes made must not be names of the
repeats set aside; and the program's parameters and results must come out in
their order.

**What the copies are.**  The middle repeat's statements with its own buffers
renamed to each middle repeat's (views, scalars named after a buffer and the
comments too), its kernels renamed to that repeat's kernels (a part ``NAME_..``
of a kernel ``NAME`` to the part of the other kernel), and each buffer a pass
made for it named as the pass would have named that repeat's (the same suffix
after the other repeat's buffer), else with the repeat's number added.  The
final program is verified before the passes that see the whole program run,
as it is after every pass.

``STRIPEML_REPEATS=0`` turns this off (the pipeline runs over every layer).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace

from ..analysis.canonical import note_copies
from ..ir.nodes import (
    Block,
    Constant,
    Intrinsic,
    Load,
    LoadIndex,
    Program,
    Refinement,
    Special,
    Statement,
    Store,
)
from ._common import fresh
from ._repeats import Repeats, find_repeats, realigned, remember, root_names, written

__all__ = [
    "Repeats",
    "enabled",
    "expand",
    "find_repeats",
    "realigned",
    "reduce",
    "remember",
]


def enabled() -> bool:
    """Whether the pass manager looks for repeats (``STRIPEML_REPEATS=0``: never)."""
    return os.environ.get("STRIPEML_REPEATS", "1").strip() not in ("0", "off", "no", "false")


# -- the smaller program -----------------------------------------------------------


def reduce(program: Program, rep: Repeats) -> Program:
    """``program`` with repeats ``1 .. count - 2`` but the first set aside: the
    last repeat reads the middle repeat's buffers where it read the one before it."""
    root = program.root
    last = rep.count - 1
    back = {a: b for a, b in zip(rep.own_names(last - 1), rep.own_names(1))}
    drop: set[str] = set()
    for j in range(2, last):
        drop.update(rep.own_names(j))
    drop.difference_update(rep.names[1])
    stmts = root.stmts
    tail = [_rename_root(stmts[i], back) for i in rep.window(last)]
    kept = (*stmts[: rep.start + 2 * rep.period], *tail, *stmts[rep.end :])
    refs = tuple(r for r in root.refs if r.into not in drop)
    return Program(replace(root, refs=refs, stmts=kept))


def _rename_root(s: Statement, names: Mapping[str, str]) -> Statement:
    """``s`` with the root buffers it names renamed (its views keep their names)."""
    if isinstance(s, Special):
        return replace(
            s,
            inputs=tuple(names.get(n, n) for n in s.inputs),
            outputs=tuple(names.get(n, n) for n in s.outputs),
        )
    if isinstance(s, Block) and any(r.from_ in names for r in s.refs):
        refs = tuple(replace(r, from_=names[r.from_]) if r.from_ in names else r for r in s.refs)
        return replace(s, refs=refs)
    return s


# -- copying the middle repeat back ---------------------------------------------------


class _Clash(Exception):
    """A name a copy would give is one the copy already uses for something else."""


def expand(original: Program, reduced: Program, done: Program, rep: Repeats) -> Program | None:
    """The whole program from ``done`` (what the passes made of ``reduced``):
    the middle repeat's statements copied for every repeat set aside, or None
    when ``done`` does not split as the module docstring requires."""
    last = rep.count - 1
    names0 = set(rep.names[0])
    # the middle repeat's own buffers (not the ones it reads from the first)
    own1_set = {nm for nm in rep.own_names(1) if nm not in names0}
    shared = {nm for nm, mine in zip(rep.names[1], rep.own) if not mine}
    link_in = set(rep.own_names(1)) & names0
    before_names = {r.into for r in reduced.root.refs}
    everything = {r.into for r in original.root.refs}
    made = [r.into for r in done.root.refs if r.into not in before_names]
    if any(nm in everything for nm in made):
        return None  # a name the passes made is a name of a repeat set aside
    # the buffers of the middle repeat that the last one reads (its result)
    tail_end = len(reduced.root.stmts) - (len(original.root.stmts) - rep.end)
    tail = reduced.root.stmts[tail_end - rep.period : tail_end]
    link_out = own1_set & {nm for s in tail for nm in root_names(s)}
    stmts = done.root.stmts
    touched = [set(root_names(s)) for s in stmts]
    writes = [written(s) for s in stmts]
    inner = own1_set - link_out
    inside = [k for k in range(len(stmts)) if touched[k] & inner or writes[k] & own1_set]
    if not inside:
        return None
    p, q = inside[0], inside[-1] + 1
    made_set = set(made)
    allowed = own1_set | link_in | shared | made_set
    for k in range(p, q):
        if not touched[k] <= allowed:
            return None
    mine_made = {nm for k in range(p, q) for nm in touched[k] & made_set}
    mine = own1_set | mine_made
    for k in range(p):
        if touched[k] & mine:
            return None
    reads_later: set[str] = set()
    for k in range(q, len(stmts)):
        if writes[k] & mine:
            return None  # the last repeat writes what the middle one made
        reads_later |= touched[k]
    # what the last repeat reads of the middle one: its buffers as the repeat
    # before the last names them
    tail_reads = mine & reads_later
    refs1 = [r for r in done.root.refs if r.into in mine]

    taken = everything | {r.into for r in done.root.refs}
    copies: list[list[Statement]] = []
    copy_refs: list[dict[str, Refinement]] = []
    renames: list[dict[str, str]] = []
    for j in range(2, last):
        names = dict(zip(rep.names[1], rep.names[j]))
        for nm in shared:
            names.pop(nm, None)
        for nm in sorted(mine_made):
            names[nm] = _made_name(nm, names, taken, j)
            taken.add(names[nm])
        blocks = {
            a.name: b.name
            for a, b in zip(
                (original.root.stmts[i] for i in rep.window(1)),
                (original.root.stmts[i] for i in rep.window(j)),
            )
            if isinstance(a, Block) and isinstance(b, Block) and a.name
        }
        renamer = _Renamer(names, blocks)
        copies.append([renamer.stmt(stmts[k]) for k in range(p, q)])
        try:
            renamer.check()
        except _Clash:
            return None
        copy_refs.append({r.into: replace(r, into=names[r.into]) for r in refs1})
        renames.append(names)
    note_copies([
        (c, s) for copy in copies for c, s in zip(copy, stmts[p:q])
        if isinstance(c, Block) and isinstance(s, Block)
    ])  # fmt: skip
    back = {nm: renames[-1][nm] for nm in tail_reads}
    after = [_rename_root(s, back) if touched[k] & tail_reads else s
             for k, s in enumerate(stmts[q:], start=q)]  # fmt: skip
    out_stmts = (*stmts[:q], *(s for c in copies for s in c), *after)
    refs = _refs(done.root.refs, mine, copy_refs)
    for kind in ("in", "out"):
        want = [r.into for r in original.root.refs if r.dir == kind]
        if [r.into for r in refs if r.dir == kind] != want:
            return None
    return Program(replace(done.root, refs=tuple(refs), stmts=out_stmts))


def _refs(
    refs: Iterable[Refinement], mine: set[str], copies: list[dict[str, Refinement]]
) -> list[Refinement]:
    """``refs`` with each run of the middle repeat's refinements followed by the
    same run of every copy, in order (as the passes, run over every repeat,
    would have listed them: parameters and results keep their order)."""
    out: list[Refinement] = []
    run: list[str] = []
    for r in (*refs, None):
        if r is not None and r.into in mine:
            run.append(r.into)
        elif run:
            for c in copies:
                out.extend(c[nm] for nm in run)
            run = []
        if r is not None:
            out.append(r)
    return out


def _made_name(name: str, names: Mapping[str, str], taken: set[str], j: int) -> str:
    """A name for repeat ``j``'s copy of buffer ``name``, which a pass made for the
    middle repeat: the same suffix after the other repeat's buffer where ``name``
    extends one of the middle repeat's (``T30_p`` -> ``T96_p``), else ``name``
    with the repeat's number."""
    base = name
    while base:
        if base in names and base != name:
            return fresh(names[base] + name[len(base) :], taken)
        base = base.rpartition("_")[0]
    return fresh(f"{name}_{j}", taken)


class _Renamer:
    """Statements of the middle repeat renamed to another repeat's.

    ``names``: the middle repeat's buffers to the other's; ``blocks``: its
    kernels' names to the other's.  A name (of a view, a scalar, a block) or a
    comment has each of those that it holds as a word, between characters that
    are not letters or digits, replaced: ``T30``, ``$T30``, ``T30_sum``,
    ``k17_T30_nest``.  A name that a copy would both make and keep unchanged
    (two names becoming one) is a clash: :meth:`check` raises it."""

    def __init__(self, names: Mapping[str, str], blocks: Mapping[str, str]) -> None:
        self.names = names
        self.words = {**names, **blocks}
        words = sorted(self.words, key=len, reverse=True)
        alternatives = "|".join(map(re.escape, words))
        self.pattern = re.compile(rf"(?<![A-Za-z0-9])(?:{alternatives})(?![A-Za-z0-9])")
        self.made: set[str] = set()
        self.kept: set[str] = set()

    def sub(self, text: str) -> str:
        return self.pattern.sub(lambda m: self.words[m.group()], text) if text else text

    def name(self, n: str) -> str:
        got = self.names.get(n)
        if got is None:
            if n[:1] == "$" and n[1:] in self.names:
                got = "$" + self.names[n[1:]]
            elif "_" in n:
                got = self.sub(n)
        if got is None or got == n:
            self.kept.add(n)
            return n
        self.made.add(got)
        return got

    def check(self) -> None:
        both = self.made & self.kept
        if both:
            raise _Clash(min(both))

    def stmt(self, s: Statement) -> Statement:
        name = self.name
        kind = type(s)
        if kind is Load:
            assert isinstance(s, Load)
            return Load(name(s.into), name(s.ref))
        if kind is Store:
            assert isinstance(s, Store)
            return Store(name(s.ref), name(s.value))
        if kind is Intrinsic:
            assert isinstance(s, Intrinsic)
            return Intrinsic(s.op, tuple(map(name, s.inputs)), name(s.into), s.dtype)
        if kind is Constant:
            assert isinstance(s, Constant)
            return Constant(name(s.into), s.value, s.dtype)
        if kind is LoadIndex:
            assert isinstance(s, LoadIndex)
            return LoadIndex(name(s.into), s.expr)
        if kind is Special:
            assert isinstance(s, Special)
            return replace(
                s, inputs=tuple(map(name, s.inputs)), outputs=tuple(map(name, s.outputs))
            )
        assert isinstance(s, Block)
        refs = tuple(
            replace(r, into=name(r.into), from_=name(r.from_) if r.from_ else r.from_)
            for r in s.refs
        )
        return replace(
            s,
            refs=refs,
            stmts=tuple(map(self.stmt, s.stmts)),
            name=self.sub(s.name),
            comment=self.sub(s.comment),
        )
