"""The questions :mod:`stripeml.analysis.ranges` answers without isl (every bound
naming one index; an output of its own indices, not tied to the others), against
brute force over random bounds, and the isl answers they stand in for."""

from __future__ import annotations

import random

import numpy as np
import pytest

from stripeml.analysis import ranges
from stripeml.analysis.ranges import Bound, covers, infer_ranges
from stripeml.ir.affine import Affine

SPAN = 16  # brute force looks at every tuple in [-SPAN, SPAN) per index


def _points(names: list[str], bounds: list[Bound]) -> list[dict[str, int]]:
    grids = np.meshgrid(*[np.arange(-SPAN, SPAN)] * len(names), indexing="ij")
    env = {n: g.ravel() for n, g in zip(names, grids)}
    ok = np.ones(env[names[0]].shape, bool)
    for b in bounds:
        value = np.broadcast_to(b.expr.evaluate(env), ok.shape)
        ok &= (value >= 0) & (value <= b.hi)
    return [{n: int(env[n][k]) for n in names} for k in np.flatnonzero(ok)]


def _random_single(rng: random.Random, names: list[str]) -> list[Bound]:
    """Bounds of one index each (coefficients -3..3 but 0), at least one per
    index, and now and then a constant one."""
    bounds = []
    for name in names:
        for _ in range(rng.randint(1, 3)):
            coeff = rng.choice([-3, -2, -1, 1, 1, 1, 2, 3])
            expr = Affine.index(name, coeff) + rng.randint(-6, 6)
            bounds.append(Bound(expr, rng.randint(-1, 9), "x"))
    if rng.random() < 0.2:
        bounds.append(Bound(Affine.constant(rng.randint(-1, 3)), rng.randint(0, 2), "c"))
    rng.shuffle(bounds)
    return bounds


@pytest.mark.parametrize("seed", range(40))
def test_ranges_of_one_index_bounds_are_brute_forces(seed: int) -> None:
    rng = random.Random(seed)
    names = ["i", "j", "k"][: rng.randint(1, 3)]
    bounds = _random_single(rng, names)
    pts = _points(names, bounds)
    got = infer_ranges(names, bounds)
    assert not got.unbounded
    assert got.empty == (not pts)
    if pts:
        assert got.ranges == {n: (min(p[n] for p in pts), max(p[n] for p in pts)) for n in names}


@pytest.mark.parametrize("seed", range(40))
def test_ranges_with_indices_fixed_by_their_bounds_are_brute_forces(seed: int) -> None:
    """A 1 x 1 window's shape: ``k`` fixed by its own bounds, in bounds with others."""
    rng = random.Random(500 + seed)
    i, j, k = (Affine.index(x) for x in "ijk")
    value = rng.randint(-2, 2)
    bounds = _random_single(rng, ["i", "j"])
    bounds.append(Bound(k - value + rng.choice([0, 0, 0, 1]), 0, "k fixed (or not)"))
    bounds.append(
        Bound(i + k * rng.choice([1, 2, -1]) + rng.randint(-3, 3), rng.randint(2, 9), "i k")
    )
    if rng.random() < 0.5:
        bounds.append(Bound(i + j + k + rng.randint(-3, 3), rng.randint(2, 9), "i j k"))
    pts = _points(["i", "j", "k"], bounds)
    got = infer_ranges(["i", "j", "k"], bounds)
    assert got.empty == (not pts)
    if pts:
        assert got.ranges == {n: (min(p[n] for p in pts), max(p[n] for p in pts)) for n in "ijk"}


def test_a_plain_question_does_not_ask_isl(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shapes of a matmul's bounds and output: answered without building a set."""

    def no_isl(*_: object) -> None:
        raise AssertionError("isl was asked")

    monkeypatch.setattr(ranges, "domain_set", no_isl)
    monkeypatch.setattr(ranges, "_domain", no_isl)
    m, n, k = (Affine.index(x) for x in "mnk")
    bounds = [Bound(m, 7, "C"), Bound(n, 4, "C"), Bound(m, 7, "A"), Bound(k, 2, "A")]
    bounds += [Bound(k, 2, "B"), Bound(n, 4, "B")]
    got = infer_ranges(["m", "n", "k"], bounds)
    assert got.ranges == {"m": (0, 7), "n": (0, 4), "k": (0, 2)}
    assert covers(["m", "n", "k"], bounds, [m, n], [8, 5])
    assert not covers(["m", "n", "k"], bounds, [m, n], [8, 6])


def _random_output_question(rng: random.Random) -> tuple[list[str], list[Bound], list[Affine]]:
    """Output indices ``o``, ``p`` (accessed as themselves) and one other index
    ``r``: bounds of the output indices (sometimes two of them in one), of
    ``r``, and sometimes one tying ``r`` to an output index."""
    o, p, r = Affine.index("o"), Affine.index("p"), Affine.index("r")
    bounds = [Bound(o + rng.randint(-2, 2), rng.randint(2, 6), "o")]
    bounds.append(Bound(p * rng.choice([1, 2]) + rng.randint(-1, 1), rng.randint(2, 6), "p"))
    if rng.random() < 0.5:
        bounds.append(Bound(o + p + rng.randint(-2, 2), rng.randint(3, 9), "o + p"))
    bounds.append(Bound(r * rng.choice([1, -1, 2]) + rng.randint(-3, 3), rng.randint(-1, 4), "r"))
    if rng.random() < 0.3:
        bounds.append(Bound(o + r + rng.randint(-4, 2), rng.randint(0, 8), "tied"))
    if rng.random() < 0.4:  # a 1 x 1 window's index: fixed by its bounds, tied to o
        w = Affine.index("w")
        bounds.append(Bound(w + rng.choice([0, 0, 1]), 0, "w"))
        bounds.append(Bound(o + w + rng.randint(-1, 1), rng.randint(2, 6), "o + w"))
        return ["o", "p", "r", "w"], bounds, [o, p]
    return ["o", "p", "r"], bounds, [o, p]


@pytest.mark.parametrize("seed", range(60))
def test_coverage_of_own_index_outputs_is_brute_forces(seed: int) -> None:
    rng = random.Random(1000 + seed)
    names, bounds, out = _random_output_question(rng)
    sizes = [rng.randint(1, 6), rng.randint(1, 5)]
    pts = _points(names, bounds)
    reached = {(pt["o"], pt["p"]) for pt in pts}
    want = all((a, b) in reached for a in range(sizes[0]) for b in range(sizes[1]))
    assert covers(names, bounds, out, sizes) is want


def test_a_bound_tying_the_output_to_another_index_is_isls_to_decide() -> None:
    """``0 <= o + r - 3 <= 1`` with ``r`` in 0..1 reaches ``o`` = 2..4 only."""
    o, r = Affine.index("o"), Affine.index("r")
    bounds = [Bound(o, 5, "O"), Bound(r, 1, "R"), Bound(o + r - 3, 1, "tied")]
    assert not covers(["o", "r"], bounds, [o], [6])
    assert covers(["o", "r"], [*bounds[:2], Bound(o + r, 6, "loose")], [o], [6])
