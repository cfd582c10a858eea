"""Coverage of output buffers, against brute-force enumeration of stored elements."""

from __future__ import annotations

import itertools

import islpy as isl
from hypothesis import given, settings
from hypothesis import strategies as st

from stripeml.analysis.coverage import unwritten, writes_all, written
from stripeml.ir import Block, Store, parse

from .brute import elements, kernels, nest_points
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
