"""``autotile``: the program suite under several budgets, random tilings, random contractions.

The interpreter is the oracle: every stage is re-run on the suite's inputs
(the manager's ``check=``), random tilings of random constrained kernels must
run every point exactly once, and random affine contractions tiled with tiny
budgets must agree with the brute-force oracle of ``tests/test_random_contractions.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

import stripeml
from stripeml.analysis.cost import CostModel
from stripeml.errors import StripeError
from stripeml.ir import (
    Affine,
    Block,
    Constant,
    Constraint,
    Index,
    LoadIndex,
    Program,
    Refinement,
    Store,
    TensorShape,
    format,
    parse,
    verify,
)
from stripeml.passes import Dce, Fuse, make_pass
from stripeml.passes.autotile import Autotile, candidate_sizes, choose_tiles, tile_kernel
from stripeml.passes.manager import run_pipeline
from stripeml.passes.thread import Thread
from stripeml.runtime.interp import run

from .helpers import assert_close, checker, lower_case

try:
    from programs import CASES, Case  # tests/programs.py
    from test_random_contractions import brute_force, contractions, make_inputs
except ImportError:  # tests/ imported as a package
    from tests.programs import CASES, Case
    from tests.test_random_contractions import brute_force, contractions, make_inputs

PIPELINES: dict[str, Callable[[], list]] = {
    # Tiny budgets force many small, ragged tiles.
    "tiny": lambda: [Autotile(memory_bytes=256, line_bytes=4)],
    "lines": lambda: [Autotile(memory_bytes=1024)],
    "divisors_only": lambda: [Autotile(memory_bytes=256, line_bytes=4, ragged=False)],
    "outputs_parallel": lambda: [
        Autotile(memory_bytes=1024, line_bytes=4, only_outputs=True, min_tiles=4)
    ],
    "every_kernel_greedy": lambda: [
        Autotile(memory_bytes=48, line_bytes=4, select="*", max_candidates=8)
    ],
    "tiles_then_threads": lambda: [
        Autotile(memory_bytes=512, line_bytes=4, select="kernel"),
        Thread(threads=3),
    ],
    "fused_then_tiled": lambda: [
        Fuse(unit_stride_reductions_only=False, reused_inputs=True),
        Dce(),
        Autotile(memory_bytes=512, select="kernel,!fill"),
        Thread(),
    ],
}


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_suite_preserves_results(case: Case, pipeline: str) -> None:
    program, inputs = lower_case(case)
    expected = run(program, inputs)
    tol = {"rtol": case.rtol, "atol": case.atol}
    result = run_pipeline(program, PIPELINES[pipeline](), check=checker(inputs, expected, **tol))
    for _name, text in result.stages:
        assert format(parse(text)) == text
    want = dict(zip((r.into for r in program.outputs), case.reference(dict(inputs))))
    assert_close(run(result.program, inputs), want, case.name, **tol)
    for p in PIPELINES[pipeline]():
        assert p.run(result.program) is result.program, p.name


def test_tiny_budgets_tile_most_of_the_suite() -> None:
    tiled = 0
    for case in CASES:
        program, _ = lower_case(case)
        result = Autotile(memory_bytes=256, line_bytes=4, select="kernel").run(program)
        tiled += result is not program
    assert tiled >= len(CASES) // 2


# -- choosing tiles ------------------------------------------------------------------------

MATMUL = parse("""block main [] #program (
    in A f32(37, 53):(53, 1)
    in B f32(53, 29):(29, 1)
    out C f32(37, 29):(29, 1)
) {
  block k0_C [m:37, n:29, k:53] #agg_add #contraction #kernel (
      in A[m, k] f32(1, 1):(53, 1)
      in B[k, n] f32(1, 1):(29, 1)
      out C[m, n]:add f32(1, 1):(29, 1)
  ) {
    $A = load(A)
    $B = load(B)
    $1 = mul($A, $B): f32
    C = store($1)
  }
}
""")
KERNEL = MATMUL.root.stmts[0]


def test_candidate_sizes() -> None:
    assert candidate_sizes(12) == [1, 2, 3, 4, 6, 8, 12]
    assert candidate_sizes(37) == [1, 2, 4, 8, 16, 32, 37]
    assert candidate_sizes(1) == [1]
    assert candidate_sizes(12, ragged=False) == [1, 2, 3, 4, 6, 12]


def test_divisors_only_keeps_tile_sized_views() -> None:
    text = format(MATMUL).replace("37", "36").replace("53", "48").replace("29", "30")
    program = parse(text)
    (outer,) = Autotile(memory_bytes=4096, line_bytes=4, ragged=False).run(program).root.stmts
    (inner,) = outer.sub_blocks
    assert not inner.constraints  # no ragged tile
    # Every view is a 12x16 / 16x10 / 12x10 tile window moving with the tile indices.
    assert [str(a) for r in outer.refs for a in r.access] == [
        "12*m_o",
        "16*k_o",
        "16*k_o",
        "10*n_o",
        "12*m_o",
        "10*n_o",
    ]
    assert [r.shape.sizes for r in outer.refs] == [(12, 16), (16, 10), (12, 10)]


@pytest.mark.parametrize("memory", [512, 2048, 6144, 16384])
def test_the_choice_fits_and_is_the_cheapest(memory: int) -> None:
    budget = memory / 2
    tiles = choose_tiles(KERNEL, budget=budget, line_bytes=4)
    model = CostModel(KERNEL, line_bytes=4)
    best = model.evaluate(tiles)
    assert best.fits(budget)
    for m in candidate_sizes(37):
        for n in candidate_sizes(29):
            for k in candidate_sizes(53):
                c = model.evaluate({"m": m, "n": n, "k": k})
                assert not c.fits(budget) or c.total_bytes >= best.total_bytes


def test_only_outputs_and_min_tiles() -> None:
    tiles = choose_tiles(KERNEL, budget=4096, line_bytes=4, only_outputs=True)
    assert tiles["k"] == 53
    tiles = choose_tiles(KERNEL, budget=1 << 30, min_tiles=6)
    assert CostModel(KERNEL).evaluate(tiles).parallel_tiles >= 6
    assert choose_tiles(KERNEL, budget=1 << 30) is None  # fits whole
    assert choose_tiles(KERNEL, budget=4) is None  # nothing fits


def test_greedy_search_stays_within_the_budget() -> None:
    tiles = choose_tiles(KERNEL, budget=3072, line_bytes=4, max_candidates=10)
    assert tiles is not None and CostModel(KERNEL, 4).evaluate(tiles).fits(3072)


def test_tiling_is_a_fixed_point_and_identity_when_unchanged() -> None:
    once = Autotile(memory_bytes=6144, line_bytes=4).run(MATMUL)
    assert once is not MATMUL and Autotile(memory_bytes=6144, line_bytes=4).run(once) is once
    assert Autotile(memory_bytes=1 << 20).run(MATMUL) is MATMUL
    assert Autotile(memory_bytes=256, select="eltwise").run(MATMUL) is MATMUL


def test_bad_options_raise() -> None:
    with pytest.raises(StripeError, match="bad tag selector"):
        make_pass("autotile", select="kernel,,x")
    with pytest.raises(StripeError, match="positive"):
        make_pass("autotile", memory_bytes=0)


# -- random tilings run every point exactly once -------------------------------------------

NAMES = ("i", "j", "k")


@st.composite
def counting_kernels(draw) -> tuple[Program, dict[str, int]]:
    """A kernel adding 1 per point into ``N[i, j, k]`` and storing ``index(...)`` into ``V``.

    Any point run twice (or not at all) changes ``N``; a wrong index
    substitution changes ``V``.  Returns the program and random tile sizes.
    """
    n = draw(st.integers(1, 3))
    ranges = [draw(st.integers(1, 7)) for _ in range(n)]
    names = NAMES[:n]
    idxs = tuple(Index(x, r) for x, r in zip(names, ranges))
    cons = []
    for _ in range(draw(st.integers(0, 2))):
        coeffs = {x: draw(st.integers(-2, 2)) for x in names}
        cons.append(Constraint(Affine.build(coeffs, draw(st.integers(0, 8)))))
    shape = TensorShape.dense("f32", tuple(ranges))
    one = TensorShape("f32", (1,) * n, shape.strides)
    access = tuple(Affine.index(x) for x in names)
    weights = {x: draw(st.integers(-3, 3)) for x in names}
    refs = (
        Refinement("out", "N", one, "N", access, "add"),
        Refinement("out", "V", TensorShape("i64", (1,) * n, shape.strides), "V", access, "assign"),
    )
    stmts = (
        Constant("$one", 1.0, "f32"),
        Store("N", "$one"),
        LoadIndex("$x", Affine.build(weights, 5)),
        Store("V", "$x"),
    )
    kernel = Block(idxs, refs, stmts, tuple(cons), frozenset({"kernel", "contraction"}), "count")
    root_refs = (
        Refinement("out", "N", shape),
        Refinement("out", "V", TensorShape.dense("i64", tuple(ranges))),
    )
    root = Block(refs=root_refs, stmts=(kernel,), tags=frozenset({"program"}))
    tiles = {x: draw(st.integers(1, r)) for x, r in zip(names, ranges)}
    return Program(root), tiles


@settings(max_examples=150, deadline=None)
@given(counting_kernels())
def test_random_tilings_run_every_point_once(drawn) -> None:
    program, tiles = drawn
    verify(program)
    kernel = program.root.stmts[0]
    tiled = Program(program.root.with_stmts((tile_kernel(kernel, tiles, program.root),)))
    note(format(tiled))
    verify(tiled)
    assert_close(run(tiled, {}), run(program, {}), "tiled vs whole")


def test_assign_kernels_store_each_element_once() -> None:
    # The interpreter rejects two stores to one element of an `assign` view.
    text = format(MATMUL).replace(":add", ":assign").replace("#agg_add", "#agg_assign")
    text = text.replace("k:53", "k:1")
    program = parse(text)
    tiled = Autotile(memory_bytes=256, line_bytes=4).run(program)
    assert tiled is not program
    inputs = {"A": np.ones((37, 53), np.float32), "B": np.ones((53, 29), np.float32)}
    assert_close(run(tiled, inputs), run(program, inputs))


# -- random contractions through autotile and thread -----------------------------------------


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(drawn=contractions(), seed=st.integers(0, 2**16), memory=st.sampled_from([64, 128, 256]))
def test_random_contractions_tiled_match_the_oracle(drawn, seed: int, memory: int) -> None:
    spec, shapes = drawn
    source = spec.source()
    note(source)
    arrays = make_inputs(spec, shapes, seed)
    expected = brute_force(spec, arrays)
    f = stripeml.compile(source, target="interp")
    program = f.lower(*(arrays[name] for name, _ in spec.params)).program
    passes = [Autotile(memory_bytes=memory, line_bytes=8, select="kernel"), Thread(threads=2)]
    result = run_pipeline(program, passes)
    note(result.stages[-1][1])
    event(f"stages: {[name for name, _ in result.stages]}")
    got = run(result.program, {name: arrays[name] for name, _ in spec.params})
    np.testing.assert_allclose(got["O"], expected, rtol=1e-9, atol=1e-12)
