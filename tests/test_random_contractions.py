"""Random affine contractions, checked against a brute-force oracle.

The strategy writes Tile source for one contraction with random affine index
polynomials; the oracle enumerates integer index tuples in plain Python loops,
keeps those where every access (output included) is in bounds and every
constraint holds, and aggregates per output element (unreached elements stay
0).  The oracle knows nothing of stripeml; ``test_references_selfcheck.py``
checks it against NumPy.

Every index is made to appear *alone* (coefficient +-1 plus a constant) in some
access dimension, so its range is always inferable and stripeml must not
raise.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

try:
    from test_programs import TARGETS
except ImportError:  # tests/ imported as a package
    from tests.test_programs import TARGETS

# --------------------------------------------------------------------------
# The contraction description and its Tile source
# --------------------------------------------------------------------------

_INDEX_RE = re.compile(r"\b[a-z]\w*\b")


@dataclass(frozen=True)
class Access:
    tensor: str
    polys: tuple[str, ...]  # Tile index polynomials (Python-evaluable too)

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

    def source(self) -> str:
        params = ", ".join(f"{n}[{', '.join(d)}]" if d else n for n, d in self.params)
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
        return (
            f"function ({params}) -> ({self.out.tensor}) {{\n"
            f"    {lhs} = {self.agg}({combo}){tail};\n"
            f"}}\n"
        )

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


# --------------------------------------------------------------------------
# The oracle
# --------------------------------------------------------------------------


class Unbounded(Exception):
    """Some index has no single-index access or constraint bounding it."""


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


def index_ranges(spec: Spec, arrays: dict[str, np.ndarray], margin: int = 2) -> dict[str, range]:
    """A superset of each index's valid values, from the bounds that involve it alone.

    ``0 <= c * x + k < S`` bounds ``x``; the range is widened by ``margin`` on
    each side so the filter, not this function, decides what is valid.
    """
    dims = bind_dims(spec, arrays)
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


_AGG = {
    "+": sum,
    "*": math.prod,
    ">": max,
    "<": min,
}


def brute_force(
    spec: Spec,
    arrays: dict[str, np.ndarray],
    ranges: dict[str, range] | None = None,
    dtype=None,
) -> np.ndarray:
    """Evaluate the contraction by enumerating index tuples in Python loops.

    ``ranges`` overrides the searched range of each index (default:
    :func:`index_ranges`).  A ``cond`` tuple contributes ``C`` when ``A == B``
    and 0 otherwise.
    """
    dims = bind_dims(spec, arrays)
    shape = output_shape(spec, dims)
    if ranges is None:
        ranges = index_ranges(spec, arrays)
    names = list(ranges)
    checks = [
        (compile(p, "<poly>", "eval"), extent)
        for p, extent in _bounds(spec, dims, {n: a.shape for n, a in arrays.items()})
    ]
    out_code = [compile(p, "<poly>", "eval") for p in spec.out.polys]
    op_code = [
        (acc.tensor, [compile(p, "<poly>", "eval") for p in acc.polys]) for acc in spec.operands
    ]
    lists = {n: a.tolist() for n, a in arrays.items()}
    found: dict[tuple[int, ...], list] = {}
    env: dict[str, int] = dict(dims)
    glb = {"__builtins__": {}}
    for tup in itertools.product(*(ranges[n] for n in names)):
        env.update(zip(names, tup))
        if not all(0 <= eval(code, glb, env) < extent for code, extent in checks):
            continue
        vals = []
        for tensor, codes in op_code:
            v = lists[tensor]
            for code in codes:
                v = v[eval(code, glb, env)]
            vals.append(v)
        if spec.combo == "none":
            value = vals[0]
        elif spec.combo == "*":
            value = vals[0] * vals[1]
        elif spec.combo == "+":
            value = vals[0] + vals[1]
        elif spec.combo == "==":
            value = vals[0] == vals[1]
        else:  # cond
            value = vals[2] if vals[0] == vals[1] else 0
        found.setdefault(tuple(eval(c, glb, env) for c in out_code), []).append(value)

    if dtype is None:
        if spec.combo == "==":
            dtype = np.bool_
        elif spec.combo == "cond":
            dtype = arrays[spec.operands[2].tensor].dtype
        else:
            dtype = np.result_type(*(arrays[a.tensor] for a in spec.operands))
    if spec.default is not None:
        out = np.array(arrays[spec.default], dtype=dtype)
        assert out.shape == shape
    else:
        out = np.zeros(shape, dtype=dtype)
    for pos, vals in found.items():
        if spec.agg == "=":
            assert len(vals) == 1, f"assign: {len(vals)} values reach {pos}"
            out[pos] = vals[0]
        else:
            out[pos] = _AGG[spec.agg](vals)
    return out


# --------------------------------------------------------------------------
# The strategy
# --------------------------------------------------------------------------

OUT_INDICES = ("i", "j", "k")
RED_INDICES = ("r", "s")
DIM_NAMES = ("P", "Q", "R", "S", "T", "U")


def render_poly(terms: list[tuple[int, str]], const: int) -> str:
    text = ""
    for c, x in terms:
        mag = "" if abs(c) == 1 else f"{abs(c)} * "
        if not text:
            text = ("-" if c < 0 else "") + mag + x
        else:
            text += (" - " if c < 0 else " + ") + mag + x
    if const:
        text += f" - {-const}" if const < 0 else f" + {const}"
    return text


# A *witness* tuple (every index in 0..2) is drawn first and each constant is
# chosen, within -2..2, to put the witness in bounds where it can: most drawn
# contractions then have valid tuples, yet coefficients and signs stay uniform.
# Now and then a constant is drawn freely, so empty domains occur too.


def _const_for(draw, value: int) -> int:
    """A constant in -2..2 that lands ``value + const`` in 0..2 when it can."""
    if draw(st.integers(0, 7)) == 0:
        return draw(st.integers(-2, 2))
    return max(-2, min(2, -value + draw(st.sampled_from((0, 0, 1, 2)))))


def _anchor(draw, x: str, witness: dict[str, int]) -> tuple[str, int]:
    sign = draw(st.sampled_from((1, -1)))
    const = _const_for(draw, sign * witness[x])
    return render_poly([(sign, x)], const), sign * witness[x] + const


def _poly(draw, indices: tuple[str, ...], witness: dict[str, int]) -> tuple[str, int]:
    chosen = draw(st.lists(st.sampled_from(indices), min_size=1, max_size=2, unique=True))
    terms = [(draw(st.sampled_from((1, 2, -1, -2))), x) for x in chosen]
    value = sum(c * witness[x] for c, x in terms)
    const = _const_for(draw, value)
    return render_poly(terms, const), value + const


def _extent(draw, at_least: int) -> int:
    """An extent in 1..6, above the witness position ``at_least - 1`` when it can be."""
    return max(draw(st.integers(1, 6)), at_least if at_least <= 6 else 1)


def _size(draw, dims: dict[str, int], at_least: int) -> str:
    kind = draw(st.sampled_from(("lit", "dim", "dim_plus", "half")))
    if kind == "lit":
        return str(_extent(draw, at_least))
    d = draw(st.sampled_from(sorted(dims)))
    text = {"dim": d, "dim_plus": f"{d} + {draw(st.integers(1, 2))}", "half": f"({d} + 1) / 2"}[
        kind
    ]
    return text if eval_int(text, dims) >= at_least else str(_extent(draw, at_least))


@st.composite
def contractions(draw) -> tuple[Spec, dict[str, tuple[int, ...]]]:
    """A random contraction and the input shapes to call it with."""
    outs = OUT_INDICES[: draw(st.integers(1, 3))]
    reds = RED_INDICES[: draw(st.integers(1, 2))]
    indices = outs + reds
    witness = {x: draw(st.integers(0, 2)) for x in indices}
    ranks = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
    if sum(ranks) < len(reds):
        ranks[0] = len(reds)
    positions = [(t, d) for t, r in enumerate(ranks) for d in range(r)]
    anchored = dict(zip(draw(st.permutations(positions)), reds))

    dim_iter = iter(DIM_NAMES)
    params, operands, shapes, dims = [], [], {}, {}
    for t, rank in enumerate(ranks):
        name = "AB"[t]
        dnames = tuple(next(dim_iter) for _ in range(rank))
        polys, shape = [], []
        for d in range(rank):
            if (t, d) in anchored:
                poly, value = _anchor(draw, anchored[(t, d)], witness)
            else:
                poly, value = _poly(draw, indices, witness)
            polys.append(poly)
            shape.append(_extent(draw, value + 1))
        params.append((name, dnames))
        operands.append(Access(name, tuple(polys)))
        shapes[name] = tuple(shape)
        dims.update(zip(dnames, shape))

    out_polys, sizes = [], []
    for x in outs:
        poly, value = _anchor(draw, x, witness)
        out_polys.append(poly)
        sizes.append(_size(draw, dims, value + 1))
    constraints = ()
    if draw(st.booleans()):
        poly, value = _poly(draw, indices, witness)
        bound = draw(st.sampled_from(["lit", *sorted(dims)]))
        if bound == "lit" or dims[bound] <= value:
            bound = str(_extent(draw, value + 1))
        constraints = ((poly, bound),)
    combo = "none" if len(operands) == 1 else draw(st.sampled_from(("*", "+")))
    agg = draw(st.sampled_from(("+", ">", "<", "*")))
    spec = Spec(
        tuple(params),
        Access("O", tuple(out_polys)),
        tuple(sizes),
        agg,
        combo,
        tuple(operands),
        constraints,
    )
    return spec, shapes


def make_inputs(spec: Spec, shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if spec.agg == "*":
        # Keep products tame: factors near 1 (each tuple's value is near 1).
        lo, hi = (0.4, 0.6) if spec.combo == "+" else (0.8, 1.2)
    else:
        lo, hi = -1.0, 1.0
    return {name: rng.uniform(lo, hi, shapes[name]) for name, _ in spec.params}


# --------------------------------------------------------------------------
# The test
# --------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@settings(
    max_examples=int(os.environ.get("STRIPEML_HYPOTHESIS_EXAMPLES", 60)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(drawn=contractions(), seed=st.integers(0, 2**32 - 1))
def test_random_contraction(target, drawn, seed):
    import stripeml

    spec, shapes = drawn
    source = spec.source()
    note(source)
    note(f"shapes: {shapes}")
    arrays = make_inputs(spec, shapes, seed)
    expected = brute_force(spec, arrays)
    # Output sizes come from the size expressions, evaluated independently.
    dims = bind_dims(spec, arrays)
    assert expected.shape == tuple(eval_int(s, dims) for s in spec.sizes)

    f = stripeml.compile(source, target=target)
    got = f(*(arrays[name] for name, _ in spec.params))
    assert isinstance(got, np.ndarray)
    assert got.shape == expected.shape
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
