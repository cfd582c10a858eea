"""Element types (float16, bfloat16, int64 indices, bool), ``dynamic=True`` and
``stripeml.torch.last_programs()``, each against eager PyTorch."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
st = pytest.importorskip("stripeml.torch")


def _compiles(fn: Any, *inputs: Any, dynamic: bool | None = None) -> tuple[Any, Any]:
    """(stripeml's result, eager's), after checking that a program was built and
    nothing ran eagerly."""
    torch._dynamo.reset()
    before = st.stats()
    with torch.no_grad():
        got = torch.compile(fn, backend="stripeml", dynamic=dynamic)(*inputs)
        want = fn(*inputs)
    after = st.stats()
    assert after.get("compiles", 0) > before.get("compiles", 0), "nothing compiled"
    assert after.get("fallbacks", 0) == before.get("fallbacks", 0), "a graph ran eagerly"
    return got, want


# float16: PyTorch CPU rounds each operator's result to half precision; so does
# stripeml, but not always after the same steps (a fused sum): a few ulps apart.
TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 3e-2}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_inference(dtype: Any) -> None:
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * 4 * 4, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4),
        nn.Softmax(-1),
    ).to(dtype).eval()  # fmt: skip
    x = torch.randn(2, 3, 8, 8, dtype=dtype)
    got, want = _compiles(m, x)
    assert got.dtype == dtype
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_bfloat16_elementwise_is_exact() -> None:
    """Elementwise bfloat16 work computes in float32 and rounds once per operator,
    as PyTorch CPU does: the same bits."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, generator=g).to(torch.bfloat16)
    c = torch.randn(64, generator=g).to(torch.bfloat16)
    got, want = _compiles(lambda x, y: torch.tanh(x * y + 1.5) - y, a, c)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, want)


def test_int64_indices_and_bool_masks() -> None:
    emb = nn.Embedding(20, 4).eval()

    def f(idx: Any, mask: Any) -> Any:
        picked = emb(idx * 2 + 1)
        return torch.where(mask.unsqueeze(-1), picked, -picked), (idx % 3 == 0) | mask

    idx = torch.tensor([[0, 3, 9], [4, 1, 2]], dtype=torch.int64)
    mask = torch.tensor([[True, False, True], [False, False, True]])
    (y, flags), (want_y, want_flags) = _compiles(f, idx, mask)
    torch.testing.assert_close(y, want_y, rtol=1e-6, atol=0.0)
    assert flags.dtype == torch.bool and torch.equal(flags, want_flags)


def test_dynamic_shapes_specialise_per_shape() -> None:
    """``dynamic=True``: one dynamo graph; stripeml builds one program per
    concrete shape seen and reuses it when the shape comes back."""
    torch.manual_seed(0)
    torch._dynamo.reset()
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    c = torch.compile(m, backend="stripeml", dynamic=True)
    before = st.stats()
    for n in (2, 3, 5, 3, 2):
        x = torch.randn(n, 8)
        with torch.no_grad():
            torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
    mid = st.stats()
    assert mid["graphs"] - before.get("graphs", 0) == 1  # dynamo traced once
    assert mid["inference_compiles"] - before.get("inference_compiles", 0) == 3
    # training with dynamic shapes: forward and backward per shape, sizes that
    # the forward hands the backward are this call's
    for n in (2, 3, 2, 3):
        x = torch.randn(n, 8)
        m.zero_grad()
        c(x).square().sum().backward()
        got = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        m(x).square().sum().backward()
        for g, p in zip(got, m.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)
    after = st.stats()
    assert after["forward_compiles"] - mid.get("forward_compiles", 0) == 2
    assert after["backward_compiles"] - mid.get("backward_compiles", 0) == 2


def test_last_programs_show_tile_and_stripe() -> None:
    torch._dynamo.reset()
    m = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    x = torch.randn(2, 4)
    torch.compile(m, backend="stripeml")(x).sum().backward()
    fwd, bwd = st.last_programs(2)
    assert (fwd.kind, bwd.kind) == ("forward", "backward")
    assert fwd.source.startswith("function (") and "Relu" in fwd.source
    assert "block" in fwd.stripe and "#program" in fwd.stripe
    assert bwd.optimised and bwd.optimised != bwd.stripe
    assert "backward graph" in str(bwd)
    assert st.last_programs(0) == [] and len(st.last_programs()) >= 2
