"""``=`` contractions store each output element at most once, decided when shapes bind.

A program whose valid index tuples store one element twice is a
``TileTypeError`` from lowering, on every backend, before anything runs;
injective ones run and match NumPy.  The random test compares the verdict and
its witness with brute-force enumeration of the valid tuples (no stripeml, no
isl), and the values of the programs it accepts with the brute-force oracle of
``test_random_contractions``.
"""

from __future__ import annotations

import itertools
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import stripeml
from stripeml.errors import ExecutionError, TileTypeError

try:
    from fuzz.contraction import (
        Access,
        Spec,
        bind_dims,
        brute_force,
        eval_int,
        index_ranges,
        output_shape,
    )
    from fuzz.gen_contraction import render_poly
    from test_programs import TARGETS
except ImportError:  # tests/ imported as a package
    from tests.fuzz.contraction import (
        Access,
        Spec,
        bind_dims,
        brute_force,
        eval_int,
        index_ranges,
        output_shape,
    )
    from tests.fuzz.gen_contraction import render_poly
    from tests.test_programs import TARGETS

REPRO = "function (A[N]) -> (O) { O[0 : 1] = =(A[i]); }"
WITNESS = re.compile(r"stores O\[([^\]]*)\] twice, from (.*?) and from (.*?); '='")


def f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)


def parse_point(text: str) -> dict[str, int]:
    """``"i = 0, j = 2"`` -> ``{"i": 0, "j": 2}``."""
    out = {}
    for part in text.split(", "):
        name, value = part.split(" = ")
        out[name] = int(value)
    return out


# -- the reproducer -------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_the_reproducer_is_rejected_when_lowering(target):
    f = stripeml.compile(REPRO, target=target)
    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    with pytest.raises(TileTypeError) as err:
        f.lower(a)
    msg = str(err.value)
    assert msg.startswith("1:26: in 'O[0 : 1] = =(A[i])': stores O[0] twice, ")
    assert "from i = 0 and from i = 1" in msg
    assert (err.value.line, err.value.column) == (1, 26)
    # The call is refused the same way: no value, and no run-time race instead.
    with pytest.raises(TileTypeError, match=r"stores O\[0\] twice"):
        f(a)


@pytest.mark.parametrize("target", TARGETS)
def test_one_valid_tuple_is_no_race(target):
    """The verdict is per signature: with ``N = 1`` the same program is a copy."""
    f = stripeml.compile(REPRO, target=target)
    np.testing.assert_array_equal(f(np.array([5.0], dtype=np.float32)), [5.0])


def test_the_witness_is_in_source_coordinates_and_names_the_line():
    """Index ranges that do not start at 0 (``i`` is 2 .. N+1) are reported as written."""
    src = """function (A[N]) -> (O) {
    B = A * 2;
    O[i - 2 - j : N] = =(B[i - 2]), j < 2;
}"""
    f = stripeml.compile(src, target="interp")
    with pytest.raises(TileTypeError) as err:
        f.lower(f32(4))
    assert str(err.value).startswith("3:5: in 'O[i - 2 - j : N] = =(B[i - 2]), j < 2': stores O[0]")
    assert "from i = 2, j = 0 and from i = 3, j = 1" in str(err.value)
    assert (err.value.line, err.value.column) == (3, 5)


def test_injectivity_can_depend_on_the_bounds():
    """``O[i + 3 * j]`` is a reshape while ``i < 3``, a race when ``i`` reaches 3."""
    src = "function (I[R, C]) -> (O) { O[i + 3 * j : 3 * C] = =(I[i, j]); }"
    f = stripeml.compile(src, target="interp")
    x = f32(3, 4)
    np.testing.assert_array_equal(f(x), x.T.reshape(-1))
    with pytest.raises(TileTypeError, match=r"stores O\[3\] twice, from i = 0, j = 1 and from"):
        f.lower(f32(4, 4))


def test_the_interpreter_keeps_its_own_guard_for_stripe_programs():
    """IR that did not come through Tile is still checked when it runs."""
    from stripeml.ir import parse
    from stripeml.runtime.interp import run

    program = parse("""block [] #program (
    in A f32(3):(1)
    out O f32(1):(1)
) {
  block [i:3] #kernel (
      in A[i] f32(1):(1)
      out O[0]:assign f32(1):(1)
  ) {
    $a = load(A)
    O = store($a)
  }
}
""")
    with pytest.raises(ExecutionError, match="stored more than once"):
        run(program, {"A": np.ones(3, np.float32)})


# -- injective programs run and match NumPy ---------------------------------------------

INJECTIVE = [
    (
        "transpose",
        "function (X[M, N]) -> (O) { O[n, m : N, M] = =(X[m, n]); }",
        {"X": f32(4, 6)},
        lambda X: X.T,
    ),
    (
        "strided_slice",
        "function (X[N]) -> (O) { O[i : N / 3] = =(X[3 * i + 2]); }",
        {"X": f32(10)},
        lambda X: X[2::3][:3],
    ),
    (
        "shift_pad",
        "function (X[N]) -> (O) { O[i + 2 : N + 3] = =(X[i]); }",
        {"X": f32(5)},
        lambda X: np.concatenate([[0, 0], X, [0]]).astype(np.float32),
    ),
    (
        "anti_diagonal_by_constraint",
        "function (X[N, N]) -> (O) { O[i : N] = =(X[i, j]), i + j - N + 1 < 1; }",
        {"X": f32(5, 5)},
        lambda X: np.fliplr(X).diagonal(),
    ),
    (
        "interleave_over_default",
        "function (X[N], D[M]) -> (O) { O[2 * i + 1 : M] = =(X[i]), default D; }",
        {"X": f32(4), "D": f32(9)},
        lambda X, D: np.concatenate([D[:1], np.ravel(np.c_[X, D[2::2]])]).astype(np.float32),
    ),
    (
        "broadcast_a_row",
        "function (V[N]) -> (O) { O[i, j : 3, N] = =(V[j]); }",
        {"V": f32(4)},
        lambda V: np.tile(V, (3, 1)),
    ),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", INJECTIVE, ids=lambda c: c[0])
def test_injective_assign_runs(case, target):
    _, src, inputs, reference = case
    got = stripeml.compile(src, target=target)(**inputs)
    np.testing.assert_array_equal(got, reference(*inputs.values()))


# -- random contractions against brute force -------------------------------------------

NAMES = ("i", "j", "k")


def _landing(draw, value: int) -> int:
    """A constant that puts ``value + const`` in 0..2 (now and then any in -2..2)."""
    if draw(st.integers(0, 7)) == 0:
        return draw(st.integers(-2, 2))
    return -value + draw(st.integers(0, 2))


@st.composite
def assign_contractions(draw) -> tuple[Spec, dict[str, tuple[int, ...]]]:
    """A random ``=`` contraction over 1-3 indices and the shapes of its inputs.

    Each index is *anchored*: alone (coefficient +-1) in some output or input
    dimension, or in a constraint, so its range is finite; every other
    dimension is a random affine of one or two indices.  As in
    ``test_random_contractions``, a witness tuple (indices in 0..2) is drawn
    first and constants and extents are chosen to keep it valid where they
    can, so that most domains are not empty.
    """
    names = NAMES[: draw(st.integers(1, 3))]
    witness = {x: draw(st.integers(0, 2)) for x in names}
    out_rank = draw(st.integers(0, 2))
    in_ranks = draw(st.lists(st.integers(1, 2), min_size=1, max_size=2))
    slots = [("O", d) for d in range(out_rank)]
    slots += [(t, d) for t, r in enumerate(in_ranks) for d in range(r)]
    anchored: dict[object, str] = {}
    single = []
    for x in names:
        free = [s for s in slots if s not in anchored]
        if free and draw(st.integers(0, 3)):
            anchored[draw(st.sampled_from(free))] = x
        else:
            single.append(x)

    def poly(slot) -> tuple[str, int]:
        """An index polynomial for ``slot`` and its value at the witness."""
        if slot in anchored:
            terms = [(draw(st.sampled_from((1, -1))), anchored[slot])]
        else:
            chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
            terms = [(draw(st.sampled_from((1, 2, 3, -1, -2))), x) for x in chosen]
        value = sum(c * witness[x] for c, x in terms)
        const = _landing(draw, value)
        return render_poly(terms, const), value + const

    def extent(at: int) -> int:
        return max(draw(st.integers(1, 4)), at + 1)

    constraints = []
    for x in single:
        constraints.append((render_poly([(1, x)], _landing(draw, witness[x])), "3"))
    if draw(st.booleans()):
        text, value = poly(("C",))
        constraints.append((text, str(extent(value))))
    params, operands, shapes = [], [], {}
    for t, rank in enumerate(in_ranks):
        name = "AB"[t]
        polys, shape = [], []
        for d in range(rank):
            text, value = poly((t, d))
            polys.append(text)
            shape.append(extent(value))
        params.append((name, tuple(f"{name}{d}" for d in range(rank))))
        operands.append(Access(name, tuple(polys)))
        shapes[name] = tuple(shape)
    out_polys, sizes = [], []
    for d in range(out_rank):
        text, value = poly(("O", d))
        out_polys.append(text)
        sizes.append(str(extent(value) + draw(st.integers(0, 1))))
    default = None
    if out_rank and draw(st.booleans()):
        params.append(("D", tuple(sizes)))
        shapes["D"] = tuple(int(s) for s in sizes)
        default = "D"
    combo = "none" if len(operands) == 1 else draw(st.sampled_from(("*", "+")))
    spec = Spec(
        tuple(params),
        Access("O", tuple(out_polys)),
        tuple(sizes),
        "=",
        combo,
        tuple(operands),
        tuple(constraints),
        default,
    )
    return spec, shapes


def valid_tuples(spec: Spec, arrays: dict[str, np.ndarray]) -> dict[tuple, list[dict]]:
    """Output element -> the valid index tuples storing it, by enumeration."""
    dims = bind_dims(spec, arrays)
    checks = list(zip(spec.out.polys, output_shape(spec, dims)))
    for acc in spec.operands:
        checks += zip(acc.polys, arrays[acc.tensor].shape)
    checks += [(p, eval_int(b, dims)) for p, b in spec.constraints]
    ranges = index_ranges(spec, arrays)
    names = list(ranges)
    found: dict[tuple, list[dict]] = {}
    for values in itertools.product(*(ranges[n] for n in names)):
        env = {**dims, **dict(zip(names, values))}
        if all(0 <= eval_int(p, env) < extent for p, extent in checks):
            element = tuple(eval_int(p, env) for p in spec.out.polys)
            found.setdefault(element, []).append(dict(zip(names, values)))
    return found


def make_inputs(spec: Spec, shapes: dict[str, tuple[int, ...]], seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1, 1, shapes[name]) for name, _ in spec.params}


@pytest.mark.parametrize("target", TARGETS)
@settings(
    max_examples=int(os.environ.get("STRIPEML_HYPOTHESIS_EXAMPLES", 60)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(drawn=assign_contractions(), seed=st.integers(0, 2**32 - 1))
def test_random_assign_verdict_and_values(target, drawn, seed):
    spec, shapes = drawn
    note(spec.source())
    note(f"shapes: {shapes}")
    arrays = make_inputs(spec, shapes, seed)
    found = valid_tuples(spec, arrays)
    twice = {e: ts for e, ts in found.items() if len(ts) > 1}
    f = stripeml.compile(spec.source(), target=target)
    args = [arrays[name] for name, _ in spec.params]
    if not twice:
        got = f(*args)
        np.testing.assert_allclose(got, brute_force(spec, arrays), rtol=1e-12, atol=0)
        return
    with pytest.raises(TileTypeError) as err:
        f.lower(*args)
    m = WITNESS.search(str(err.value))
    assert m is not None, str(err.value)
    element = tuple(int(v) for v in m.group(1).split(", ")) if m.group(1) else ()
    first, second = parse_point(m.group(2)), parse_point(m.group(3))
    assert set(first) == set(second) == set(spec.indices())
    assert first != second
    assert element in twice
    assert first in twice[element] and second in twice[element]
