"""Liveness of allocations and the memory counts, checked on programs worked out by hand."""

from __future__ import annotations

from unittest import mock

import pytest

from stripeml.analysis import coverage
from stripeml.analysis.liveness import initial_reads, live_bytes, live_range, live_ranges
from stripeml.analysis.memory import own_allocations, peak_bytes
from stripeml.ir import parse
from stripeml.passes.place import Place

# T is written in two halves by k0 and k1 before k2 reads it; U is written whole by k2
# and copied out by a special.
HALVES = """block [] #program (
    in A f32(4):(1)
    out O f32(4):(1)
    none T f32(4):(1)
    none U f32(4):(1)
) {
  block k0 [i:2] #kernel (
      in A[i] f32(1):(1)
      out T[i]:assign f32(1):(1)
  ) {
    $a = load(A)
    T = store($a)
  }
  block k1 [i:SECOND] #kernel (
      in A[i + 2] f32(1):(1)
      out T[i + 2]:assign f32(1):(1)
  ) {
    $a = load(A)
    T = store($a)
  }
  block k2 [i:4] #kernel (
      in T[i] f32(1):(1)
      out U[i]:assign f32(1):(1)
  ) {
    $t = load(T)
    U = store($t)
  }
  special copy(U) -> (O)
}
"""


@pytest.mark.parametrize("quick", [True, False], ids=["quick_boxes", "isl"])
def test_live_ranges_of_a_temporary_written_in_two_halves(quick: bool) -> None:
    whole = parse(HALVES.replace("SECOND", "2"))
    holed = parse(HALVES.replace("SECOND", "1"))  # T[3] is never written: k2 reads a zero
    with mock.patch.object(coverage, "_box", coverage._box if quick else lambda acc, runs=(): None):
        assert live_ranges(whole.root, own_allocations(whole.root), ()) == {
            "T": (0, 2),
            "U": (2, 3),
        }
        assert live_range(holed.root, holed.root.ref("T"), ()) == (-1, 2)
        assert initial_reads(whole) == frozenset() and initial_reads(holed) == {"T"}
        # 16 bytes each, both live at k2.
        assert live_bytes(whole) == live_bytes(holed) == {"DRAM": 32}


def test_place_reports_with_the_analyses() -> None:
    assert Place.peak_bytes is peak_bytes
    assert Place.live_bytes is live_bytes
    assert Place.initial_reads is initial_reads
    placed = Place(alignment=4).run(parse(HALVES.replace("SECOND", "2")))
    # T lives k0..k2 and U k2..copy: they meet at k2, so U goes after T's 16 bytes.
    assert [(r.into, r.offset) for r in own_allocations(placed.root)] == [("T", 0), ("U", 16)]
    assert peak_bytes(placed) == {"DRAM": 32}
