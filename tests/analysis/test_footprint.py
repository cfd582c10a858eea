"""Footprints over tiles, against the hull of brute-force enumerated elements."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stripeml.analysis.footprint import Footprint, box_footprint, footprint, footprints
from stripeml.ir import Affine, Block, Constraint, parse

from .brute import kernels, nest_points

CONV = parse("""block [] #program (
    in I f32(18, 18):(18, 1)
    in K f32(3, 3):(3, 1)
    out O f32(16, 16):(16, 1)
) {
  block conv [x:16, y:16, kx:3, ky:3] #kernel (
      in I[kx + x, ky + y] f32(1, 1):(18, 1)
      in K[kx, ky] f32(1, 1):(3, 1)
      out O[x, y]:add f32(1, 1):(16, 1)
  ) {
    $i = load(I)
    O = store($i)
  }
}
""").root.stmts[0]

PADDED = parse("""block [] #program (
    in I f32(6):(1)
    out O f32(6):(1)
) {
  block conv [x:6, kx:3] #kernel (
      kx + x - 1 >= 0
      -kx - x + 6 >= 0
      in I[kx + x - 1] f32(1):(1)
      out O[x]:add f32(1):(1)
  ) {
    $i = load(I)
    O = store($i)
  }
}
""").root.stmts[0]


def brute_hull(block: Block, ref: str, tiles: dict[str, int], outer=()) -> Footprint | None:
    """Per dimension the least/greatest offset from the tile-origin access, by enumeration."""
    r = block.ref(ref)
    lo = [None] * len(r.access)
    hi = [None] * len(r.access)
    bases = {i.name: i for i in block.idxs}
    seen = False
    for p in nest_points([*outer, block]):
        seen = True
        origin = dict(p)
        for name, idx in bases.items():
            t = tiles.get(name, idx.range)
            base = idx.affine.evaluate(p) if idx.affine is not None else 0
            origin[name] = base + (p[name] - base) // t * t
        for d, (expr, size) in enumerate(zip(r.access, r.shape.sizes)):
            off = expr.evaluate(p) - expr.evaluate(origin)
            lo[d] = off if lo[d] is None else min(lo[d], off)
            hi[d] = off + size - 1 if hi[d] is None else max(hi[d], off + size - 1)
    if not seen:
        return None
    return Footprint(tuple(lo), tuple(hi))


def test_conv_tile_of_8x8_outputs_reads_a_10x10_window() -> None:
    tiles = {"x": 8, "y": 8}
    fp = footprint(CONV, "I", tiles)
    assert fp == Footprint((0, 0), (9, 9)) and fp.sizes == (10, 10) and fp.elements == 100
    assert footprint(CONV, "K", tiles).sizes == (3, 3)
    assert footprint(CONV, "O", tiles).sizes == (8, 8)
    assert box_footprint(CONV.ref("I").access, (1, 1), {"x": 8, "y": 8, "kx": 3, "ky": 3}) == fp


def test_padded_conv_exact_footprint_is_the_box() -> None:
    # Interior tiles reach the whole window; the constraints only clip border tiles.
    assert footprint(PADDED, "I", {"x": 2}) == Footprint((0,), (3,))
    assert brute_hull(PADDED, "I", {"x": 2}) == Footprint((0,), (3,))


def test_constraints_shrink_the_footprint() -> None:
    tri = parse("""block [] #program (
    in A f32(16):(1)
    out O f32(8):(1)
) {
  block [i:8, k:8] #kernel (
      -i - k + 3 >= 0
      in A[i + k] f32(1):(1)
      out O[i]:add f32(1):(1)
  ) {
    $a = load(A)
    O = store($a)
  }
}
""").root.stmts[0]
    # Only the tile at the origin holds points (i + k <= 3): 4 elements, the box says 7.
    tiles = {"i": 4, "k": 4}
    assert footprint(tri, "A", tiles) == brute_hull(tri, "A", tiles) == Footprint((0,), (3,))
    assert box_footprint(tri.ref("A").access, (1,), tiles).sizes == (7,)
    # With k whole every tile's origin is k = 0: offsets are measured from there.
    assert footprint(tri, "A", {"i": 4}) == brute_hull(tri, "A", {"i": 4})


def test_negative_coefficients_give_negative_offsets() -> None:
    rev = parse("""block [] #program (
    in A f32(8):(1)
    out O f32(8):(1)
) {
  block [i:8] #kernel (
      in A[-i + 7] f32(1):(1)
      out O[i]:assign f32(1):(1)
  ) {
    $a = load(A)
    O = store($a)
  }
}
""").root.stmts[0]
    assert footprint(rev, "A", {"i": 4}) == Footprint((-3,), (0,))


def test_nested_block_and_empty_domain() -> None:
    outer = Block(idxs=CONV.idxs[:1])
    inner = Block(idxs=CONV.idxs[1:], refs=CONV.refs)
    got = footprints(inner, {"y": 4}, outer=[outer])
    assert got["I"] == Footprint((0, 0), (2, 5)) and got["O"].sizes == (1, 4)
    assert got["I"] == brute_hull(inner, "I", {"y": 4}, outer=[outer])
    far = Constraint(Affine.index("x") - 100)
    empty = Block(idxs=PADDED.idxs, refs=PADDED.refs, constraints=(far,))
    assert footprint(empty, "I", {"x": 2}) is None


@settings(max_examples=100, deadline=None)
@given(block=kernels(), data=st.data())
def test_random_kernels_against_enumeration(block: Block, data) -> None:
    tiles = {i.name: data.draw(st.integers(1, i.range)) for i in block.idxs}
    got = footprints(block, tiles)
    for r in block.refs:
        want = brute_hull(block, r.into, tiles)
        assert got.get(r.into) == want, r
        if want is None:
            continue
        box = box_footprint(r.access, r.shape.sizes, tiles)
        assert all(b <= w for b, w in zip(box.lo, want.lo))
        assert all(b >= w for b, w in zip(box.hi, want.hi))
        if not block.constraints:
            assert box == want
