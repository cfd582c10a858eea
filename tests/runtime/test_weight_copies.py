"""A model file's weights are copied into the disk cache's ``weights/`` folder
by the first process that reads them and mapped by a later one reading the
same file (``runtime/weight_copies.py``), and the file's identity names them
for the layouts' key (``runtime/provenance.py``): a file changed in place is
read again and gets new layouts.  A damaged copy is reported and the weights
are read from the model file.  Every result is checked against onnxruntime."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import stripeml.runtime.host
from stripeml.runtime import kept_layouts, weight_copies

from . import test_kept_layouts
from .test_kept_layouts import DAMAGE, _idle

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx  # noqa: E402

RNG = np.random.default_rng(11)


# the layout tests' fixtures: a fresh cache root storing layouts of any size,
# and each layout lookup's outcome
cache = test_kept_layouts.cache
loads = test_kept_layouts.loads


X = RNG.standard_normal((8, 96)).astype(np.float32)


def _model_file(path: Path) -> np.ndarray:
    """``y = relu(x @ w1) @ w2^T`` (a ``Gemm`` with ``transB``: laid out by the
    importer); returns ``w1``, whose bytes the file holds as they are."""
    w1 = RNG.standard_normal((96, 128)).astype(np.float32)
    w2 = RNG.standard_normal((64, 128)).astype(np.float32)
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("Gemm", ["r", "w2"], ["y"], transB=1),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return w1


def _onnxruntime(path: Path) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": X})[0]


def _model_start(path: Path) -> None:
    _idle()
    f = stripeml.onnx.compile(str(path), target="cpu")
    np.testing.assert_allclose(f(x=X), _onnxruntime(path), rtol=1e-4, atol=1e-4)
    del f
    kept_layouts.wait_writes()  # the cache's files are written on a thread of their own
    _idle()


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per model file read in this test: whether its weights came from the
    cache's copy (any size of model is copied)."""
    monkeypatch.setattr(weight_copies, "MIN_BYTES", 0)
    found: list[bool] = []
    open_copy = weight_copies.open_copy

    def recorded(st):
        got = open_copy(st)
        found.append(got is not None)
        return got

    monkeypatch.setattr(weight_copies, "open_copy", recorded)
    return found


def _change_weights_in_place(path: Path, w1: np.ndarray) -> None:
    """The same size, other weights, written in place (the inode kept)."""
    data = path.read_bytes()
    at = data.index(w1.tobytes())
    with open(path, "r+b") as f:
        f.seek(at)
        f.write((w1 * -2.0).tobytes())


def test_a_model_file_changed_in_place_gets_new_layouts(cache, loads, tmp_path) -> None:
    path = tmp_path / "model.onnx"
    w1 = _model_file(path)
    _model_start(path)
    _model_start(path)
    assert loads == [False, True], "the same file: its layouts mapped"
    _change_weights_in_place(path, w1)
    _model_start(path)
    assert loads == [False, True, False]
    _model_start(path)
    assert loads == [False, True, False, True]


def test_a_model_files_weights_are_mapped_from_the_cache(cache, loads, copies, tmp_path) -> None:
    path = tmp_path / "model.onnx"
    w1 = _model_file(path)
    _model_start(path)
    assert copies == [False] and len(list((cache / "weights").glob("*.weights"))) == 1
    _model_start(path)
    assert copies == [False, True] and loads == [False, True]
    _change_weights_in_place(path, w1)
    _model_start(path)  # another file now: read from it, copied again
    assert copies == [False, True, False] and loads == [False, True, False]
    _model_start(path)
    assert copies[-1] and loads[-1]


def test_weights_mapped_from_the_cache_are_read_only(cache, copies, tmp_path) -> None:
    path = tmp_path / "model.onnx"
    _model_file(path)
    from stripeml.onnx.load import read_model

    read_model(str(path))
    kept_layouts.wait_writes()
    _, _, raws = read_model(str(path))
    assert copies == [False, True]
    for raw in raws.values():
        assert not raw.flags.writeable
        with pytest.raises(ValueError):
            raw.setflags(write=True)
        assert stripeml.runtime.host.immutable(raw.view(np.float32)[1:])


@pytest.mark.parametrize("damage", ["a flipped bit", "a truncated file", "an edited head"])
def test_a_damaged_weights_copy_is_read_from_the_model_again(
    cache, copies, tmp_path, damage
) -> None:
    path = tmp_path / "model.onnx"
    _model_file(path)
    _model_start(path)
    (copy,) = (cache / "weights").glob("*.weights")
    DAMAGE[damage](copy)
    with pytest.warns(RuntimeWarning, match="weight cache: ignoring corrupt or forged entry"):
        _model_start(path)
    assert copies == [False, False]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _model_start(path)
    assert copies == [False, False, True]
