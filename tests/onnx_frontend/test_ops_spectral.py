"""DFT and STFT (ops/spectral.py) against NumPy's FFT in float64."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import stripeml  # noqa: E402
import stripeml.onnx  # noqa: E402

RNG = np.random.default_rng(11)


def _dft_model(shape, axis, inverse=0, onesided=0, length=None):
    inits = [nh.from_array(np.array(axis, np.int64), "axis")]
    names = ["X", "", "axis"]
    if length is not None:
        inits.append(nh.from_array(np.array(length, np.int64), "len"))
        names[1] = "len"
    node = h.make_node("DFT", names, ["Y"], inverse=inverse, onesided=onesided)
    g = h.make_graph(
        [node],
        "dft",
        [h.make_tensor_value_info("X", T.FLOAT, shape)],
        [h.make_tensor_value_info("Y", T.FLOAT, None)],
        inits,
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 20)])


def _complex(a):
    return a[..., 0] + 1j * a[..., 1] if a.shape[-1] == 2 else a[..., 0]


def _parts(z):
    return np.stack([z.real, z.imag], -1)


@pytest.mark.parametrize("length", [None, 6, 12])
@pytest.mark.parametrize("comps", [1, 2])
def test_forward_dft_any_length(length, comps):
    x = RNG.standard_normal((2, 9, 3, comps)).astype(np.float32)
    y = stripeml.onnx.compile(_dft_model(x.shape, 1, length=length), target="cpu")(X=x)
    want = np.fft.fft(_complex(x.astype(np.float64)), n=length or 9, axis=1)
    np.testing.assert_allclose(y, _parts(want), rtol=1e-5, atol=1e-5)


def test_onesided_forward_and_its_inverse():
    x = RNG.standard_normal((3, 10, 1)).astype(np.float32)
    spec = stripeml.onnx.compile(_dft_model(x.shape, 1, onesided=1), target="cpu")(X=x)
    want = np.fft.rfft(x[..., 0].astype(np.float64), axis=1)
    np.testing.assert_allclose(spec, _parts(want), rtol=1e-5, atol=1e-5)
    back = stripeml.onnx.compile(_dft_model(spec.shape, 1, inverse=1, onesided=1), target="cpu")
    y = back(X=spec)
    assert y.shape == (3, 10, 1)
    np.testing.assert_allclose(y[..., 0], x[..., 0], rtol=1e-5, atol=1e-5)


def test_inverse_of_a_complex_spectrum():
    x = RNG.standard_normal((7, 4, 2)).astype(np.float32)
    y = stripeml.onnx.compile(_dft_model(x.shape, 0, inverse=1), target="cpu")(X=x)
    np.testing.assert_allclose(
        y, _parts(np.fft.ifft(_complex(x.astype(np.float64)), axis=0)), rtol=1e-5, atol=1e-6
    )


def test_stft_with_a_window_computed_at_run_time():
    sig = RNG.standard_normal((2, 64, 1)).astype(np.float32)
    win = np.hanning(16).astype(np.float32)
    node = h.make_node("STFT", ["X", "step", "W"], ["Y"], onesided=1)
    g = h.make_graph(
        [node],
        "stft",
        [
            h.make_tensor_value_info("X", T.FLOAT, sig.shape),
            h.make_tensor_value_info("W", T.FLOAT, win.shape),
        ],
        [h.make_tensor_value_info("Y", T.FLOAT, None)],
        [nh.from_array(np.array(8, np.int64), "step")],
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    y = stripeml.onnx.compile(model, target="cpu")(X=sig, W=win)
    frames = 1 + (64 - 16) // 8
    want = np.stack(
        [np.fft.rfft(sig[:, f * 8 : f * 8 + 16, 0] * win, axis=1) for f in range(frames)], 1
    )
    assert y.shape == (2, frames, 9, 2)
    np.testing.assert_allclose(y, _parts(want), rtol=1e-5, atol=1e-5)


def test_the_last_axis_cannot_be_transformed():
    with pytest.raises(stripeml.StripeError, match="cannot be the last"):
        stripeml.onnx.compile(_dft_model((4, 2), -1), target="cpu")(X=np.ones((4, 2), np.float32))
