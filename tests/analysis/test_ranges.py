"""Index-range inference and output coverage (isl), against brute force, and their
memo: the same question with other labels gets the same answer, and an answer
handed out cannot be changed by its caller."""

from __future__ import annotations

import itertools

import pytest

from stripeml.analysis.ranges import Bound, covers, infer_ranges
from stripeml.ir.affine import Affine


def _bounds(label: str) -> list[Bound]:
    i, j = Affine.index("i"), Affine.index("j")
    # 0 <= i + j <= 5, 0 <= i - j + 2 <= 4 (labels only name them in messages)
    return [Bound(i + j, 5, f"{label} dim 0"), Bound(i - j + 2, 4, f"{label} dim 1")]


def _brute(hi: int = 12) -> dict[str, tuple[int, int]]:
    pts = [
        (i, j)
        for i, j in itertools.product(range(-hi, hi), repeat=2)
        if 0 <= i + j <= 5 and 0 <= i - j + 2 <= 4
    ]
    return {
        "i": (min(p[0] for p in pts), max(p[0] for p in pts)),
        "j": (min(p[1] for p in pts), max(p[1] for p in pts)),
    }


def test_ranges_are_the_exact_box_whatever_the_labels() -> None:
    want = _brute()
    first = infer_ranges(["i", "j"], _bounds("A"))
    assert first.ranges == want and not first.empty and not first.unbounded
    first.ranges["i"] = (0, 0)  # a caller's change stays its own
    again = infer_ranges(["i", "j"], _bounds("layer 7's B"))
    assert again.ranges == want


def test_an_unbounded_index_is_reported() -> None:
    i = Affine.index("i")
    got = infer_ranges(["i", "k"], [Bound(i, 3, "A dim 0")])
    assert got.unbounded == ("k",) and got.ranges == {"i": (0, 3)}


@pytest.mark.parametrize("size, want", [(6, True), (7, False)])
def test_coverage_of_the_output(size: int, want: bool) -> None:
    """``o = i + j`` over the box reaches 0..5 (the diamond above reaches every
    sum from 0 to 5): a 6-element output is covered, a 7-element one is not."""
    i, j = Affine.index("i"), Affine.index("j")
    for label in ("A", "B"):
        assert covers(["i", "j"], _bounds(label), [i + j], [size]) is want
