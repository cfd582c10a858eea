"""``stripeml onnx``: compile, run, check against onnxruntime, time."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from stripeml.cli import main  # noqa: E402


def _model(path, op: str = "Relu") -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = helper.make_tensor("w", TensorProto.FLOAT, [3], [1.0, -2.0, 3.0])
    nodes = [helper.make_node("Add", ["x", "w"], ["s"]), helper.make_node(op, ["s"], ["y"])]
    m = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)]
    )
    m.ir_version = 8
    onnx.save(m, str(path))
    return str(path)


def test_check_and_bench(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    path = _model(tmp_path / "m.onnx")
    assert main(["onnx", path, "--random", "--check", "--bench", "2", "--input", "x=4x3"]) == 0
    out, err = capsys.readouterr()
    assert "shape (4, 3)" in out
    assert "check    y  ok" in out
    assert "latency  median of 2" in out and "onnxruntime" in out
    assert "kernels" in out
    assert "compiling" in err  # progress on stderr


def test_outputs_match_numpy_on_ones(tmp_path, capsys):
    path = _model(tmp_path / "m.onnx")
    assert main(["onnx", path, "--target", "interp"]) == 0
    out = capsys.readouterr().out
    expected = np.maximum(np.ones((1, 3)) + [1.0, -2.0, 3.0], 0).sum()
    assert f"sum {expected:.6g}" in out


def test_unsupported_op_is_reported(tmp_path, capsys):
    path = _model(tmp_path / "m.onnx", op="NoSuchOp")
    assert main(["onnx", path]) == 1
    assert "NoSuchOp" in capsys.readouterr().err


def test_missing_file(tmp_path, capsys):
    # A model that does not exist is bad command-line use: status 2, as the README
    # says for every command (this test said 1, the bug issue 12 reported).
    assert main(["onnx", str(tmp_path / "absent.onnx")]) == 2
    assert "no such ONNX model" in capsys.readouterr().err


def _phase_rows(out: str) -> dict[str, float]:
    """``{phase: milliseconds}`` from the ``phases`` table ``--timing`` prints."""
    rows = {}
    for line in out.split("phases   (", 1)[1].splitlines()[1:]:
        if not line.startswith("  "):
            break
        name = line.strip().split("  ")[0]
        rows[name] = float(line.split(" ms")[0].split()[-1])
    return rows


def test_timing_lists_the_compile_phases(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "cache"))
    path = _model(tmp_path / "m.onnx")
    assert main(["onnx", path, "--timing", "--input", "x=4x3"]) == 0
    rows = _phase_rows(capsys.readouterr().out)
    # a cold cache: every phase of the route from ONNX to machine code ran
    for name in ("onnx read", "onnx import", "bind + lower", "verify", "pass fuse", "codegen"):
        assert name in rows, (name, rows)
    for name in ("llvm optimise", "llvm emit", "load", "first run"):
        assert name in rows, (name, rows)
    # the rows add up to the total, which is no more than the wall time printed
    total = rows.pop("total")
    assert abs(sum(rows.values()) - total) < 0.05 * total + 0.5
    # a warm cache: the program and its object code are read, nothing is optimised
    assert main(["onnx", path, "--timing", "--input", "x=4x3"]) == 0
    warm = _phase_rows(capsys.readouterr().out)
    assert "cache read" in warm and "load" in warm
    assert "verify" not in warm and "pass fuse" not in warm and "codegen" not in warm
