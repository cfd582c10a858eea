"""Fresh result arrays: the CPU runtime zeroes only the outputs a program may leave
partly unwritten (or aggregates into); the others start uninitialised.  That a
written output is not zeroed cannot show in its values, so these tests check
the analysis that decides it and, by value, that a partly written output still
reads zeros where nothing was stored, after memory full of other values was
freed and handed out again."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

from stripeml.analysis import coverage
from stripeml.analysis.liveness import written_outputs
from stripeml.ir.parser import parse
from stripeml.runtime import cpu
from stripeml.runtime.interp import run

# O is written in two parts, k0 then k1 (SECOND: how many elements k1 writes);
# P is aggregated into (a sum over j: its identity is written first, so the
# kernel never reads what was there); Q is read by k3 right after k2 wrote
# half of it.
PROGRAM = """block [] #program (
    in A f32(64):(1)
    out O f32(64):(1)
    out P f32(8):(1)
    out Q f32(64):(1)
    out R f32(64):(1)
) {
  block k0 [i:32] #kernel (
      in A[i] f32(1):(1)
      out O[i]:assign f32(1):(1)
  ) {
    $a = load(A)
    O = store($a)
  }
  block k1 [i:SECOND] #kernel (
      in A[i + 32] f32(1):(1)
      out O[i + 32]:assign f32(1):(1)
  ) {
    $a = load(A)
    $b = add($a, $a): f32
    O = store($b)
  }
  block k2 [i:8, j:8] #kernel (
      in A[8*i + j] f32(1):(1)
      out P[i]:add f32(1):(1)
  ) {
    $a = load(A)
    P = store($a)
  }
  block k3 [i:32] #kernel (
      in A[i] f32(1):(1)
      out Q[i]:assign f32(1):(1)
  ) {
    $a = load(A)
    Q = store($a)
  }
  block k4 [i:64] #kernel (
      in Q[i] f32(1):(1)
      out R[i]:assign f32(1):(1)
  ) {
    $q = load(Q)
    R = store($q)
  }
}
"""


@pytest.mark.parametrize("quick", [True, False], ids=["quick_boxes", "isl"])
def test_written_outputs(quick: bool) -> None:
    whole = parse(PROGRAM.replace("SECOND", "32"))
    holed = parse(PROGRAM.replace("SECOND", "31"))  # O[63] is never written
    with mock.patch.object(coverage, "_box", coverage._box if quick else lambda acc, runs=(): None):
        # Q: half written, then read whole (its other half reads zeros)
        assert written_outputs(whole) == {"O", "P", "R"}
        assert written_outputs(holed) == {"P", "R"}


def _dirty_heap() -> None:
    """Hand memory full of non-zero bytes back to the allocator, so that fresh
    arrays of these sizes would start with them unless zeroed."""
    for n in (64, 256, 4096, 1 << 16):
        junk = np.full(n, 7.0, np.float32)
        del junk


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("second", [32, 31])
def test_fresh_outputs_read_zeros_where_nothing_was_stored(threads: int, second: int) -> None:
    program = parse(PROGRAM.replace("SECOND", str(second)))
    compiled = cpu.CpuBackend(cpu.CpuOptions(threads=threads)).compile(program)
    names = written_outputs(program)
    slots = {k for k, b in enumerate(compiled._buffers) if b.info.name in names}
    assert compiled._written_outputs() == slots
    rng = np.random.default_rng(0)
    for _ in range(20):
        inputs = {"A": rng.uniform(1, 2, 64).astype(np.float32)}
        want = run(program, inputs)
        _dirty_heap()
        got = compiled.run(inputs)
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-6, err_msg=name)
        if second == 31:
            assert got["O"][63] == 0.0
        assert not got["Q"][32:].any() and not got["R"][32:].any()
