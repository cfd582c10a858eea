"""Coverage of output buffers, against brute-force enumeration of stored elements."""

from __future__ import annotations

import itertools
from unittest import mock

import islpy as isl
from hypothesis import given, settings
from hypothesis import strategies as st

from stripeml.analysis import coverage
from stripeml.analysis.access import accesses, uses
from stripeml.analysis.coverage import covers, unwritten, writes_all, written
from stripeml.ir import Block, Store, parse

from .brute import brute_touches, elements, kernels, nest_points, nests
from .test_dependence import FUSED, MATMUL, ROWS, TILED


def test_full_writers() -> None:
    assert writes_all(MATMUL, "C", (8, 8))
    assert writes_all(TILED, "C", (8, 8))  # through the inner stores, ragged constraints included
    assert writes_all(FUSED, "V", (8,))
    assert writes_all(ROWS, "Y", (8, 8))  # a special writes its whole view
    assert not writes_all(MATMUL, "C", (9, 8))


def test_unwritten_elements_of_a_strided_store() -> None:
    block = parse("""block [] #program (
    in I f32(6):(1)
    out O f32(12):(1)
) {
  block [i:6] #kernel (
      in I[i] f32(1):(1)
      out O[2*i]:assign f32(1):(1)
  ) {
    $x = load(I)
    O = store($x)
  }
}
""").root.stmts[0]
    assert not writes_all(block, "O", (12,))
    holes: set[int] = set()
    unwritten(block, "O", (12,)).foreach_point(
        lambda p: holes.add(p.get_coordinate_val(isl.dim_type.set, 0).to_python())
    )
    assert holes == {1, 3, 5, 7, 9, 11}


def test_per_outer_point() -> None:
    (inner,) = TILED.sub_blocks
    # Each tile writes its whole window only where the tile is not ragged: at
    # m_o = 2 only rows 6..7 of the 3 exist.
    assert not writes_all(inner, "C", (3, 3), outer=[TILED])
    assert not written(inner, "C", outer=[TILED]).is_empty()


def brute_written(block: Block, ref: str) -> set[tuple]:
    r = block.ref(ref)
    out: set[tuple] = set()
    stores = [s for s in block.stmts if isinstance(s, Store) and s.ref == ref]
    for p in nest_points([block]):
        for _ in stores:
            out.update(elements(r.access, (1,) * len(r.access), p))
    return out


@settings(max_examples=120, deadline=None)
@given(block=kernels(), data=st.data())
def test_random_kernels_against_enumeration(block: Block, data) -> None:
    outs = [r for r in block.refs if r.dir == "out"]
    if not outs:
        return
    r = outs[0]
    sizes = tuple(data.draw(st.integers(0, 4)) for _ in r.access)
    box = set(itertools.product(*(range(s) for s in sizes)))
    assert writes_all(block, r.into, sizes) == (box <= brute_written(block, r.into))


# -- one coverage test for every caller: the quick box test and isl agree with enumeration --


def brute_covers(kernel: Block, ref: str, sizes: tuple[int, ...]) -> bool:
    """At every point of ``kernel``, its statements write every element of ``[0, sizes)`` of
    its view ``ref`` (the question ``cache`` and liveness ask)."""
    box = set(itertools.product(*(range(s) for s in sizes)))
    zero = tuple(0 for _ in sizes)
    for p in nest_points([kernel]):
        views = {ref: (ref, zero, kernel.ref(ref).shape.sizes)}
        hit = {e for _, _, e, write in brute_touches(kernel.stmts, views, p, True) if write}
        if not box <= hit:
            return False
    return True


def brute_writes_all(kernel: Block, ref: str, sizes: tuple[int, ...]) -> bool:
    """Over all points of ``kernel`` together, stores through view ``ref`` reach every element
    of the parent buffer ``[0, sizes)``."""
    r = kernel.ref(ref)
    box = set(itertools.product(*(range(s) for s in sizes)))
    hit = set()
    for p in nest_points([kernel]):
        views = {ref: (r.from_, tuple(a.evaluate(p) for a in r.access), r.shape.sizes)}
        hit |= {e for _, _, e, write in brute_touches(kernel.stmts, views, p, False) if write}
    return box <= hit


def both_ways(question, *args):
    """``question(*args)`` answered with the quick box test, and by isl alone."""
    quick = question(*args)
    with mock.patch.object(coverage, "_box", lambda acc, runs=(): None):
        slow = question(*args)
    return quick, slow


@settings(max_examples=150, deadline=None)
@given(kernel=nests(), data=st.data())
def test_covers_a_view_at_every_point(kernel: Block, data) -> None:
    for r in kernel.refs:
        sizes = tuple(data.draw(st.integers(0, 3)) for _ in r.access)
        writes = [a for a in uses(kernel.stmts, r.into, r.shape.sizes) if a.write]
        want = brute_covers(kernel, r.into, sizes)
        assert both_ways(covers, writes, [kernel], sizes) == (want, want)


@settings(max_examples=150, deadline=None)
@given(kernel=nests(), data=st.data())
def test_writes_all_through_nested_views(kernel: Block, data) -> None:
    for r in kernel.refs:
        if r.dir == "in":
            continue
        sizes = tuple(data.draw(st.integers(0, 4)) for _ in r.access)
        want = brute_writes_all(kernel, r.into, sizes)
        assert both_ways(writes_all, kernel, r.into, sizes) == (want, want)


TILES = """block [] #program (
    out O f32(8, 6):(6, 1)
) {
  block [i:4, j:3] #kernel (
      out O[2*i, 2*j]:assign f32(2, 2):(6, 1)
  ) {
    block [a:2, b:2] (
        CONSTRAINT
        out W = O[a, b]:assign f32(1, 1):(6, 1)
    ) {
      $c = const(1.0): f32
      W = store($c)
    }
  }
}
"""


STRIDED = """block [] #program (
    out O f32(8):(1)
) {
  block [i:4] #kernel (
      out O[2*i]:assign f32(1):(1)
  ) {
    $c = const(1.0): f32
    O = store($c)
  }
}
"""


def test_the_quick_test_decides_plain_boxes_and_leaves_the_rest_to_isl() -> None:
    (kernel,) = parse(TILES.replace("CONSTRAINT", "")).root.sub_blocks
    (inner,) = kernel.sub_blocks
    writes = accesses(kernel)
    assert [coverage._box(a) for a in writes] == [((0, 8), (0, 6))]  # 2*i + a: no gaps
    assert both_ways(covers, writes, [], (8, 6)) == (True, True)
    assert both_ways(covers, writes, [], (9, 6)) == (False, False)
    # Per point of the kernel, the inner block writes the kernel's whole 2x2 view.
    assert coverage._box(accesses(inner)[0]) == ((0, 2), (0, 2))
    assert writes_all(inner, "W", (2, 2), [kernel]) and not writes_all(inner, "W", (3, 2), [kernel])
    # A constraint (here one that holds everywhere) is isl's to decide.
    (kernel,) = parse(TILES.replace("CONSTRAINT", "-a + 1 >= 0")).root.sub_blocks
    writes = accesses(kernel)
    assert [coverage._box(a) for a in writes] == [None]
    assert covers(writes, [], (8, 6)) and not covers(writes, [], (9, 6))
    # Strides that leave gaps are isl's too: O[2*i] over i < 4 misses 1, 3, 5.
    (strided,) = accesses(parse(STRIDED).root.stmts[0])
    assert coverage._box(strided) is None
    assert both_ways(covers, [strided], [], (7,)) == (False, False)
    assert both_ways(covers, [strided], [], (1,)) == (True, True)
    # One index in two dimensions is a diagonal, not a box.
    diagonal = STRIDED.replace("f32(8):(1)", "f32(4, 4):(4, 1)").replace("O[2*i]", "O[i, i]")
    (diag,) = accesses(parse(diagonal.replace("f32(1):(1)", "f32(1, 1):(4, 1)")).root.stmts[0])
    assert coverage._box(diag) is None
    assert both_ways(covers, [diag], [], (2, 2)) == (False, False)
    assert both_ways(covers, [diag], [], (1, 1)) == (True, True)


def test_an_empty_nest_is_covered() -> None:
    """No point of the nest, nothing to cover (the quick test must not say otherwise)."""
    (kernel,) = parse("""block [] #program (
    out O f32(4):(1)
) {
  block [i:4] #kernel (
      -i - 1 >= 0
      out O[i]:assign f32(1):(1)
  ) {
    block [j:1] (
        out W = O[j]:assign f32(1):(1)
    ) {
      $c = const(1.0): f32
      W = store($c)
    }
  }
}
""").root.sub_blocks
    writes = uses(kernel.stmts, "O", (1,))
    assert coverage._box(writes[0]) == ((0, 1),)
    assert both_ways(covers, writes, [kernel], (2,)) == (True, True)
    assert not covers(writes, [], (2,))  # over the inner block alone: one element of two


def test_rank_zero_views_inside_an_outer_block() -> None:
    """A register accumulated by a reduction nested in a kernel: written at every kernel point."""
    (reduce,) = FUSED.sub_blocks
    assert both_ways(writes_all, reduce, "S", (), [FUSED]) == (True, True)
    assert written(reduce, "S", [FUSED]).count_val().to_python() == 8  # one per point of i
    assert unwritten(reduce, "S", (), [FUSED]).is_empty()


def _stores(consts: list[tuple[int, int]], step: int, tiles: tuple[int, int]) -> Block:
    """A kernel over ``t, s`` storing ``O[step*t + a, step*s + b]`` for each ``(a, b)``
    of ``consts``, each through a view of its own (a Winograd output transform's form)."""
    views = "\n".join(
        f"      out O{k} = O[{step}*t + {a}, {step}*s + {b}]:assign f32(1, 1):(64, 1)"
        for k, (a, b) in enumerate(consts)
    )
    stores = "\n".join(f"    O{k} = store($c)" for k in range(len(consts)))
    (kernel,) = parse(f"""block [] #program (
    out O f32(64, 64):(64, 1)
) {{
  block [t:{tiles[0]}, s:{tiles[1]}] #kernel (
{views}
  ) {{
    $c = const(1.0): f32
{stores}
  }}
}}
""").root.stmts
    return kernel


def test_a_group_of_strided_stores_is_one_box() -> None:
    """The 16 stores of a 4 x 4 output tile, strided each, are one box together:
    decided without isl (the light SqueezeNet's liveness asked isl 16 such
    questions, 0.18 s of its cold compile)."""
    kernel = _stores([(a, b) for a in range(4) for b in range(4)], 4, (6, 6))
    writes = [a for a in uses([kernel], "O", (64, 64)) if a.write]
    assert len(writes) == 16 and all(coverage._box(a) is None for a in writes)
    assert coverage._boxes(writes) == [((0, 24), (0, 24))]
    with mock.patch.object(coverage, "_covers_isl", side_effect=AssertionError("isl asked")):
        assert covers(writes, [], (24, 24))
        assert not covers(writes, [], (25, 24))
    assert both_ways(covers, writes, [], (24, 24)) == (True, True)
    # one store of the 16 missing: no longer a product of runs, each its own (isl decides)
    holed = [a for a in writes if a.exprs[0].const != 2 or a.exprs[1].const != 1]
    assert coverage._boxes(holed) == [None] * 15
    assert both_ways(covers, holed, [], (24, 24)) == (False, False)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.sets(st.integers(0, 4), min_size=1, max_size=4),
    cols=st.sets(st.integers(0, 4), min_size=1, max_size=4),
    drop=st.integers(-1, 15),
    step=st.integers(1, 4),
    tiles=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    sizes=st.tuples(st.integers(0, 12), st.integers(0, 12)),
)
def test_groups_of_stores_against_enumeration(rows, cols, drop, step, tiles, sizes) -> None:
    """Constant offsets that are a product of two sets (runs or not), or one with a
    store dropped, with any stride: the quick test and isl agree with the
    elements enumerated."""
    consts = sorted(itertools.product(rows, cols))
    if 0 <= drop < len(consts) and len(consts) > 1:
        del consts[drop]
    writes = [a for a in uses([_stores(consts, step, tiles)], "O", (64, 64)) if a.write]
    hit = {
        (step * t + a, step * s + b)
        for a, b in consts
        for t in range(tiles[0])
        for s in range(tiles[1])
    }
    want = set(itertools.product(range(sizes[0]), range(sizes[1]))) <= hit
    assert both_ways(covers, writes, [], sizes) == (want, want)
