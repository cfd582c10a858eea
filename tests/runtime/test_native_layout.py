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


@pytest.fixture(autouse=True)
def _native_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """The native helpers themselves: each compiled before its first copy, not
    NumPy's copy while they compile (that mode has tests of its own, below)."""
    monkeypatch.setattr(native_layout, "BACKGROUND", False)


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


def _forget_helpers(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    """An empty kernel cache and no helper loaded: a cold process's first copy."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    native_layout._settle_compiles()
    monkeypatch.setattr(native_layout, "_ENTRIES", {})
    monkeypatch.setattr(native_layout, "BACKGROUND", True)
    monkeypatch.setattr(native_layout, "_numpy_bytes", 0)


def test_a_cold_first_copy_does_not_wait_for_the_compile(monkeypatch, tmp_path):
    """With the helper not in the cache, the first copy is NumPy's (the same
    bytes) and the helper, and the other one a float32 model's import asks for,
    compile on a thread; once they are in, copies are native (and a later
    process loads them from the cache)."""
    _forget_helpers(monkeypatch, tmp_path)
    compiled = []
    real = native_layout._compile

    def slow(kind, *args):  # noqa: ANN001, ANN202
        compiled.append(kind)
        return real(kind, *args)

    monkeypatch.setattr(native_layout, "_compile", slow)
    numpy_copies = []
    real_numpy = native_layout._numpy
    monkeypatch.setattr(
        native_layout, "_numpy", lambda *a: numpy_copies.append(1) or real_numpy(*a)
    )
    src = _rng().standard_normal((64, 64, 9)).astype(np.float32)
    scale = _rng().standard_normal(64).astype(np.float32)
    want = np.ascontiguousarray((src * scale[:, None, None]).transpose(2, 1, 0))
    assert native_layout.reversed_axes(src, scale).tobytes() == want.tobytes()
    native_layout._settle_compiles()
    assert numpy_copies == [1]
    assert sorted(compiled) == [("float", True), ("i32", False)]
    assert native_layout.reversed_axes(src, scale).tobytes() == want.tobytes()
    assert native_layout.reversed_axes(src).tobytes() == src.transpose(2, 1, 0).tobytes()
    assert numpy_copies == [1]  # both native now
    monkeypatch.setattr(native_layout, "_ENTRIES", {})
    native_layout.reversed_axes(src)
    assert len(compiled) == 2 and numpy_copies == [1]  # loaded from the cache


def test_a_failed_background_compile_is_raised_where_waited_for(monkeypatch, tmp_path):
    _forget_helpers(monkeypatch, tmp_path)

    def broken(*_, **__):  # noqa: ANN002, ANN003, ANN202
        raise RuntimeError("LLVM said no")

    monkeypatch.setattr(native_layout.jit, "compile_ir", broken)
    src = _rng().standard_normal((64, 64, 9)).astype(np.float32)
    assert np.array_equal(native_layout.reversed_axes(src), src.transpose(2, 1, 0))
    with pytest.raises(RuntimeError, match="LLVM said no"):
        native_layout._entry("i32", False)


def test_cold_copies_past_numpys_share_wait_for_the_native_helper(monkeypatch, tmp_path):
    """NumPy's copies would take longer than the compile: past its share they wait."""
    _forget_helpers(monkeypatch, tmp_path)
    monkeypatch.setattr(native_layout, "NUMPY_BYTES", 64 * 64 * 9 * 4 - 1)
    numpy_copies = []
    real_numpy = native_layout._numpy
    monkeypatch.setattr(
        native_layout, "_numpy", lambda *a: numpy_copies.append(1) or real_numpy(*a)
    )
    src = _rng().standard_normal((64, 64, 9)).astype(np.float32)
    assert native_layout.reversed_axes(src).tobytes() == src.transpose(2, 1, 0).tobytes()
    assert numpy_copies == [] and ("i32", False) in native_layout._ENTRIES
    small = src[:32]
    assert np.array_equal(native_layout.reversed_axes(small), small.transpose(2, 1, 0))
