"""Kernel fast path: whole index boxes as strided views, contracted by NumPy.

It applies to a leaf block whose statements are loads, constants,
``load_index``, intrinsics and one store (no nested blocks, specials or
allocations).  Its own indices are split into a few *enumerated* ones (a small
product of ranges, chosen so that once they are fixed every constraint bounds
at most one remaining index) and the *rest*, which then ranges over a box.
For each parent point and each tap (values of the enumerated indices) every
load becomes an ``as_strided`` view of its storage with one axis per index of
the box, and

* ``contract`` mode (``add`` aggregation over indices absent from the output,
  value a product of factors each computed from at most one load): the
  factors are contracted with ``np.einsum`` (BLAS for matmul-like shapes);
* ``map`` mode (everything else): the statements run elementwise on the
  broadcast views and indices absent from the output are reduced with the
  aggregation's ufunc (an ``assign`` with such an index is a race).

The result is stored into the aggregation scope as one strided box, so
coverage, ``inout`` and race checks are the general path's.
"""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass

import numpy as np

from ...ir.affine import Affine
from ...ir.dtypes import to_numpy
from ...ir.nodes import Block, Constant, Intrinsic, Load, LoadIndex, Store
from .frame import Frame, Options, View, constant
from .intrinsics import apply_intrinsic
from .traffic import Traffic

MAX_TAPS = 4096  # auto mode: at most this many (parent point, tap) pairs ...
MIN_POINTS_PER_TAP = 1024  # ... each covering this many points on average
MAX_ENUM_CANDIDATES = 16
_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
_LETTERS = string.ascii_letters

Coefs = dict[str, int]  # coefficient per local index
Fixed = dict[str, int]  # values of the enumerated indices at one tap
Box = dict[str, tuple[int, int]]  # (low, length) of every rest index at one tap
Def = Load | Constant | Intrinsic | LoadIndex  # a statement defining a scalar


@dataclass(frozen=True)
class _Plan:
    vars: tuple[str, ...]  # own indices with range > 1
    ranges: dict[str, int]
    enum: tuple[str, ...]  # enumerated indices
    rest: tuple[str, ...]  # indices spanning the box
    store: Store
    mode: str  # "contract" | "map"
    factors: tuple[str, ...]  # contract: scalars whose product is the stored value


def try_fast(block: Block, parent: Frame, views: list[View], opts: Options) -> bool:
    """Run ``block`` on the fast path if it fits (and pays off); else return False."""
    plan = _analyse(block, views)
    if plan is None:
        return False
    taps = int(np.prod([plan.ranges[v] for v in plan.enum]))
    total = int(np.prod([plan.ranges[v] for v in plan.vars]))
    box = total // taps
    if plan.mode == "map" and box > 4 * opts.chunk_points:
        return False
    n_par = parent.points.n
    if opts.mode == "auto" and (n_par * taps > MAX_TAPS or total < MIN_POINTS_PER_TAP * taps):
        return False
    _Runner(block, parent, views, plan, opts).run()
    return True


def _analyse(block: Block, views: list[View]) -> _Plan | None:
    defs: dict[str, Def] = {}
    stores = []
    for s in block.stmts:
        if isinstance(s, Store):
            stores.append(s)
        elif isinstance(s, (Load, Constant, Intrinsic, LoadIndex)):
            defs[s.into] = s
        else:
            return None
    if len(stores) != 1:
        return None
    store = stores[0]
    by_name = {v.ref.into: v for v in views}
    out = by_name.get(store.ref)
    if out is None or out.sink is None:
        return None
    ranges = {i.name: i.range for i in block.idxs if i.range > 1}
    vars_ = tuple(ranges)
    multi = [set(_coefs(c.expr, ranges)) for c in block.constraints]
    multi = [s for s in multi if len(s) > 1]
    enum = _choose_enumerated(multi, ranges)
    if enum is None:
        return None
    rest = tuple(v for v in vars_ if v not in enum)
    out_coefs = _coefs(out.flat, ranges)
    reduced = [v for v in rest if v not in out_coefs]
    mode = "map"
    factors: tuple[str, ...] = ()
    if reduced and out.ref.agg == "add" and out.ref.shape.dtype != "bool":
        found = _factorise(store.value, defs, out.ref.shape.dtype)
        if found is not None:
            mode, factors = "contract", found
    return _Plan(vars_, ranges, enum, rest, store, mode, factors)


def _coefs(aff: Affine, ranges: dict[str, int]) -> Coefs:
    return {n: c for n, c in aff.terms if n in ranges}


def _choose_enumerated(multi: list[set[str]], ranges: dict[str, int]) -> tuple[str, ...] | None:
    """Cheapest index set whose fixing leaves at most one free index per constraint."""
    cands = sorted(set().union(*multi)) if multi else []
    if len(cands) > MAX_ENUM_CANDIDATES:
        return None
    best: tuple[int, tuple[str, ...]] | None = None
    for k in range(len(cands) + 1):
        for subset in itertools.combinations(cands, k):
            if all(len(s - set(subset)) <= 1 for s in multi):
                cost = int(np.prod([ranges[v] for v in subset]))
                if best is None or cost < best[0]:
                    best = (cost, subset)
    assert best is not None  # enumerating every candidate always works
    return tuple(v for v in ranges if v in best[1])


def _factorise(value: str, defs: dict[str, Def], dtype: str) -> tuple[str, ...] | None:
    """Split ``value`` into ``mul`` factors that each depend on at most one load."""
    s = defs.get(value)
    if isinstance(s, Intrinsic) and s.op == "mul" and s.dtype == dtype:
        left = _factorise(s.inputs[0], defs, dtype)
        right = _factorise(s.inputs[1], defs, dtype)
        return None if left is None or right is None else left + right
    loads: set[str] = set()
    if not _collect_loads(value, defs, loads) or len(loads) > 1:
        return None
    return (value,)


def _collect_loads(name: str, defs: dict[str, Def], loads: set[str]) -> bool:
    s = defs.get(name)
    if isinstance(s, Load):
        loads.add(s.into)
        return True
    if isinstance(s, Constant):
        return True
    if isinstance(s, Intrinsic):
        return all(_collect_loads(i, defs, loads) for i in s.inputs)
    return False  # load_index: not a function of one buffer


class _Runner:
    """Executes one planned block for every parent point and tap."""

    def __init__(
        self, block: Block, parent: Frame, views: list[View], plan: _Plan, opts: Options
    ) -> None:
        self.block, self.plan = block, plan
        self.traffic = opts.traffic
        self.views = {v.ref.into: v for v in views}
        self.out = self.views[plan.store.ref]
        sink = self.out.sink
        assert sink is not None  # _analyse plans only stores into an aggregation scope
        self.sink = sink
        self.letter = {v: _LETTERS[k] for k, v in enumerate(plan.vars)}
        self.paths: dict[str, list] = {}
        points = parent.points
        local0 = {i.name: i.affine if i.affine is not None else 0 for i in block.idxs}

        def split(aff: Affine, extra: np.ndarray | None = None) -> tuple[Coefs, np.ndarray]:
            # Coefficients on the local (0-based) indices, and the value at
            # local 0 for every parent point.
            consts = points.eval(aff.substitute(local0))
            return _coefs(aff, plan.ranges), consts if extra is None else consts + extra

        self.n_par = points.n
        self.refs = {n: split(v.flat, v.parent.base) for n, v in self.views.items()}
        self.cons = [split(c.expr) for c in block.constraints]
        self.indices = {s.into: split(s.expr) for s in block.stmts if isinstance(s, LoadIndex)}

    def run(self) -> None:
        plan = self.plan
        factors = self._factor_arrays() if plan.mode == "contract" else {}
        tap_ranges = [range(plan.ranges[v]) for v in plan.enum]
        for p in range(self.n_par):
            for tap in itertools.product(*tap_ranges):
                fixed = dict(zip(plan.enum, tap))
                box = self._box(p, fixed)
                if box is None:
                    continue
                if self.traffic is not None:
                    self._count(box, self.traffic)
                if plan.mode == "contract":
                    self._contract(p, fixed, box, factors)
                else:
                    self._map(p, fixed, box)

    def _count(self, box: Box, traffic: Traffic) -> None:
        """Memory traffic of one box: each point loads and stores once per statement."""
        n = int(np.prod([length for _, length in box.values()]))
        for s in self.block.stmts:
            if isinstance(s, (Load, Store)):
                v = self.views[s.ref]
                count = traffic.read if isinstance(s, Load) else traffic.write
                count(v.ref, v.parent.storage, n)

    def _box(self, p: int, fixed: Fixed) -> Box | None:
        """``{index: (low, length)}`` of the rest indices at this tap, or None if empty."""
        lo = {v: 0 for v in self.plan.rest}
        hi = {v: self.plan.ranges[v] - 1 for v in self.plan.rest}
        for coefs, consts in self.cons:
            val = int(consts[p]) + sum(c * fixed[v] for v, c in coefs.items() if v in fixed)
            free = [(v, c) for v, c in coefs.items() if v not in fixed]
            if not free:
                if val < 0:
                    return None
                continue
            ((v, a),) = free
            if a > 0:
                lo[v] = max(lo[v], -(val // a))  # a*v + val >= 0
            else:
                hi[v] = min(hi[v], val // -a)
        if any(lo[v] > hi[v] for v in lo):
            return None
        return {v: (lo[v], hi[v] - lo[v] + 1) for v in lo}

    def _start(self, entry: tuple[Coefs, np.ndarray], p: int, fixed: Fixed, box: Box) -> int:
        coefs, consts = entry
        start = int(consts[p])
        for v, c in coefs.items():
            start += c * (fixed[v] if v in fixed else box[v][0])
        return start

    def _axes(self, box: Box) -> list[str]:
        return [v for v in self.plan.rest if box[v][1] > 1]

    def _view(
        self, flat: np.ndarray, name: str, p: int, fixed: Fixed, box: Box, axes: list[str]
    ) -> np.ndarray:
        """``flat`` (laid out like ref ``name``'s storage) as a view over ``axes``."""
        entry = self.refs[name]
        coefs = entry[0]
        start = self._start(entry, p, fixed, box)
        shape = tuple(box[v][1] if coefs.get(v) else 1 for v in axes)
        strides = tuple(coefs.get(v, 0) * flat.itemsize for v in axes)
        return np.lib.stride_tricks.as_strided(
            flat[start:], shape=shape, strides=strides, writeable=False
        )

    def _store(self, values: np.ndarray, p: int, fixed: Fixed, box: Box, axes: list[str]) -> None:
        """Store ``values`` (one axis per entry of ``axes``, broadcastable)."""
        coefs = self.refs[self.plan.store.ref][0]
        keep = [v for v in axes if coefs.get(v)]
        lens = tuple(box[v][1] for v in keep)
        start = self._start(self.refs[self.plan.store.ref], p, fixed, box)
        self.sink.store_box(start, lens, tuple(coefs[v] for v in keep), values)

    # -- map mode -----------------------------------------------------------
    def _map(self, p: int, fixed: Fixed, box: Box) -> None:
        axes = self._axes(box)
        vals: dict[str, np.ndarray] = {}
        value = None
        for s in self.block.stmts:
            if isinstance(s, Load):
                vals[s.into] = self._view(
                    self.views[s.ref].parent.storage, s.ref, p, fixed, box, axes
                )
            elif isinstance(s, Constant):
                vals[s.into] = constant(s.value, s.dtype)
            elif isinstance(s, Intrinsic):
                vals[s.into] = apply_intrinsic(s.op, [vals[i] for i in s.inputs], s.dtype)
            elif isinstance(s, LoadIndex):
                vals[s.into] = self._index_grid(self.indices[s.into], p, fixed, box, axes)
            elif isinstance(s, Store):
                value = vals[s.value]
        assert value is not None
        full = np.broadcast_to(value, tuple(box[v][1] for v in axes))
        out_coefs = self.refs[self.plan.store.ref][0]
        reduced = tuple(k for k, v in enumerate(axes) if not out_coefs.get(v))
        if reduced:
            agg = self.out.ref.agg
            if agg == "assign":
                raise self.sink.race()
            with np.errstate(all="ignore"):
                full = _REDUCE[agg].reduce(full, axis=reduced)
        self._store(full, p, fixed, box, axes)

    def _index_grid(
        self, entry: tuple[Coefs, np.ndarray], p: int, fixed: Fixed, box: Box, axes: list[str]
    ) -> np.ndarray:
        coefs = entry[0]
        grid = np.asarray(self._start(entry, p, fixed, box), dtype=np.int64).reshape(
            (1,) * len(axes)
        )
        for k, v in enumerate(axes):
            if coefs.get(v):
                shape = [1] * len(axes)
                shape[k] = box[v][1]
                grid = grid + (np.arange(box[v][1], dtype=np.int64) * coefs[v]).reshape(shape)
        return grid

    # -- contract mode --------------------------------------------------------
    def _factor_arrays(self) -> dict[str, tuple[str | None, np.ndarray]]:
        """Each factor evaluated once over its whole storage (or a 0-d constant)."""
        defs = {s.into: s for s in self.block.stmts if isinstance(s, Def)}
        out: dict[str, tuple[str | None, np.ndarray]] = {}
        for f in self.plan.factors:
            ref: list[str] = []
            memo: dict[str, np.ndarray] = {}

            def ev(name: str, ref: list[str] = ref, memo: dict = memo) -> np.ndarray:
                if name not in memo:
                    s = defs[name]
                    if isinstance(s, Load):
                        ref.append(s.ref)
                        memo[name] = self.views[s.ref].parent.storage
                    elif isinstance(s, Constant):
                        memo[name] = constant(s.value, s.dtype)
                    elif isinstance(s, Intrinsic):
                        memo[name] = apply_intrinsic(s.op, [ev(i) for i in s.inputs], s.dtype)
                    else:  # pragma: no cover - _collect_loads keeps load_index out of factors
                        raise AssertionError(s)
                return memo[name]

            arr = ev(f)
            out[f] = (ref[0] if ref else None, arr)
        return out

    def _contract(self, p: int, fixed: Fixed, box: Box, factors: dict) -> None:
        axes = self._axes(box)
        dtype = to_numpy(self.out.ref.shape.dtype)
        ops, subs = [], []
        scalar = None
        for ref, arr in factors.values():
            if ref is None:
                scalar = arr if scalar is None else scalar * arr
                continue
            coefs = self.refs[ref][0]
            mine = [v for v in axes if coefs.get(v)]
            view = self._view(arr, ref, p, fixed, box, axes).reshape([box[v][1] for v in mine])
            ops.append(view)
            subs.append("".join(self.letter[v] for v in mine))
        out_coefs = self.refs[self.plan.store.ref][0]
        out_axes = [v for v in axes if out_coefs.get(v)]
        present = set("".join(subs))
        spec_out = "".join(self.letter[v] for v in out_axes if self.letter[v] in present)
        if ops:
            spec = ",".join(subs) + "->" + spec_out
            if spec not in self.paths:
                self.paths[spec] = np.einsum_path(spec, *ops, optimize="greedy")[0]
            result = np.einsum(spec, *ops, optimize=self.paths[spec])
        else:
            result = np.ones((), dtype)
        with np.errstate(all="ignore"):
            if scalar is not None:
                result = result * scalar
            count = 1
            for v in axes:
                if v not in out_axes and self.letter[v] not in present:
                    count *= box[v][1]
            if count > 1:
                result = result * count
        result = np.asarray(result).astype(dtype, copy=False)
        shape = [box[v][1] if self.letter[v] in present else 1 for v in out_axes]
        self._store(result.reshape(shape), p, fixed, box, axes)
