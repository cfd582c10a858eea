"""``Executable.profile``: rows with the roofline figures, still unpacking as triples.

No speed is asserted: only what the rows hold and how the figures relate.
"""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.api import ProfileRow
from stripeml.runtime import peaks as peaks_mod
from stripeml.targets import load_target
from stripeml.targets.host import HostFacts

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
TWO = "function (A, B) -> (C, D) { C = A + B; D = relu(C * A); }"


@pytest.fixture
def no_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the ceilings were measured")

    monkeypatch.setattr(peaks_mod, "measure", refuse)
    monkeypatch.setattr(peaks_mod, "_MEASURED", {})


def _inputs(m: int = 24, k: int = 16, n: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)


def test_rows_carry_flops_bytes_rates_and_the_fraction(no_measuring: None) -> None:
    target = load_target("cpu", host=HostFacts(peak_gflops=100.0, dram_gbps=10.0))
    a, b = _inputs()
    exe = stripeml.compile(MATMUL, target=target).lower(a, b)
    rows = exe.profile(a, b, repeat=2)
    (row,) = rows
    assert isinstance(row, ProfileRow) and isinstance(row, tuple)
    assert row.kernel == row[0] and row.statement.startswith("C[m, n")
    assert row.flops == 2 * 24 * 16 * 8
    assert row.bytes == 4 * (24 * 16 + 16 * 8 + 24 * 8)
    assert row.seconds > 0
    assert row.gflops == pytest.approx(row.flops / row.seconds / 1e9)
    assert row.gbps == pytest.approx(row.bytes / row.seconds / 1e9)
    assert row.peak_fraction == pytest.approx(max(row.gflops / 100.0, row.gbps / 10.0))
    assert row.bound == "memory"  # 6144 FLOPs / 2816 bytes: short of the ridge at 100 / 10
    assert set(row._asdict()) == set(ProfileRow.FIELDS)
    assert "peak_fraction=" in repr(row)


def test_old_unpacking_still_works(no_measuring: None) -> None:
    target = load_target("cpu", host=HostFacts(peak_gflops=100.0, dram_gbps=10.0))
    a, b = _inputs()
    fn = stripeml.compile(TWO, target=target)
    rows = fn.lower(a, a).profile(a, a)
    assert len(rows) >= 1
    for name, statement, seconds in rows:  # the triple profile always returned
        assert isinstance(name, str) and isinstance(statement, str) and seconds >= 0
    assert all(len(r) == 3 and r[:3] == (r.kernel, r.statement, r.seconds) for r in rows)
    assert [r[2] for r in rows] == sorted((r[2] for r in rows), reverse=True)
    assert sum(r.flops for r in rows) == 3 * a.size  # add, mul, relu


def test_without_ceilings_the_fraction_is_unknown(no_measuring: None) -> None:
    # conftest sets STRIPEML_MEASURE_PEAKS=0: the host's ceilings are not measured
    a, b = _inputs()
    exe = stripeml.compile(MATMUL, target=load_target("cpu")).lower(a, b)
    (row,) = exe.profile(a, b)
    assert row.flops == 2 * 24 * 16 * 8 and row.gflops > 0
    assert row.peak_fraction is None and row.bound is None


def test_other_backends_give_one_row_with_the_totals(no_measuring: None) -> None:
    a, b = _inputs(6, 5, 4)
    exe = stripeml.compile(TWO, target="interp").lower(a, a)
    (row,) = exe.profile(a, a)
    assert row.kernel == "program" and row.statement == ""
    assert row.flops == 3 * a.size
    assert row.bytes == sum(w.bytes for w in exe.work.values())
    assert row.peak_fraction is None
