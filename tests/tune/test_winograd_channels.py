"""``winograd``'s ``min_channels`` and ``tile`` as tunable options: a tune may
leave a 3 x 3 convolution of 16-31 channels direct (``min_channels`` 32, above
the ``cpu`` target's 16), or run it as F(2 x 2, 3 x 3) (``tile`` 2, the target
says 4), each one candidate of that convolution's job, checked against NumPy
and onnxruntime."""

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

THIRTY_TWO = {"winograd": {"min_channels": 32}}
F2 = {"winograd": {"tile": 2}}


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
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(12).standard_normal((1, 16, 16, 16)).astype(np.float32)
    return model, x, w, b


def _numpy(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 32, 16, 16), np.float64)
    for ky in range(3):
        for kx in range(3):
            out += np.einsum("nchw,oc->nohw", p[:, :, ky : ky + 16, kx : kx + 16], w[:, :, ky, kx])
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


def test_min_channels_and_tile_are_axes_with_the_analytic_values():
    model, x, _, _ = _model()
    target, job = _conv_job(model, x)
    space = axes(target, job.point)
    (channels,) = [a for a in space if (a.pass_name, a.option) == ("winograd", "min_channels")]
    (tile,) = [a for a in space if (a.pass_name, a.option) == ("winograd", "tile")]
    winograd = next(p for p in target.passes if p.name == "winograd")
    assert isinstance(winograd, Winograd)
    # the target file's value is the start, one of the values, and one step from the other
    assert channels.start == winograd.min_channels == 16
    assert channels.values == (16, 32)
    assert tile.start == winograd.tile == 4
    assert tile.values == (2, 4)
    steps = list(neighbours({}, space))
    assert THIRTY_TWO in steps and F2 in steps


def test_a_choice_leaves_a_16_channel_convolution_direct_or_runs_f2(cache):
    """The analytic program rewrites the 16-channel convolution as F(4 x 4, 3 x 3);
    the candidate ``min_channels=32`` leaves it direct and ``tile=2`` runs it as
    F(2 x 2, 3 x 3).  Each passes the measurer's check against the interpreter,
    equals the whole pipeline's build, and matches NumPy and onnxruntime."""
    import onnxruntime as ort

    model, x, w, b = _model()
    target, job = _conv_job(model, x)
    measurer = LocalMeasurer(target)
    checked = measurer.check(job, [{}, THIRTY_TWO, F2])
    ((analytic_text, analytic_error), (direct_text, direct_error), (f2_text, f2_error)) = checked
    assert analytic_error is None and direct_error is None and f2_error is None
    assert "winograd" in analytic_text  # rewritten with the file's options
    assert "winograd" not in direct_text  # the choice leaves it direct
    assert "winograd" in f2_text and f2_text != analytic_text
    # the input blocks: 6 x 6 values for F(4 x 4), 4 x 4 for F(2 x 2)
    assert "6, 6" in analytic_text and "6, 6" not in f2_text and "4, 4" in f2_text
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    out = next(r.into for r in job.parsed.root.refs if r.dir == "out")
    for choice, text in ((THIRTY_TWO, direct_text), (F2, f2_text)):
        built = measurer._build(job, choice)
        assert built.compiled is not None
        got = built.compiled.run(dict(job.inputs))[out].reshape(1, 32, 16, 16)
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(got, _numpy(x, w, b), rtol=1e-3, atol=1e-4)
        whole = build_candidate(job, target, choice)  # every pass, no stages
        assert whole.error is None and whole.text == text
