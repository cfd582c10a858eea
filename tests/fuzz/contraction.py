"""A contraction as data, and the brute-force oracle of contraction semantics.

:class:`Spec` describes one statement ``O[polys : sizes] = agg(combo), constraints,
default D``; :func:`brute_force` evaluates it from the language's definition
(docs/tile-language.md §4) in plain Python loops: enumerate integer index
tuples, keep those where every access (the output's included) is in bounds
and every constraint holds, aggregate per output element; unreached elements
keep 0 or the default.  Nothing here imports stripeml, and
``tests/test_references_selfcheck.py`` checks the oracle against NumPy.

:func:`brute_force_bounded` is the same evaluation carrying an error bound per
element (see ``tests/fuzz/reference.py`` for the model): how far any evaluation
in the operands' dtypes, in any summation order, may be from the value given.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from .numerics import SIGN_UNSURE, is_float, to_dtype, unit, wrap

_INDEX_RE = re.compile(r"\b[a-z]\w*\b")


@dataclass(frozen=True)
class Access:
    tensor: str
    polys: tuple[str, ...]  # Tile index polynomials (Python-evaluable with // for /)

    def tile(self) -> str:
        return f"{self.tensor}[{', '.join(self.polys)}]"


@dataclass(frozen=True)
class Spec:
    """``O[out.polys : sizes] = agg(combo of operands), constraints, default D``.

    ``params`` are ``(name, dim names)`` in parameter order; size and bound
    expressions are Tile integer expressions of those dims (``/`` is floor
    division); ``combo`` is ``none``, ``*``, ``+``, ``==`` or ``cond``.
    """

    params: tuple[tuple[str, tuple[str, ...]], ...]
    out: Access
    sizes: tuple[str, ...]
    agg: str
    combo: str
    operands: tuple[Access, ...]
    constraints: tuple[tuple[str, str], ...] = ()
    default: str | None = None

    def statement(self) -> str:
        """The contraction as one Tile statement (with its ``;``)."""
        ops = [a.tile() for a in self.operands]
        if self.combo == "none":
            combo = ops[0]
        elif self.combo == "cond":
            combo = f"{ops[0]} == {ops[1]} ? ({ops[2]})"
        else:
            combo = f" {self.combo} ".join(ops)
        lhs = f"{self.out.tensor}[{', '.join(self.out.polys)} : {', '.join(self.sizes)}]"
        if not self.out.polys:
            lhs = f"{self.out.tensor}[]"
        tail = "".join(f", {p} < {b}" for p, b in self.constraints)
        if self.default is not None:
            tail += f", default {self.default}"
        return f"{lhs} = {self.agg}({combo}){tail};"

    def source(self) -> str:
        params = ", ".join(f"{n}[{', '.join(d)}]" if d else n for n, d in self.params)
        return f"function ({params}) -> ({self.out.tensor}) {{\n    {self.statement()}\n}}\n"

    def indices(self) -> list[str]:
        polys = [*self.out.polys, *(p for a in self.operands for p in a.polys)]
        polys += [p for p, _ in self.constraints]
        seen: dict[str, None] = {}
        for p in polys:
            for name in _INDEX_RE.findall(p):
                seen.setdefault(name, None)
        return list(seen)


def eval_int(expr: str, env: dict[str, int]) -> int:
    """A Tile integer expression (``/`` is floor division) in Python."""
    return int(eval(expr.replace("/", "//"), {"__builtins__": {}}, dict(env)))


class Unbounded(Exception):
    """Some index has no single-index access or constraint bounding it."""


class AssignConflict(Exception):
    """An ``=`` contraction stores two values into one element: the language's error."""

    def __init__(self, pos: tuple[int, ...], count: int) -> None:
        super().__init__(f"assign: {count} values reach {pos}")
        self.pos = pos
        self.count = count


def bind_dims(spec: Spec, arrays: dict[str, np.ndarray]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for name, dnames in spec.params:
        shape = arrays[name].shape
        assert len(shape) == len(dnames), (name, shape, dnames)
        for d, s in zip(dnames, shape):
            if d.isdigit():
                assert int(d) == s
                continue
            assert dims.setdefault(d, s) == s, f"dim {d} bound twice"
    return dims


def output_shape(spec: Spec, dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(eval_int(s, dims) for s in spec.sizes)


def _bounds(spec: Spec, dims: dict[str, int], shapes: dict[str, tuple[int, ...]]):
    """(poly, extent) pairs meaning ``0 <= poly < extent``."""
    yield from zip(spec.out.polys, output_shape(spec, dims))
    for acc in spec.operands:
        yield from zip(acc.polys, shapes[acc.tensor])
    for poly, bound in spec.constraints:
        yield poly, eval_int(bound, dims)


def index_ranges(
    spec: Spec, arrays: dict[str, np.ndarray], margin: int = 2, dims: dict[str, int] | None = None
) -> dict[str, range]:
    """A superset of each index's valid values, from the bounds that involve it alone.

    ``0 <= c * x + k < S`` bounds ``x``; the range is widened by ``margin`` on
    each side so the filter, not this function, decides what is valid.
    """
    dims = bind_dims(spec, arrays) if dims is None else dims
    shapes = {n: a.shape for n, a in arrays.items()}
    names = spec.indices()
    lo = {n: -math.inf for n in names}
    hi = {n: math.inf for n in names}
    for poly, extent in _bounds(spec, dims, shapes):
        zero = {n: 0 for n in names}
        k = eval_int(poly, {**dims, **zero})
        coeffs = {n: eval_int(poly, {**dims, **zero, n: 1}) - k for n in names}
        used = [n for n, c in coeffs.items() if c != 0]
        if len(used) != 1:
            continue
        (x,) = used
        c = coeffs[x]
        a, b = -k / c, (extent - 1 - k) / c  # c*x + k in [0, extent - 1]
        lo[x] = max(lo[x], math.ceil(min(a, b)))
        hi[x] = min(hi[x], math.floor(max(a, b)))
    for n in names:
        if math.isinf(lo[n]) or math.isinf(hi[n]):
            raise Unbounded(n)
    return {n: range(lo[n] - margin, hi[n] + margin + 1) for n in names}


def result_dtype(spec: Spec, arrays: dict[str, np.ndarray]) -> np.dtype:
    """The contraction's dtype: NumPy promotion of the operands; ``==`` gives bool."""
    if spec.combo == "==":
        return np.dtype(np.bool_)
    if spec.combo == "cond":
        return arrays[spec.operands[2].tensor].dtype
    return np.result_type(*(arrays[a.tensor] for a in spec.operands))


def brute_force(
    spec: Spec,
    arrays: dict[str, np.ndarray],
    ranges: dict[str, range] | None = None,
    dtype=None,
    dims: dict[str, int] | None = None,
) -> np.ndarray:
    """Evaluate the contraction by enumerating index tuples in Python loops.

    ``ranges`` overrides the searched range of each index (default:
    :func:`index_ranges`); ``dims`` gives the dimension sizes (default: bound
    from ``spec.params``).  A ``cond`` tuple contributes ``C`` when ``A == B``
    and 0 otherwise.  ``=`` reaching an element twice raises
    :class:`AssignConflict`.
    """
    return brute_force_bounded(spec, arrays, None, ranges, dtype, dims)[0]


def _valid_tuples(spec, arrays, dims, ranges):
    """``(output position, [operand positions])`` of every valid index tuple.

    The whole index box is enumerated at once (each polynomial evaluated on
    NumPy arrays of index values, ``/`` as floor division); only the valid
    tuples are then visited one by one.
    """
    names = list(ranges)
    grids = np.meshgrid(*(np.arange(r.start, r.stop) for r in ranges.values()), indexing="ij")
    env: dict = {**dims, **dict(zip(names, (g.ravel() for g in grids)))}
    count = math.prod(len(r) for r in ranges.values())

    def value(poly: str) -> np.ndarray:
        v = eval(poly.replace("/", "//"), {"__builtins__": {}}, env)
        return np.broadcast_to(np.asarray(v, dtype=np.int64), (count,))

    valid = np.ones(count, dtype=bool)
    for p, extent in _bounds(spec, dims, {n: a.shape for n, a in arrays.items()}):
        v = value(p)
        valid &= (v >= 0) & (v < extent)
    out = [value(p)[valid].tolist() for p in spec.out.polys]
    ops = [[value(p)[valid].tolist() for p in a.polys] for a in spec.operands]
    for t in range(int(valid.sum())):
        yield tuple(c[t] for c in out), [tuple(c[t] for c in codes) for codes in ops]


def _at(nested, pos: tuple[int, ...]):
    for i in pos:
        nested = nested[i]
    return nested


def _scaled(x, e: float) -> float:
    """``|x| * e`` with an exact operand (``e == 0``) contributing nothing, even if ``x`` is inf."""
    return abs(x) * e if e else 0.0


def _rounding(u: float, v) -> float:
    """The rounding error of storing ``v``; infinities and NaN are exact."""
    return u * abs(v) if u and math.isfinite(v) else 0.0


def _combine(combo: str, vals: list, errs: list[float], u: float) -> tuple[object, float]:
    """One tuple's value and its error bound (``u``: rounding unit of the combination)."""
    if combo == "none":
        return vals[0], errs[0]
    a, b = vals[0], vals[1]
    ea, eb = errs[0], errs[1]
    if combo == "*":
        v = a * b
        return v, _zero_sign(v, ea, eb, _scaled(a, eb) + _scaled(b, ea) + ea * eb + _rounding(u, v))
    if combo == "+":
        v = a + b
        return v, _zero_sign(v, ea, eb, ea + eb + _rounding(u, v))
    unsure = ea + eb > 0 and abs(a - b) <= ea + eb
    if combo == "==":
        return a == b, float(unsure)
    c, ec = vals[2], errs[2]  # cond
    if unsure:
        return (c if a == b else 0), ec + abs(c)
    return (c, ec) if a == b else (0, 0.0)


def _zero_sign(v, ea: float, eb: float, err: float) -> float:
    """``err``, at least :data:`SIGN_UNSURE` when a float result is zero and an
    operand is inexact: its zero may carry either sign (``0 * x`` with ``x`` a
    sum of zeros), as the elementwise rules in ``reference.py`` say too."""
    if isinstance(v, (float, np.floating)) and v == 0 and (ea > 0 or eb > 0):
        return max(err, SIGN_UNSURE)
    return err


def _nan_max(vals: list, pick) -> object:
    for v in vals:
        if v != v:  # NaN propagates, as the max/min intrinsics do
            return v
    return pick(vals)


def _aggregate(agg: str, pairs: list, dt: np.dtype, pos) -> tuple[object, float]:
    vals = [v for v, _ in pairs]
    errs = [e for _, e in pairs]
    u = unit(dt)
    if agg == "=":
        if len(pairs) > 1:
            raise AssignConflict(pos, len(pairs))
        return pairs[0]
    if dt.kind == "b":
        # Bool aggregation: sum and max are "any", product and min "all".
        v = any(vals) if agg in "+>" else all(vals)
        return v, max(errs)
    if agg == "+":
        finite = all(math.isfinite(v) for v in vals) if is_float(dt) else True
        total = math.fsum(vals) if is_float(dt) and finite else sum(vals)
        # Any order of summation in dtype: (L - 1) roundings, each at most u * sum |v|
        # (infinities add exactly).
        err = sum(errs)
        if finite:
            err += (len(vals) - 1) * u * sum(abs(v) for v in vals)
        if is_float(dt) and total == 0:
            err = max(err, SIGN_UNSURE)  # the sign of a sum of zeros depends on its order
        return total, err
    if agg == "*":
        prod = math.prod(vals)
        err = len(vals) * _rounding(u, prod)
        for i, e in enumerate(errs):
            if e:
                err += e * math.prod(abs(v) for j, v in enumerate(vals) if j != i)
        if is_float(dt) and prod == 0 and any(errs):
            err = max(err, SIGN_UNSURE)  # a factor's zero may carry either sign
        return prod, err
    pick = max if agg == ">" else min
    v = _nan_max(vals, pick)
    err = max(errs)
    if is_float(dt) and v == 0 and len({math.copysign(1.0, x) for x in vals if x == 0}) > 1:
        err = max(err, SIGN_UNSURE)  # max(-0.0, +0.0) may be either
    return v, err


def brute_force_bounded(
    spec: Spec,
    arrays: dict[str, np.ndarray],
    errs: dict[str, np.ndarray] | None = None,
    ranges: dict[str, range] | None = None,
    dtype=None,
    dims: dict[str, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`brute_force` with error bounds: ``errs`` bounds each operand's error
    (absent: exact); returns the value and a float64 bound per element."""
    dims = bind_dims(spec, arrays) if dims is None else dims
    shape = output_shape(spec, dims)
    if ranges is None:
        ranges = index_ranges(spec, arrays, dims=dims)
    dt = np.dtype(result_dtype(spec, arrays) if dtype is None else dtype)
    # The combination is computed in the operands' promoted dtype.
    combo_dt = np.result_type(*(arrays[a.tensor] for a in spec.operands))
    u = unit(combo_dt)
    # Integer * and + wrap per tuple, before a max or min sees the value.
    wrapping = combo_dt.kind in "iu"
    lists = {a.tensor: arrays[a.tensor].tolist() for a in spec.operands}
    err_lists = {
        a.tensor: (errs[a.tensor].tolist() if errs and a.tensor in errs else None)
        for a in spec.operands
    }
    found: dict[tuple[int, ...], list] = {}
    for out_pos, op_pos in _valid_tuples(spec, arrays, dims, ranges):
        vals = [_at(lists[a.tensor], p) for a, p in zip(spec.operands, op_pos)]
        es = [
            (_at(err_lists[a.tensor], p) if err_lists[a.tensor] is not None else 0.0)
            for a, p in zip(spec.operands, op_pos)
        ]
        value, e = _combine(spec.combo, vals, es, u)
        if wrapping and spec.combo in ("*", "+"):
            value = wrap(int(value), combo_dt)  # each tuple's value is in the dtype
        found.setdefault(out_pos, []).append((value, e))

    if spec.default is not None:
        default = arrays[spec.default]
        assert default.shape == shape
        with np.errstate(all="ignore"):
            out = np.array(default, dtype=dt)
        err = np.zeros(shape)
        if errs and spec.default in errs:
            err = np.array(errs[spec.default], dtype=np.float64)
    else:
        out = np.zeros(shape, dtype=dt)
        err = np.zeros(shape)
    for pos, pairs in found.items():
        value, e = _aggregate(spec.agg, pairs, dt, pos)
        stored, overflowed = to_dtype(value, dt)
        out[pos] = stored
        if is_float(dt):
            e += _rounding(unit(dt), float(value))
        err[pos] = math.inf if overflowed or e != e else e
    return out, err
