"""Per-operator parity of the ATen translations (src/stripeml/torch/lower.py) with eager.

Each case compiles a tiny function or module with ``torch.compile(...,
backend="stripeml")`` under ``torch.no_grad()`` and checks that a stripeml
program was really built (the ``compiles`` counter rises, ``fallbacks`` does
not) and that its results match eager PyTorch: float32 within rtol 1e-4 /
atol 1e-5, integers and booleans exactly, same dtypes and shapes.  Operators
that cannot be translated must make the graph fall back (and still compute the
right answer eagerly).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional
st = pytest.importorskip("stripeml.torch")


def _leaves(x: Any) -> list[Any]:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]


def _same(got: Any, want: Any, rtol: float, atol: float) -> None:
    g, w = _leaves(got), _leaves(want)
    assert len(g) == len(w)
    for a, e in zip(g, w):
        assert a.dtype == e.dtype, (a.dtype, e.dtype)
        assert a.shape == e.shape, (a.shape, e.shape)
        if e.dtype.is_floating_point:
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            assert torch.equal(a, e), (a, e)


def _compiled(fn: Callable[..., Any], *inputs: Any, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """``fn(*inputs)`` through stripeml equals eager, and it really compiled."""
    torch._dynamo.reset()
    if isinstance(fn, nn.Module):
        fn.eval()
    before = st.stats()
    c = torch.compile(fn, backend="stripeml")
    with torch.no_grad():
        want = fn(*inputs)
        got = c(*inputs)
        again = c(*inputs)  # the cached program
    after = st.stats()
    assert after.get("compiles", 0) > before.get("compiles", 0), "nothing compiled"
    assert after.get("fallbacks", 0) == before.get("fallbacks", 0), "a graph ran eagerly"
    _same(got, want, rtol, atol)
    _same(again, want, rtol, atol)


def _falls_back(fn: Callable[..., Any], *inputs: Any) -> None:
    """``fn(*inputs)`` runs eagerly, wholly or split around the unsupported node
    (a fallback is counted), and is still right."""
    torch._dynamo.reset()
    before = st.stats()
    c = torch.compile(fn, backend="stripeml")
    with torch.no_grad():
        want = fn(*inputs)
        got = c(*inputs)
    after = st.stats()
    assert after.get("fallbacks", 0) > before.get("fallbacks", 0), "expected a fallback"
    _same(got, want, 0.0, 0.0)


def _randn(*shape: int, seed: int = 0) -> Any:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def _ints(*shape: int, lo: int = -20, hi: int = 20, seed: int = 0, dtype: Any = None) -> Any:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g, dtype=dtype or torch.int64)


X = _randn(2, 3, 4)
Y = _randn(2, 3, 4, seed=1)
POS = X.abs() + 0.1
INTS = _ints(2, 3, 4)
INTS2 = _ints(2, 3, 4, seed=1, lo=1, hi=9)


# -- elementwise -------------------------------------------------------------
CASES: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
    "arith_tensors_broadcast": (
        lambda a, b, r: (
            a + b,
            a - b * 2.5,
            a * r,
            a / (r.abs() + 1),
            torch.add(a, b, alpha=3),
            torch.sub(a, r, alpha=0.5),
        ),
        (X, Y, _randn(4, seed=2)),
    ),
    "arith_python_scalars": (
        lambda a: (a + 1, 2 - a, a * 3.5, a / 4, 1.5 / (a.abs() + 1), -a + 0.25),
        (X,),
    ),
    "unary_math": (
        lambda a, p: (
            torch.exp(a),
            torch.log(p),
            torch.sqrt(p),
            torch.rsqrt(p),
            torch.erf(a),
            torch.neg(a),
            torch.abs(a),
            torch.sigmoid(a),
            torch.tanh(a),
        ),
        (X, POS),
    ),
    "pow": (
        lambda a, p, b, i: (
            a**2,
            p**0.5,
            p**3,
            p**b,
            2.0**a,
            torch.pow(p, -1.5),
            a**3,
            a**-2,
            i**3,
            2 ** i.abs(),
            i**0.5,
            torch.pow(i, 2),
        ),
        (X, POS, Y, _ints(2, 3, 4, lo=-9, hi=9)),
    ),
    "activations": (
        lambda a: (
            F.gelu(a),
            F.gelu(a, approximate="tanh"),
            F.silu(a),
            F.hardswish(a * 4),
            F.hardtanh(a * 2),
            F.hardtanh(a * 2, -0.5, 0.75),
            F.relu6(a * 5),
            F.relu(a),
            F.hardsigmoid(a * 4),
            F.leaky_relu(a, 0.2),
        ),
        (X,),
    ),
    "clamp": (
        lambda a, lo, hi: (
            a.clamp(-0.5, 0.5),
            a.clamp(min=0.1),
            a.clamp(max=-0.1),
            torch.clamp(a, lo, hi),
            torch.clamp_min(a, 0.2),
            torch.clamp_max(a, 0.3),
        ),
        (X, torch.full((4,), -0.3), torch.full((4,), 0.6)),
    ),
    "comparisons": (
        lambda a, b, s: (
            a < b,
            a <= 0.0,
            a > b,
            a >= 0.5,
            a == b,
            a != b,
            a == a,
            a != a,
            torch.eq(a, 0.0),
            torch.ne(a, 1.0),
            torch.max(a, b),
            a == s,
            a != s,
            a < s,
            a * s,
            torch.min(a, b),
            torch.maximum(a, b),
            torch.minimum(a, b),
        ),
        (
            torch.cat([X.round().flatten()[:-1], torch.tensor([0.1])]).reshape(2, 3, 4),
            Y.round(),
            torch.tensor(0.1, dtype=torch.float64),
        ),
    ),
    "where": (
        lambda a, b: (
            torch.where(a > 0, a, b),
            torch.where(a > b, 1.0, b),
            torch.where(b < 0, a, 0.0),
            torch.where(a > 0, 2, -3),
        ),
        (X, Y),
    ),
    "any_all": (
        lambda a: (
            torch.any(a > 1),
            torch.all(a > -3),
            (a > 0).any(dim=1),
            (a > -1).all(dim=-1, keepdim=True),
            torch.any(a > 1.5, dim=0),
            ~(a > 0),
            (a > 0) & (a < 1),
            (a > 0) | (a < -1),
            torch.logical_not(a > 0),
            (a > 0) ^ (a < 0.5),
            torch.logical_xor(a, a > 0),
            torch.logical_and(a, a > 0),
        ),
        (X,),
    ),
    # -- integers ------------------------------------------------------------
    "int_arith": (
        lambda i, j: (
            i + j,
            i - j,
            i * j,
            i * 3,
            i + 7,
            -i,
            torch.abs(i),
            i**2,
            torch.maximum(i, j),
            torch.minimum(i, j),
            i.clamp(-5, 5),
            torch.add(i, j, alpha=3),
            torch.sub(i, 2, alpha=2),
            i & j,
            i | 6,
            i ^ j,
            ~i,
        ),
        (INTS, INTS2),
    ),
    "int_true_division_and_promotion": (
        lambda i, j: (i / j, i * 0.5, i + 1.25, i / 4),
        (INTS, INTS2),
    ),
    "int_compare_and_where": (
        lambda i, j: (i < j, i == 3, i != j, i >= 0, torch.where(i > 0, i, j)),
        (INTS, INTS2),
    ),
    "int_compare_float_scalar": (
        lambda i: (i > 0.5, i < -0.5, i == 0.0, i >= 2.5, i <= -2.5, i != 1.5),
        (INTS,),
    ),
    "int32_ops": (
        lambda i: (i + 1, i * i, i.sum(dim=1), i > 0, i.to(torch.int64)),
        (_ints(3, 4, dtype=torch.int32),),
    ),
    "int_reductions": (
        lambda i: (
            i.sum(),
            i.sum(dim=1),
            i.amax(dim=-1),
            i.amin(dim=(0, 2), keepdim=True),
            (i > 0).sum(dim=0),
        ),
        (INTS,),
    ),
    "casts": (
        lambda a, i: (
            a.to(torch.int64),
            (a * 10).to(torch.int32),
            a.to(torch.bool),
            i.to(torch.float32),
            (i > 0).to(torch.float32),
            i.to(torch.bool),
            (a > 0).long(),
            a.double(),
            i.to(torch.int16),
            i.abs().to(torch.uint8),
        ),
        (X * 3, INTS),
    ),
    # -- constants -----------------------------------------------------------
    "constants": (
        lambda a: (
            a + torch.full((3, 4), 2.5),
            a * torch.zeros(4),
            a + torch.ones(3, 1),
            a * torch.scalar_tensor(3.0),
            a + torch.arange(4),
            a + torch.arange(1, 9, 2, dtype=torch.float32),
            torch.arange(0.0, 1.0, 0.25) + a[0, 0],
            torch.arange(6) * 2,
            torch.arange(5, 0, -1) + a[0, 0, 0],
            torch.arange(-1.0, 1.0, 0.3) * 2,
            torch.full((2,), 7) + a.shape[0],
        ),
        (X,),
    ),
    "like_constants": (
        lambda a: (
            a + torch.zeros_like(a),
            a * torch.ones_like(a),
            torch.full_like(a, 3.0) - a,
            a.new_zeros(2) + 1,
        ),
        (X,),
    ),
    # -- shapes --------------------------------------------------------------
    "view_reshape": (
        lambda a: (
            a.view(6, 4) + 1,
            a.reshape(-1) * 2,
            a.flatten(1),
            a.unsqueeze(0) + 1,
            a.reshape(2, 12).t() * 1,
            a[None, :, None] + 0,
            a.reshape(4, 6).squeeze(),
        ),
        (X,),
    ),
    "permute_transpose_t": (
        lambda a, m: (
            a.permute(2, 0, 1) + 1,
            a.permute(-1, -3, -2) * 2,
            a.transpose(0, 2) + 0,
            a.transpose(-1, -2) - 1,
            m.t() + 1,
            m.T * 2,
            a.mT + 0,
        ),
        (X, _randn(3, 5)),
    ),
    "expand": (
        lambda a, r: (
            r.expand(2, 3, 4) + 0,
            a[:, :1].expand(-1, 3, -1) * 2,
            r.unsqueeze(0).expand(5, 4) + a[0, 0],
        ),
        (X, _randn(4, seed=3)),
    ),
    "cat": (
        lambda a, b, i: (
            torch.cat([a, b], 0),
            torch.cat([a, b, a], dim=-1),
            torch.cat([a, b[:, :1]], 1),
            torch.cat([i, i], 2),
            torch.cat([a, b], 1),
            torch.cat([a.flatten(), torch.zeros(0)]) * 1,
            torch.cat([i, a], 0),
        ),
        (X, Y, INTS),
    ),
    "slice_select": (
        lambda a: (
            a[:, 1:] + 0,
            a[..., ::2] + 0,
            a[:, -2:, 1:3] * 1,
            a[1] + 0,
            a[:, -1] * 1,
            a[:, :, 0] + 0,
            a[-1, 1:, -3:-1] + 0,
            a[:, 1:100] + 0,
            a[:, 5:] + 0,
            a[:, 1::2] + 0,
            a.select(2, -2) + 0,
            a.narrow(2, 1, 2) + 0,
        ),
        (X,),
    ),
    "split_unbind": (
        lambda a: (
            *torch.split(a, 2, dim=2),
            *torch.split(a, [1, 2], dim=1),
            *torch.split(a, 3, dim=-1),
            *torch.unbind(a, 1),
            *a.unbind(-1),
            *a.chunk(2, dim=0),
        ),
        (X,),
    ),
    "embedding": (
        nn.Embedding(10, 6, padding_idx=0),
        (torch.tensor([[0, 3, 9], [1, 1, 5]]),),
    ),
    "embedding_int32_indices": (
        nn.Embedding(7, 3),
        (torch.tensor([6, 0, 2], dtype=torch.int32),),
    ),
    # -- reductions ----------------------------------------------------------
    "reductions": (
        lambda a: (
            a.mean(),
            a.mean(dim=1),
            a.mean(dim=(0, 2), keepdim=True),
            a.sum(),
            a.sum(-1),
            a.sum(dim=[0, 1], keepdim=True),
            a.amax(dim=1),
            a.amax(),
            a.amin(dim=-1, keepdim=True),
            a.amin(dim=(0, 1)),
            a.max(dim=2).values,
            a.min(dim=0, keepdim=True).values,
            torch.max(a, -1)[0],
            a.min(),
            a.max(),
        ),
        (X,),
    ),
    "softmax": (
        lambda a: (
            F.softmax(a, -1),
            F.softmax(a, dim=0),
            F.log_softmax(a, 1),
            F.log_softmax(a * 30, -1),
            a.softmax(-2),
        ),
        (X,),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op(name: str) -> None:
    fn, inputs = CASES[name]
    torch.manual_seed(0)
    _compiled(fn, *inputs)


# -- normalisation, linear algebra, convolution, pooling ---------------------
def test_layer_norm() -> None:
    torch.manual_seed(0)

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.LayerNorm(8)
            self.b = nn.LayerNorm([4, 8], eps=1e-3)
            self.c = nn.LayerNorm(8, elementwise_affine=False)
            self.d = nn.LayerNorm(8, bias=False)
            for p in self.parameters():
                p.data.uniform_(-1, 1)

        def forward(self, x: Any) -> Any:
            return self.a(x), self.b(x), self.c(x), self.d(x), F.layer_norm(x, (8,))

    _compiled(M(), _randn(2, 4, 8) * 3 + 1)


def test_batch_norm_eval() -> None:
    torch.manual_seed(0)

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.BatchNorm2d(4)
            self.b = nn.BatchNorm2d(4, affine=False, eps=1e-2)
            self.c = nn.BatchNorm1d(4)
            for bn in (self.a, self.b, self.c):
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)
            for p in self.parameters():
                p.data.uniform_(-1, 1)

        def forward(self, x: Any, y: Any) -> Any:
            return self.a(x), self.b(x), self.c(y)

    _compiled(M(), _randn(2, 4, 5, 5), _randn(3, 4, 6, seed=1))


def test_matmul_family() -> None:
    torch.manual_seed(0)

    def f(a: Any, b: Any, c: Any, d: Any, v: Any, bias: Any, w: Any) -> Any:
        return (
            a @ b, torch.mm(a, b), torch.bmm(c, d), c @ d, torch.matmul(c, b), a @ v, v @ b,
            torch.addmm(bias, a, b), torch.addmm(bias, a, b, beta=0.5, alpha=2.0),
            F.linear(a, w), F.linear(a, w, w[:, 0]), F.linear(c, w), torch.matmul(c, d[0]),
        )  # fmt: skip

    _compiled(
        f, _randn(3, 5), _randn(5, 6, seed=1), _randn(2, 3, 5, seed=2), _randn(2, 5, 4, seed=3),
        _randn(5, seed=4), _randn(6, seed=5), _randn(7, 5, seed=6),
    )  # fmt: skip


def test_linear_modules() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 5), nn.SiLU(), nn.Linear(5, 4, bias=False), nn.Tanh())
    _compiled(m, _randn(2, 3, 6))


def test_conv2d_variants() -> None:
    torch.manual_seed(0)

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.plain = nn.Conv2d(4, 6, 3)
            self.strided = nn.Conv2d(4, 6, 3, stride=2, padding=1)
            self.asym = nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2))
            self.dilated = nn.Conv2d(4, 4, 3, padding=2, dilation=2, bias=False)
            self.grouped = nn.Conv2d(4, 6, 3, padding=1, groups=2)
            self.depthwise = nn.Conv2d(4, 8, 3, padding=1, groups=4)
            self.same = nn.Conv2d(4, 6, 3, padding="same")
            self.pointwise = nn.Conv2d(4, 5, 1)

        def forward(self, x: Any) -> Any:
            return tuple(m(x) for m in self.children())

    _compiled(M(), _randn(2, 4, 9, 8))


def test_conv1d() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv1d(3, 5, 3, padding=1, stride=2), nn.ReLU(), nn.Conv1d(5, 5, 1))
    _compiled(m, _randn(2, 3, 11))


def test_max_pool2d() -> None:
    def f(x: Any) -> Any:
        return (
            F.max_pool2d(x, 2), F.max_pool2d(x, 3, stride=2), F.max_pool2d(x, 3, 2, padding=1),
            F.max_pool2d(x, 2, ceil_mode=True), F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
            F.max_pool2d(x, (2, 3), (1, 2)), F.max_pool2d(x, 3, 1, 1, dilation=2),
        )  # fmt: skip

    _compiled(f, _randn(2, 3, 9, 8))


def test_avg_pool2d() -> None:
    def f(x: Any) -> Any:
        return (
            F.avg_pool2d(x, 2), F.avg_pool2d(x, 3, stride=2),
            F.avg_pool2d(x, 3, 2, padding=1),
            F.avg_pool2d(x, 3, 2, padding=1, count_include_pad=False),
            F.avg_pool2d(x, 2, ceil_mode=True),
            F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
            F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
            F.avg_pool2d(x, (2, 3), (1, 2)),
        )  # fmt: skip

    _compiled(f, _randn(2, 3, 9, 8))


def test_adaptive_avg_pool2d() -> None:
    def f(x: Any) -> Any:
        return (
            F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x, (1, 1)),
            F.adaptive_avg_pool2d(x, (9, 8)), F.adaptive_avg_pool2d(x, (3, 4)),
        )  # fmt: skip

    _compiled(f, _randn(2, 3, 9, 8))


def test_max_pool2d_indices_and_bfloat16_cast() -> None:
    """(Both fell back before training support: now they compile.)"""
    _compiled(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), _randn(1, 2, 7, 6))
    _compiled(lambda a: a.to(torch.bfloat16) * 2, _randn(3, 4))


def test_remainder_and_fmod() -> None:
    i, j = torch.tensor([-7, -3, 0, 4, 9]), torch.tensor([3, -2, 5, -4, 2])
    _compiled(lambda a, b: (torch.remainder(a, b), torch.fmod(a, b), a % 3), i, j)
    _compiled(lambda x: (torch.remainder(x, 0.7), torch.fmod(x, -0.7)), _randn(4, 5))


# -- what must fall back -----------------------------------------------------
#: name -> (function, inputs, the operator explain() names as the reason)
FALLBACKS: dict[str, tuple[Callable[..., Any], tuple[Any, ...], str]] = {
    "floor_divide": (lambda i, j: torch.div(i, j, rounding_mode="floor"), (INTS, INTS2), "div"),
    "conv_transpose2d": (nn.ConvTranspose2d(3, 4, 3), (_randn(1, 3, 5, 5),), "convolution"),
    "adaptive_avg_pool2d_uneven": (
        lambda x: F.adaptive_avg_pool2d(x, (4, 3)),
        (_randn(1, 2, 9, 8),),
        "adaptive_avg_pool2d",
    ),
    "max_dim_indices": (lambda a: a.max(dim=1), (X,), "getitem"),
    "avg_pool2d_divisor_override": (
        lambda x: F.avg_pool2d(x, 2, divisor_override=3),
        (_randn(1, 2, 6, 6),),
        "avg_pool2d",
    ),
    "argmax": (lambda a: a.argmax(dim=1), (X,), "argmax"),
}


@pytest.mark.parametrize("name", sorted(FALLBACKS))
def test_falls_back(name: str) -> None:
    fn, inputs, op = FALLBACKS[name]
    if isinstance(fn, nn.Module):
        fn.eval()
    _falls_back(fn, *inputs)
    torch._dynamo.reset()
    why = st.explain(fn, *inputs)
    assert not why.compiles
    assert any(op in name for name in why.unsupported), why
