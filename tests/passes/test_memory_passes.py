"""The memory passes on hand-written nested IR: legality edges, placement, measurements.

Golden cases (``golden/{localize,scalarize,cache,place,pad,prune}``) show each
rule on a small program; these tests cover what a golden file cannot: that a
refused rewrite really would have been wrong, that the overlap checker and
the arena interpreter catch a bad placement, options, and peak memory.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import stripeml
from pipelines import cpu_passes
from stripeml.analysis.liveness import live_range
from stripeml.errors import StripeError
from stripeml.ir import Block, Program, format, parse, verify
from stripeml.passes import make_pass
from stripeml.passes.cache import Cache
from stripeml.passes.localize import Localize
from stripeml.passes.manager import run_pipeline
from stripeml.passes.pad import Pad
from stripeml.passes.place import Place
from stripeml.passes.prune import Prune
from stripeml.passes.scalarize import Scalarize
from stripeml.runtime.interp import run

from .helpers import assert_close, assert_same_results, chain_inputs, checker, random_inputs
from .memcheck import assert_placed_soundly, overlaps
from .test_random_chains import chains

try:
    from ir.samples import tiled_cached
    from programs import CASES_BY_NAME
    from runtime.programs_ir import tiled_matmul
except ImportError:  # tests/ imported as a package
    from tests.ir.samples import tiled_cached
    from tests.programs import CASES_BY_NAME
    from tests.runtime.programs_ir import tiled_matmul

GOLDEN = Path(__file__).parent / "golden"

# Ten elementwise statements, nine temporaries, results reused a few steps later.
CHAIN10 = """function (A[N, M], B[N, M]) -> (O) {
    T1 = A * B;
    T2 = exp(T1);
    T3 = T2 + A;
    T4 = tanh(T3);
    T5 = T4 * T1;
    T6 = T5 - B;
    T7 = relu(T6);
    T8 = T7 * T3;
    T9 = sqrt(abs(T8));
    O = T9 + T2;
}"""


def _golden_before(name: str) -> Program:
    text = (GOLDEN / f"{name}.txt").read_text()
    return parse(text.split("=== before\n", 1)[1].split("=== after\n", 1)[0])


def _with_offsets(program: Program, offsets: dict[str, int]) -> Program:
    """``program`` with the root temporaries' offsets set by hand."""
    refs = tuple(
        dataclasses.replace(r, offset=offsets[r.into]) if r.into in offsets else r
        for r in program.root.refs
    )
    return Program(dataclasses.replace(program.root, refs=refs))


# -- localize ---------------------------------------------------------------------------------


def test_moving_a_temporary_into_the_kernel_that_writes_and_reads_it_would_change_results():
    """Why ``localize`` refuses: in the kernel, loads see the temporary from before it ran."""
    program = _golden_before("localize/kernel_writes_and_reads_temporary_unchanged")
    assert Localize().run(program) is program
    moved = parse(
        format(program)
        .replace("    none T f32(4):(1)\n", "")
        .replace("inout T[i]:assign f32(1):(1)", "none T f32(1):(1)")
    )
    verify(moved)
    inputs = {"A": np.arange(1, 5, dtype=np.float32)}
    assert np.all(run(program, inputs)["O"] == 0)  # the pre-kernel contents
    assert np.all(run(moved, inputs)["O"] == inputs["A"])  # what a fresh allocation gives


def test_read_only_temporary_sinks_and_reads_the_same_initial_contents():
    program = parse(
        """block p [] #program (
    in A f32(4):(1)
    out O f32(4):(1)
    none T f32(4):(1)
) {
  block k [i:4] #kernel (
      in A[i] f32(1):(1)
      in T[i] f32(1):(1)
      out O[i]:assign f32(1):(1)
  ) {
    $a = load(A)
    $t = load(T)
    $y = add($a, $t): f32
    O = store($y)
  }
}
"""
    )
    result = Localize().run(program)
    assert "T" not in {r.into for r in result.root.refs}
    (kernel,) = result.root.sub_blocks
    assert kernel.ref("T").dir == "none"
    assert_same_results(program, result)


def test_shrink_falls_back_to_a_constant_start_when_the_minimum_has_pieces():
    """Views at ``3*t`` and ``6 - t``: the minimum is piecewise, the box starts at 0."""
    program = parse(
        """block p [] #program (
    in A f32(3, 2):(2, 1)
    out O f32(3, 2):(2, 1)
) {
  block k [t:3] #kernel (
      in A[t, 0] f32(1, 2):(2, 1)
      out O[t, 0]:assign f32(1, 2):(2, 1)
      none X f32(20):(1)
  ) {
    block w [i:2] (
        in A[0, i] f32(1, 1):(2, 1)
        out X[3*t + i]:assign f32(1):(1)
    ) {
      $a = load(A)
      X = store($a)
    }
    block r [i:2] (
        in X[-t + i + 6] f32(1):(1)
        in Y = X[3*t + i] f32(1):(1)
        out O[0, i]:assign f32(1, 1):(2, 1)
    ) {
      $x = load(X)
      $y = load(Y)
      $z = add($x, $y): f32
      O = store($z)
    }
  }
}
"""
    )
    verify(program)
    result = Localize().run(program)
    (kernel,) = result.root.sub_blocks
    assert kernel.ref("X").shape.sizes == (8,)  # elements 0 .. 7 are used
    verify(result)
    assert_same_results(program, result)
    assert Localize().run(result) is result


# -- scalarize --------------------------------------------------------------------------------


def test_scalarize_removes_every_register_of_a_block():
    program = _golden_before("scalarize/store_then_loads")
    text = format(program).replace(
        "      none R f32():() @REGISTER\n",
        "      none R f32():() @REGISTER\n      none Q f32(1):(1)\n",
    )
    text = text.replace(
        "    O = store($y)\n", "    Q = store($y)\n    $q = load(Q)\n    O = store($q)\n"
    )
    program = parse(text)
    verify(program)
    result = Scalarize().run(program)
    (kernel,) = result.root.sub_blocks
    assert not [r for r in kernel.refs if r.dir == "none"]
    assert_same_results(program, result)


# -- cache ------------------------------------------------------------------------------------


def test_cache_leaves_views_that_copy_blocks_already_stage() -> None:
    """tiled_matmul copies A's tile into L1 itself: only B and C are cached."""
    program = tiled_matmul(8, 12, 5, 4)
    result = Cache(location="SRAM").run(program)
    verify(result)
    assert_same_results(program, result)
    (tile,) = result.root.sub_blocks
    kinds = [sorted(b.tags) for b in tile.sub_blocks]
    assert kinds == [["cache_in", "copy"], ["copy"], ["kernel"], ["cache_out", "copy"]]
    allocations = {r.into: r.location for r in tile.refs if r.dir == "none"}
    assert allocations == {"Ac": "L1", "B_sram": "SRAM", "C_sram": "SRAM"}
    assert Cache(location="SRAM").run(result) is result
    # The sample stages A through T (L1) with a copy block; only B is left to cache.
    sample = tiled_cached()
    cached = Cache(location="L1").run(sample)
    (tile,) = cached.root.sub_blocks
    assert [r.into for r in tile.refs if r.dir == "none"] == ["T", "B_l1"]
    assert_same_results(sample, cached)


@pytest.mark.parametrize("dtype", ["f32", "i32"])
@pytest.mark.parametrize(
    "agg, op", [("add", "mul"), ("max", "add"), ("min", "sub"), ("mul", "add")]
)
def test_cached_border_tiles_start_at_the_identity(agg: str, op: str, dtype: str) -> None:
    """A padded 1-D "convolution" with each aggregation: the output cache is initialised."""
    program = parse(
        format(_golden_before("cache/padded_conv_output_starts_at_identity"))
        .replace("f32", dtype)
        .replace(":add", f":{agg}")
        .replace("#agg_add", f"#agg_{agg}")
        .replace("mul($i, $k)", f"{op}($i, $k)")
    )
    verify(program)
    result = Cache(location="SRAM").run(program)
    (tile,) = result.root.sub_blocks
    assert any("cache_init" in b.tags for b in tile.sub_blocks)
    for seed in range(3):
        assert_same_results(program, result, seed)


def test_cache_options_are_checked() -> None:
    with pytest.raises(StripeError, match="dirs"):
        make_pass("cache", dirs="both")
    with pytest.raises(StripeError, match="selector"):
        make_pass("cache", select="a b")


def test_autotiled_convolution_cached_and_placed_runs_in_shared_memory() -> None:
    case = CASES_BY_NAME["conv2d_same_pad"]
    inputs = case.make_inputs()
    f = stripeml.compile(case.source, target="interp")
    program = f.lower(*(inputs[p] for p in f.params)).program
    expected = run(program, inputs)
    passes = [
        make_pass("autotile", memory_bytes=1024),
        Cache(location="SRAM"),
        Prune(),
        Place(alignment=16),
    ]
    result = run_pipeline(program, passes, check=checker(inputs, expected, **_tol(case)))
    tags = {t for b in stripeml.ir.walk_blocks(result.program.root) for t in b.tags}
    assert {"cache_in", "cache_out", "cache_init"} <= tags
    assert_placed_soundly(result.program)
    assert_close(run(result.program, inputs, arena=True), expected, "arena", **_tol(case))


def _tol(case) -> dict[str, float]:
    return {"rtol": case.rtol, "atol": case.atol}


# -- place ------------------------------------------------------------------------------------


def test_overlapping_live_buffers_are_caught_by_the_checker_and_by_the_arena() -> None:
    program = _golden_before("place/root_chain_shares")
    placed = Place().run(program)
    assert_placed_soundly(placed)
    inputs = random_inputs(program)
    want = run(program, inputs)
    assert_close(run(placed, inputs, arena=True), want, "placed")
    bad = _with_offsets(program, {"T1": 0, "T2": 0, "T3": 0, "S": 0})
    assert overlaps(bad)
    with pytest.raises(AssertionError):
        assert_close(run(bad, inputs, arena=True), want, "everything at 0")
    assert_close(run(bad, inputs), want, "offsets are ignored without arena")


def test_a_temporary_whose_zeros_are_read_keeps_them() -> None:
    """Sharing T's bytes with U (whose odd elements are never written) leaks T's values."""
    program = _golden_before("place/reads_initial_contents")
    (k1, k2, k3, k4) = program.root.sub_blocks
    assert live_range(program.root, program.root.ref("U"), ()) == (-1, 3)
    assert live_range(program.root, program.root.ref("T"), ()) == (0, 1)
    inputs = random_inputs(program)
    want = run(program, inputs)
    placed = Place().run(program)
    assert_close(run(placed, inputs, arena=True), want, "placed")
    shared = _with_offsets(program, {"T": 0, "U": 0})
    assert not overlaps(shared)  # first-mention liveness alone would allow it ...
    with pytest.raises(AssertionError):  # ... but U's odd elements then hold exp(A)
        assert_close(run(shared, inputs, arena=True), want, "U on T's bytes")


def test_place_options() -> None:
    assert Place(locations=["SRAM", "L1"]).locations == ("SRAM", "L1")
    assert make_pass("place", locations="DRAM, SRAM").locations == ("DRAM", "SRAM")
    program = _golden_before("place/root_chain_shares")
    for alignment in (1, 4, 64, 96):
        placed = Place(alignment=alignment).run(program)
        offsets = [r.offset for r in placed.root.refs if r.dir == "none"]
        assert all(o % np.lcm(alignment, 4) == 0 for o in offsets)
        assert_placed_soundly(placed)
    assert Place(locations="SRAM").run(program) is program


def test_nested_allocations_share_one_frame_per_point() -> None:
    program = Pad(multiple=4).run(_golden_before("place/nested_allocations"))
    placed = Place().run(program)
    assert_placed_soundly(placed)
    inputs = random_inputs(program)
    assert_close(run(placed, inputs, arena=True), run(program, inputs), "arena")
    (tile,) = placed.root.sub_blocks
    sram = {r.into: r.offset for r in tile.refs if r.location == "SRAM"}
    assert sram["C_sram"] == sram["A_sram"]  # A_sram is dead once Ac is filled


def _lowered(source: str, **arrays: np.ndarray) -> Program:
    return stripeml.compile(source, target="interp").lower(**arrays).program


@pytest.mark.parametrize("size", [(4, 5), (64, 64)])
def test_place_shrinks_the_ten_statement_chain(size: tuple[int, int]) -> None:
    rng = np.random.default_rng(0)
    inputs = {n: rng.uniform(-1, 1, size).astype(np.float32) for n in "AB"}
    program = _lowered(CHAIN10, **inputs)
    placed = Place().run(program)
    alone, shared, bound = (
        Place.peak_bytes(program)["DRAM"],
        Place.peak_bytes(placed)["DRAM"],
        Place.live_bytes(placed)["DRAM"],
    )
    n = size[0] * size[1] * 4
    assert alone == 9 * n
    assert bound <= shared < alone
    if n % 64 == 0:
        assert shared == bound == 5 * n  # T2, T3 and T1 live across the middle of the chain
    assert_placed_soundly(placed)
    assert_close(run(placed, inputs, arena=True), run(program, inputs), "arena")


def test_place_on_the_mlp() -> None:
    case = CASES_BY_NAME["mlp_10_statements"]
    inputs = case.make_inputs()
    f = stripeml.compile(case.source, target="interp")
    program = f.lower(*(inputs[p] for p in f.params)).program
    unplaced = [q for q in cpu_passes() if q.name != "place"]  # the CPU target places too
    for p in (program, run_pipeline(program, unplaced).program):
        placed = Place().run(p)
        assert Place.peak_bytes(placed)["DRAM"] < Place.peak_bytes(p)["DRAM"]
        assert_placed_soundly(placed)
        assert_close(run(placed, inputs, arena=True), run(p, inputs), "arena", **_tol(case))


def test_place_on_a_larger_mlp_reaches_the_lower_bound() -> None:
    """N, K, H, C = 64, 256, 128, 10: nine temporaries, 109056 bytes one buffer each."""
    source = CASES_BY_NAME["mlp_10_statements"].source
    rng = np.random.default_rng(1)
    shapes = {"X": (64, 256), "W1": (256, 128), "B1": (128,), "W2": (128, 10), "B2": (10,)}
    inputs = {n: rng.uniform(-1, 1, s).astype(np.float32) for n, s in shapes.items()}
    program = _lowered(source, **inputs)
    placed = Place().run(program)
    assert Place.peak_bytes(program) == {"DRAM": 109056}
    assert Place.peak_bytes(placed) == Place.live_bytes(placed) == {"DRAM": 65536}
    assert_placed_soundly(placed)
    assert_close(run(placed, inputs, arena=True), run(program, inputs), "arena", rtol=1e-4)


# -- pad and prune ----------------------------------------------------------------------------


def test_pad_then_place_runs_in_shared_memory() -> None:
    program = _golden_before("place/root_chain_shares")
    text = format(program).replace("16", "13")
    program = parse(text)
    verify(program)
    padded = Pad(multiple=8).run(program)
    assert padded.root.ref("T1").shape.strides == (16, 1)
    placed = Place().run(padded)
    inputs = random_inputs(program)
    assert_close(run(placed, inputs, arena=True), run(program, inputs), "padded, placed")


def test_prune_after_autotile_removes_unit_tiles() -> None:
    """``matmul_vector_rows_1`` has a range-1 index: prune takes it out everywhere."""
    case = CASES_BY_NAME["matmul_vector_rows_1"]
    inputs = case.make_inputs()
    f = stripeml.compile(case.source, target="interp")
    program = f.lower(*(inputs[p] for p in f.params)).program
    result = Prune().run(program)
    assert all(i.range > 1 for b in stripeml.ir.walk_blocks(result.root) for i in b.idxs)
    assert_close(run(result, inputs), run(program, inputs), "pruned", **_tol(case))


# -- random chains ----------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains(), n=st.integers(1, 3), m=st.integers(1, 4), fused=st.booleans())
def test_random_chains_through_the_memory_passes(chain, n: int, m: int, fused: bool) -> None:
    source, _ = chain
    note(source)
    inputs = chain_inputs(n, m)
    program = stripeml.compile(source, target="interp").lower(**inputs).program
    expected = run(program, inputs)
    passes = [*(cpu_passes() if fused else []), Localize(), Scalarize(), Prune(), Pad(4)]
    passes += [Cache(location="L1", select="kernel"), Place(alignment=8)]
    result = run_pipeline(program, passes, check=checker(inputs, expected)).program
    assert_placed_soundly(result)
    assert_close(run(result, inputs, arena=True), expected, "arena")


def test_every_block_kind_is_handled() -> None:
    """Specials at the root, fills and nested blocks: every memory pass keeps results."""
    for name in ("default_tensor", "unreached_elements_zero", "layernorm", "cumsum"):
        case = CASES_BY_NAME[name]
        inputs = case.make_inputs()
        f = stripeml.compile(case.source, target="interp")
        program = f.lower(*(inputs[p] for p in f.params)).program
        for p in (Localize(), Scalarize(), Prune(), Pad(2), Cache(select="kernel"), Place()):
            out = p.run(program)
            verify(out)
            assert isinstance(out.root, Block)
            assert_close(run(out, inputs), run(program, inputs), f"{name} {p.name}", **_tol(case))
