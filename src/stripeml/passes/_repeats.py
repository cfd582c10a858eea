"""Finding a model's repeated layers in a lowered program (:mod:`._replicate`
runs the passes over three of them and copies the middle one back).

**When the repeats are found.**  Each root statement gets a *skeleton*: the
statement with every name (of a buffer, a view, a scalar) replaced by the order
of its first appearance, block names and comments left out, indices, tags,
shapes, accesses, constants and everything else kept.  A period ``L`` (at
least :data:`MIN_PERIOD` statements) is a run where each statement's skeleton
is the one ``L`` statements on, for at least :data:`MIN_REPEATS` repeats; the
period that sets aside the most statements wins, if that is at least
:data:`MIN_SHARE` of the program's (:data:`RETRY_SHARE` for a second try), and the repeats start where
the fewest buffers cross from one repeat to the next (between layers, not
between a product and its bias), or where a start that split before did for
statements of the same kinds (:func:`remember`: the model's last input
shape).  Then, numbering each repeat's root buffers in order of first use
(its *window numbers*):

* every repeat uses its numbers in the same pattern;
* each number names either one buffer shared by every repeat (an attention
  mask the layers all read) or a buffer of each repeat's own, and the middle
  repeats' buffers of one number have the same direction, shape,
  aggregation, location, offset and ``const`` mark (the last layer's result
  may be the program's);
* every middle repeat's own buffers are used at the same statements relative
  to its start: no statement outside the repeat and its two neighbours reads
  them, and the neighbours read them alike.

Where a pass merged statements on both sides of a cut, :func:`realigned`
gives another start from what the passes made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np

from ..ir.nodes import Block, Program, Special, Statement
from ..ir.verify_memo import NameNumbers, UnknownStatement

__all__ = [
    "MIN_PERIOD",
    "MIN_REPEATS",
    "MIN_SHARE",
    "RETRY_SHARE",
    "Repeats",
    "find_repeats",
    "realigned",
    "remember",
    "root_names",
    "written",
]

#: Root statements per repeat, at least.
MIN_PERIOD = 4
#: Repeats, at least (three are kept: fewer would save nothing).
MIN_REPEATS = 4
#: The statements set aside, at least, as a share of the program's: below it the
#: passes over the smaller program cost nearly what they cost over the whole
#: (the light ResNet-50's 5 equal blocks of 10 statements of 178: 0.23 s a try
#: against 0.35 for the whole) ...
MIN_SHARE = 1 / 3
#: ... and for a second try, where the first start did not split (two tries
#: over under half the program cost more than one over all of it).
RETRY_SHARE = 1 / 2


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


def _skeleton_block(n: NameNumbers, b: Block) -> tuple:
    return (b.idxs, b.constraints, b.tags, n.views(b), tuple(map(n.stmt, b.stmts)))


def _skeleton(s: Statement) -> tuple[tuple, tuple[str, ...]]:
    """Root statement ``s`` with its names numbered (see the module docstring:
    :class:`~stripeml.ir.verify_memo.NameNumbers`, each block's indices in their
    order and its tags kept), and the root buffers it names, in order of first
    appearance."""
    numbers = NameNumbers(_skeleton_block)
    if isinstance(s, Special):
        return numbers.stmt(s), tuple(dict.fromkeys((*s.inputs, *s.outputs)))
    if not isinstance(s, Block):
        raise UnknownStatement
    names = tuple(dict.fromkeys(r.from_ for r in s.refs if r.from_))
    return _skeleton_block(numbers, s), names


def written(s: Statement) -> set[str]:
    """The root buffers root statement ``s`` writes."""
    if isinstance(s, Special):
        return set(s.outputs)
    if isinstance(s, Block):
        return {r.from_ for r in s.refs if r.from_ and r.dir in ("out", "inout")}
    return set()


def root_names(s: Statement) -> tuple[str, ...]:
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
    except (UnknownStatement, TypeError):  # TypeError: a field that does not hash
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
    if best is None or best[0] < MIN_SHARE * n:
        return None  # the smaller program would cost the passes nearly as much
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
        for nm in written(s):
            writer.setdefault(nm, k)
    names = {s.name: k for k, s in enumerate(stmts) if isinstance(s, Block) and s.name}
    pattern = None
    if names:
        words = "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
        pattern = re.compile(rf"(?<![A-Za-z0-9])(?:{words})(?![A-Za-z0-9])")
    blocked: set[int] = set()
    for s in done.root.stmts:
        members = {writer[nm] for nm in written(s) if nm in writer}
        if pattern is not None and isinstance(s, Block):
            members.update(names[m.group()] for m in pattern.finditer(s.name))
        if len(members) > 1:
            blocked.update(range(min(members) + 1, max(members) + 1))
    period, start = rep.period, rep.start
    roots = list(rep.roots)
    if (rep.count - 3) * period < RETRY_SHARE * len(roots):
        return None
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
