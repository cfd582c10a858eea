"""The command line with targets: ``--target`` names and files, ``ir --timing``,
``ir --report`` and ``stripeml targets`` (the real compiler, small programs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stripeml import cli
from stripeml.targets import load_target

from .helpers import HEADER, write

MATMUL = ["ir", "matmul", "-i", "A=6x5", "-i", "B=5x4"]
NPU = "targets/examples/npu.toml"


def _section(out: str, title: str) -> list[str]:
    """The ``//`` lines of the section whose header contains ``title``."""
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if "=====" in line and title in line)
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("//") or "=====" in line:
            break
        body.append(line[2:].strip())
    return body


def test_timing_lists_every_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*MATMUL, "--target", NPU, "--stages", "--timing"]) == 0
    out = capsys.readouterr().out
    assert "// ===== lower =====" in out
    rows = _section(out, "pass timings")
    names = [spec.name for spec in load_target(NPU).pipeline]
    assert [r.split()[0] for r in rows] == [*names, "total"]
    assert all(re.fullmatch(r"\S+\s+[0-9.]+ ms", r) for r in rows)


def test_timing_without_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*MATMUL, "--timing"]) == 0
    out = capsys.readouterr().out
    assert "#program" in out and _section(out, "pass timings") == ["(no passes)"]


def test_report_counts_bytes_per_memory(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*MATMUL, "--target", NPU, "--report"]) == 0
    out = capsys.readouterr().out
    rows = {r.split()[0]: r.split()[1:] for r in _section(out, "memory traffic")}
    points = 6 * 5 * 4  # one load of A and of B, one store of C per point
    assert rows["DRAM"][:3] == [str(2 * points * 4), str(points * 4), str(3 * points * 4)]
    assert rows["SRAM"][:3] == ["0", "0", "0"] and rows["SRAM"][3:] == ["256", "KiB"]
    assert "not placed" in out


def test_report_on_the_interpreter_and_a_bundled_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*MATMUL, "--report", "--target", "examples/two_level_cpu"]) == 0
    rows = [r.split()[0] for r in _section(capsys.readouterr().out, "memory traffic")]
    assert rows[:5] == ["location", "DRAM", "L2", "L1", "all"]
    assert cli.main([*MATMUL, "--report"]) == 0
    rows = [r.split()[0] for r in _section(capsys.readouterr().out, "memory traffic")]
    assert rows[:3] == ["location", "DRAM", "all"]


def test_run_and_demo_take_target_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "matmul", "-r", "1", "--target", NPU]) == 0
    assert f"target {NPU}" in capsys.readouterr().out
    assert cli.main(["demo", "softmax", "--target", "examples/npu"]) == 0


def test_targets_lists_the_bundled_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["targets"]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()}
    assert set(rows) == {
        "interp",
        "cpu",
        "opencl",
        "opencl_pocl",
        "cuda",
        "examples/npu",
        "examples/two_level_cpu",
    }
    assert rows["cpu"][0] == "cpu" and rows["examples/npu"][0] == "interp"
    assert rows["examples/npu"][1:] == ["DRAM", "4", "GiB,", "SRAM", "256", "KiB"]
    assert rows["cuda"][:2] == ["cuda", "DRAM"]


def test_targets_describes_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = write(tmp_path, HEADER + '[[pipeline]]\npass = "fuse"\n')
    assert cli.main(["targets", "examples/npu", str(mine)]) == 0
    out = capsys.readouterr().out
    assert "SRAM" in out and "25.6 GB/s" in out and f"file               {mine}" in out
    assert "pipeline           fuse()" in out


def test_bad_target_files_exit_1_and_name_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path, HEADER + '[[pipeline]]\npass = "fusion"\n')
    assert cli.main(["targets", str(bad)]) == 1
    assert f"{bad}: pipeline[0].pass: unknown pass 'fusion'" in capsys.readouterr().err
    assert cli.main([*MATMUL, "--target", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{bad}: pipeline[0].pass: ") and "Traceback" not in err


@pytest.mark.parametrize("target", ["tpu", "nope.toml"])
def test_unknown_targets_are_usage_errors(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*MATMUL, "--target", target]) == 2
    assert target in capsys.readouterr().err


def test_gpu_targets_print_their_ir(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra is not installed")
    assert cli.main([*MATMUL, "--target", "cuda"]) == 0  # NVRTC compiles without a GPU
    assert "block" in capsys.readouterr().out
