"""``thread``: marked indices are race-free (against brute force), results never change."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import stripeml
from stripeml.errors import StripeError
from stripeml.ir import Block, Program, parse
from stripeml.passes import make_pass
from stripeml.passes.autotile import Autotile
from stripeml.passes.manager import run_pipeline
from stripeml.passes.thread import Thread, choose_thread_index
from stripeml.runtime.interp import run

from .helpers import checker

try:
    from analysis.brute import brute_race_free_nested, kernels  # tests/analysis/brute.py
    from programs import CASES, Case  # tests/programs.py
    from test_random_contractions import contractions, make_inputs
except ImportError:  # tests/ imported as a package
    from tests.analysis.brute import brute_race_free_nested, kernels
    from tests.programs import CASES, Case
    from tests.test_random_contractions import contractions, make_inputs


def _points(block: Block) -> int:
    n = 1
    for b in [block, *block.sub_blocks]:
        for i in b.idxs:
            n *= i.range
    return n


def _check_marked(program: Program, threads: int) -> int:
    """Every ``#thread`` kernel's first index is race-free; returns how many were marked."""
    marked = 0
    for k in program.root.stmts:
        if not (isinstance(k, Block) and "thread" in k.tags):
            continue
        marked += 1
        assert k.idxs[0].range >= 2
        if _points(k) <= 20000:
            assert k.idxs[0].name in brute_race_free_nested(k), k.name
    return marked


@pytest.mark.parametrize("threads", [2, 8])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_suite_marks_race_free_indices(case: Case, threads: int) -> None:
    inputs = case.make_inputs()
    f = stripeml.compile(case.source)
    program = f.lower(*(inputs[p] for p in f.params)).program
    expected = run(program, inputs)
    check = checker(inputs, expected, rtol=case.rtol, atol=case.atol)
    result = run_pipeline(program, [Thread(threads=threads)], check=check).program
    _check_marked(result, threads)
    assert Thread(threads=threads).run(result) is result


@settings(max_examples=200, deadline=None)
@given(kernels())
def test_choice_on_random_kernels(block: Block) -> None:
    safe = [n for n in brute_race_free_nested(block) if block.idx(n).range >= 2]
    chosen = choose_thread_index(block, 3)
    assert (chosen is None) == (not safe)
    if chosen is not None:
        assert chosen in safe
        enough = [n for n in safe if block.idx(n).range >= 3]
        assert chosen == (enough[0] if enough else max(safe, key=lambda n: block.idx(n).range))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=contractions(), seed=st.integers(0, 2**16), memory=st.sampled_from([64, 256]))
def test_tiled_random_contractions_split_safely(drawn, seed: int, memory: int) -> None:
    spec, shapes = drawn
    note(spec.source())
    arrays = make_inputs(spec, shapes, seed)
    program = stripeml.compile(spec.source()).lower(*(arrays[n] for n, _ in spec.params)).program
    passes = [Autotile(memory_bytes=memory, line_bytes=8), Thread(threads=2)]
    result = run_pipeline(program, passes).program
    note(stripeml.ir.format(result))
    _check_marked(result, 2)
    inputs = {n: arrays[n] for n, _ in spec.params}
    np.testing.assert_allclose(run(result, inputs)["O"], run(program, inputs)["O"], rtol=1e-9)


def test_reorder_keeps_everything_else() -> None:
    program = parse("""block main [] #program (
    in A f32(16, 8):(8, 1)
    out S f32(8):(1)
) {
  block col_sum [r:16, c:8] #agg_add #contraction #kernel (
      in A[r, c] f32(1, 1):(8, 1)
      out S[c]:add f32(1):(1)
  ) {
    $a = load(A)
    S = store($a)
  }
}
""")
    (before,) = program.root.stmts
    (after,) = Thread(threads=4).run(program).root.stmts
    assert [i.name for i in after.idxs] == ["c", "r"]
    assert after.tags == before.tags | {"thread"}
    assert (after.refs, after.stmts, after.constraints) == (
        before.refs,
        before.stmts,
        before.constraints,
    )


def test_bad_selector_raises() -> None:
    with pytest.raises(StripeError, match="bad tag selector"):
        make_pass("thread", select="!")
