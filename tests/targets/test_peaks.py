"""The roofline ceilings as target facts: given in a file or to HostFacts, or measured lazily."""

from __future__ import annotations

from pathlib import Path

import pytest

from stripeml.errors import TargetError
from stripeml.targets import load_target, target_from_toml
from stripeml.targets.host import CpuId, HostFacts, Peaks

from .helpers import HEADER, write

CPU = 'backend = "cpu"\nthreads = 3\n\n[[memory]]\nname = "DRAM"\nsize = "1 GiB"\n'


class Recorder:
    """A measurer that remembers what it was asked and answers fixed numbers."""

    def __init__(self) -> None:
        self.calls: list[tuple[CpuId, int]] = []
        self.peaks = Peaks(200.0, 20.0)

    def __call__(self, cpu: CpuId, threads: int) -> Peaks:
        self.calls.append((cpu, threads))
        return self.peaks


def test_given_peaks_are_never_measured() -> None:
    def refuse(cpu: CpuId, threads: int) -> Peaks:
        raise AssertionError("measured although given")

    host = HostFacts(peak_gflops=123.0, dram_gbps=45, measure_peaks=refuse)
    assert host.peak_gflops == 123.0 and host.dram_gbps == 45.0
    assert host.peaks(7, refuse) == Peaks(123.0, 45.0)


def test_missing_peaks_are_measured_once_per_thread_count() -> None:
    measure = Recorder()
    host = HostFacts(threads=4, dram_gbps=9.0, measure_peaks=measure)
    assert measure.calls == []  # nothing at construction
    assert host.peaks() == Peaks(200.0, 9.0)  # the given bandwidth wins
    assert host.peak_gflops == 200.0
    assert host.peaks(1) == Peaks(200.0, 9.0)
    assert [t for _, t in measure.calls] == [4, 1]
    assert host.cpu == measure.calls[0][0]


def test_without_a_measurer_peaks_are_unknown() -> None:
    host = HostFacts(threads=2)
    assert host.peaks() == Peaks(None, None) and not host.peaks().known
    assert host.peak_gflops is None and host.dram_gbps is None
    assert host.peaks(2, Recorder()).known  # a measurer given by the caller


def test_peaks_merge() -> None:
    assert Peaks(1.0, None) | Peaks(2.0, 3.0) == Peaks(1.0, 3.0)
    assert Peaks(None, None) | Peaks(2.0, None) == Peaks(2.0, None)


@pytest.mark.parametrize("bad", [0, -1.5, "fast", True])
def test_host_facts_refuse_bad_peaks(bad: object) -> None:
    with pytest.raises(ValueError, match="peak_gflops must be a positive number"):
        HostFacts(peak_gflops=bad)  # type: ignore[arg-type]


def test_a_file_may_give_the_ceilings(tmp_path: Path) -> None:
    text = CPU.replace('size = "1 GiB"', 'size = "1 GiB"\nbandwidth_gbs = 12.5')
    target = load_target(write(tmp_path, "peak_gflops = 640\n" + text))
    assert target.peak_gflops == 640.0 and target.dram_gbps == 12.5
    auto = target_from_toml('peak_gflops = "auto"\n' + CPU)
    assert auto.peak_gflops is None and auto.dram_gbps is None
    assert target_from_toml(CPU).peak_gflops is None


@pytest.mark.parametrize("bad", ["0", "-3", '"fast"', "true", "[1]"])
def test_a_bad_peak_gflops_names_the_key(bad: str) -> None:
    with pytest.raises(TargetError, match=r"x.toml: peak_gflops: must be a positive number"):
        target_from_toml(f"peak_gflops = {bad}\n" + HEADER, source="x.toml")


def test_ceilings_do_not_change_the_fingerprint() -> None:
    plain = target_from_toml(CPU)
    fast = target_from_toml("peak_gflops = 999\n" + CPU)
    assert plain.fingerprint() == fast.fingerprint()  # compiled code does not depend on them
    assert plain != fast  # but they are facts of the target


def test_the_target_keeps_the_host_facts_it_was_loaded_with() -> None:
    host = HostFacts(threads=2, peak_gflops=10.0, dram_gbps=1.0)
    target = target_from_toml(CPU, host=host)
    assert target.host is host
    assert target == target_from_toml(CPU, host=HostFacts(threads=2))  # host is not compared
    assert "host" not in repr(target)


def test_stripeml_targets_shows_a_given_peak() -> None:
    from stripeml.targets.report import describe_target

    assert "peak               640 GFLOP/s f32" in describe_target(
        target_from_toml("peak_gflops = 640\n" + CPU)
    )
    assert "GFLOP/s" not in describe_target(target_from_toml(CPU))
