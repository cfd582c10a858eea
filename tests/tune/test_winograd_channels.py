"""``winograd``'s ``min_channels`` as a tunable option: a tune may rewrite a
3 x 3 convolution of 16-31 channels (below the ``cpu`` target's 32), as one
candidate of that convolution's job, checked against NumPy and onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import stripeml
import stripeml.onnx
from stripeml.passes.winograd import Winograd
from stripeml.tile.bind import signature_of
from stripeml.tuning.driver import _function_and_args
from stripeml.tuning.executors import LocalMeasurer
from stripeml.tuning.kernels import build_candidate, kernel_jobs
from stripeml.tuning.space import axes, neighbours

SIXTEEN = {"winograd": {"min_channels": 16}}


def _model() -> tuple[onnx.ModelProto, np.ndarray, np.ndarray, np.ndarray]:
    """A 3 x 3 convolution, 16 -> 32 channels, padded, with a bias, then a ReLU."""
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((32, 16, 3, 3)) * 0.2).astype(np.float32)
    b = (rng.standard_normal(32) * 0.2).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        "conv16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 14, 14])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(12).standard_normal((1, 16, 14, 14)).astype(np.float32)
    return model, x, w, b


def _numpy(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 32, 14, 14), np.float64)
    for ky in range(3):
        for kx in range(3):
            out += np.einsum("nchw,oc->nohw", p[:, :, ky : ky + 14, kx : kx + 14], w[:, :, ky, kx])
    return np.maximum(out + b[None, :, None, None], 0).astype(np.float32)


def _conv_job(model: onnx.ModelProto, x: np.ndarray):
    f = stripeml.onnx.compile(model, target="cpu", threads=2)
    fn, args = _function_and_args(f, [x])
    jobs, skipped = kernel_jobs(
        fn.lowered(signature_of(args)), fn.target, fn.constants, 0, dict(zip(fn.params, args))
    )
    assert not skipped
    (job,) = [j for j in jobs if "ky:3" in j.label.replace(" ", "")]
    return fn.target, job


def test_min_channels_is_an_axis_with_the_analytic_value():
    model, x, _, _ = _model()
    target, job = _conv_job(model, x)
    space = axes(target, job.point)
    (axis,) = [a for a in space if (a.pass_name, a.option) == ("winograd", "min_channels")]
    winograd = next(p for p in target.passes if p.name == "winograd")
    assert isinstance(winograd, Winograd)
    # the target file's value is the start, one of the values, and one step from 16
    assert axis.start == winograd.min_channels == 32
    assert axis.values == (16, 32)
    assert SIXTEEN in list(neighbours({}, space))


def test_a_16_channel_convolution_rewritten_by_a_choice(cache):
    """The analytic program leaves the convolution direct (16 < 32 channels);
    the candidate ``min_channels=16`` rewrites it (Winograd kernels appear),
    passes the measurer's check against the interpreter, equals the whole
    pipeline's build, and matches NumPy and onnxruntime."""
    import onnxruntime as ort

    model, x, w, b = _model()
    target, job = _conv_job(model, x)
    measurer = LocalMeasurer(target)
    ((analytic_text, analytic_error), (text, error)) = measurer.check(job, [{}, SIXTEEN])
    assert analytic_error is None and error is None
    assert "winograd" not in analytic_text  # the control: direct without the choice
    assert "winograd" in text and text != analytic_text
    built = measurer._build(job, SIXTEEN)
    assert built.compiled is not None
    out = next(r.into for r in job.parsed.root.refs if r.dir == "out")
    got = built.compiled.run(dict(job.inputs))[out].reshape(1, 32, 14, 14)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(got, _numpy(x, w, b), rtol=1e-3, atol=1e-4)
    whole = build_candidate(job, target, SIXTEEN)  # every pass, no stages
    assert whole.error is None and whole.text == text
