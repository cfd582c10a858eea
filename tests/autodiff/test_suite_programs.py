"""Every program of the test suite (tests/programs.py) with float inputs,
differentiated: the gradient program's directional derivative against a
central finite difference, in float64 on the interpreter.  A program that
cannot be differentiated must say so with an AutodiffError; the set of those
is pinned below, so a regression (or a newly differentiable program) shows."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import stripeml
from stripeml.errors import StripeError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from programs import CASES  # noqa: E402

#: Programs whose gradient stripeml refuses, and why.
REFUSED = {
    # a parameter written without dims ('S', not 'S[]') whose gradient must be
    # reduced from a broadcast: its rank is not known before the call
    "broadcast_rank0_input": "the shape of 'O' is not known statically",
}
#: Programs whose outputs do not depend smoothly on every float input (a
#: finite difference across a cast to an integer, a comparison, floor/ceil).
PIECEWISE_CONSTANT = {"cast_as_int32_truncates", "comparisons_bool", "fn_floor", "fn_ceil"}


def _float_cases():
    out = []
    for case in CASES:
        inputs = case.make_inputs()
        floats = [k for k, v in inputs.items() if v.dtype.kind == "f"]
        if floats:
            out.append(pytest.param(case, floats, id=case.name))
    return out


def _loss(fn, inputs, cotangents):
    outs = fn(**inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return sum(float(np.sum(np.asarray(o, np.float64) * c)) for o, c in zip(outs, cotangents))


@pytest.mark.parametrize("case,floats", _float_cases())
def test_gradient_of_every_suite_program(case, floats):
    rng = np.random.default_rng(7)
    inputs = {
        k: (v.astype(np.float64) if v.dtype.kind == "f" else v)
        for k, v in case.make_inputs().items()
    }
    f = stripeml.compile(case.source, target="interp")
    try:
        g = stripeml.grad(f, wrt=tuple(floats))
    except StripeError as exc:
        assert case.name in REFUSED and REFUSED[case.name] in str(exc), f"{case.name}: {exc}"
        return
    assert case.name not in REFUSED, f"{case.name} is differentiable now: unpin it"
    outs = f(**inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    float_outs = [o for o in outs if np.asarray(o).dtype.kind == "f"]
    cotangents = [rng.standard_normal(np.shape(o)) for o in outs]
    try:
        grads = g(
            *inputs.values(), *[c.astype(np.asarray(o).dtype) for c, o in zip(cotangents, outs)]
        )
    except StripeError as exc:
        assert case.name in REFUSED and REFUSED[case.name] in str(exc), f"{case.name}: {exc}"
        return
    grads = grads if isinstance(grads, tuple) else (grads,)
    if not float_outs:
        return
    for name, grad in zip(floats, grads):
        assert np.shape(grad) == inputs[name].shape, name
        if case.name in PIECEWISE_CONSTANT:
            continue
        v = rng.standard_normal(inputs[name].shape)
        h = 1e-6 * max(1.0, float(np.max(np.abs(inputs[name]))))
        plus = dict(inputs, **{name: inputs[name] + h * v})
        minus = dict(inputs, **{name: inputs[name] - h * v})
        numeric = (_loss(f, plus, cotangents) - _loss(f, minus, cotangents)) / (2 * h)
        analytic = float(np.sum(np.asarray(grad, np.float64) * v))
        assert analytic == pytest.approx(numeric, rel=1e-5, abs=1e-6), (case.name, name)


@pytest.mark.parametrize(
    "source,shapes",
    [
        (
            "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }",
            [(64, 96), (96, 128), (64, 128)],
        ),
        (
            "function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) {"
            " O[n, y, x, co : N, H, W, CO] ="
            " +(I[n, y + ky - 1, x + kx - 1, c] * K[ky, kx, c, co]); }",
            [(1, 28, 28, 64), (3, 3, 64, 64), (1, 28, 28, 64)],
        ),
    ],
    ids=["matmul", "conv3x3"],
)
def test_gradients_reach_the_register_tiled_kernels(source, shapes):
    """The backward contractions of a matmul and a convolution are tiled for
    registers like the forward one (the cpu target's `unroll`)."""
    f = stripeml.compile(source, target="cpu")
    names = [p for p in f.params][:2]
    g = stripeml.grad(f, wrt=tuple(names))
    arrays = [np.ones(s, np.float32) for s in shapes]
    assert f.lower(*arrays[:2]).ir.count("#register_tile") >= 1
    assert g.lower(*arrays).ir.count("#register_tile") >= 2  # one per input's gradient
