"""Fusion as a tuning lever: a product's epilogue left out (``epilogue``'s
``enabled``) and a chain left unnested (``nest``'s ``enabled``), each a choice
for one kernel, checked against NumPy; and a chain's window, which times the
whole chain whichever way it runs."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from attention import ATTENTION
from attention import attention_reference as _attention
from stripeml.passes._kernel_choices import kernel_key, tuning_point
from stripeml.passes.manager import run_pipeline
from stripeml.tuning.kernels import kernel_jobs
from stripeml.tuning.space import axes, neighbours

from .helpers import root_kernels, through_point

TWO_LAYERS = """
function (X[M, K], W1[K, N], B1[N], W2[N, P], B2[P]) -> (Y) {
    T[m, n : M, N] = +(X[m, k] * W1[k, n]);
    H = relu(T + B1);
    U[m, p : M, P] = +(H[m, n] * W2[n, p]);
    Y = relu(U + B2);
}
"""


def _epilogues(program) -> set[str]:
    """The names of the root kernels that run an elementwise kernel on their tiles."""
    found = set()
    for k in root_kernels(program):
        stack = list(k.sub_blocks)
        while stack:
            b = stack.pop()
            if "epilogue" in b.tags:
                found.add(k.name)
            stack.extend(b.sub_blocks)
    return found


def test_the_space_has_both_levers():
    f = stripeml.compile(TWO_LAYERS, target="cpu", threads=2)
    space = axes(f.target, tuning_point(f.target.passes))
    found = {(a.pass_name, a.option): a for a in space}
    assert found[("epilogue", "enabled")].start is True
    assert found[("nest", "enabled")].start is True
    steps = list(neighbours({}, space))
    assert {"epilogue": {"enabled": False}} in steps
    assert {"nest": {"enabled": False}} in steps


def test_one_product_without_its_epilogue():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    w1 = rng.standard_normal((96, 128)).astype(np.float32)
    b1 = rng.standard_normal(128).astype(np.float32)
    w2 = rng.standard_normal((128, 64)).astype(np.float32)
    b2 = rng.standard_normal(64).astype(np.float32)
    f = stripeml.compile(TWO_LAYERS, target="cpu", threads=2)
    args = [x, w1, b1, w2, b2]
    passes, program, at_point = through_point(f, args)
    first, second = [k for k in root_kernels(at_point) if "contraction" in k.tags]
    plain = run_pipeline(program, passes).program
    assert _epilogues(plain) == {first.name, second.name}  # the control
    choice = {kernel_key(at_point.root, first): {"epilogue": {"enabled": False}}}
    tuned = run_pipeline(program, passes, choices=choice).program
    assert _epilogues(tuned) == {second.name}
    # the bias and ReLU of the first product run as a kernel of their own
    assert len(root_kernels(tuned)) == len(root_kernels(plain)) + 1
    inputs = dict(zip(["X", "W1", "B1", "W2", "B2"], args))
    got = f.backend.compile(tuned).run(inputs)["Y"]
    h = np.maximum(x.astype(np.float64) @ w1 + b1, 0)
    np.testing.assert_allclose(got, np.maximum(h @ w2 + b2, 0), rtol=1e-4, atol=1e-3)


@pytest.fixture
def attention():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4, 256, 32)).astype(np.float32)
    k = rng.standard_normal((4, 256, 32)).astype(np.float32)
    v = rng.standard_normal((4, 256, 32)).astype(np.float32)
    f = stripeml.compile(ATTENTION, target="cpu", threads=2)
    passes, program, at_point = through_point(f, [q, k, v])
    plain = run_pipeline(program, passes).program
    nests = [k for k in root_kernels(plain) if "nest" in k.tags]
    if not nests:
        pytest.skip("this machine's L2 holds the whole attention: nothing nests")
    return f, (q, k, v), passes, program, at_point, plain


def test_a_chain_left_unnested(attention):
    """Off for the chain's first kernel: that kernel runs on its own, over all its
    rows; the kernels after it are a segment of their own for ``nest``
    (docs/tuning.md), which may nest them as a shorter chain."""
    f, (q, k, v), passes, program, at_point, plain = attention
    head = root_kernels(at_point)[0]  # the scores' product: the chain's first kernel
    (nest,) = [b for b in root_kernels(plain) if "nest" in b.tags]
    assert nest.name.startswith(head.name)  # the control
    choice = {kernel_key(at_point.root, head): {"nest": {"enabled": False}}}
    tuned = run_pipeline(program, passes, choices=choice).program
    kernels = root_kernels(tuned)
    assert not any(b.name.startswith(head.name) for b in kernels if "nest" in b.tags)
    alone = next(b for b in kernels if b.name == head.name)
    assert [i.range for i in alone.idxs if i.range > 1]  # its own kernel, not a nest's part
    scores = next(r for r in tuned.root.refs if r.into == "S")  # written whole, to memory
    assert scores.shape.sizes == (4, 256, 256)
    got = f.backend.compile(tuned).run({"Q": q, "K": k, "V": v})["O"]
    np.testing.assert_allclose(got, _attention(q, k, v), rtol=1e-4, atol=1e-5)


def test_a_chain_head_times_the_whole_chain(attention):
    """The job of the chain's first kernel times every kernel of the chain: nested
    they are one step (its own), unnested each is a step of its own, and each
    must count."""
    f, (q, k, v), passes, program, at_point, plain = attention
    names = [b.name for b in root_kernels(at_point)]
    jobs, _ = kernel_jobs(program, f.target, {}, 0, {"Q": q, "K": k, "V": v})
    head = next(j for j in jobs if j.name == names[0])
    (nest,) = [b for b in root_kernels(plain) if "nest" in b.tags]
    inside = {b.name for b in nest.sub_blocks}
    members = [n for n in names if any(s == n or s.startswith(n + "_") for s in inside)]
    assert len(members) >= 4  # scores, maximum, exponentials and sums, product
    assert set(members) <= set(head.window)
    assert len(set(head.window)) == len(head.window)
    others = [j for j in jobs if j.name != names[0]]
    assert all(len(j.window) <= 2 for j in others)
