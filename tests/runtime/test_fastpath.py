"""The kernel fast path: when it applies, and agreement with the general path."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stripeml.errors import ExecutionError
from stripeml.ir.affine import Affine
from stripeml.runtime.interp import fastpath, run

from .programs_ir import contraction, conv2d, matmul, tiled_matmul


@pytest.fixture
def fast_runs(monkeypatch):
    """Counts blocks executed by the fast path."""
    calls = []
    original = fastpath._Runner.run

    def counting(self):
        calls.append(self.plan.mode)
        return original(self)

    monkeypatch.setattr(fastpath._Runner, "run", counting)
    return calls


rng = np.random.default_rng(11)


def test_conv_uses_contract_mode_with_enumerated_taps(fast_runs):
    i = rng.standard_normal((1, 12, 12, 8)).astype(np.float32)
    k = rng.standard_normal((3, 3, 8, 8)).astype(np.float32)
    p = conv2d(1, 12, 12, 8, 8)
    fast = run(p, {"I": i, "K": k}, mode="auto")["O"]
    assert fast_runs == ["contract"]
    general = run(p, {"I": i, "K": k}, mode="general")["O"]
    np.testing.assert_allclose(fast, general, rtol=1e-4, atol=1e-4)
    plan = fastpath._analyse(p.root.stmts[0], _views_for(p))
    assert set(plan.enum) == {"kx", "ky"}


def _views_for(p):
    """Resolved views of the program's first kernel (for inspecting plans)."""
    from stripeml.runtime.interp.frame import View, flat_offset
    from stripeml.runtime.interp.memory import Accumulator, RefState

    kernel = p.root.stmts[0]
    views = []
    for ref in kernel.refs:
        parent = RefState(p.root.ref(ref.from_), np.zeros(1), np.zeros(1, np.int64), None)
        sink = Accumulator(np.zeros(1), ref.agg, False, ref.into) if ref.dir != "in" else None
        views.append(View(ref, parent, flat_offset(ref), sink))
    return views


def test_auto_skips_small_blocks(fast_runs):
    run(matmul(4, 4, 4), {"A": np.ones((4, 4), np.float32), "B": np.ones((4, 4), np.float32)})
    assert fast_runs == []
    a = np.ones((64, 64), np.float32)
    run(matmul(64, 64, 64), {"A": a, "B": a})
    assert fast_runs == ["contract"]


def test_general_mode_never_uses_it(fast_runs):
    a = np.ones((64, 64), np.float32)
    run(matmul(64, 64, 64), {"A": a, "B": a}, mode="general")
    assert fast_runs == []


def test_max_pool_and_eltwise_use_map_mode(fast_runs):
    x = rng.standard_normal((6, 8)).astype(np.float32)
    p = contraction({"I": ("f32", (6, 8))}, ("O", "f32", (3, 4)), {"x": 3, "y": 4, "i": 2, "j": 2},
                    {"I": "2*x + i, 2*y + j", "O": "x, y"}, agg="max", combo=None)  # fmt: skip
    run(p, {"I": x}, mode="fast")
    p = contraction({"A": ("f32", (6, 8)), "B": ("f32", (8,))}, ("O", "f32", (6, 8)),
                    {"i": 6, "j": 8}, {"A": "i, j", "B": "j", "O": "i, j"},
                    agg="assign", combo="sub")  # fmt: skip
    out = run(p, {"A": x, "B": x[0]}, mode="fast")["O"]
    np.testing.assert_array_equal(out, x - x[0])
    assert fast_runs == ["map", "map"]


def test_nested_blocks_with_allocations_fall_back(fast_runs):
    a = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal((6, 8)).astype(np.float32)
    out = run(tiled_matmul(8, 8, 6, 4), {"A": a, "B": b}, mode="fast")["C"]
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    # The tiled outer block (allocation) runs generally; its leaf blocks run fast per tile.
    assert fast_runs == ["map", "contract"]


def test_enumeration_choice():
    ranges = {"x": 50, "kx": 3, "y": 40, "ky": 5, "c": 7}
    assert fastpath._choose_enumerated([{"x", "kx"}, {"y", "ky"}], ranges) == ("kx", "ky")
    assert fastpath._choose_enumerated([], ranges) == ()
    assert fastpath._choose_enumerated([{"x", "kx", "c"}], ranges) == ("kx", "c")


# -- random affine contractions: fast == general == a naive loop ----------------


@st.composite
def contractions(draw):
    n_idx = draw(st.integers(1, 4))
    names = ["i", "j", "k", "l"][:n_idx]
    ranges = {n: draw(st.integers(1, 5)) for n in names}
    coef = st.integers(-2, 2)

    def access(rank, coef=coef):
        affs, sizes = [], []
        for _ in range(rank):
            a = Affine.build({n: draw(coef) for n in names})
            lo = sum(min(0, c * (ranges[n] - 1)) for n, c in a.terms)
            hi = sum(max(0, c * (ranges[n] - 1)) for n, c in a.terms)
            pad = draw(st.integers(0, 2))
            affs.append(a - lo + pad)
            sizes.append(hi - lo + 1 + pad + draw(st.integers(0, 1)))
        return affs, tuple(sizes)

    n_in = draw(st.integers(1, 2))
    inputs, acc = {}, {}
    for k in range(n_in):
        affs, sizes = access(draw(st.integers(1, 3)))
        inputs[f"X{k}"] = ("f64", sizes)
        acc[f"X{k}"] = affs
    # Sparse output accesses, so that many points reduce into one element.
    out_affs, out_sizes = access(draw(st.integers(1, 2)), st.sampled_from([0, 0, 0, 1, -1, 2]))
    acc["O"] = out_affs
    cons = []
    for _ in range(draw(st.integers(0, 2))):
        two = draw(st.permutations(names))[:2]
        c = Affine.build({n: draw(st.integers(-1, 1)) for n in two}, draw(st.integers(-2, 4)))
        cons.append(c)
    agg = draw(st.sampled_from(["add", "add", "max", "min", "mul", "assign"]))
    combo = None if n_in == 1 else draw(st.sampled_from(["mul", "add"]))
    access_text = {k: ", ".join(str(a) for a in v) for k, v in acc.items()}
    prog = contraction(inputs, ("O", "f64", out_sizes), ranges, access_text, agg=agg,
                       combo=combo, constraints=cons)  # fmt: skip
    return prog, inputs, ranges, acc, cons, agg, combo, out_sizes


def naive(inputs, values, ranges, acc, cons, agg, combo, out_sizes):
    """Loop over every point (test oracle only)."""
    stored: dict[tuple, list[float]] = {}
    names = list(ranges)
    for point in itertools.product(*(range(ranges[n]) for n in names)):
        env = dict(zip(names, point))
        if any(c.evaluate(env) < 0 for c in cons):
            continue
        xs = [values[k][tuple(a.evaluate(env) for a in acc[k])] for k in inputs]
        v = xs[0] if combo is None else (xs[0] * xs[1] if combo == "mul" else xs[0] + xs[1])
        stored.setdefault(tuple(a.evaluate(env) for a in acc["O"]), []).append(v)
    out = np.zeros(out_sizes)
    for elem, vs in stored.items():
        if agg == "assign" and len(vs) > 1:
            return None
        fn = {"add": np.sum, "max": np.max, "min": np.min, "mul": np.prod, "assign": np.sum}[agg]
        out[elem] = fn(vs)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contractions(), st.integers(0, 2**32 - 1))
def test_random_contractions_agree(case, seed):
    prog, inputs, ranges, acc, cons, agg, combo, out_sizes = case
    r = np.random.default_rng(seed)
    values = {k: r.uniform(0.5, 1.5, s).astype(np.float64) for k, (_, s) in inputs.items()}
    expected = naive(inputs, values, ranges, acc, cons, agg, combo, out_sizes)
    for kw in ({"mode": "general"}, {"mode": "fast"}, {"mode": "general", "chunk_points": 3}):
        if expected is None:
            with pytest.raises(ExecutionError):
                run(prog, values, **kw)
        else:
            np.testing.assert_allclose(run(prog, values, **kw)["O"], expected, rtol=1e-9, atol=0)
