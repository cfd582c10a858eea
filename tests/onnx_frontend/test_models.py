"""The light models shipped with ``onnx`` (``onnx/backend/test/data/light``).

1. Each model with its own weights against the output shipped beside it, on
   the input the ONNX test runner generates (``arange / n``).  Those weights
   are all ``ConstantOfShape(0.02)``, so the expected output is a near-uniform
   softmax: a weak check on its own.
2. So the models are also run with random weights and the final Softmax
   removed, comparing the logits with onnxruntime on random inputs.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml.onnx.testing import randomize_weights, strip_softmax  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = [
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
]
# Compared with onnxruntime with random weights in the default run; the rest
# in `make test-slow`.
RANDOM_FAST = {"resnet50", "squeezenet"}


def _load(name: str):
    return onnx.load(os.path.join(LIGHT, f"light_{name}.onnx"))


def _runner_input(model) -> dict[str, np.ndarray]:
    """The inputs onnx's runner feeds the light models (arange / n, float32)."""
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for x in model.graph.input:
        if x.name in inits:
            continue
        shape = tuple(d.dim_value or 1 for d in x.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[x.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=[] if n in RANDOM_FAST else pytest.mark.slow) for n in MODELS],
)
def test_shipped_output(name):
    model = _load(name)
    expected = numpy_helper.to_array(
        onnx.load_tensor(os.path.join(LIGHT, f"light_{name}_output_0.pb"))
    )
    fn = stripeml.onnx.compile(model, target="cpu")
    got = fn(**_runner_input(model))
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-7)


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=[] if n in RANDOM_FAST else pytest.mark.slow) for n in MODELS],
)
def test_random_weights_against_onnxruntime(name):
    ort = pytest.importorskip("onnxruntime")
    model = strip_softmax(randomize_weights(_load(name), seed=1))
    rng = np.random.default_rng(2)
    feeds = {
        k: rng.standard_normal(v.shape).astype(np.float32) for k, v in _runner_input(model).items()
    }
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)[0]
    got = stripeml.onnx.compile(model, target="cpu")(**feeds)
    assert got.shape == expected.shape
    # The logits must vary (random weights): a uniform answer would prove nothing.
    assert float(np.std(expected)) > 1e-3
    scale = float(np.max(np.abs(expected)))
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4 * scale)
