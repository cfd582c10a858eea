"""Broken and hostile model *files*: empty, truncated, corrupt, and external
data that is missing, malformed or outside the model's folder.

Each is an ``OnnxError`` (a ``StripeError``) naming the file and the tensor;
nothing outside the model's folder is ever read.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml.cli import main  # noqa: E402
from stripeml.onnx import OnnxError  # noqa: E402

W = np.arange(6, dtype=np.float32).reshape(2, 3)


def add_model(w: TensorProto | None = None) -> onnx.ModelProto:
    """``y = x + w`` with ``x``, ``w`` and ``y`` float32 (2, 3)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    w = numpy_helper.from_array(W, "w") if w is None else w
    node = helper.make_node("Add", ["x", "w"], ["y"], name="add")
    graph = helper.make_graph([node], "g", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def external(location: str, **entries: int) -> TensorProto:
    """Initializer ``w`` (float32 (2, 3)) whose data is in the file ``location``."""
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
    t.data_location = TensorProto.EXTERNAL
    for key, value in {"location": location, **entries}.items():
        e = t.external_data.add()
        e.key, e.value = key, str(value)
    return t


def save(model: onnx.ModelProto, path) -> str:
    path.write_bytes(model.SerializeToString())
    return str(path)


def run(model) -> np.ndarray:
    f = stripeml.onnx.compile(model, target="interp")
    return f(np.ones((2, 3), np.float32))


# -- the file itself -------------------------------------------------------------------


def test_an_empty_file_is_not_a_model(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(OnnxError, match=r"empty\.onnx: the file is empty \(0 bytes\)"):
        stripeml.onnx.compile(str(path))


def test_an_empty_model_proto_is_not_a_model():
    with pytest.raises(OnnxError, match="no IR version"):
        stripeml.onnx.compile(onnx.ModelProto())


@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_a_truncated_file_is_an_onnx_error(tmp_path, keep):
    data = add_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(OnnxError, match=r"cut\.onnx: "):
        stripeml.onnx.compile(str(path))


def test_a_file_cut_after_the_graph_misses_its_opset(tmp_path):
    """Cut at a field boundary the bytes still parse: the opset import is gone."""
    model = add_model()
    full = model.SerializeToString()
    del model.opset_import[:]
    cut = model.SerializeToString()
    assert full.startswith(cut)
    path = tmp_path / "cut.onnx"
    path.write_bytes(cut)
    with pytest.raises(OnnxError, match="no opset_import for the ai.onnx domain"):
        stripeml.onnx.compile(str(path))


def test_corrupt_bytes_and_a_directory_are_onnx_errors(tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\xff" * 64)
    with pytest.raises(OnnxError, match=r"junk\.onnx: not a valid ONNX model"):
        stripeml.onnx.compile(str(path))
    with pytest.raises(OnnxError, match="not a regular file"):
        stripeml.onnx.compile(str(tmp_path))
    with pytest.raises(OnnxError, match="no such ONNX model"):
        stripeml.onnx.compile(str(tmp_path / "missing.onnx"))


def test_the_command_line_reports_an_empty_file_without_a_traceback(tmp_path, capsys):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    assert main(["onnx", str(path)]) == 1
    err = capsys.readouterr().err
    assert "the file is empty" in err and "Traceback" not in err


# -- external data ---------------------------------------------------------------------


def test_external_data_inside_the_folder_is_read(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\0" * 8 + W.tobytes())
    path = save(add_model(external("weights.bin", offset=8, length=24)), tmp_path / "m.onnx")
    np.testing.assert_array_equal(run(path), 1.0 + W)


def test_a_model_proto_with_external_data_is_refused_not_read_from_the_cwd(tmp_path, monkeypatch):
    """In memory a model has no folder: the file is not looked up in the current directory."""
    (tmp_path / "weights.bin").write_bytes(W.tobytes())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OnnxError, match=r"initializer 'w' keeps its data in an external file"):
        stripeml.onnx.compile(add_model(external("weights.bin")))


@pytest.mark.parametrize("proto", [False, True])
@pytest.mark.parametrize(
    "location, message",
    [
        ("/etc/passwd", "is an absolute path"),
        ("../../../../etc/passwd", "points outside the model's folder"),
        ("sub/../../outside.bin", "points outside the model's folder"),
    ],
)
def test_external_data_outside_the_folder_is_refused(tmp_path, location, message, proto):
    model = add_model(external(location))
    if proto:
        with pytest.raises(OnnxError, match="keeps its data in an external file"):
            stripeml.onnx.compile(model)
        return
    folder = tmp_path / "model"
    folder.mkdir()
    with pytest.raises(OnnxError, match=rf"m\.onnx: initializer 'w': .*{message}"):
        stripeml.onnx.compile(save(model, folder / "m.onnx"))


def test_a_symbolic_link_out_of_the_folder_is_refused(tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(W.tobytes())  # a valid payload: only where it lives is wrong
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").symlink_to(secret)
    path = save(add_model(external("weights.bin")), folder / "m.onnx")
    with pytest.raises(OnnxError, match="outside the model's folder"):
        stripeml.onnx.compile(path)


@pytest.mark.parametrize(
    "entries, message",
    [
        ({"offset": 100}, "offset 100 is past the end"),
        ({"offset": 8, "length": 24}, "wants 24 bytes at offset 8, but 'weights.bin' has 24 bytes"),
        ({"length": 12}, "holds 12 bytes, but shape (2, 3) of float needs 24"),
        ({"offset": -1}, "offset '-1' is not a byte count"),
    ],
)
def test_external_data_that_does_not_fit_is_refused(tmp_path, entries, message):
    (tmp_path / "weights.bin").write_bytes(W.tobytes())
    path = save(add_model(external("weights.bin", **entries)), tmp_path / "m.onnx")
    with pytest.raises(OnnxError, match=rf"initializer 'w': .*{re.escape(message)}"):
        stripeml.onnx.compile(path)


def test_missing_external_data_names_the_file(tmp_path):
    path = save(add_model(external("nowhere.bin")), tmp_path / "m.onnx")
    with pytest.raises(OnnxError, match="cannot open external data file 'nowhere.bin'"):
        stripeml.onnx.compile(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_external_data_is_refused_without_blocking(tmp_path):
    """A FIFO would block a plain ``open`` forever: the import must fail at once."""
    os.mkfifo(tmp_path / "weights.bin")
    path = save(add_model(external("weights.bin")), tmp_path / "m.onnx")
    code = (
        "import sys, stripeml.onnx\n"
        "try:\n"
        "    stripeml.onnx.compile(sys.argv[1])\n"
        "except stripeml.onnx.OnnxError as e:\n"
        "    print('refused:', e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, path], capture_output=True, text=True, timeout=120
    )
    assert "refused:" in done.stdout and "not a regular file" in done.stdout, done.stderr
