"""A convolution's weights (one group, a multiple of 64 output channels) reach
the program as the file stores them: the array read from the model (``(CO, CI,
KH, KW)``) is the program's constant, with no channels-last copy at import, and
the program lays it out once in the register tiles' panels
(``passes/_const_panels.py``); a batch normalisation folded into the
convolution scales its sums.  Checked against onnxruntime, cold and in a warm
process (the disk cache the cold one left)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx  # noqa: E402

from .warm import cold_then_warm  # noqa: E402

RNG = np.random.default_rng(2026)
X = RNG.standard_normal((1, 16, 12, 10)).astype(np.float32)


def _model() -> Any:
    """Conv 3x3 stride 2 (bias) -> BatchNormalization -> Relu -> Conv 1x1 (no bias)
    (a 3 x 3, stride-1 convolution keeps channels-last weights, which the cpu
    target's ``winograd`` pass reads)."""
    w1 = (RNG.standard_normal((64, 16, 3, 3)) * 0.2).astype(np.float32)
    b1 = RNG.standard_normal(64).astype(np.float32)
    scale, beta = RNG.uniform(0.5, 2.0, 64), RNG.standard_normal(64)
    mean, var = RNG.standard_normal(64), RNG.uniform(0.5, 2.0, 64)
    w2 = (RNG.standard_normal((128, 64, 1, 1)) * 0.2).astype(np.float32)
    inits = [
        numpy_helper.from_array(w1, "w1"),
        numpy_helper.from_array(b1, "b1"),
        *(
            numpy_helper.from_array(v.astype(np.float32), n)
            for v, n in ((scale, "s"), (beta, "beta"), (mean, "mean"), (var, "var"))
        ),
        numpy_helper.from_array(w2, "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "s", "beta", "mean", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 6, 5])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _onnxruntime(path: Path) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": X})[0]


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


@pytest.fixture()
def model_file(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "convs.onnx"
    onnx.save(_model(), str(path))
    return path


def test_the_weights_read_are_the_programs_constants(model_file) -> None:
    """No copy of the weights at import: the program's constants are the arrays
    read from the file, laid out in panels by the program itself."""
    fn = stripeml.onnx.compile(str(model_file), target="cpu")
    exe = fn.lower(X)
    assert exe is not None
    constants = list(exe.function.constants.values())
    for name in ("w1", "w2"):
        read = fn.graph.initializers[name]
        assert any(np.shares_memory(c, read) for c in constants), name
    assert exe.ir.count("_panels f32(") == 2, exe.ir  # one layout per weight
    _close(np.asarray(fn(X)), _onnxruntime(model_file))


CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import stripeml.onnx
    x = np.load(sys.argv[2])
    y = stripeml.onnx.compile(sys.argv[1], target="cpu")(x)
    np.save(sys.argv[3], y)
    print(json.dumps({"passes": "stripeml.passes" in sys.modules}))
    """
)


def test_a_warm_process_gives_the_cold_ones_outputs(model_file, tmp_path) -> None:
    """Cold, then warm (a fresh process on the cache the cold one left): the same
    bits, onnxruntime's values, and the warm process builds no pass."""
    runs = cold_then_warm(CHILD, model_file, X, tmp_path)
    (cold_info, cold), (warm_info, warm) = runs
    assert cold_info["passes"] and not warm_info["passes"]
    np.testing.assert_array_equal(warm, cold)
    _close(warm, _onnxruntime(model_file))


def _conv3x3_bn(size: int) -> tuple[Any, np.ndarray]:
    """A 3 x 3, stride-1, padded convolution (64 -> 64 channels) on a ``size`` x
    ``size`` image, a batch normalisation folded into it; and its input."""
    w = (RNG.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float32)
    scale, beta = RNG.uniform(0.5, 2.0, 64), RNG.standard_normal(64)
    mean, var = RNG.standard_normal(64), RNG.uniform(0.5, 2.0, 64)
    inits = [numpy_helper.from_array(w, "w")] + [
        numpy_helper.from_array(v.astype(np.float32), n)
        for v, n in ((scale, "s"), (beta, "beta"), (mean, "mean"), (var, "var"))
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "beta", "mean", "var"], ["y"]),
    ]
    shape = [1, 64, size, size]
    g = helper.make_graph(
        nodes,
        "conv3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    x = RNG.standard_normal(shape).astype(np.float32)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), x


@pytest.mark.parametrize("size", [7, 8])
def test_a_3x3_convolution_too_small_for_winograd_reads_its_weights_as_stored(
    size, tmp_path, monkeypatch
) -> None:
    """Below the cpu target's ``winograd`` ``min_size`` (8) a 3 x 3, stride-1
    convolution is direct: its weights are the array read (no channels-last copy);
    from 8 on ``winograd`` takes it, from channels-last weights.  Both against
    onnxruntime."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "cache"))
    model, x = _conv3x3_bn(size)
    path = tmp_path / "conv3.onnx"
    onnx.save(model, str(path))
    fn = stripeml.onnx.compile(str(path), target="cpu")
    exe = fn.lower(x)
    assert exe is not None
    read = fn.graph.initializers["w"]
    as_read = any(np.shares_memory(c, read) for c in exe.function.constants.values())
    assert as_read == (size < 8)
    assert ("_wino_u" in exe.ir) == (size >= 8)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    _close(np.asarray(fn(x)), session.run(None, {"x": x})[0])


def test_the_importers_winograd_size_is_the_cpu_targets() -> None:
    """The importer reads a 3 x 3 convolution's weights as stored below the cpu
    target's ``winograd`` ``min_size``: the two stay equal."""
    from stripeml.onnx.layout_conv import WINOGRAD_MIN_SIZE
    from stripeml.targets import resolve

    (spec,) = [s for s in resolve("cpu").pipeline if s.name == "winograd"]
    assert dict(spec.options)["min_size"] == WINOGRAD_MIN_SIZE
