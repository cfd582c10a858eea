"""The printer's remembered shape texts (``printer._SHAPES``): the same text as
written out each time, for any dtype, sizes and strides, and bounded."""

from __future__ import annotations

import pytest

from stripeml.ir import parse, printer
from stripeml.ir.nodes import Refinement, TensorShape


def _ref(dtype: str, sizes: tuple[int, ...], strides: tuple[int, ...]) -> Refinement:
    return Refinement("in", "A", TensorShape(dtype, sizes, strides))


def test_remembered_shapes_print_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(printer, "_SHAPES", {})
    monkeypatch.setattr(printer, "_NAMES_MAX", 4)
    cases = [("f32", (2, 3), (3, 1)), ("i8", (2, 3), (3, 1)), ("f32", (2, 3), (1, 2))]
    cases += [("f64", (n,), (1,)) for n in range(1, 9)]
    for _ in range(2):  # printed, then remembered (or forgotten: the bound)
        for dtype, sizes, strides in cases:
            text = printer.format_ref(_ref(dtype, sizes, strides))
            want = f"in A {dtype}({', '.join(map(str, sizes))}):({', '.join(map(str, strides))})"
            assert text == want
            assert len(printer._SHAPES) <= 4


def test_a_program_round_trips_with_shapes_and_plain_indices_remembered() -> None:
    text = """block [] #program (
    in A f32(4, 4):(4, 1)
    out B f32(4, 4):(4, 1)
) {
  block k [i:4, j:4] #kernel (
      in A[i, j + 1 - 1] f32(1, 1):(4, 1)
      out B[j, 2*i - i]:assign f32(1, 1):(4, 1)
  ) {
    $x = load(A)
    B = store($x)
  }
}
"""
    program = parse(text)
    assert printer.format(program) == text.replace("j + 1 - 1", "j").replace("2*i - i", "i")
