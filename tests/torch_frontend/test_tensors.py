"""Tensors reach the kernels without copies (``src/stripeml/torch/tensors.py``).

A spy on the CPU runtime's kernel runner records the buffer pointers the
kernels are handed; a CPU, C-contiguous float32 input (and, in training, a
parameter) must be among them as the tensor's own ``data_ptr()``, and a result
must come back as a tensor over the memory a kernel wrote.  A copy anywhere on
the way in or out fails these tests.  Other inputs (non-contiguous, bfloat16)
are converted exactly once: the kernels read the converted array itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
st = pytest.importorskip("stripeml.torch")


@pytest.fixture
def kernel_pointers(monkeypatch: pytest.MonkeyPatch) -> list[set[int]]:
    """Per program run, the addresses of the buffers its kernels were given."""
    from stripeml.runtime.cpu_run import CpuCompiled

    runs: list[set[int]] = []
    original = CpuCompiled._run_steps

    def spy(self: Any, pointers: Any, storages: Any, constant: bool = False) -> None:
        if not constant:
            runs.append({p for p in pointers if p})
        original(self, pointers, storages, constant)

    monkeypatch.setattr(CpuCompiled, "_run_steps", spy)
    return runs


@pytest.fixture
def conversions(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, np.ndarray]]:
    """Every (tensor, array) the backend turned an input into (a parameter's
    array kept from an earlier call, ``HeldArrays``, is not turned again)."""
    from stripeml.torch import tensors

    seen: list[tuple[Any, np.ndarray]] = []
    original = tensors.host_array

    def spy(t: Any, layout: Any = None) -> np.ndarray:
        arr = original(t, layout)
        seen.append((t, arr))
        return arr

    monkeypatch.setattr(tensors, "host_array", spy)
    return seen


def _compiled(fn: Any) -> Any:
    torch._dynamo.reset()
    return torch.compile(fn, backend="stripeml")


def test_contiguous_input_reaches_the_kernels_without_a_copy(
    kernel_pointers: list[set[int]], conversions: list[tuple[Any, np.ndarray]]
) -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    c = _compiled(m)
    before = st.stats()
    for _ in range(2):  # the first call compiles, the second reuses the program
        x = torch.randn(3, 8)
        assert x.is_contiguous() and x.dtype == torch.float32
        kernel_pointers.clear()
        with torch.no_grad():
            y = c(x)
        torch.testing.assert_close(y, m(x), rtol=1e-4, atol=1e-5)
        assert kernel_pointers, "no stripeml kernel ran"
        # the first call views the tensor; later ones hand its address over as is
        arrays = [a for t, a in conversions if t is x]
        assert len(arrays) <= 1 and all(a.ctypes.data == x.data_ptr() for a in arrays)
        assert any(x.data_ptr() in run for run in kernel_pointers), "the input was copied"
        assert any(y.data_ptr() in run for run in kernel_pointers), "the result was copied"
    assert st.stats()["inference_compiles"] - before.get("inference_compiles", 0) == 1


def test_training_inputs_and_parameters_reach_the_kernels_without_a_copy(
    kernel_pointers: list[set[int]],
) -> None:
    """In training, parameters are runtime inputs: the kernels read them in
    place (an optimizer's update is seen without any copy or re-binding)."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    c = _compiled(m)
    x = torch.randn(5, 8)
    before = st.stats()
    c(x).sum().backward()
    after = st.stats()
    assert after["forward_compiles"] > before.get("forward_compiles", 0)
    assert after["backward_compiles"] > before.get("backward_compiles", 0)
    assert len(kernel_pointers) >= 2  # forward and backward programs ran
    forward = kernel_pointers[0]
    assert x.data_ptr() in forward
    for name, p in m.named_parameters():
        assert p.data_ptr() in forward, f"{name} was copied on its way to the kernels"
    # later steps (by address, ``direct.py``): the same, and the gradients
    # PyTorch accumulates are the memory the backward program wrote
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(2):
        kernel_pointers.clear()
        x = torch.randn(5, 8)
        opt.zero_grad(set_to_none=True)
        y = c(x)
        y.sum().backward()
        opt.step()
        forward, backward = kernel_pointers
        assert x.data_ptr() in forward and y.data_ptr() in forward
        for name, p in m.named_parameters():
            assert p.data_ptr() in forward, f"{name} was copied on its way to the kernels"
            assert p.grad is not None and p.grad.data_ptr() in backward, name


def test_non_contiguous_input_is_converted_once(
    kernel_pointers: list[set[int]], conversions: list[tuple[Any, np.ndarray]]
) -> None:
    """A strided view whose memory is no permutation of a dense array (every other
    column) is copied exactly once, by the backend, into a C-contiguous array
    that the kernels then read as it is."""
    base = torch.randn(6, 8)
    x = base[:, ::2]
    c = _compiled(lambda t: torch.tanh(t) * 2.0 + 1.0)
    with torch.no_grad():
        y = c(x)
    torch.testing.assert_close(y, torch.tanh(x) * 2.0 + 1.0, rtol=1e-5, atol=1e-6)
    given = [(t, a) for t, a in conversions if t.data_ptr() == base.data_ptr()]
    assert len(given) == 1, given
    t, arr = given[0]
    assert not t.is_contiguous()  # (what the backend was handed: still the view)
    assert arr.flags.c_contiguous and arr.ctypes.data != base.data_ptr()
    np.testing.assert_array_equal(arr, x.numpy())
    assert any(arr.ctypes.data in run for run in kernel_pointers), "converted more than once"
    assert not any(base.data_ptr() in run for run in kernel_pointers)


def test_transposed_input_is_read_in_place(
    kernel_pointers: list[set[int]], conversions: list[tuple[Any, np.ndarray]]
) -> None:
    """A transposed (permuted) view of a contiguous tensor is not copied: the
    program is built for the input stored in that order and its kernels read the
    tensor's own memory."""
    base = torch.randn(6, 4)
    x = base.t()
    c = _compiled(lambda t: torch.tanh(t) * 2.0 + 1.0)
    with torch.no_grad():
        y = c(x)
    torch.testing.assert_close(y, torch.tanh(x) * 2.0 + 1.0, rtol=1e-5, atol=1e-6)
    given = [(t, a) for t, a in conversions if t.data_ptr() == base.data_ptr()]
    assert len(given) == 1, given
    assert given[0][1].ctypes.data == base.data_ptr()
    assert any(base.data_ptr() in run for run in kernel_pointers), "the kernels read a copy"


def test_bfloat16_input_is_widened_once(
    kernel_pointers: list[set[int]], conversions: list[tuple[Any, np.ndarray]]
) -> None:
    """bfloat16 is held in float32 inside a program: one conversion, read as is."""
    x = torch.randn(4, 8).to(torch.bfloat16)
    c = _compiled(lambda t: torch.relu(t) + 1.0)
    with torch.no_grad():
        y = c(x)
    assert y.dtype == torch.bfloat16 and torch.equal(y, torch.relu(x) + 1.0)
    ((t, arr),) = [(t, a) for t, a in conversions if t.data_ptr() == x.data_ptr()]
    assert arr.dtype == np.float32 and arr.flags.c_contiguous
    np.testing.assert_array_equal(arr, x.float().numpy())
    assert any(arr.ctypes.data in run for run in kernel_pointers), "converted more than once"


def test_rebinding_parameters_keeps_no_old_direct_call() -> None:
    """An inference program is rebuilt when a parameter changes in place; the old
    one's call by address (``direct.py``, which holds the compiled program) is
    dropped with it, not kept for every version (the results are eager's)."""
    import gc

    from stripeml.runtime.cpu_direct import DirectCall

    def live() -> int:
        gc.collect()
        return sum(isinstance(o, DirectCall) for o in gc.get_objects())

    torch.manual_seed(0)
    m = nn.Linear(8, 4).eval()
    c = _compiled(m)
    x = torch.randn(2, 8)
    before = live()
    with torch.no_grad():
        for _ in range(6):
            m.weight.mul_(0.5)  # a new version: the next call binds again
            for _ in range(2):  # (the second call of a program goes by address)
                torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-6)
    assert live() - before <= 1


def test_results_kept_by_the_caller_are_never_written_again() -> None:
    """Results come in memory the backend reuses once nothing holds it any more
    (``DirectPlan._array``): results the caller keeps keep their values while
    later calls run, and a released result's memory serves a later call."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.Tanh()).eval()
    c = _compiled(m)
    xs = [torch.randn(3, 8) for _ in range(8)]
    with torch.no_grad():
        kept = [(x, c(x)) for x in xs]  # (more than the backend keeps for reuse)
        for x, y in kept:
            torch.testing.assert_close(y, m(x), rtol=1e-5, atol=1e-6)
        views = [y[1:] for _, y in kept[:3]]  # a view holds its result too
        del kept, x, y
        for x in reversed(xs):  # (other inputs: other values)
            c(x)
        for v, x in zip(views, xs[:3]):
            torch.testing.assert_close(v, m(x)[1:], rtol=1e-5, atol=1e-6)
        y = c(xs[0])
        address = y.data_ptr()
        del y
        assert c(xs[1]).data_ptr() == address  # released: its memory is used again
