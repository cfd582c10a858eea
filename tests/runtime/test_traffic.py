"""The interpreter's memory-traffic report: bytes read and written per location."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml import ir
from stripeml.runtime.interp import MODES, Traffic, run, run_with_report

# A tile of A is copied from DRAM into an SRAM allocation, then computed from SRAM.
TILED = """
block main [] #program (
    in A f32(8, 4):(4, 1)
    out O f32(8, 4):(4, 1)
) {
  block tile [t:2] #kernel (
      in A[4*t, 0] f32(4, 4):(4, 1)
      out O[4*t, 0]:assign f32(4, 4):(4, 1)
      none T f32(4, 4):(4, 1) @SRAM
  ) {
    block copy_in [i:4, j:4] #copy (
        in A[i, j] f32(1, 1):(4, 1)
        out T[i, j]:assign f32(1, 1):(4, 1)
    ) {
      $a = load(A)
      T = store($a)
    }
    block compute [i:4, j:4] (
        in T[i, j] f32(1, 1):(4, 1)
        out O[i, j]:assign f32(1, 1):(4, 1)
    ) {
      $t = load(T)
      $c = const(2.0): f32
      $d = mul($t, $c): f32
      O = store($d)
    }
  }
}
"""

# A view that names its own location (L2) over a DRAM parameter.
OWN_LOCATION = """
block main [] #program (
    in A f64(6):(1)
    out O f64(6):(1)
) {
  block k [i:6] #kernel (
      in A[i] f64(1):(1) @L2
      out O[i]:assign f64(1):(1)
  ) {
    $a = load(A)
    O = store($a)
  }
}
"""

SPECIAL = """
block main [] #program (
    in X f32(2, 6):(6, 1)
    out Y f32(3, 4):(4, 1)
) {
  special reshape(X) -> (Y)
}
"""

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"


@pytest.mark.parametrize("mode", MODES)
def test_copy_into_sram_counts_dram_reads_and_sram_writes(mode: str) -> None:
    program = ir.parse(TILED)
    a = np.arange(32, dtype=np.float32).reshape(8, 4)
    out, traffic = run_with_report(program, {"A": a}, mode=mode)
    np.testing.assert_array_equal(out["O"], 2 * a)
    assert traffic.reads == {"DRAM": 128, "SRAM": 128}
    assert traffic.writes == {"SRAM": 128, "DRAM": 128}
    assert traffic.as_dict() == {
        "DRAM": {"read": 128, "written": 128},
        "SRAM": {"read": 128, "written": 128},
    }
    assert traffic.total("SRAM") == 256 and traffic.total("L1") == 0


@pytest.mark.parametrize("mode", MODES)
def test_matmul_counts_one_element_per_point_on_every_path(mode: str) -> None:
    m, k, n = 9, 7, 5
    f = stripeml.compile(MATMUL, target="interp")
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    program = f.lower(a, b).program
    _, traffic = run_with_report(program, {"A": a, "B": b}, mode=mode)
    assert traffic.reads == {"DRAM": 2 * m * k * n * 4}
    assert traffic.writes == {"DRAM": m * k * n * 4}


def test_chunking_does_not_change_the_counts() -> None:
    program = ir.parse(TILED)
    a = np.ones((8, 4), np.float32)
    _, whole = run_with_report(program, {"A": a}, mode="general")
    _, chunked = run_with_report(program, {"A": a}, mode="general", chunk_points=3)
    assert whole == chunked


def test_a_view_with_its_own_location() -> None:
    program = ir.parse(OWN_LOCATION)
    _, traffic = run_with_report(program, {"A": np.ones(6)})
    assert traffic.reads == {"L2": 6 * 8} and traffic.writes == {"DRAM": 6 * 8}


def test_specials_move_whole_views() -> None:
    program = ir.parse(SPECIAL)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    out, traffic = run_with_report(program, {"X": x})
    np.testing.assert_array_equal(out["Y"], x.reshape(3, 4))
    assert traffic.reads == {"DRAM": 48} and traffic.writes == {"DRAM": 48}


def test_run_takes_a_traffic_object_and_results_do_not_change() -> None:
    program = ir.parse(TILED)
    a = np.random.default_rng(0).random((8, 4)).astype(np.float32)
    traffic = Traffic()
    counted = run(program, {"A": a}, traffic=traffic)
    np.testing.assert_array_equal(counted["O"], run(program, {"A": a})["O"])
    assert traffic.locations == ["DRAM", "SRAM"]
