"""Partial graphs: an operator stripeml lacks runs eagerly; the supported
partitions around it compile as their own programs."""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
st = pytest.importorskip("stripeml.torch")


class _Sandwich(nn.Module):
    """Linear+ReLU, cumsum (no translation), Linear+ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.b = nn.Sequential(nn.Linear(16, 4), nn.ReLU())

    def forward(self, x: object) -> object:
        return self.b(torch.cumsum(self.a(x), 1))


class _AllUnsupported(nn.Module):
    def forward(self, x: object) -> object:
        return torch.cumprod(torch.cumsum(x, 0), 1)


def test_unsupported_op_in_the_middle_compiles_both_sides(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    monkeypatch.setenv("STRIPEML_TORCH_VERBOSE", "1")
    m = _Sandwich().eval()
    x = torch.randn(3, 8)
    before = st.stats()
    with caplog.at_level(logging.WARNING, logger="stripeml.torch"), torch.no_grad():
        c = torch.compile(m, backend="stripeml")
        got = c(x)
        want = m(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        after = st.stats()
        assert after.get("compiles", 0) - before.get("compiles", 0) == 2
        assert after.get("partitions", 0) - before.get("partitions", 0) == 2
        assert after.get("eager_nodes", 0) - before.get("eager_nodes", 0) == 1
        assert after.get("fallbacks", 0) - before.get("fallbacks", 0) == 1
        # a second call compiles nothing more; an in-place weight update rebinds
        x2 = torch.randn(3, 8)
        torch.testing.assert_close(c(x2), m(x2), rtol=1e-4, atol=1e-5)
        assert st.stats()["compiles"] == after["compiles"]
        m.b[0].weight.mul_(2.0)
        torch.testing.assert_close(c(x2), m(x2), rtol=1e-4, atol=1e-5)
        assert st.stats()["compiles"] == after["compiles"] + 1
    assert "cumsum" in caplog.text
    assert "2 partition(s) compile" in caplog.text
    assert "1 node(s) fall back" in caplog.text


def test_explain_reports_partitions() -> None:
    torch._dynamo.reset()
    e = st.explain(_Sandwich().eval(), torch.randn(3, 8))
    (g,) = e.graphs
    assert not e.compiles and e.partial and g.partial
    assert len(g.partitions) == 2
    for p in g.partitions:  # the transposed weight is folded into its own block
        assert dict(p) == {
            "aten.permute.default": 1,
            "aten.addmm.default": 1,
            "aten.relu.default": 1,
        }, p
    assert dict(g.eager) == {"aten.cumsum.default": 1}
    assert any("cumsum" in op for op in e.unsupported)
    text = str(e)
    assert "2 partitions compile" in text and "cumsum" in text, text


def test_every_op_unsupported_runs_eagerly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    torch._dynamo.reset()
    monkeypatch.setenv("STRIPEML_TORCH_VERBOSE", "1")
    m = _AllUnsupported()
    x = torch.randn(4, 5)
    before = st.stats()
    with caplog.at_level(logging.WARNING, logger="stripeml.torch"), torch.no_grad():
        got = torch.compile(m, backend="stripeml")(x)
    torch.testing.assert_close(got, m(x))
    after = st.stats()
    assert after.get("compiles", 0) == before.get("compiles", 0)
    assert after.get("fallbacks", 0) > before.get("fallbacks", 0)
    assert "cumsum" in caplog.text and "cumprod" in caplog.text
    torch._dynamo.reset()
    e = st.explain(m, x)
    assert not e.compiles and not e.partial
    assert "runs eagerly" in str(e)


def test_trivial_partition_is_not_compiled() -> None:
    class ViewsOnly(nn.Module):
        def forward(self, x: object) -> object:
            return torch.cumsum(x.reshape(4, 3).t(), 0)

    torch._dynamo.reset()
    m = ViewsOnly()
    x = torch.randn(12)
    before = st.stats().get("compiles", 0)
    with torch.no_grad():
        got = torch.compile(m, backend="stripeml")(x)
    torch.testing.assert_close(got, m(x))
    assert st.stats().get("compiles", 0) == before


class _FailsToTranslate(nn.Module):
    """Linear+ReLU, sigmoid (made to fail when translated), Linear+ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.b = nn.Sequential(nn.Linear(16, 4), nn.ReLU())

    def forward(self, x: object) -> object:
        return self.b(torch.sigmoid(self.a(x)))


def _refuse_sigmoid(monkeypatch: pytest.MonkeyPatch) -> None:
    from stripeml.torch.lower import RULES, Unsupported

    def refuse(*args: object) -> object:
        raise Unsupported("aten.sigmoid.default", "refused by the test")

    monkeypatch.setitem(RULES, "sigmoid", refuse)


def test_a_known_op_that_fails_to_translate_is_split_around(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator with a rule whose use does not translate (found when the
    program is built) runs eagerly; the graph around it is split and compiles."""
    torch.manual_seed(0)
    _refuse_sigmoid(monkeypatch)
    monkeypatch.setenv("STRIPEML_TORCH_VERBOSE", "1")
    torch._dynamo.reset()
    m = _FailsToTranslate().eval()
    x = torch.randn(3, 8)
    before = st.stats()
    with caplog.at_level(logging.WARNING, logger="stripeml.torch"), torch.no_grad():
        c = torch.compile(m, backend="stripeml")
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
    after = st.stats()
    assert after.get("compiles", 0) - before.get("compiles", 0) == 2
    assert after.get("partitions", 0) - before.get("partitions", 0) == 2
    assert after.get("eager_nodes", 0) - before.get("eager_nodes", 0) == 1
    assert "refused by the test" in caplog.text and "2 partition(s) compile" in caplog.text

    torch._dynamo.reset()
    e = st.explain(m, x)
    (g,) = e.graphs
    assert g.partial and len(g.partitions) == 2
    assert dict(g.eager) == {"aten.sigmoid.default": 1}
    assert e.unsupported == {"aten.sigmoid.default": "refused by the test"}
