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
from stripeml.passes.thread import Thread, choose_thread_index, chunk_read_bytes
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
    f = stripeml.compile(case.source, target="interp")
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
        if not enough:
            assert chosen == max(safe, key=lambda n: block.idx(n).range)
            return
        assert chosen in enough
        even = [n for n in enough if -(-block.idx(n).range // 3) * 3 <= 1.1 * block.idx(n).range]
        assert chosen in (even or enough)


def test_chunk_read_bytes_by_hand() -> None:
    program = parse("""block main [] #program (
    in A f32(8, 4):(4, 1)
    in B f32(4, 16):(16, 1)
    out C f32(8, 16):(16, 1)
) {
  block mm [m:8, n:16, k:4] #agg_add #contraction #kernel (
      in A[m, k] f32(1, 1):(4, 1)
      in B[k, n] f32(1, 1):(16, 1)
      out C[m, n]:add f32(1, 1):(16, 1)
  ) {
    $a = load(A)
    $b = load(B)
    $1 = mul($a, $b): f32
    C = store($1)
  }
}
""")
    (mm,) = program.root.stmts
    # m takes 4 values: A 4x4, B 4x16 elements; n takes 8: A 8x4, B 4x8 (4 bytes each).
    assert chunk_read_bytes(mm, "m", 4) == (16 + 64) * 4
    assert chunk_read_bytes(mm, "n", 8) == (32 + 32) * 4
    # n's chunks read less, but n is C's unit-stride (vector) index: m is split.
    assert choose_thread_index(mm, 2) == "m"


def test_the_unit_stride_index_is_not_split() -> None:
    """A copy into channels 64..127 of a 55x55x128 buffer: splitting the channels
    would read a hair fewer bytes, but leave each thread strided rows and no
    vector loop; the rows are split."""
    program = parse("""block main [] #program (
    in A f32(55, 55, 64):(3520, 64, 1)
    out B f32(55, 55, 128):(7040, 128, 1)
) {
  block cat [y:55, x:55, c:64] #eltwise #kernel (
      in A[y, x, c] f32(1, 1, 1):(3520, 64, 1)
      out B[y, x, c + 64]:assign f32(1, 1, 1):(7040, 128, 1)
  ) {
    $a = load(A)
    B = store($a)
  }
}
""")
    (k,) = program.root.stmts
    assert chunk_read_bytes(k, "c", 32) < chunk_read_bytes(k, "y", 28)
    assert choose_thread_index(k, 2) == "y"


def test_even_split_preferred_over_cheap_uneven_one() -> None:
    program = parse("""block main [] #program (
    in A f32(3, 64):(64, 1)
    out B f32(3, 64):(64, 1)
) {
  block scale [i:3, j:64] #eltwise #kernel (
      in A[i, j] f32(1, 1):(64, 1)
      out B[i, j]:assign f32(1, 1):(64, 1)
  ) {
    $a = load(A)
    B = store($a)
  }
}
""")
    (k,) = program.root.stmts
    assert choose_thread_index(k, 2) == "j"  # i: chunks of 2 and 1 rows


def test_conv_splits_rows_when_the_image_dominates() -> None:
    """The blocked-weight conv kernels of the CPU pipeline: a large image with few
    weight panels splits its rows; a small image with many panels splits panels."""
    from stripeml.passes.halo import Halo
    from stripeml.passes.unroll import Unroll

    src = """function (I[N, X, Y, CI], K[CB, KX, KY, CI, C]) -> (O) {
        O[n, x, y, BLK * cb + c : N, X, Y, CO] = +(I[n, x + kx - 1, y + ky - 1, ci] * K[cb, kx, ky, ci, c]);
    }"""

    def first_index(size: int, ci: int, co: int, blk: int) -> str:
        i = np.zeros((1, size, size, ci), np.float32)
        k = np.zeros((co // blk, 3, 3, ci, blk), np.float32)
        text = src.replace("BLK", str(blk)).replace("CO]", f"{co}]")
        program = stripeml.compile(text, target="interp").lower(i, k).program
        passes = [Halo(), Unroll(rows=4, vectors=2, max_rows=7), Thread(threads=2)]
        out = run_pipeline(program, passes).program
        (kernel,) = [b for b in out.root.stmts if "tiled" in b.tags]
        return kernel.idxs[0].name

    # 4 panels of 147 KB, an 861 KB image: a pixel index (x, or y's tiles)
    assert first_index(56, 64, 64, 16) in {"x", "y_o"}
    assert first_index(7, 512, 512, 8) == "cb"  # 64 panels of 147 KB, a 166 KB image


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=contractions(), seed=st.integers(0, 2**16), memory=st.sampled_from([64, 256]))
def test_tiled_random_contractions_split_safely(drawn, seed: int, memory: int) -> None:
    spec, shapes = drawn
    note(spec.source())
    arrays = make_inputs(spec, shapes, seed)
    program = (
        stripeml.compile(spec.source(), target="interp")
        .lower(*(arrays[n] for n, _ in spec.params))
        .program
    )
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
