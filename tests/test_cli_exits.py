"""The command line's failures: one message, never a traceback, the README's exit
statuses (0 ok, 1 rejected / failed / out of memory / internal error, 2 usage,
130 interrupted), and ``stripeml ir`` making no input data without ``--report``.

Failures the compiler cannot be made to raise on demand (memory running out, a
bug, Ctrl-C) are simulated by replacing ``stripeml.compile`` or the random
inputs; the exit statuses and the demo's GPU message also run the real thing.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import stripeml
from stripeml import cli
from stripeml.cli import common
from stripeml.errors import InternalError, StripeError

MATMUL = "function (A[M, K], B[K, N]) -> (C) {\n    C[m, n : M, N] = +(A[m, k] * B[k, n]);\n}\n"
NUMPY_OOM = (
    "Unable to allocate 74.5 GiB for an array with shape (100000, 100000) and data type float64"
)


@pytest.fixture
def tile_file(tmp_path: Path) -> Path:
    path = tmp_path / "mm.tile"
    path.write_text(MATMUL)
    return path


def _compile_raising(exc: BaseException) -> Callable[..., object]:
    def compile_(source: str, target: str = "interp", *, name: str = "main") -> object:
        raise exc

    return compile_


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# --------------------------------------------------------------------------
# Out of memory, interrupts, internal errors: for run, ir, demo, targets, onnx


def _argv(command: str, tile_file: Path) -> list[str]:
    return {
        "run": ["run", str(tile_file), "-i", "A=2x3", "-i", "B=3x4"],
        "ir": ["ir", str(tile_file), "-i", "A=2x3", "-i", "B=3x4"],
        "demo": ["demo", "matmul"],
    }[command]


@pytest.mark.parametrize("command", ["run", "ir", "demo"])
@pytest.mark.parametrize(
    ("exc", "status", "expected"),
    [
        (MemoryError(NUMPY_OOM), 1, rf"^stripeml: out of memory while .*: {re.escape(NUMPY_OOM)}$"),
        (MemoryError(), 1, r"^stripeml: out of memory while \S"),
        (KeyboardInterrupt(), 130, r"^stripeml: interrupted$"),
        (RuntimeError("boom"), 1, r"^stripeml: internal error .*RuntimeError: boom; .*report it"),
    ],
    ids=["oom", "oom-bare", "interrupt", "bug"],
)
def test_failures_print_one_line(
    command: str,
    exc: BaseException,
    status: int,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    tile_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(stripeml, "compile", _compile_raising(exc), raising=False)
    if command == "demo" and not isinstance(exc, (MemoryError, KeyboardInterrupt)):
        pytest.skip("the demo reports a broken example in its table (tested in test_cli.py)")
    assert cli.main(_argv(command, tile_file)) == status
    assert re.search(expected, _one_line(capsys.readouterr().err))


def test_oom_in_a_demo_example_is_not_an_internal_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    def compile_(source: str, target: str = "interp", *, name: str = "main") -> object:
        calls.append(name)
        raise MemoryError(NUMPY_OOM)

    monkeypatch.setattr(stripeml, "compile", compile_, raising=False)
    assert cli.main(["demo", "cumsum", "matmul"]) == 1
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert line == f"stripeml: out of memory while running the example matmul: {NUMPY_OOM}"
    assert calls == ["matmul"] and "internal error" not in captured.out


def test_oom_building_the_random_inputs(
    monkeypatch: pytest.MonkeyPatch, tile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_memory(specs: object, seed: int = 0) -> dict[str, np.ndarray]:
        raise MemoryError(NUMPY_OOM)

    monkeypatch.setattr(common, "random_inputs", no_memory)
    assert cli.main(["run", str(tile_file), "-i", "A=100000x100000", "-i", "B=100000x5"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line == f"stripeml: out of memory while building the random inputs: {NUMPY_OOM}"


def test_oom_the_api_wrapped_is_still_out_of_memory(
    monkeypatch: pytest.MonkeyPatch, tile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``Function`` wraps unexpected exceptions as InternalError; a MemoryError is not a bug."""
    wrapped = InternalError(f"internal error while compiling main: MemoryError: {NUMPY_OOM}")
    wrapped.__cause__ = MemoryError(NUMPY_OOM)
    monkeypatch.setattr(stripeml, "compile", _compile_raising(wrapped), raising=False)
    assert cli.main(_argv("run", tile_file)) == 1
    line = _one_line(capsys.readouterr().err)
    assert line == f"stripeml: out of memory while compiling {tile_file}: {NUMPY_OOM}"


def test_real_oom_in_a_process_with_little_address_space(tmp_path: Path) -> None:
    """A real ``MemoryError`` from NumPy: the child may map 3 GiB, the inputs need 80 GB."""
    resource = pytest.importorskip("resource")
    code = (
        "import resource, sys\n"
        "from stripeml.cli import main\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "sys.exit(main(['run', 'matmul', '-i', 'A=100000x100000', '-i', 'B=100000x4']))\n"
    )
    del resource
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1, done.stderr
    line = _one_line(done.stderr)
    assert line.startswith("stripeml: out of memory while building the random inputs: ")
    assert "(100000, 100000)" in line


def test_internal_error_traceback_with_debug(
    monkeypatch: pytest.MonkeyPatch, tile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(stripeml, "compile", _compile_raising(RuntimeError("boom")), raising=False)
    for argv in (["--debug", *_argv("run", tile_file)], [*_argv("ir", tile_file), "--debug"]):
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert "internal error" in err and "Traceback" in err and "RuntimeError: boom" in err
    monkeypatch.setenv("STRIPEML_DEBUG", "1")
    assert cli.main(_argv("run", tile_file)) == 1
    assert "Traceback" in capsys.readouterr().err


def test_internal_error_from_the_api_asks_for_a_report(
    monkeypatch: pytest.MonkeyPatch, tile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bug = InternalError("internal error while compiling main for 2x3:f32: KeyError: 'x'")
    bug.__cause__ = KeyError("x")
    monkeypatch.setattr(stripeml, "compile", _compile_raising(bug), raising=False)
    assert cli.main(_argv("ir", tile_file)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[0] == f"{tile_file}: {bug}"
    assert "please report it" in err.splitlines()[1]


def test_targets_command_out_of_memory(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import stripeml.targets

    def no_memory(target: object, **kwargs: object) -> object:
        raise MemoryError()

    monkeypatch.setattr(stripeml.targets, "load_target", no_memory)
    assert cli.main(["targets", "cpu"]) == 1
    assert (
        _one_line(capsys.readouterr().err)
        == "stripeml: out of memory while running `stripeml targets`"
    )


def test_broken_pipe_is_quiet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``stripeml demo --list | head -1``: stdout closes early; no message, status 141."""
    real_print = print

    def closed(*args: object, file: Any = None, **kwargs: Any) -> None:
        if file is None:  # stdout
            raise BrokenPipeError(32, "Broken pipe")
        real_print(*args, file=file, **kwargs)

    monkeypatch.setattr("builtins.print", closed)
    assert cli.main(["demo", "--list"]) == 141
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------------
# Exit statuses, as the README's table says (real compiler)


def _bad_target(tmp_path: Path) -> Path:
    path = tmp_path / "chip.toml"
    path.write_text('backend = "interp"\n[[memory]]\nname = "DRAM"\nsize = -1\n')
    return path


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["run", "matmul", "-r", "1"], 0),
        (["run", "nope.tile"], 2),
        (["run", "matmul", "--target", "tpu"], 2),
        (["run", "matmul", "--target", "nope.toml"], 2),
        (["run", "matmul", "-i", "A=2x3"], 2),
        (["run", "matmul", "--target", "{bad_target}"], 1),
        (["run", "{bad_program}", "-i", "A=2x3", "-i", "B=3x4"], 1),
        (["ir", "matmul"], 0),
        (["ir", "nope.tile"], 2),
        (["ir", "matmul", "--target", "tpu"], 2),
        (["ir", "matmul", "--target", "{bad_target}"], 1),
        (["ir", "{bad_program}", "-i", "A=2x3", "-i", "B=3x4"], 1),
        (["demo", "matmul"], 0),
        (["demo", "nosuch"], 2),
        (["demo", "matmul", "--target", "tpu"], 2),
        (["demo", "matmul", "--target", "{bad_target}"], 1),
        (["targets"], 0),
        (["targets", "cpu"], 0),
        (["targets", "tpu"], 2),
        (["targets", "nope.toml"], 2),
        (["targets", "{bad_target}"], 1),
        (["targets", "{bad_target}", "tpu"], 2),
        (["frobnicate"], 2),
    ],
)
def test_exit_statuses(
    argv: list[str], status: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad_program = tmp_path / "bad.tile"
    bad_program.write_text(MATMUL.replace("*", "@"))
    names = {"bad_target": str(_bad_target(tmp_path)), "bad_program": str(bad_program)}
    assert cli.main([a.format(**names) for a in argv]) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if status == 2:
        assert "usage: stripeml" in err


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["{model}", "--target", "interp"], 0, ""),
        (["{absent}"], 2, "no such ONNX model"),
        (["{model}", "--input", "x=4y3"], 2, "bad --input 'x=4y3'"),
        (["{model}", "--input", "x=0x3"], 2, "every size must be positive"),
        (["{model}", "--input", "z=4x3"], 2, "no such graph input (the model takes x)"),
        (["{model}", "--input", "x=4x3", "--input", "x=2x3"], 2, "given twice"),
        (["{model}", "--target", "tpu"], 2, "unknown target 'tpu'"),
        (["{garbage}"], 1, "cannot read ONNX model"),
        (["{unsupported}"], 1, "NoSuchOp"),
    ],
)
def test_onnx_exit_statuses(
    argv: list[str], status: int, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    def model(name: str, op: str) -> str:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [x], [y])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.save(m, str(tmp_path / name))
        return str(tmp_path / name)

    (tmp_path / "garbage.onnx").write_bytes(b"\xff\x00 not a model")
    names = {
        "model": model("m.onnx", "Relu"),
        "unsupported": model("u.onnx", "NoSuchOp"),
        "absent": str(tmp_path / "absent.onnx"),
        "garbage": str(tmp_path / "garbage.onnx"),
    }
    assert cli.main(["onnx", *(a.format(**names) for a in argv)]) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err and message in err
    if status == 2:
        assert "usage: stripeml onnx" in err


# --------------------------------------------------------------------------
# demo on a target that cannot run: one message for the whole run


def test_demo_on_a_target_that_cannot_run_says_so_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = stripeml.compile
    calls: list[str] = []

    class NoDevice:
        def __init__(self, params: tuple[str, ...], name: str) -> None:
            self.params = params
            self.name = name

        def __call__(self, *arrays: np.ndarray) -> np.ndarray:
            calls.append(self.name)
            raise StripeError("target 'cuda': no usable CUDA GPU (no driver)")

    def compile_(source: str, target: str = "interp", *, name: str = "main") -> object:
        f = real(source, target="interp", name=name)
        return NoDevice(f.params, name) if target == "cuda" else f

    monkeypatch.setattr(stripeml, "compile", compile_, raising=False)
    assert cli.main(["demo", "--target", "cuda"]) == 1
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert text.count("no usable CUDA GPU") == 1, text
    assert _one_line(captured.err).startswith("stripeml demo: nothing runs on target cuda here: ")
    assert calls == ["matmul", "probe"]  # the first example, the probe, then nothing more


def test_real_demo_on_cuda_without_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        from stripeml.runtime.cuda import gpu_available

        if gpu_available()[0]:
            pytest.skip("a CUDA GPU is present here")
    except (StripeError, ImportError):
        pass  # no cuda extra: the target cannot run either
    assert cli.main(["demo", "matmul", "softmax", "cumsum", "--target", "cuda"]) == 1
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert line.startswith("stripeml demo: nothing runs on target cuda here: ")
    assert captured.out == ""


# --------------------------------------------------------------------------
# `ir` without --report makes no input data


def test_ir_without_report_builds_no_inputs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("stripeml ir made random input data without --report")

    monkeypatch.setattr(common, "random_inputs", refuse)
    monkeypatch.setattr(np.random, "default_rng", refuse)
    tracemalloc.start()
    try:
        assert cli.main(["ir", "matmul", "-i", "A=8000x8000", "-i", "B=8000x8000"]) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    out = capsys.readouterr().out
    assert "in A f32(8000, 8000)" in out and "out C f32(8000, 8000)" in out
    assert peak < 64 << 20, f"peak {peak / 2**20:.0f} MiB traced while lowering"  # inputs: 512 MiB


def test_ir_with_report_still_runs_on_random_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ir", "matmul", "-i", "A=6x5", "-i", "B=5x4", "--report"]) == 0
    assert "memory traffic" in capsys.readouterr().out


def test_shape_only_arrays_cost_no_memory() -> None:
    specs = [common.InputSpec("A", (8000, 8000), "f64"), common.InputSpec("S", (), "i8")]
    a, s = common.shape_only_arrays(specs)
    assert a.shape == (8000, 8000) and a.dtype == np.float64 and a.nbytes == 8000 * 8000 * 8
    assert a.strides == (0, 0) and not a.flags.writeable
    assert s.shape == () and s.dtype == np.int8
