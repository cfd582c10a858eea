"""ReverseSequence, Det and MelWeightMatrix (ops/misc.py) against onnx's reference
evaluator and NumPy, on random inputs."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml import StripeError  # noqa: E402
from stripeml.errors import ExecutionError  # noqa: E402
from stripeml.onnx import OnnxError  # noqa: E402

RNG = np.random.default_rng(7)
ELEM = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float64): T.DOUBLE,
        np.dtype(np.float16): T.FLOAT16, np.dtype(np.int64): T.INT64,
        np.dtype(np.int32): T.INT32}  # fmt: skip


def _model(node, inputs, inits=(), opset=22):
    ins = [
        h.make_tensor_value_info(name, ELEM[np.dtype(a.dtype)], list(a.shape)) for name, a in inputs
    ]
    g = h.make_graph([node], "g", ins, [h.make_tensor_value_info("y", 0, None)], list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def _check(model, feeds, target="interp", exact=True, **tol):
    got = stripeml.onnx.compile(model, target=target)(**feeds)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, **tol)
    return got


# -- ReverseSequence -----------------------------------------------------------


@pytest.mark.parametrize(
    "batch_axis, time_axis, shape",
    [(1, 0, (6, 4, 3)), (0, 1, (4, 6)), (0, 2, (3, 2, 5)), (2, 1, (2, 5, 3)), (-1, 0, (4, 2, 3))],
)
def test_reverse_sequence_with_run_time_lengths(batch_axis, time_axis, shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    nb, nt = shape[batch_axis], shape[time_axis]
    # 0 (untouched), the whole axis, beyond it (clamped), and negative (as
    # Python's slices read them in the reference)
    lens = RNG.integers(-nt - 1, nt + 3, size=nb).astype(np.int64)
    lens[0] = 0
    node = h.make_node(
        "ReverseSequence", ["x", "l"], ["y"], batch_axis=batch_axis, time_axis=time_axis
    )
    _check(_model(node, [("x", x), ("l", lens)]), {"x": x, "l": lens})


def test_reverse_sequence_on_the_cpu_with_int32_data():
    x = RNG.integers(-100, 100, size=(7, 5, 2)).astype(np.int32)
    lens = np.array([1, 7, 3, 0, 5], np.int64)
    node = h.make_node("ReverseSequence", ["x", "l"], ["y"])
    _check(_model(node, [("x", x), ("l", lens)]), {"x": x, "l": lens}, target="cpu")


def test_reverse_sequence_with_constant_lengths():
    x = RNG.standard_normal((3, 6)).astype(np.float64)
    lens = np.array([6, 2, 4], np.int64)
    node = h.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=0, time_axis=1)
    model = _model(node, [("x", x)], [nh.from_array(lens, "l")])
    f = stripeml.onnx.compile(model, target="interp")
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(f(x=x), want)
    assert "min(" not in f.source(x=x)  # the positions are computed when compiling


@pytest.mark.parametrize(
    "attrs, lens, message",
    [
        ({"batch_axis": 0, "time_axis": 0}, np.zeros(4, np.int64), "must differ"),
        ({}, np.zeros(3, np.int64), r"sequence_lens must have shape \[4\]"),
        ({"batch_axis": 3}, np.zeros(4, np.int64), "batch_axis 3 is out of range"),
    ],
)
def test_reverse_sequence_errors(attrs, lens, message):
    x = np.zeros((4, 4), np.float32)
    node = h.make_node("ReverseSequence", ["x", "l"], ["y"], name="rs", **attrs)
    model = _model(node, [("x", x), ("l", lens)])
    with pytest.raises(OnnxError, match=rf"node 'rs' \(ReverseSequence\): .*{message}"):
        stripeml.onnx.compile(model, target="interp")(x=x, l=lens)


# -- Det -----------------------------------------------------------------------


def _det_model(shape, dtype):
    x = np.zeros(shape, dtype)
    return _model(h.make_node("Det", ["x"], ["y"]), [("x", x)])


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_det_of_random_batches_matches_numpy(size, dtype):
    x = RNG.standard_normal((2, 3, size, size)).astype(dtype)
    got = stripeml.onnx.compile(_det_model(x.shape, dtype), target="interp")(x)
    want = np.linalg.det(x)
    assert got.dtype == dtype and got.shape == (2, 3)
    rtol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0)


def test_det_pivots_singular_and_special_matrices_on_the_cpu():
    mats = np.array(
        [
            [[0, 1, 0], [0, 0, 1], [1, 0, 0]],  # a permutation: every column pivots
            [[0, 0, 2], [0, 3, 0], [4, 0, 0]],
            [[1, 2, 3], [2, 4, 6], [1, 0, 1]],  # singular (dependent rows)
            [[0, 0, 0], [1, 2, 3], [4, 5, 6]],  # a zero row
            [[1, 2, 3], [0, 0, 0], [0, 0, 0]],  # zero pivot columns
            [[1e-300, 1, 0], [1, 0, 0], [0, 0, 1]],
            [[2, -1, 0], [-1, 2, -1], [0, -1, 2]],
        ],
        np.float64,
    )
    f = stripeml.onnx.compile(_det_model(mats.shape, np.float64), target="cpu")
    got = f(mats)
    np.testing.assert_allclose(got, np.linalg.det(mats), rtol=1e-14, atol=1e-14)
    assert got[2] == 0 and got[3] == 0 and got[4] == 0
    with_nan = mats.copy()
    with_nan[0, 1, 1] = np.nan
    assert np.isnan(f(with_nan)[0]) and np.array_equal(f(with_nan)[1:], got[1:])


def test_det_of_one_matrix_is_a_scalar_and_float16_is_rounded_once():
    x = RNG.standard_normal((5, 5)).astype(np.float16)
    got = stripeml.onnx.compile(_det_model(x.shape, np.float16), target="interp")(x)
    assert got.shape == () and got.dtype == np.float16
    assert got == np.float16(np.linalg.det(x.astype(np.float64)))


@pytest.mark.parametrize("shape, want", [((0, 3, 3), np.zeros(0)), ((2, 0, 0), np.ones(2))])
def test_det_of_no_matrices_and_of_empty_ones(shape, want):
    x = np.zeros(shape, np.float32)
    got = stripeml.onnx.compile(_det_model(shape, np.float32), target="interp")(x)
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_det_of_a_constant_is_folded():
    x = RNG.standard_normal((2, 4, 4)).astype(np.float32)
    node = h.make_node("Det", ["c"], ["y"])
    model = _model(node, [], [nh.from_array(x, "c")])
    f = stripeml.onnx.compile(model, target="interp")
    np.testing.assert_allclose(f(), np.linalg.det(x), rtol=1e-6)


def test_det_of_node_test_shapes_matches_the_reference():
    x = RNG.standard_normal((4, 3, 3)).astype(np.float32)
    _check(_det_model(x.shape, np.float32), {"x": x}, exact=False, rtol=1e-6)


@pytest.mark.parametrize(
    "shape, dtype, message",
    [
        ((3, 4), np.float32, r"square matrices \[\.\.\., M, M\], got \[3, 4\]"),
        ((3,), np.float32, "square matrices"),
        ((2, 2), np.int64, "must be a float tensor"),
        ((65, 65), np.float32, "larger than Det unrolls"),
    ],
)
def test_det_errors(shape, dtype, message):
    x = np.zeros(shape, dtype)
    model = _model(h.make_node("Det", ["x"], ["y"], name="d"), [("x", x)])
    with pytest.raises(OnnxError, match=rf"node 'd' \(Det\): .*{message}"):
        stripeml.onnx.compile(model, target="interp")(x)


# -- MelWeightMatrix -----------------------------------------------------------


def _mel_model(values, **attrs):
    names = ["bins", "dft", "rate", "low", "high"]
    node = h.make_node("MelWeightMatrix", names, ["y"], name="mel", **attrs)
    return _model(node, list(zip(names, values)), opset=17), dict(zip(names, values))


@pytest.mark.parametrize(
    "bins, dft, rate, low, high, itype, ftype",
    [
        (8, 16, 8192, 0.0, 4096.0, np.int32, np.float32),
        (10, 64, 16000, 20.0, 8000.0, np.int64, np.float32),
        (13, 512, 22050, 125.5, 7600.0, np.int64, np.float64),
        (1, 8, 100, 10.0, 40.0, np.int32, np.float64),
        (0, 8, 100, 10.0, 40.0, np.int32, np.float32),
    ],
)
def test_mel_weight_matrix_is_the_reference_s(bins, dft, rate, low, high, itype, ftype):
    values = [np.array(v, itype) for v in (bins, dft, rate)] + [
        np.array(v, ftype) for v in (low, high)
    ]
    model, feeds = _mel_model(values)
    got = stripeml.onnx.compile(model, target="interp")(**feeds)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    assert got.dtype == want.dtype == np.float32 and got.shape == (dft // 2 + 1, bins)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("elem, dtype", [(T.DOUBLE, np.float64), (T.FLOAT16, np.float16),
                                         (T.INT32, np.int32)])  # fmt: skip
def test_mel_weight_matrix_output_datatype(elem, dtype):
    values = [np.array(v, np.int64) for v in (6, 32, 8000)] + [
        np.array(v, np.float32) for v in (60.0, 3800.0)
    ]
    model, feeds = _mel_model(values, output_datatype=elem)
    got = stripeml.onnx.compile(model, target="interp")(**feeds)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "values, message",
    [
        ((8, 16, 8192, 0.0, 9000.0), "fall outside the 9 frequency bins"),
        ((8, 16, 0, 0.0, 10.0), "sample_rate must be positive"),
        ((8, 0, 8192, 0.0, 10.0), "dft_length must be positive"),
        ((-1, 16, 8192, 0.0, 10.0), "num_mel_bins must not be negative"),
        ((8, 16, 8192, 0.0, np.inf), "upper_edge_hertz must be finite"),
    ],
)
def test_mel_weight_matrix_errors(values, message):
    arrays = [np.array(v, np.int64) for v in values[:3]] + [
        np.array(v, np.float32) for v in values[3:]
    ]
    model, feeds = _mel_model(arrays)
    with pytest.raises(OnnxError, match=rf"node 'mel' \(MelWeightMatrix\): .*{message}"):
        stripeml.onnx.compile(model, target="interp")(**feeds)


def test_errors_are_stripe_errors():
    assert issubclass(OnnxError, StripeError) and issubclass(ExecutionError, StripeError)
