"""An LSTM, or a GRU with ``linear_before_reset``, whose recurrent product is
laid out by blocks of hidden units (all gates of a block side by side;
``ops/recurrent.py``, ``unit_block``): the options it keeps against the NumPy
reference of the specification, and one kernel a step (the gate math the
product's epilogue, split by blocks)."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

import stripeml.onnx as so  # noqa: E402
from stripeml.ir.nodes import Block  # noqa: E402

from .test_ops_recurrent import INPUTS, arrays, check, feeds, model, reference  # noqa: E402

LBR = {"linear_before_reset": 1}
CASES = [
    # hidden (blocks of 64, 32 or 16 units), batch, attributes, array options
    # (the kind: LSTM, or GRU with linear_before_reset)
    (128, 1, {}, {}),  # two blocks of 64
    (128, 2, {"direction": "bidirectional"}, {"h0": True, "c0": True}),
    (96, 1, {"clip": 0.7, "input_forget": 1}, {"c0": True}),  # three blocks of 32
    (64, 3, {"layout": 1, "direction": "reverse"}, {"h0": True}),  # one block
    (48, 1, {"activations": ["HardSigmoid", "Softplus", "ThresholdedRelu"],
             "activation_alpha": [0.25, 0.1], "activation_beta": [0.45]}, {}),  # three of 16
    (128, 1, {}, {"runtime": INPUTS}),  # weights and states known at run time
    (128, 2, {"direction": "bidirectional"}, {"lengths": [5, 5]}),  # equal, shorter than X
    (128, 1, {**LBR, "direction": "bidirectional"}, {}),  # the set's GRU, smaller
    (96, 2, {**LBR, "clip": 0.6}, {"h0": True}),
    (64, 1, {**LBR, "layout": 1, "direction": "reverse"}, {"h0": True}),
    (48, 1, {**LBR, "activations": ["HardSigmoid", "Softsign"],
             "activation_alpha": [0.3], "activation_beta": [0.4]}, {}),
    (128, 1, LBR, {"runtime": INPUTS, "h0": True}),
    (128, 1, LBR, {"bias": False}),
]  # fmt: skip


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"h{c[0]}-b{c[1]}-{sorted(c[2])}-{sorted(c[3])}"
)
def test_against_the_reference(case):
    """Y, Y_h and Y_c against the float64 reference: directions, layouts,
    initial states, clip, input_forget, activations with parameters, run-time
    weights, equal ``sequence_lens`` shorter than X."""
    hidden, batch, attrs, opts = case
    kind = "GRU" if "linear_before_reset" in attrs else "LSTM"
    opts = dict(opts)
    runtime = tuple(opts.pop("runtime", ("X",)))
    if "lengths" in opts:
        runtime = (*runtime, "sequence_lens")
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    a = arrays(kind, 6, batch, 5, hidden, dirs, layout=attrs.get("layout", 0), **opts)
    a = {k: (v * 0.3 if k in ("W", "R") else v) for k, v in a.items()}  # a tamer recurrence
    m = model(kind, a, runtime=runtime, **attrs)
    got = so.compile(m, target="cpu")(**feeds(m, a))
    check(list(got), reference(kind, a, **attrs), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_one_kernel_a_step(kind, threads):
    """Hidden 128 (two blocks of 64 units; the GRU with linear_before_reset, as
    PyTorch exports it): after the first step (no product: the state starts
    at zero), each step is one root kernel, the product with the gate math as
    its epilogue, split over threads by blocks; the numbers match the
    reference.  (Gate-major columns took two kernels a step: the gate math
    read several column ranges of the product, not its own point.)"""
    seq = 5
    attrs = {"linear_before_reset": 1} if kind == "GRU" else {}
    a = arrays(kind, seq, 1, 8, 128)
    a = {k: (v * 0.3 if k in ("W", "R") else v) for k, v in a.items()}
    m = model(kind, a, **attrs)
    f = so.compile(m, target="cpu", threads=threads)
    check(list(f(**feeds(m, a))), reference(kind, a, **attrs), rtol=2e-4, atol=2e-5)
    program = f.lower(**feeds(m, a)).program
    kernels = [s for s in program.root.stmts if isinstance(s, Block)]
    steps = [k for k in kernels if "sigmoid" in k.comment]
    assert len(steps) == seq, [k.comment for k in steps]
    fused = [k for k in steps if "tiled" in k.tags and "+(" in k.comment]
    assert len(fused) == seq - 1
    for k in fused:
        inner = [s for s in k.stmts if isinstance(s, Block)]
        assert any("epilogue" in s.tags for s in inner)
        if threads == 2:
            assert "thread" in k.tags and k.idxs[0].range == 2
