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

**When the repeats are found.**  Each root statement gets a *skeleton*: the
statement with every name (of a buffer, a view, a scalar) replaced by the order
of its first appearance, block names and comments left out, indices, tags,
shapes, accesses, constants and everything else kept.  A period ``L`` (at
least :data:`MIN_PERIOD` statements) is a run where each statement's skeleton
is the one ``L`` statements on, for at least :data:`MIN_REPEATS` repeats; the
period that sets aside the most statements wins, and the repeats start where
the fewest buffers cross from one repeat to the next (between layers, not
between a product and its bias).  Then, numbering each repeat's root buffers
in order of first use (its *window numbers*):

* every repeat uses its numbers in the same pattern;
* each number names either one buffer shared by every repeat (an attention
  mask the layers all read) or a buffer of each repeat's own, and the middle
  repeats' buffers of one number have the same direction, shape,
  aggregation, location, offset and ``const`` mark (the last layer's result
  may be the program's);
* every middle repeat's own buffers are used at the same statements relative
  to its start: no statement outside the repeat and its two neighbours reads
  them, and the neighbours read them alike.

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
from dataclasses import dataclass, field, replace

import numpy as np

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

__all__ = [
    "MIN_PERIOD",
    "MIN_REPEATS",
    "Repeats",
    "enabled",
    "expand",
    "find_repeats",
    "realigned",
    "reduce",
    "remember",
]

#: Root statements per repeat, at least.
MIN_PERIOD = 4
#: Repeats, at least (three are kept: fewer would save nothing).
MIN_REPEATS = 4


def enabled() -> bool:
    """Whether the pass manager looks for repeats (``STRIPEML_REPEATS=0``: never)."""
    return os.environ.get("STRIPEML_REPEATS", "1").strip() not in ("0", "off", "no", "false")


@dataclass(frozen=True)
class Repeats:
    """A run of ``count`` repeats of ``period`` root statements from ``start``.

    ``names[j]``: repeat ``j``'s root buffers by window number; ``own[x]``:
    whether number ``x`` names a buffer of each repeat's own (else one buffer
    every repeat shares)."""

    start: int
    period: int
    count: int
    names: tuple[tuple[str, ...], ...]
    own: tuple[bool, ...]
    #: the repeated statements found, ``[first, last)``, whatever the repeats' start
    region: tuple[int, int] = (0, 0)
    #: every root statement's root buffers, in order of first appearance
    roots: tuple[tuple[str, ...], ...] = field(default=(), repr=False, compare=False)
    #: the kinds of a period's statements from ``region``'s first (:func:`remember`)
    kinds: tuple = field(default=(), repr=False, compare=False)

    def window(self, j: int) -> range:
        first = self.start + j * self.period
        return range(first, first + self.period)

    @property
    def end(self) -> int:
        return self.start + self.count * self.period

    def own_names(self, j: int) -> list[str]:
        return [n for n, mine in zip(self.names[j], self.own) if mine]


# -- skeletons -------------------------------------------------------------------


class _Unknown(Exception):
    """A statement of no known kind: no skeleton."""


def _skeleton(s: Statement) -> tuple[tuple, tuple[str, ...]]:
    """Root statement ``s`` with its names numbered (see the module docstring),
    and the root buffers it names, in order of first appearance."""
    refs: dict[str, int] = {}
    scalars: dict[str, int] = {}

    def ref(n: str) -> int:
        return refs.setdefault(n, len(refs)) if n else -1

    def scalar(n: str) -> tuple[bool, int]:
        return (n.startswith("$"), scalars.setdefault(n, len(scalars)))

    def block(b: Block) -> tuple:
        views = tuple(
            (r.dir, ref(r.from_), ref(r.into), r.shape, r.access, r.agg, r.location, r.offset,
             r.const)
            for r in b.refs
        )  # fmt: skip
        return (b.idxs, b.constraints, b.tags, views, tuple(stmt(t) for t in b.stmts))

    def stmt(t: object) -> tuple:
        kind = type(t)
        if kind is Load:
            return ("load", scalar(t.into), ref(t.ref))  # type: ignore[attr-defined]
        if kind is Store:
            return ("store", ref(t.ref), scalar(t.value))  # type: ignore[attr-defined]
        if kind is Intrinsic:
            assert isinstance(t, Intrinsic)
            return ("op", t.op, tuple(map(scalar, t.inputs)), scalar(t.into), t.dtype)
        if kind is Constant:
            assert isinstance(t, Constant)
            return ("const", scalar(t.into), repr(t.value), t.dtype)
        if kind is LoadIndex:
            assert isinstance(t, LoadIndex)
            return ("index", scalar(t.into), t.expr)
        if kind is Block:
            assert isinstance(t, Block)
            return block(t)
        raise _Unknown

    if isinstance(s, Special):
        names = tuple(dict.fromkeys((*s.inputs, *s.outputs)))
        ins, outs = tuple(map(ref, s.inputs)), tuple(map(ref, s.outputs))
        return ("special", s.op, ins, outs, repr(s.params)), names
    if not isinstance(s, Block):
        raise _Unknown
    names = tuple(dict.fromkeys(r.from_ for r in s.refs if r.from_))
    return block(s), names


def _written(s: Statement) -> set[str]:
    """The root buffers root statement ``s`` writes."""
    if isinstance(s, Special):
        return set(s.outputs)
    if isinstance(s, Block):
        return {r.from_ for r in s.refs if r.from_ and r.dir in ("out", "inout")}
    return set()


def _root_names(s: Statement) -> tuple[str, ...]:
    if isinstance(s, Special):
        return (*s.inputs, *s.outputs)
    if isinstance(s, Block):
        return tuple(r.from_ for r in s.refs if r.from_)
    return ()


# -- finding the repeats -----------------------------------------------------------


def find_repeats(program: Program) -> Repeats | None:
    """The run of repeated root statements of ``program`` that sets aside the
    most statements, checked as the module docstring says; None when there is
    none."""
    root = program.root
    stmts = root.stmts
    n = len(stmts)
    if n < MIN_PERIOD * MIN_REPEATS:
        return None
    table: dict[tuple, int] = {}
    keys: list[int] = []
    roots: list[tuple[str, ...]] = []
    try:
        for s in stmts:
            sk, names = _skeleton(s)
            keys.append(table.setdefault(sk, len(table)))
            roots.append(names)
    except (_Unknown, TypeError):  # TypeError: a field that does not hash
        return None
    ids = np.asarray(keys)
    best: tuple[int, int, int, int] | None = None  # (statements saved, period, first, run)
    for period in range(MIN_PERIOD, n // MIN_REPEATS + 1):
        eq = ids[:-period] == ids[period:]
        if not eq.any():
            continue
        edges = np.diff(np.concatenate(([0], eq.astype(np.int8), [0])))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        k = int(np.argmax(ends - starts))
        run = int(ends[k] - starts[k])
        count = (run + period) // period
        if count < MIN_REPEATS:
            continue
        saved = (count - 3) * period
        if best is None or saved > best[0]:
            best = (saved, period, int(starts[k]), run)
    if best is None:
        return None
    _, period, first, run = best
    kinds = tuple(_kind(stmts[i]) for i in range(first, first + period))
    known = _STARTS.get(kinds)
    start = first + known if known is not None else _aligned(roots, period, first, run)
    rep = _at(root, roots, start, period, (first, first + run + period))
    return None if rep is None else replace(rep, kinds=kinds)


#: Where repeats started that split (see :func:`remember`): the statements' kinds
#: of a period from the first repeated statement -> the start's offset from it.
#: A model's next input shape has the same kinds (not the same shapes).
_STARTS: dict[tuple, int] = {}
_MAX_STARTS = 64


def _kind(s: Statement) -> tuple:
    if isinstance(s, Special):
        return ("special", s.op)
    if isinstance(s, Block):
        return ("block", tuple(sorted(s.tags)), len(s.refs), len(s.stmts))
    return (type(s).__name__,)


def remember(rep: Repeats) -> None:
    """Note that ``rep``'s start split (the next input shape starts there)."""
    if rep.kinds:
        _STARTS.pop(rep.kinds, None)
        _STARTS[rep.kinds] = rep.start - rep.region[0]
        while len(_STARTS) > _MAX_STARTS:
            _STARTS.pop(next(iter(_STARTS)))


def _at(
    root: Block, roots: list[tuple[str, ...]], start: int, period: int, region: tuple[int, int]
) -> Repeats | None:
    """The repeats of ``region`` that start at ``start``, checked; None if fewer
    than :data:`MIN_REPEATS` fit or the checks fail."""
    count = (region[1] - start) // period
    if start < region[0] or count < MIN_REPEATS:
        return None
    rep = _checked(root, roots, start, period, count)
    if rep is None:
        return None
    return replace(rep, region=region, roots=tuple(roots))


def _aligned(roots: list[tuple[str, ...]], period: int, first: int, run: int) -> int:
    """Where the repeats start, in ``first .. first + period - 1`` (keeping at
    least :data:`MIN_REPEATS`): the cut with the fewest buffers that both the
    repeat before it and the repeat after it use."""
    best, where = None, first
    for o in range(period):
        if (run + period - o) // period < MIN_REPEATS:
            break
        cut = first + o + period
        before = {nm for i in range(cut - period, cut) for nm in roots[i]}
        after = {nm for i in range(cut, cut + period) for nm in roots[i]}
        crossing = len(before & after)
        if best is None or crossing < best:
            best, where = crossing, first + o
    return where


def _checked(
    root: Block, roots: list[tuple[str, ...]], start: int, period: int, count: int
) -> Repeats | None:
    """The repeats at ``start`` if they pass the module docstring's checks."""
    names: list[tuple[str, ...]] = []
    pattern = None
    for j in range(count):
        number: dict[str, int] = {}
        first = start + j * period
        pat = [tuple(number.setdefault(nm, len(number)) for nm in roots[i])
               for i in range(first, first + period)]  # fmt: skip
        if pattern is None:
            pattern = pat
        elif pat != pattern:
            return None
        names.append(tuple(number))
    refs = {r.into: r for r in root.refs}
    own: list[bool] = []
    for x in range(len(names[0])):
        these = [names[j][x] for j in range(count)]
        distinct = len(set(these))
        if distinct == 1:
            own.append(False)
        elif distinct == count:
            own.append(True)
        else:
            return None
        facts = set()
        for nm in these[1:-1]:  # the first and the last repeat run as they are
            r = refs.get(nm)
            if r is None:
                return None
            facts.add((r.dir, r.shape, r.agg, r.location, r.offset, r.const))
        if len(facts) != 1:
            return None
    uses: dict[str, list[int]] = {}
    for i, nms in enumerate(roots):
        for nm in nms:
            uses.setdefault(nm, []).append(i)
    for x, mine in enumerate(own):
        if not mine:
            continue
        seen = None
        for j in range(1, count - 1):
            first = start + j * period
            rel = tuple(i - first for i in uses[names[j][x]])
            if seen is None:
                seen = rel
            elif rel != seen:
                return None
    return Repeats(start, period, count, tuple(names), tuple(own))


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


def realigned(original: Program, reduced: Program, done: Program, rep: Repeats) -> Repeats | None:
    """Other repeats of the same statements when ``done`` (the passes' result on
    ``reduced``) did not split at ``rep``'s cuts: a pass merged statements on
    both sides of one (GPT-2's residual add into the next layer norm's mean).
    Each statement of ``done`` covers the statements of ``reduced`` whose
    buffers it writes or whose kernels its name holds (``fuse`` names a merged
    kernel after its parts); a start where no statement covers both sides of
    any of the three cuts, with the fewest buffers crossing, is tried instead
    (None: no such start)."""
    stmts = reduced.root.stmts
    writer: dict[str, int] = {}
    for k, s in enumerate(stmts):
        for nm in _written(s):
            writer.setdefault(nm, k)
    names = {s.name: k for k, s in enumerate(stmts) if isinstance(s, Block) and s.name}
    pattern = None
    if names:
        words = "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
        pattern = re.compile(rf"(?<![A-Za-z0-9])(?:{words})(?![A-Za-z0-9])")
    blocked: set[int] = set()
    for s in done.root.stmts:
        members = {writer[nm] for nm in _written(s) if nm in writer}
        if pattern is not None and isinstance(s, Block):
            members.update(names[m.group()] for m in pattern.finditer(s.name))
        if len(members) > 1:
            blocked.update(range(min(members) + 1, max(members) + 1))
    period, start = rep.period, rep.start
    roots = list(rep.roots)
    best: tuple[int, int, int] | None = None  # (crossing, |offset|, offset)
    for o in range(-period + 1, period):
        if any(start + j * period + o in blocked for j in range(3)):
            continue
        if start + o < rep.region[0] or (rep.region[1] - start - o) // period < MIN_REPEATS:
            continue
        cut = start + o + period
        before = {nm for i in range(cut - period, cut) for nm in roots[i]}
        after = {nm for i in range(cut, cut + period) for nm in roots[i]}
        key = (len(before & after), abs(o), o)
        if best is None or key < best:
            best = key
    if best is None or best[2] == 0:
        return None
    got = _at(original.root, roots, start + best[2], period, rep.region)
    return None if got is None else replace(got, kinds=rep.kinds)


# -- copying the middle repeat back ---------------------------------------------------


class _Clash(Exception):
    """A name a copy would give is one the copy already uses for something else."""


def expand(original: Program, reduced: Program, done: Program, rep: Repeats) -> Program | None:
    """The whole program from ``done`` (what the passes made of ``reduced``):
    the middle repeat's statements copied for every repeat set aside, or None
    when ``done`` does not split as the module docstring requires."""
    last = rep.count - 1
    names0 = set(rep.names[0])
    own1 = [nm for nm in rep.own_names(1) if nm not in names0]
    own1_set = set(own1)
    shared = {nm for nm, mine in zip(rep.names[1], rep.own) if not mine}
    link_in = set(rep.own_names(1)) & names0
    before_names = {r.into for r in reduced.root.refs}
    everything = {r.into for r in original.root.refs}
    made = [r.into for r in done.root.refs if r.into not in before_names]
    if any(nm in everything for nm in made):
        return None  # a name the passes made is a name of a repeat set aside
    # the buffers of the middle repeat that the last one reads (its result)
    link_out = own1_set & {
        nm for i in range(len(reduced.root.stmts) - (len(original.root.stmts) - rep.end) - rep.period,
                          len(reduced.root.stmts) - (len(original.root.stmts) - rep.end))
        for nm in _root_names(reduced.root.stmts[i])
    }  # fmt: skip
    stmts = done.root.stmts
    touched = [set(_root_names(s)) for s in stmts]
    written = [_written(s) for s in stmts]
    inner = own1_set - link_out
    inside = [k for k in range(len(stmts)) if touched[k] & inner or written[k] & own1_set]
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
        if written[k] & mine:
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
