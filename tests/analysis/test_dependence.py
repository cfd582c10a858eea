"""Race checks for parallel splits, against brute-force enumeration of accesses."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stripeml.analysis.access import accesses
from stripeml.analysis.dependence import (
    _differ,
    _meetings,
    agreeing_indices,
    race_free,
    race_free_indices,
    races,
)
from stripeml.ir import (
    Affine,
    Block,
    Constant,
    Index,
    Load,
    Refinement,
    Store,
    TensorShape,
    parse,
)

from .brute import brute_race_free_nested, kernels, nest_points, nests

HEAD = """block [] #program (
    in A f32(8, 8):(8, 1)
    in B f32(8, 8):(8, 1)
    out C f32(8, 8):(8, 1)
    out V f32(8):(1)
) {
"""


def kernel(text: str) -> Block:
    return parse(HEAD + text + "}\n").root.stmts[0]


MATMUL = kernel("""  block [m:8, n:8, k:8] #kernel (
      in A[m, k] f32(1, 1):(8, 1)
      in B[k, n] f32(1, 1):(8, 1)
      out C[m, n]:add f32(1, 1):(8, 1)
  ) {
    $a = load(A)
    $b = load(B)
    $c = mul($a, $b): f32
    C = store($c)
  }
""")

# A tiled matmul whose outer output view spans all of C (a ragged tiling does
# this): only the inner stores show that m_o and n_o never meet.
TILED = kernel("""  block [m_o:3, n_o:3, k_o:2] #kernel #tiled (
      in A[0, 4*k_o] f32(8, 4):(8, 1)
      in B[4*k_o, 0] f32(4, 8):(8, 1)
      out C[0, 0]:add f32(8, 8):(8, 1)
  ) {
    block [m_i:3, n_i:3, k_i:4] #tile (
        -3*m_o - m_i + 7 >= 0
        -3*n_o - n_i + 7 >= 0
        in A[3*m_o + m_i, k_i] f32(1, 1):(8, 1)
        in B[k_i, 3*n_o + n_i] f32(1, 1):(8, 1)
        out C[3*m_o + m_i, 3*n_o + n_i]:add f32(1, 1):(8, 1)
    ) {
      $a = load(A)
      $b = load(B)
      $c = mul($a, $b): f32
      C = store($c)
    }
  }
""")

# A row sum fused into a register per row: the register is private to a point.
FUSED = kernel("""  block [i:8] #kernel #fused (
      in A[i, 0] f32(1, 8):(8, 1)
      out V[i]:assign f32(1):(1)
      none S f32():() @REGISTER
  ) {
    block [j:8] #reduce (
        in A[0, j] f32(1, 1):(8, 1)
        out S[]:add f32():()
    ) {
      $a = load(A)
      S = store($a)
    }
    $s = load(S)
    V = store($s)
  }
""")

# Reverse C in place: point i reads C[i, 0] and writes C[7 - i, 0].
IN_PLACE = kernel("""  block [i:8] #kernel (
      in X = C[i, 0] f32(1, 1):(8, 1)
      out Y = C[-i + 7, 0]:assign f32(1, 1):(8, 1)
  ) {
    $x = load(X)
    Y = store($x)
  }
""")

# A special copying a whole row per point: rows never meet across i.
ROWS = kernel("""  block [i:8] #kernel (
      in X = A[i, 0] f32(1, 8):(8, 1)
      out Y = C[i, 0]:assign f32(1, 8):(8, 1)
  ) {
    special copy(X) -> (Y)
  }
""")


@pytest.mark.parametrize(
    "block, safe",
    [
        (MATMUL, ("m", "n")),
        (TILED, ("m_o", "n_o")),
        (FUSED, ("i",)),
        (IN_PLACE, ()),
        (ROWS, ("i",)),
    ],
    ids=["matmul", "tiled_whole_view", "fused_register", "in_place_reverse", "special_rows"],
)
def test_known_kernels(block: Block, safe: tuple[str, ...]) -> None:
    assert race_free_indices(block) == safe
    for idx in block.idxs:
        assert race_free(block, idx.name) == (idx.name in safe)


def test_races_name_the_accesses() -> None:
    (race,) = races(MATMUL, "k")
    assert race.first.buffer == race.second.buffer == "C" and race.first.write
    kinds = {(r.first.ref, r.second.ref) for r in races(IN_PLACE, "i")}
    assert kinds == {("X", "Y")}  # Y's own writes never meet across i: only the read races
    with pytest.raises(KeyError):
        races(MATMUL, "nope")


def test_accesses_compose_views_and_skip_private_buffers() -> None:
    accs = accesses(TILED)
    assert [(a.ref, a.write) for a in accs] == [("A", False), ("B", False), ("C", True)]
    assert [str(e) for e in accs[2].exprs] == ["m_i + 3*m_o", "n_i + 3*n_o"]
    assert [(a.buffer, a.write) for a in accesses(FUSED)] == [("A", False), ("V", True)]


def test_nested_split_within_an_outer_point() -> None:
    (inner,) = TILED.sub_blocks
    # Inside one tile, the points of m_i write distinct elements; k_i adds into one.
    assert race_free_indices(inner, outer=[TILED]) == ("m_i", "n_i")


def brute_race_free(block: Block) -> tuple[str, ...]:
    """Indices along which no element is written at one value and touched at another."""
    stmts = [(s.ref, isinstance(s, Store)) for s in block.stmts if isinstance(s, (Load, Store))]
    safe = []
    points = list(nest_points([block]))
    for idx in block.idxs:
        touched: dict[tuple, list[tuple[int, bool]]] = defaultdict(list)
        for p in points:
            for ref, write in stmts:
                r = block.ref(ref)
                elem = (r.from_, *(e.evaluate(p) for e in r.access))
                touched[elem].append((p[idx.name], write))
        ok = all(
            not (w1 or w2) or v1 == v2
            for uses in touched.values()
            for v1, w1 in uses
            for v2, w2 in uses
        )
        if ok:
            safe.append(idx.name)
    return tuple(safe)


@settings(max_examples=150, deadline=None)
@given(kernels())
def test_random_kernels_against_enumeration(block: Block) -> None:
    assert race_free_indices(block) == brute_race_free(block)


# -- proofs without isl ------------------------------------------------------------------


def isl_race_free(block: Block, outer: tuple[Block, ...] = ()) -> tuple[str, ...]:
    """:func:`race_free_indices` as isl alone answers it: every pair of accesses asked."""
    meetings = _meetings(block, outer)
    return tuple(
        i.name for i in block.idxs if not any(_differ(met, i.name) for _, _, met in meetings)
    )


@settings(max_examples=150, deadline=None)
@given(nests())
def test_proofs_agree_with_isl(block: Block) -> None:
    assert race_free_indices(block) == isl_race_free(block)
    for inner in block.sub_blocks:
        assert race_free_indices(inner, (block,)) == isl_race_free(inner, (block,))


@st.composite
def radix_kernels(draw) -> Block:
    """A kernel storing to ``C`` through sums of its indices with coefficients that
    are sometimes, and sometimes not quite, a mixed radix's, maybe through an
    index with an offset."""
    n = draw(st.integers(2, 3))
    names = ("i", "j", "k")[:n]
    idxs = tuple(Index(x, draw(st.integers(1, 6))) for x in names)
    coeffs = st.sampled_from((0, 1, 2, 3, 4, 5, 6, 7, -1, -3))
    access = tuple(
        Affine.build({x: draw(coeffs) for x in names}, draw(st.integers(0, 2))) for _ in range(2)
    )
    out = Refinement("out", "Y", TensorShape("f32", (1, 1), (8, 1)), "C", access, "add")
    read = Refinement("in", "X", TensorShape("f32", (1, 1), (8, 1)), "C", access)
    refs = (out, read) if draw(st.booleans()) else (out,)
    body = [Constant("$c", 1.0, "f32"), Store("Y", "$c")]
    if len(refs) == 2:
        body.insert(0, Load("$x", "X"))
    return Block(idxs=idxs, refs=refs, stmts=tuple(body))


@settings(max_examples=200, deadline=None)
@given(radix_kernels())
def test_mixed_radix_kernels_against_enumeration_and_isl(block: Block) -> None:
    assert race_free_indices(block) == brute_race_free(block) == isl_race_free(block)


def test_agreeing_indices_read_digits() -> None:
    def agree(expr: str, ranges: dict[str, int]) -> frozenset[str]:
        idxs = ", ".join(f"{n}:{r}" for n, r in ranges.items())
        text = f"""  block [{idxs}] #kernel (
      out C[{expr}, 0]:add f32(1, 1):(8, 1)
  ) {{
    $c = const(1.0): f32
    C = store($c)
  }}
"""
        (write,) = accesses(kernel(text))
        return agreeing_indices(write, write)

    assert agree("7*y + x", {"y": 3, "x": 7}) == {"y", "x"}  # digits of base 7
    assert agree("7*y + x", {"y": 3, "x": 8}) == frozenset()  # x = 7 reaches the next y
    assert agree("4*y + x", {"y": 2, "x": 8}) == frozenset()
    assert agree("8*y + 2*x", {"y": 2, "x": 4}) == {"y", "x"}
    assert agree("y", {"y": 8, "x": 8}) == {"y"}  # x is not in the element: not proven


def test_an_offset_index_is_left_to_isl() -> None:
    # p = 2*i + {0, 1}: a p of one i never meets another i's, but p's values are
    # not [0, 2), so no digit is read off the element and isl decides.
    block = kernel("""  block [i:4] #kernel (
      out C[0, 0]:add f32(8, 8):(8, 1)
  ) {
    block [p:2 = 2*i] (
        out C[p, 0]:add f32(1, 1):(8, 1)
    ) {
      $c = const(1.0): f32
      C = store($c)
    }
  }
""")
    (write,) = accesses(block)
    assert agreeing_indices(write, write) == frozenset()
    assert (
        race_free_indices(block) == isl_race_free(block) == brute_race_free_nested(block) == ("i",)
    )
