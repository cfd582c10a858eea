"""The interpreter's general path narrows a block's box to what its constraints
on one index alone allow before it enumerates points (runtime/interp/points.py,
``_windows``): results equal NumPy's, and a block whose constraints leave no
point (a fuzzed range of 2**31 under ``-ky - 7 >= 0``) runs at once instead of
enumerating billions of points.
"""

from __future__ import annotations

import numpy as np
import pytest

from stripeml.ir import parse, verify
from stripeml.runtime.interp import run
from stripeml.runtime.interp.points import _windows

# O[y, c] = max over ky in [lo, hi) of I[y + ky, c], ky's range cut by two constraints
WINDOW = """block main [] #program (
    in I f32(12, 3):(3, 1)
    out O f32(4, 3):(3, 1)
) {{
  block k0_O [y:4, c:3, ky:{range}] #agg_max #contraction #kernel (
      {lower} >= 0
      {upper} >= 0
      in I[y + ky, c] f32(1, 1):(3, 1)
      out O[y, c]:max f32(1, 1):(3, 1)
  ) {{
    $I = load(I)
    O = store($I)
  }}
}}
"""


def _program(rng: int, lo: int, hi: int):
    """ky over ``[lo, hi)`` inside a range of ``rng``: ``ky - lo >= 0``, ``hi - 1 - ky >= 0``."""
    text = WINDOW.format(range=rng, lower=f"ky - {lo}", upper=f"-ky + {hi - 1}")
    program = parse(text)
    verify(program)
    return program


@pytest.mark.parametrize("lo, hi", [(0, 9), (2, 5), (3, 4), (8, 9)])
@pytest.mark.parametrize("mode, chunk", [("general", 1 << 21), ("general", 5), ("auto", 1 << 21)])
def test_results_equal_numpy(lo: int, hi: int, mode: str, chunk: int) -> None:
    x = np.random.default_rng(lo * 10 + hi).standard_normal((12, 3)).astype(np.float32)
    got = run(_program(9, lo, hi), {"I": x}, mode=mode, chunk_points=chunk)["O"]
    want = np.stack([x[y + lo : y + hi].max(axis=0) for y in range(4)])
    np.testing.assert_array_equal(got, want)


def test_windows_of_one_index_constraints() -> None:
    (kernel,) = _program(9, 2, 5).root.stmts
    assert _windows(kernel) == [(0, 4), (0, 3), (2, 5)]


def test_a_constraint_that_leaves_no_point_runs_at_once() -> None:
    text = WINDOW.format(range=2**31, lower="-ky - 7", upper="ky")
    program = parse(text)
    verify(program)
    (kernel,) = program.root.stmts
    assert _windows(kernel) is None
    # (it enumerated 2**31 x 12 points before: the fuzz test's pool called it a hang)
    out = run(program, {"I": np.ones((12, 3), np.float32)}, mode="general")["O"]
    np.testing.assert_array_equal(out, np.zeros((4, 3), np.float32))  # never stored


# the fuzzed program's second form: constraints over ky and y together
TWO = """block main [] #program (
    in I f32(7, 2):(2, 1)
    out O f32(4, 2):(2, 1)
) {
  block k0_O [y:4, c:2, ky:2147483648] #agg_max #contraction #kernel (
      ky + 2*y - 1 >= 0
      -ky - 2*y + 7 >= 0
      in I[ky + 2*y - 1, c] f32(1, 1):(2, 1)
      out O[y, c]:max f32(1, 1):(2, 1)
  ) {
    $I = load(I)
    O = store($I)
  }
}
"""


@pytest.mark.parametrize("mode", ["general", "auto"])
def test_constraints_over_two_indices_bound_the_huge_one(mode: str) -> None:
    program = parse(TWO)
    verify(program)
    (kernel,) = program.root.stmts
    assert _windows(kernel) == [(0, 4), (0, 2), (0, 8)]  # ky <= 7 - 2y <= 7
    x = np.random.default_rng(7).standard_normal((7, 2)).astype(np.float32)
    got = run(program, {"I": x}, mode=mode)["O"]
    # brute force over the window: rows ky + 2y - 1 for ky with both constraints
    want = np.stack(
        [
            np.max([x[ky + 2 * y - 1] for ky in range(8) if 0 <= ky + 2 * y - 1 <= 6], axis=0)
            for y in range(4)
        ]
    )
    np.testing.assert_array_equal(got, want)
