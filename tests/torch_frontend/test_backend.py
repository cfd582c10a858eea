"""torch.compile(model, backend="stripeml"): forward parity with eager, fallback, explain."""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
st = pytest.importorskip("stripeml.torch")


def _parity(model: object, *inputs: object, rtol: float = 1e-4, atol: float = 1e-5) -> object:
    torch._dynamo.reset()
    model.eval()  # type: ignore[attr-defined]
    compiled = torch.compile(model, backend="stripeml")
    before = st.stats().get("compiles", 0)
    with torch.no_grad():
        want = model(*inputs)  # type: ignore[operator]
        got = compiled(*inputs)
    assert st.stats().get("compiles", 0) > before, "nothing compiled through stripeml"
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    return compiled


def test_mlp() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(), nn.LayerNorm(32),
        nn.Linear(32, 10), nn.LogSoftmax(-1),
    )  # fmt: skip
    _parity(m, torch.randn(4, 16))


def test_small_cnn_with_batchnorm_and_pooling() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
        nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16),
        nn.ReLU(), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5),
    )  # fmt: skip
    for mod in m.modules():  # non-trivial running statistics
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 1.5)
    _parity(m, torch.randn(2, 3, 16, 16))


def test_depthwise_separable_cnn() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU6(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16), nn.Hardswish(),
        nn.Conv2d(16, 24, 1), nn.Sigmoid(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    )  # fmt: skip
    _parity(m, torch.randn(2, 3, 12, 12))


def test_transformer_encoder_layer() -> None:
    torch.manual_seed(0)
    m = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    # the eval fast path is one fused ATen op (_transformer_encoder_layer_fwd)
    # with no decomposition; without it the layer is matmuls, softmax, layer norms
    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        _parity(m, torch.randn(2, 7, 32))
    finally:
        torch.backends.mha.set_fastpath_enabled(was)


def test_second_call_compiles_nothing_and_weights_rebind() -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    m = nn.Sequential(nn.Linear(8, 8), nn.Tanh()).eval()
    c = torch.compile(m, backend="stripeml")
    x = torch.randn(3, 8)
    with torch.no_grad():
        c(x)
        n = st.stats()["compiles"]
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-6)
        assert st.stats()["compiles"] == n
        m[0].weight.mul_(2.0)  # in place, as an optimizer step does
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-6)
        assert st.stats()["compiles"] == n + 1


class _Cumsum(nn.Module):
    def forward(self, x: object) -> object:
        return torch.cumsum(torch.relu(x), 0) + 1  # cumsum has no translation


def test_unsupported_op_falls_back_to_eager(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    torch._dynamo.reset()
    monkeypatch.setenv("STRIPEML_TORCH_VERBOSE", "1")
    m = _Cumsum()
    x = torch.randn(5, 3)
    before = st.stats().get("fallbacks", 0)
    with caplog.at_level(logging.WARNING, logger="stripeml.torch"), torch.no_grad():
        got = torch.compile(m, backend="stripeml")(x)
    torch.testing.assert_close(got, m(x))
    assert st.stats().get("fallbacks", 0) > before
    assert "cumsum" in caplog.text


def test_gradients_compile_forward_and_backward() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = nn.Linear(4, 2)
    x = torch.randn(3, 4)
    before = st.stats()
    y = torch.compile(m, backend="stripeml")(x)
    y.sum().backward()
    assert m.weight.grad is not None
    torch.testing.assert_close(m.weight.grad, torch.ones(2, 1) * x.sum(0), rtol=1e-5, atol=1e-6)
    after = st.stats()
    assert after["forward_compiles"] > before.get("forward_compiles", 0)
    assert after["backward_compiles"] > before.get("backward_compiles", 0)


def test_explain() -> None:
    torch._dynamo.reset()
    ok = st.explain(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4))
    assert ok.compiles and "compiles" in str(ok)
    torch._dynamo.reset()
    bad = st.explain(_Cumsum(), torch.randn(5, 3))
    assert not bad.compiles
    assert any("cumsum" in op for op in bad.unsupported), bad.unsupported


def test_backend_is_registered() -> None:
    assert "stripeml" in torch._dynamo.list_backends()
    assert st.backend is torch._dynamo.lookup_backend("stripeml")
