"""The native transposed copy of constants (``stripeml.runtime.native_layout``),
checked against NumPy's own transposes."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from stripeml import api
from stripeml.runtime import native_layout

SHAPES = [
    (64, 64, 9),  # a 3x3 convolution's weights, one block of 16 along each axis
    (37, 19, 5),  # nothing a multiple of the block
    (1000, 513, 1),  # one tap: taken as (A, 1, B)
    (17, 1, 49),  # a depthwise 7x7
    (300, 70, 3),
]


def _rng() -> np.random.Generator:
    return np.random.default_rng(7)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.float16, np.int8, np.int16, np.int64, np.uint32, bool]
)
def test_reversed_axes_is_numpys_transpose(shape, dtype):
    src = (_rng().standard_normal(shape) * 50).astype(dtype)
    out = native_layout.reversed_axes(src)
    assert out.shape == shape[::-1] and out.flags.c_contiguous and out.flags.owndata
    assert np.array_equal(out, src.transpose(2, 1, 0))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_scaled_is_numpys_product_bit_for_bit(shape, dtype):
    rng = _rng()
    src = rng.standard_normal(shape).astype(dtype)
    scale = rng.standard_normal(shape[0]).astype(dtype)
    got = native_layout.reversed_axes(src, scale)
    want = np.ascontiguousarray((src * scale[:, None, None]).transpose(2, 1, 0))
    assert got.tobytes() == want.tobytes()


def test_no_scale_moves_bits_nans_and_negative_zeros_included():
    bits = _rng().integers(0, 2**32, size=(48, 40, 3), dtype=np.uint64).astype(np.uint32)
    src = bits.view(np.float32)  # every bit pattern, signalling NaNs among them
    out = native_layout.reversed_axes(src)
    assert out.view(np.uint32).tobytes() == np.ascontiguousarray(bits.transpose(2, 1, 0)).tobytes()


def test_two_threads_split_large_arrays(monkeypatch):
    monkeypatch.setattr(native_layout, "SPLIT", 1)
    src = _rng().standard_normal((333, 70, 9)).astype(np.float32)
    scale = _rng().standard_normal(333).astype(np.float32)
    got = native_layout.reversed_axes(src, scale)
    assert np.array_equal(got, (src * scale[:, None, None]).transpose(2, 1, 0))


def test_non_contiguous_input_is_read_as_its_values():
    base = _rng().standard_normal((80, 60, 6)).astype(np.float32)
    src = base[::2, :, 1:5]
    assert np.array_equal(native_layout.reversed_axes(src), src.transpose(2, 1, 0))


def test_api_entry_point_is_the_same_operation():
    src = _rng().standard_normal((64, 32, 9)).astype(np.float32)
    assert np.array_equal(api.reversed_axes(src), src.transpose(2, 1, 0))


@pytest.mark.parametrize(
    "src, scale",
    [
        (np.zeros((4, 4)), None),
        (np.zeros((64, 64, 2), np.float32), np.ones(3, np.float32)),
        (np.zeros((64, 64, 2), np.float32), np.ones(64, np.float64)),
    ],
)
def test_wrong_arguments_are_said(src, scale):
    with pytest.raises(ValueError, match="reversed_axes"):
        native_layout.reversed_axes(src, scale)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_starts_its_own_helper_thread(monkeypatch):
    monkeypatch.setattr(native_layout, "SPLIT", 1)
    src = _rng().standard_normal((128, 64, 3)).astype(np.float32)
    native_layout.reversed_axes(src)  # the parent's helper thread exists now
    pid = os.fork()
    if pid == 0:  # the child: would wait forever on the parent's (absent) thread
        signal.alarm(30)  # so a hang fails the test instead of the suite
        ok = np.array_equal(native_layout.reversed_axes(src), src.transpose(2, 1, 0))
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
