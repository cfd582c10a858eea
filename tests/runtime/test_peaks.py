"""The runtime's ceilings: given ones win, measured ones are kept on disk, measuring can be off.

Nothing here asserts a speed: the two measurements run briefly to show that they
run and give positive numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stripeml.runtime import peaks as peaks_mod
from stripeml.runtime.peaks import (
    MEASURE_VARIABLE,
    FmaBurst,
    PeaksFile,
    measure_dram_gbps,
    measure_peak_gflops,
    peaks_key,
    target_peaks,
)
from stripeml.targets import target_from_toml
from stripeml.targets.host import BASELINE_CPU, HostFacts, Peaks, detect_cpu

CPU = 'backend = "cpu"\nthreads = 2\n\n[[memory]]\nname = "DRAM"\nsize = "1 GiB"\n'


@pytest.fixture
def fake_measure(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Replace the measurement with a recorder (threads asked) and forget what
    this process measured before."""
    calls: list[int] = []

    def measure(cpu, threads, host=None):
        calls.append(threads)
        return Peaks(300.0, 30.0)

    monkeypatch.setattr(peaks_mod, "measure", measure)
    monkeypatch.setattr(peaks_mod, "_MEASURED", {})
    return calls


def test_file_values_are_used_and_nothing_is_measured(
    tmp_path: Path, fake_measure: list[int]
) -> None:
    text = "peak_gflops = 50\n" + CPU.replace('"1 GiB"', '"1 GiB"\nbandwidth_gbs = 5')
    target = target_from_toml(text)
    assert target_peaks(target, measure=True, store=PeaksFile(tmp_path)) == Peaks(50.0, 5.0)
    assert fake_measure == []


def test_host_facts_given_explicitly_are_not_measured(
    tmp_path: Path, fake_measure: list[int]
) -> None:
    target = target_from_toml(CPU, host=HostFacts(peak_gflops=7.0, dram_gbps=0.5))
    assert target_peaks(target, measure=True, store=PeaksFile(tmp_path)) == Peaks(7.0, 0.5)
    assert fake_measure == [] and not (tmp_path / "peaks.json").exists()


def test_measured_once_then_read_from_disk(
    tmp_path: Path, fake_measure: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PeaksFile(tmp_path)
    target = target_from_toml("peak_gflops = 111\n" + CPU)
    assert target_peaks(target, measure=True, store=store) == Peaks(111.0, 30.0)
    assert fake_measure == [2]  # the target's threads
    data = json.loads((tmp_path / "peaks.json").read_text())
    (key,) = data["entries"]
    assert key == peaks_key(detect_cpu(), 2) and data["entries"][key]["dram_gbps"] == 30.0
    # a new process (no memory of it) and a newly loaded target: read from the file
    monkeypatch.setattr(peaks_mod, "_MEASURED", {})
    again = target_from_toml(CPU)
    assert target_peaks(again, measure=True, store=store) == Peaks(300.0, 30.0)
    assert fake_measure == [2]


def test_measuring_can_be_turned_off(
    tmp_path: Path, fake_measure: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MEASURE_VARIABLE, "0")
    target = target_from_toml(CPU)
    assert target_peaks(target, store=PeaksFile(tmp_path)) == Peaks(None, None)
    assert target_peaks(target, measure=False) == Peaks(None, None)
    assert fake_measure == []
    monkeypatch.setenv(MEASURE_VARIABLE, "1")
    assert target_peaks(target, store=PeaksFile(tmp_path)).known


def test_other_backends_only_use_their_files(fake_measure: list[int]) -> None:
    target = target_from_toml(CPU.replace('"cpu"', '"interp"'))
    assert target_peaks(target, measure=True) == Peaks(None, None)
    assert fake_measure == []


def test_a_malformed_file_counts_as_absent(tmp_path: Path) -> None:
    store = PeaksFile(tmp_path)
    (tmp_path / "peaks.json").write_text("{not json")
    assert store.get("x") is None
    (tmp_path / "peaks.json").write_text(
        json.dumps({"format": 1, "entries": {"x": {"peak_gflops": -1}}})
    )
    assert store.get("x") is None
    store.put("y", Peaks(1.0, 2.0))
    assert store.get("y") == Peaks(1.0, 2.0) and store.get("x") is None


def test_another_cpu_is_not_measured() -> None:
    assert peaks_mod.measure(BASELINE_CPU, 1) == Peaks()


def test_the_measurements_run() -> None:
    assert measure_peak_gflops(1, seconds=0.01) > 0
    assert measure_dram_gbps(2, seconds=0.01) > 0


def test_a_burst_does_the_work_it_counts() -> None:
    # Each chunk runs acc = acc * a + b on 12 accumulators of every lane for its
    # iterations and stores their sum in its slot: check that sum against the
    # recurrence's closed form, so a run that skipped work would fail.
    burst = FmaBurst(2)
    assert burst.gflops() > 0
    a, b = 0.999999, 1e-6
    n = peaks_mod._FMA_ITERATIONS
    x = b * (1 - a ** (n + 1)) / (1 - a)  # b, then n steps of x * a + b
    lanes, chunks = burst.lanes, len(burst._bounds) - 1
    slots = burst._scratch[lanes : lanes * (chunks + 1)]
    assert np.allclose(slots, 12 * x, rtol=1e-3)
    assert burst.flops == chunks * n * 12 * lanes * 2
