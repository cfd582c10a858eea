"""Training through stripeml: AOTAutograd's forward and backward graphs compiled.

Each model is written here from ``torch.nn`` and trained twice from the same
weights: eagerly and through ``torch.compile(model, backend="stripeml")``.  The
first step checks the forward (rtol 1e-4) and every parameter's gradient; then
20 SGD steps must give eager's losses step by step (1e-4 relative).  The
counters must show that forward and backward graphs were compiled and that no
ATen operator was left to PyTorch, so a silent fallback to eager fails.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional
st = pytest.importorskip("stripeml.torch")


class CausalBlock(nn.Module):
    """A transformer encoder block with causal self-attention."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)

    def forward(self, x: Any) -> Any:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.layer(x, src_mask=mask, is_causal=True)


class Bag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(50, 16, mode="mean")
        self.out = nn.Linear(16, 4)

    def forward(self, idx: Any, offsets: Any) -> Any:
        return self.out(torch.tanh(self.bag(idx, offsets)))


class Lstm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(8, 16, batch_first=True)
        self.out = nn.Linear(16, 3)

    def forward(self, x: Any) -> Any:
        return self.out(self.rnn(x)[0][:, -1])


def _mlp() -> Any:
    return nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(), nn.LayerNorm(32),
        nn.Linear(32, 5),
    )  # fmt: skip


def _cnn() -> Any:
    # (no conv bias before a BatchNorm: its true gradient is 0, only rounding noise)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(16), nn.ReLU(), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(16, 5),
    )  # fmt: skip


def _depthwise() -> Any:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU6(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(16),
        nn.Hardswish(), nn.Conv2d(16, 24, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(24, 5),
    )  # fmt: skip


def _inputs(name: str) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(1)
    if name == "mlp":
        return (torch.randn(8, 16, generator=g),)
    if name in ("cnn", "depthwise"):
        return (torch.randn(4, 3, 16, 16, generator=g),)
    if name == "block":
        return (torch.randn(2, 7, 32, generator=g),)
    if name == "bag":
        return (torch.randint(0, 50, (12,), generator=g), torch.tensor([0, 3, 7, 9]))
    return (torch.randn(2, 5, 8, generator=g),)


MODELS: dict[str, Callable[[], Any]] = {
    "mlp": _mlp, "cnn": _cnn, "depthwise": _depthwise, "block": CausalBlock, "bag": Bag,
    "lstm": Lstm,
}  # fmt: skip


def _delta(before: dict[str, int]) -> Counter[str]:
    after = st.stats()
    return Counter({k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)})


@pytest.mark.parametrize("name", list(MODELS))
def test_training_matches_eager(name: str) -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    eager = MODELS[name]().train()
    mine = copy.deepcopy(eager)
    inputs = _inputs(name)
    # nn.LSTM is traced only with allow_rnn (else dynamo leaves it to PyTorch)
    with torch._dynamo.config.patch(allow_rnn=True):
        compiled = torch.compile(mine, backend="stripeml")
        before = st.stats()
        want, got = eager(*inputs), compiled(*inputs)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        target = torch.randn(want.shape, generator=torch.Generator().manual_seed(2))
        F.mse_loss(want, target).backward()
        F.mse_loss(got, target).backward()
        for (pname, p), q in zip(eager.named_parameters(), mine.parameters()):
            assert q.grad is not None, pname
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=pname)
        d = _delta(before)
        assert d["forward_compiles"] >= 1 and d["backward_compiles"] >= 1, d
        assert d["fallbacks"] == 0 and d["eager_nodes"] == 0, d
        assert d["compiled_ops"] > 0, d
        # 20 SGD steps: the same losses step by step, and no compile after the first
        opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
        opt_m = torch.optim.SGD(mine.parameters(), lr=0.05)
        compiles = st.stats()["compiles"]
        for step in range(20):
            losses = []
            for model, opt in ((eager, opt_e), (compiled, opt_m)):
                opt.zero_grad()
                loss = F.mse_loss(model(*inputs), target)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            assert losses[1] == pytest.approx(losses[0], rel=1e-4, abs=1e-7), (step, losses)
        assert st.stats()["compiles"] == compiles, "a training step recompiled"
    for (bname, b), c in zip(eager.named_buffers(), mine.buffers()):  # BatchNorm's statistics
        torch.testing.assert_close(c, b, rtol=1e-4, atol=1e-5, msg=bname)


class _Sandwich(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 4)

    def forward(self, x: Any) -> Any:
        return self.b(torch.cumsum(torch.relu(self.a(x)), 1))  # cumsum: no translation


def test_unsupported_op_in_training_splits_forward_and_backward() -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    eager = _Sandwich()
    mine = copy.deepcopy(eager)
    x = torch.randn(3, 8)
    before = st.stats()
    got = torch.compile(mine, backend="stripeml")(x)
    want = eager(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    got.square().sum().backward()
    want.square().sum().backward()
    for p, q in zip(eager.parameters(), mine.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6)
    d = _delta(before)
    assert d["forward_compiles"] >= 2 and d["backward_compiles"] >= 1, d
    assert d["eager_nodes"] >= 2, d  # cumsum forward and its backward's cumsum/flip


def test_parameters_are_inputs_of_the_training_graphs() -> None:
    """In training, parameters are runtime inputs: an optimizer step changes
    them in place and the next call sees the new values without compiling."""
    torch.manual_seed(0)
    torch._dynamo.reset()
    m = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    c = torch.compile(m, backend="stripeml")
    x = torch.randn(2, 4)
    c(x).sum().backward()
    n = st.stats()["compiles"]
    with torch.no_grad():
        m[0].weight.mul_(3.0)
    torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-6)
    assert st.stats()["compiles"] == n
    src = st.last_programs(2)
    assert [p.kind for p in src] == ["forward", "backward"], src


# float16: PyTorch CPU computes each operator in float32 and rounds its result;
# the programs round at the same operators but a fused reduction sums in another
# order: gradients a few units of the last place apart, relative to the largest.
HALF_TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 3e-2}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_training_matches_eager(dtype: Any) -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    eager = _mlp().to(dtype).train()
    mine = copy.deepcopy(eager)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 16, generator=g).to(dtype)
    target = torch.randn(8, 5, generator=g).to(dtype)
    compiled = torch.compile(mine, backend="stripeml")
    tol = HALF_TOLERANCE[dtype]
    before = st.stats()
    want, got = eager(x), compiled(x)
    assert got.dtype == dtype
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    F.mse_loss(want, target).backward()
    F.mse_loss(got, target).backward()
    for (pname, p), q in zip(eager.named_parameters(), mine.parameters()):
        assert q.grad is not None and q.grad.dtype == dtype, pname
        scale = p.grad.abs().max().item()
        torch.testing.assert_close(q.grad, p.grad, rtol=tol, atol=tol * scale, msg=pname)
    d = _delta(before)
    assert d["forward_compiles"] == 1 and d["backward_compiles"] == 1, d
    assert d["fallbacks"] == 0 and d["eager_nodes"] == 0, d
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_m = torch.optim.SGD(mine.parameters(), lr=0.05)
    for step in range(10):
        losses = []
        for model, opt in ((eager, opt_e), (compiled, opt_m)):
            opt.zero_grad()
            loss = F.mse_loss(model(x), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=2 * tol), (step, losses)
    assert _delta(before)["compiles"] == 2, "a training step recompiled"


class _DropoutMlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.drop = nn.Dropout(0.1)
        self.b = nn.Linear(32, 4)

    def forward(self, x: Any) -> Any:
        return self.b(self.drop(torch.relu(self.a(x))))


def test_dropout_in_training_runs_eagerly_and_trains() -> None:
    """Dropout's mask is PyTorch's random draw: its node runs eagerly (the rest
    of the forward compiles, and the whole backward), so with the same seed the
    compiled step draws eager's mask and computes eager's gradients."""
    torch.manual_seed(0)
    torch._dynamo.reset()
    eager = _DropoutMlp().train()
    mine = copy.deepcopy(eager)
    g = torch.Generator().manual_seed(1)
    x, target = torch.randn(16, 16, generator=g), torch.randn(16, 4, generator=g)
    compiled = torch.compile(mine, backend="stripeml")
    before = st.stats()
    torch.manual_seed(5)
    want = eager(x)
    torch.manual_seed(5)
    got = compiled(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert (want == eager.b(torch.relu(eager.a(x)))).logical_not().any(), "dropout inactive"
    F.mse_loss(want, target).backward()
    F.mse_loss(got, target).backward()
    for (pname, p), q in zip(eager.named_parameters(), mine.parameters()):
        assert q.grad is not None, pname
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=pname)
    d = _delta(before)
    assert d["fallbacks"] == 1 and d["eager_nodes"] >= 1, d  # the dropout node
    assert d["forward_compiles"] >= 1 and d["backward_compiles"] == 1, d
    opt = torch.optim.SGD(mine.parameters(), lr=0.05)
    compiles = st.stats()["compiles"]
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = F.mse_loss(compiled(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses
    assert st.stats()["compiles"] == compiles, "a training step recompiled"

    torch._dynamo.reset()
    e = st.explain(eager, x)
    (fwd,) = e.of("forward")
    assert fwd.partial and fwd.eager["aten.native_dropout.default"] == 1, fwd
    assert "training mode" in e.unsupported["aten.native_dropout.default"]
    assert all(g.compiles for g in e.of("backward")), e


def test_explain_reports_forward_and_backward_graphs() -> None:
    """``explain`` of a model in training mode reports AOTAutograd's forward and
    backward graphs, compiles nothing and leaves the model's state alone."""
    torch.manual_seed(0)
    torch._dynamo.reset()
    m = _cnn().train()
    x = _inputs("cnn")[0]
    buffers = [b.clone() for b in m.buffers()]
    before = st.stats()
    e = st.explain(m, x)
    assert [g.kind for g in e.graphs] == ["forward", "backward"], e
    assert e.compiles, e
    fwd, bwd = e.graphs
    assert fwd.ops["aten._native_batch_norm_legit_functional.default"] == 2, fwd.ops
    assert bwd.ops["aten.convolution_backward.default"] == 2, bwd.ops
    assert "(forward)" in str(e) and "(backward)" in str(e)
    d = _delta(before)
    assert d["compiles"] == 0 and d["calls"] == 0, d
    assert all(torch.equal(a, b) for a, b in zip(buffers, m.buffers()))
    assert all(p.grad is None for p in m.parameters())

    # an operator without a translation: its backward is reported too
    torch._dynamo.reset()
    e = st.explain(_Sandwich().train(), torch.randn(3, 8))
    fwd, bwd = e.of("forward"), e.of("backward")
    assert fwd and bwd and fwd[0].partial and bwd[0].partial, e
    assert "aten.cumsum.default" in e.unsupported
    # in eval mode (or under no_grad): one inference graph
    torch._dynamo.reset()
    e = st.explain(_cnn().eval(), x)
    assert [g.kind for g in e.graphs] == ["inference"] and e.compiles, e


def test_saved_transposed_parameters_are_views_not_copies() -> None:
    """A linear layer's forward graph saves ``t(W)`` for the backward: the forward
    program does not write that transpose (the output is PyTorch's view of ``W``)
    and the backward program reads the view in place (built for an input stored
    transposed), with eager's gradients."""
    import re

    torch.manual_seed(0)
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="stripeml")
    x = torch.randn(5, 8)
    for _ in range(2):  # the second step: the programs built for the views
        for m in (model, eager):
            m.zero_grad()
        compiled(x).sum().backward()
        eager(x).sum().backward()
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)
    programs = st.last_programs(4)
    forward = [p for p in programs if p.kind == "forward"]
    assert forward, "no forward program was compiled"
    transposes = re.findall(r"= =\(\w+\[i1, i0\]\)", forward[-1].source)
    assert not transposes, transposes
