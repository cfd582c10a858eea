"""Index-range inference and output coverage for contractions, answered with isl.

A contraction aggregates over every integer index tuple for which each access
is in bounds and each constraint holds.  That set of tuples is a polyhedron;
its bounding box gives each index's range, and the bounds the box does not
imply stay behind as block constraints.

Two common shapes of question are answered exactly without isl: ranges when
every bound names one index (a matmul's; a 1 x 1 convolution's, once its
window's indices, which their bounds fix at 0, are put in: the tuples are then
a box), and coverage when the output's accesses are its own indices and no
bound ties them to the other indices (each output element is then reached
exactly when its own bounds hold there and the other indices' tuples are not
none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import islpy as isl

from ..ir.affine import Affine
from ..ir.isl import constrain, set_space


@dataclass(frozen=True, slots=True)
class Bound:
    """``0 <= expr <= hi`` (``hi`` inclusive), with a label for diagnostics."""

    expr: Affine
    hi: int
    what: str


@dataclass(frozen=True, slots=True)
class RangeResult:
    """Per index ``(lo, hi)`` inclusive; ``empty`` when no tuple is valid."""

    ranges: dict[str, tuple[int, int]]
    empty: bool
    unbounded: tuple[str, ...]


def _names(indices: Sequence[str]) -> dict[str, str]:
    # isl identifiers must not clash with its keywords; map to safe names.
    return {n: f"v{i}_" for i, n in enumerate(indices)}


def domain_set(indices: Sequence[str], bounds: Sequence[Bound]) -> isl.Set:
    """The set of integer tuples ``[indices]`` satisfying every bound (built by
    isl's constraint calls: parsing the same set from text took 4x as long)."""
    return _domain(indices, bounds).to_set()


def _domain(indices: Sequence[str], bounds: Sequence[Bound], extra: Sequence[str] = ()):
    """:func:`domain_set` as a basic set, with free dimensions ``extra`` after the indices."""
    safe = _names(indices)
    exprs: list[Affine] = []
    for b in bounds:
        e = b.expr.rename(safe)
        exprs += [e, Affine.constant(b.hi) - e]
    space = set_space(tuple(safe[n] for n in indices) + tuple(extra))
    return constrain(isl.BasicSet.universe(space), exprs)


def infer_ranges(indices: Sequence[str], bounds: Sequence[Bound]) -> RangeResult:
    """Bounding box of the valid index tuples (exact integer projections).

    Answers are remembered by the indices and the bounds' expressions and limits
    (not their labels): a model's repeated layers ask the same questions of isl
    with other tensor names (BERT-base: 183 contractions, 10 distinct questions)."""
    found = _infer_ranges(tuple(indices), _bounds_key(bounds))
    return RangeResult(dict(found.ranges), found.empty, found.unbounded)


def _bounds_key(bounds: Sequence[Bound]) -> tuple[tuple[Affine, int], ...]:
    return tuple((b.expr, b.hi) for b in bounds)


def _unlabelled(key: tuple[tuple[Affine, int], ...]) -> list[Bound]:
    return [Bound(e, hi, "") for e, hi in key]


@lru_cache(maxsize=4096)
def _infer_ranges(indices: tuple[str, ...], key: tuple[tuple[Affine, int], ...]) -> RangeResult:
    pinned = _pinned(key)
    plain = RangeResult({}, True, ()) if pinned is None else _box_ranges(indices, pinned)
    if plain is not None:
        return plain
    dom = domain_set(indices, _unlabelled(key))
    if dom.is_empty():
        return RangeResult({}, True, ())
    ranges: dict[str, tuple[int, int]] = {}
    unbounded = []
    for pos, name in enumerate(indices):
        lo = dom.dim_min_val(pos)
        hi = dom.dim_max_val(pos)
        if lo.is_infty() or lo.is_neginfty() or hi.is_infty() or hi.is_neginfty():
            unbounded.append(name)
            continue
        ranges[name] = (int(lo.to_python()), int(hi.to_python()))
    return RangeResult(ranges, False, tuple(unbounded))


def _interval(coeff: int, const: int, top: int) -> tuple[int, int]:
    """The integers ``i`` with ``0 <= coeff * i + const <= top`` (``coeff`` not 0)."""
    a, b = -const, top - const
    return (-(-a // coeff), b // coeff) if coeff > 0 else (-(-b // coeff), a // coeff)


def _pinned(key: tuple[tuple[Affine, int], ...]) -> tuple[tuple[Affine, int], ...] | None:
    """``key``'s bounds with each index that its one-index bounds fix to one value
    (a 1 x 1 window's) put in as that value where it shares a bound with other
    indices (again, as long as that fixes more); ``None`` when those bounds leave
    some index no value.  The same tuples are valid."""
    while True:
        lo: dict[str, int] = {}
        hi: dict[str, int] = {}
        for expr, top in key:
            if len(expr.terms) == 1:
                ((name, coeff),) = expr.terms
                first, last = _interval(coeff, expr.const, top)
                lo[name] = max(lo.get(name, first), first)
                hi[name] = min(hi.get(name, last), last)
        if any(lo[n] > hi[n] for n in lo):
            return None
        shared = {n for expr, _ in key if len(expr.terms) > 1 for n, _ in expr.terms}
        fixed = {n: lo[n] for n in shared & lo.keys() if lo[n] == hi[n]}
        if not fixed:
            return key
        key = tuple(
            (expr.substitute(fixed) if len(expr.terms) > 1 else expr, top) for expr, top in key
        )


def _box_ranges(
    indices: tuple[str, ...], key: tuple[tuple[Affine, int], ...]
) -> RangeResult | None:
    """:func:`infer_ranges` when every bound names at most one index (the valid
    tuples are then a box: each index's interval is the intersection of its
    bounds', exactly, in integers), else ``None``."""
    lo: dict[str, int] = {}
    hi: dict[str, int] = {}
    for expr, top in key:
        if not expr.terms:
            if not 0 <= expr.const <= top:
                return RangeResult({}, True, ())
            continue
        if len(expr.terms) != 1:
            return None
        ((name, coeff),) = expr.terms
        if name not in indices:
            return None
        first, last = _interval(coeff, expr.const, top)
        lo[name] = max(lo.get(name, first), first)
        hi[name] = min(hi.get(name, last), last)
    if any(lo[n] > hi[n] for n in lo):
        return RangeResult({}, True, ())
    ranges = {n: (lo[n], hi[n]) for n in indices if n in lo}
    return RangeResult(ranges, False, tuple(n for n in indices if n not in lo))


def implied_by_box(expr: Affine, hi: int, box: dict[str, tuple[int, int]]) -> bool:
    """Whether ``0 <= expr <= hi`` holds at every point of ``box`` (exact for boxes)."""
    lo_v = hi_v = expr.const
    for n, c in expr.terms:
        a, b = box[n]
        lo_v += min(c * a, c * b)
        hi_v += max(c * a, c * b)
    return lo_v >= 0 and hi_v <= hi


def covers(
    indices: Sequence[str],
    bounds: Sequence[Bound],
    out_access: Sequence[Affine],
    out_sizes: Sequence[int],
) -> bool:
    """Whether every output element is reached by some valid tuple (remembered
    like :func:`infer_ranges`)."""
    if any(s <= 0 for s in out_sizes):
        return True
    return _covers(tuple(indices), _bounds_key(bounds), tuple(out_access), tuple(out_sizes))


@lru_cache(maxsize=4096)
def _covers(
    indices: tuple[str, ...],
    key: tuple[tuple[Affine, int], ...],
    out_access: tuple[Affine, ...],
    out_sizes: tuple[int, ...],
) -> bool:
    pinned = _pinned(key)
    if pinned is None:
        return False  # no valid tuple
    plain = _covers_plainly(indices, key, pinned, out_access, out_sizes)
    if plain is not None:
        return plain
    # The points of the domain beside the elements they reach (o = access): one
    # element per point, so empty exactly when the domain is.
    safe = _names(indices)
    outs = tuple(f"o{i}_" for i in range(len(out_access)))
    reach: list[Affine] = []
    for o, a in zip(outs, out_access):
        diff = Affine.index(o) - a.rename(safe)
        reach += [diff, -diff]
    pairs = constrain(_domain(indices, _unlabelled(key), outs), reach)
    if pairs.is_empty():
        return False
    image = pairs.project_out(isl.dim_type.set, 0, len(indices)).to_set()
    box_conds: list[Affine] = []
    for o, size in zip(outs, out_sizes):
        box_conds += [Affine.index(o), Affine.constant(size - 1) - Affine.index(o)]
    box = constrain(isl.BasicSet.universe(set_space(outs)), box_conds).to_set()
    return box.is_subset(image)


def _covers_plainly(
    indices: tuple[str, ...],
    key: tuple[tuple[Affine, int], ...],
    pinned: tuple[tuple[Affine, int], ...],
    out_access: tuple[Affine, ...],
    out_sizes: tuple[int, ...],
) -> bool | None:
    """:func:`covers` without isl when each output access is an index of its own
    (coefficient 1, no constant) and no bound (``pinned``: :func:`_pinned`'s
    bounds of ``key``) names both an output index and another index, else
    ``None``.  Then an element is reached exactly when the
    bounds on the output indices alone hold at it (a box's corners decide that)
    and some tuple of the other indices is valid: the domain is not empty, the
    output box being not empty (:func:`covers` answered the empty ones)."""
    outs = []
    for a in out_access:
        if a.const != 0 or len(a.terms) != 1 or a.terms[0][1] != 1:
            return None
        outs.append(a.terms[0][0])
    own = set(outs)
    if len(own) != len(outs) or not own <= set(indices):
        return None
    box = {n: (0, size - 1) for n, size in zip(outs, out_sizes)}
    tied = False
    for expr, top in pinned:
        names = {n for n, _ in expr.terms}
        if names <= own:
            if not implied_by_box(expr, top, box):
                return False  # an element where this bound fails: no tuple reaches it
        elif names & own:
            tied = True
    if tied:
        return None
    return not _infer_ranges(indices, key).empty
