"""Coverage answered by isl is remembered by what its sets are made of
(:func:`stripeml.analysis.coverage.covers`), not by names: a repeated layer asks
isl once, and questions differing in anything the sets read get their own answer."""

from __future__ import annotations

import pytest

from stripeml.analysis import coverage
from stripeml.analysis.coverage import writes_all
from stripeml.ir import Block, parse


def _kernel(name: str, buffer: str, rows: int, limit: int) -> Block:
    """A kernel storing ``buffer[i]`` for ``i`` in 0..rows-1 with ``i <= limit``
    (a constraint: the quick box test does not apply, isl decides)."""
    return parse(f"""block [] #program (
    in I f32({rows}):(1)
    out {buffer} f32({rows}):(1)
) {{
  block [i:{rows}] #kernel (
      -i + {limit} >= 0
      in I[i] f32(1):(1)
      out {buffer}[i]:assign f32(1):(1)
  ) {{
    $x = load(I)
    {buffer} = store($x)
  }}
}}
""").root.stmts[0]


def test_a_renamed_layer_asks_isl_once(monkeypatch: pytest.MonkeyPatch) -> None:
    coverage._covers_isl.cache_clear()
    calls = []
    real = coverage.box_set

    def counted(*args: object):  # noqa: ANN202
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(coverage, "box_set", counted)
    assert writes_all(_kernel("k1", "T1", 8, 7), "T1", (8,))
    assert writes_all(_kernel("k9", "T9", 8, 7), "T9", (8,))
    assert len(calls) == 1


@pytest.mark.parametrize("limit, want", [(7, True), (6, False), (3, False)])
def test_a_question_differing_in_a_constraint_gets_its_own_answer(limit: int, want: bool) -> None:
    """(A key leaving out the blocks' constraints would answer all three alike.)"""
    coverage._covers_isl.cache_clear()
    assert writes_all(_kernel("k", "T", 8, 7), "T", (8,))
    assert writes_all(_kernel("k", "T", 8, limit), "T", (8,)) is want
    assert writes_all(_kernel("k", "T", 8, limit), "T", (7,)) is (limit >= 6)
