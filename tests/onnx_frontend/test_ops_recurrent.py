"""RNN, GRU and LSTM (``ops/recurrent.py``) on the ``cpu`` target.

One-node models with random weights, checked against onnx's reference
evaluator where it implements the attributes (it ignores ``activations``,
``clip``, ``input_forget`` and ``sequence_lens``), and otherwise against
:func:`reference`, a NumPy transcription of the operator specification that
is itself checked against the reference evaluator and onnxruntime below.
"""

from __future__ import annotations

import io
import re
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto  # noqa: E402
from onnx import helper as oh  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml.onnx as so  # noqa: E402
from stripeml.errors import StripeError  # noqa: E402
from stripeml.onnx.builder import Builder, Node, Value  # noqa: E402
from stripeml.onnx.ops import lookup  # noqa: E402

RNG = np.random.default_rng(2024)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
INPUTS = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
OUTPUTS = ["Y", "Y_h", "Y_c"]


# -- building models ---------------------------------------------------------------


def arrays(
    kind,
    seq,
    batch,
    n_in,
    hidden,
    dirs=1,
    *,
    layout=0,
    bias=True,
    h0=False,
    c0=False,
    peep=False,
    lengths=None,
):
    """Random inputs of a recurrent node, by ONNX input name (absent ones left out)."""
    g = GATES[kind]

    def rand(*shape, scale=0.5):
        return (RNG.standard_normal(shape) * scale).astype(np.float32)

    xs = (seq, batch, n_in) if layout == 0 else (batch, seq, n_in)
    hs = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    a = {
        "X": rand(*xs, scale=1.0),
        "W": rand(dirs, g * hidden, n_in),
        "R": rand(dirs, g * hidden, hidden),
    }
    if bias:
        a["B"] = rand(dirs, 2 * g * hidden)
    if lengths is not None:
        a["sequence_lens"] = np.asarray(lengths, np.int32)
    if h0:
        a["initial_h"] = rand(*hs)
    if c0:
        a["initial_c"] = rand(*hs)
    if peep:
        a["P"] = rand(dirs, 3 * hidden)
    return a


def model(kind, a, outputs=OUTPUTS, runtime=("X",), opset=22, **attrs):
    """A one-node model: the inputs named in ``runtime`` are graph inputs, the
    others initializers; ``outputs``: the node's outputs ("" for one left out)."""
    n_in = max(INPUTS.index(k) for k in a) + 1
    ins = [k if k in a else "" for k in INPUTS[:n_in]]
    outs = list(outputs)
    if kind != "LSTM":
        outs = [o for o in outs if o != "Y_c"]
    node = oh.make_node(kind, ins, outs, **attrs)
    vis = [
        oh.make_tensor_value_info(k, oh.np_dtype_to_tensor_dtype(a[k].dtype), a[k].shape)
        for k in ins
        if k in runtime and k in a
    ]
    inits = [nh.from_array(a[k], k) for k in ins if k and k not in runtime]
    ovis = [oh.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs if o]
    g = oh.make_graph([node], "g", vis, ovis, inits)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])


def feeds(m, a):
    return {vi.name: a[vi.name] for vi in m.graph.input}


def run_stripeml(m, a):
    got = so.compile(m, target="cpu")(**feeds(m, a))
    return list(got) if isinstance(got, tuple) else [got]


def check(got, want, rtol=1e-4, atol=1e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# -- a NumPy reference of the specification ---------------------------------------

ACT_DEFAULTS = {  # lower-case name -> (takes alpha, takes beta, default alpha, default beta)
    "relu": (0, 0, 0, 0), "tanh": (0, 0, 0, 0), "sigmoid": (0, 0, 0, 0),
    "affine": (1, 1, 1.0, 0.0), "leakyrelu": (1, 0, 0.01, 0), "thresholdedrelu": (1, 0, 1.0, 0),
    "scaledtanh": (1, 1, 1.0, 1.0), "hardsigmoid": (1, 1, 0.2, 0.5), "elu": (1, 0, 1.0, 0),
    "softsign": (0, 0, 0, 0), "softplus": (0, 0, 0, 0),
}  # fmt: skip


def np_act(name, alpha, beta):
    return {
        "relu": lambda x: np.maximum(x, 0),
        "tanh": np.tanh,
        "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
        "affine": lambda x: alpha * x + beta,
        "leakyrelu": lambda x: np.where(x >= 0, x, alpha * x),
        "thresholdedrelu": lambda x: np.where(x > alpha, x, 0),
        "scaledtanh": lambda x: alpha * np.tanh(beta * x),
        "hardsigmoid": lambda x: np.clip(alpha * x + beta, 0, 1),
        "elu": lambda x: np.where(x >= 0, x, alpha * (np.exp(x) - 1)),
        "softsign": lambda x: x / (1 + np.abs(x)),
        "softplus": lambda x: np.log1p(np.exp(x)),
    }[name]


def reference(
    kind,
    a,
    *,
    direction="forward",
    activations=None,
    activation_alpha=(),
    activation_beta=(),
    clip=None,
    linear_before_reset=0,
    input_forget=0,
    layout=0,
    **_,
):
    """``kind`` on the inputs ``a`` (by ONNX name): ``[Y, Y_h(, Y_c)]``, in float64."""
    f64 = {k: v.astype(np.float64) for k, v in a.items() if k != "sequence_lens"}
    x = f64["X"] if layout == 0 else f64["X"].swapaxes(0, 1)
    seq, batch, _ = x.shape
    w, r = f64["W"], f64["R"]
    dirs, hidden = w.shape[0], r.shape[2]
    g = GATES[kind]
    b = f64.get("B", np.zeros((dirs, 2 * g * hidden)))
    p = f64.get("P", np.zeros((dirs, 3 * hidden)))
    states = [f64.get(k) for k in ("initial_h", "initial_c")]
    h0, c0 = (
        np.zeros((dirs, batch, hidden)) if v is None else v.swapaxes(0, 1) if layout else v
        for v in states
    )
    lengths = a.get("sequence_lens", np.full(batch, seq))
    names = activations or {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"]}.get(
        kind, ["Sigmoid", "Tanh", "Tanh"]
    )
    alphas, betas = iter(activation_alpha), iter(activation_beta)
    acts = []
    for name in names:
        ta, tb, da, db = ACT_DEFAULTS[name.lower()]
        acts.append(
            np_act(name.lower(), next(alphas, da) if ta else da, next(betas, db) if tb else db)
        )
    k = {"RNN": 1, "GRU": 2}.get(kind, 3)
    per_dir = [acts[d * k : (d + 1) * k] if len(acts) >= k * dirs else acts for d in range(dirs)]
    cl = (lambda v: np.clip(v, -clip, clip)) if clip else (lambda v: v)
    y = np.zeros((seq, dirs, batch, hidden))
    yh = np.zeros((dirs, batch, hidden))
    yc = np.zeros((dirs, batch, hidden))
    for d in range(dirs):
        rev = direction == "reverse" or (direction == "bidirectional" and d == 1)
        fs = per_dir[d]
        wb, rb = b[d, : g * hidden], b[d, g * hidden :]
        for n in range(batch):
            length = int(lengths[n])
            h, c = h0[d, n], c0[d, n]
            for t in range(length - 1, -1, -1) if rev else range(length):
                xw = w[d] @ x[t, n] + wb
                hr = r[d] @ h
                if kind == "RNN":
                    h = fs[0](cl(xw + hr + rb))
                elif kind == "GRU":
                    part = lambda v, j: v[j * hidden : (j + 1) * hidden]  # noqa: E731
                    z = fs[0](cl(part(xw, 0) + part(hr, 0) + part(rb, 0)))
                    rr = fs[0](cl(part(xw, 1) + part(hr, 1) + part(rb, 1)))
                    if linear_before_reset:
                        hh = fs[1](cl(part(xw, 2) + rr * (part(hr, 2) + part(rb, 2))))
                    else:
                        rh = r[d][2 * hidden :] @ (rr * h)
                        hh = fs[1](cl(part(xw, 2) + rh + part(rb, 2)))
                    h = (1 - z) * hh + z * h
                else:
                    gi, go, gf, gc = np.split(xw + hr + rb, 4)
                    pi, po, pf = np.split(p[d], 3)
                    i = fs[0](cl(gi + pi * c))
                    f = 1 - i if input_forget else fs[0](cl(gf + pf * c))
                    c = f * c + i * fs[1](cl(gc))
                    o = fs[0](cl(go + po * c))
                    h = o * fs[2](c)
                y[t, d, n] = h
            if length:
                yh[d, n], yc[d, n] = h, c
    if layout == 1:
        y, yh, yc = y.transpose(2, 0, 1, 3), yh.swapaxes(0, 1), yc.swapaxes(0, 1)
    outs = [y, yh] + ([yc] if kind == "LSTM" else [])
    return [o.astype(np.float32) for o in outs]


def want_outputs(full, outputs):
    """The reference's outputs the node names."""
    return [v for v, name in zip(full, outputs) if name]


# -- against onnx's reference evaluator --------------------------------------------

EVALUATOR_CASES = [
    # kind, seq, batch, input, hidden, attributes, array options, outputs
    ("RNN", 7, 2, 3, 4, {}, {"h0": True}, OUTPUTS),
    ("RNN", 1, 3, 2, 5, {"direction": "bidirectional", "layout": 1}, {"h0": True}, OUTPUTS),
    ("RNN", 7, 1, 3, 4, {"direction": "reverse"}, {"bias": False}, ["", "Y_h"]),
    ("GRU", 7, 3, 2, 3, {"direction": "reverse"}, {}, OUTPUTS),
    ("GRU", 5, 2, 3, 4, {"direction": "bidirectional", "linear_before_reset": 1}, {"h0": True}, OUTPUTS),
    ("GRU", 7, 2, 3, 4, {"layout": 1, "linear_before_reset": 1}, {"bias": False}, ["Y"]),
    ("LSTM", 7, 2, 3, 4, {}, {"h0": True, "c0": True, "peep": True}, OUTPUTS),
    ("LSTM", 7, 3, 2, 3, {"direction": "bidirectional", "layout": 1}, {"bias": False}, ["", "Y_h", "Y_c"]),
    ("LSTM", 1, 1, 4, 5, {"direction": "reverse"}, {"c0": True}, ["Y"]),
]  # fmt: skip


@pytest.mark.parametrize("case", EVALUATOR_CASES, ids=lambda c: f"{c[0]}-{c[5]}-{c[2]}x{c[1]}")
def test_against_the_reference_evaluator(case):
    kind, seq, batch, n_in, hidden, attrs, opts, outputs = case
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    a = arrays(kind, seq, batch, n_in, hidden, dirs, layout=attrs.get("layout", 0), **opts)
    m = model(kind, a, outputs, hidden_size=hidden, **attrs)
    want = ReferenceEvaluator(m).run(None, feeds(m, a))
    check(run_stripeml(m, a), want)
    # the NumPy reference used below agrees with the evaluator here
    check(want_outputs(reference(kind, a, **attrs), outputs), want)


def test_weights_known_only_at_run_time():
    """W, R, B, P and the initial states as graph inputs (rearranged by the program)."""
    a = arrays("LSTM", 4, 2, 3, 4, 2, h0=True, c0=True, peep=True)
    m = model("LSTM", a, runtime=tuple(INPUTS), direction="bidirectional", opset=14)
    want = ReferenceEvaluator(m).run(None, feeds(m, a))
    check(run_stripeml(m, a), want)
    a = arrays("GRU", 3, 2, 3, 4, h0=True)
    m = model("GRU", a, runtime=tuple(INPUTS), linear_before_reset=1, opset=7)
    check(run_stripeml(m, a), ReferenceEvaluator(m).run(None, feeds(m, a)))


# -- what the reference evaluator leaves out ---------------------------------------

SPEC_CASES = [
    ("RNN", {"activations": ["Relu"], "clip": 0.7}, {}),
    ("RNN", {"direction": "bidirectional", "activations": ["LeakyRelu", "Affine"],
             "activation_alpha": [0.1, 0.5], "activation_beta": [0.2]}, {"h0": True}),
    ("GRU", {"direction": "bidirectional", "clip": 1.2,
             "activations": ["HardSigmoid", "Softsign", "Sigmoid", "ScaledTanh"],
             "activation_alpha": [0.3, 0.8], "activation_beta": [0.4, 1.5]}, {"h0": True}),
    ("GRU", {"activations": ["Sigmoid", "Elu"], "activation_alpha": [0.5]}, {}),
    ("LSTM", {"input_forget": 1, "clip": 0.9}, {"peep": True, "c0": True}),
    ("LSTM", {"activations": ["HardSigmoid", "Softplus", "ThresholdedRelu"],
              "activation_alpha": [0.25, 0.1], "activation_beta": [0.45]}, {}),
]  # fmt: skip


@pytest.mark.parametrize("case", SPEC_CASES, ids=lambda c: f"{c[0]}-{sorted(c[1])}")
def test_activations_clip_and_input_forget(case):
    kind, attrs, opts = case
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    a = arrays(kind, 6, 2, 3, 4, dirs, **opts)
    m = model(kind, a, **attrs)
    check(run_stripeml(m, a), reference(kind, a, **attrs))


LENGTH_CASES = [
    # kind, lengths (seq 7), attributes: uniform, masked forward, reverse through a gather
    ("RNN", [4, 4], {"direction": "reverse"}),
    ("GRU", [2, 7, 5], {"layout": 1, "linear_before_reset": 1}),
    ("LSTM", [7, 3, 0, 5], {"direction": "bidirectional"}),
    ("RNN", [1, 6, 3], {"direction": "bidirectional", "layout": 1}),
    ("GRU", [5, 2], {"direction": "reverse"}),
]


@pytest.mark.parametrize("case", LENGTH_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{sorted(c[2])}")
def test_sequence_lens(case):
    kind, lengths, attrs = case
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    opts = {"h0": True, "c0": kind == "LSTM", "peep": kind == "LSTM"}
    a = arrays(kind, 7, len(lengths), 3, 4, dirs, layout=layout, lengths=lengths, **opts)
    m = model(kind, a, runtime=("X", "sequence_lens"), **attrs)
    got = run_stripeml(m, a)
    want = reference(kind, a, **attrs)
    check(got, want)
    y = got[0] if layout == 0 else got[0].transpose(1, 2, 0, 3)
    for n, length in enumerate(lengths):  # past a sequence's length Y is 0
        assert not y[length:, :, n].any()


def test_sequence_lens_specialises_on_its_value():
    a = arrays("LSTM", 5, 2, 3, 4, lengths=[5, 2])
    m = model("LSTM", a, runtime=("X", "sequence_lens"))
    f = so.compile(m, target="cpu")
    for lengths in ([5, 2], [3, 3], [5, 5]):
        a["sequence_lens"] = np.array(lengths, np.int32)
        check(list(f(**feeds(m, a))), reference("LSTM", a))


def test_the_numpy_reference_agrees_with_onnxruntime():
    """What :func:`reference` adds to the evaluator's formulas, as onnxruntime does it."""
    ort = pytest.importorskip("onnxruntime")
    cases = [*SPEC_CASES, ("RNN", {}, {"lengths": [6, 2, 4]}), ("GRU", {}, {"lengths": [3, 6]})]
    cases += [("LSTM", {"direction": "bidirectional"}, {"lengths": [1, 6, 4], "h0": True})]
    for kind, attrs, opts in cases:
        dirs = 2 if attrs.get("direction") == "bidirectional" else 1
        batch = len(opts["lengths"]) if "lengths" in opts else 2
        a = arrays(kind, 6, batch, 3, 4, dirs, **opts)
        m = model(kind, a, runtime=tuple(INPUTS), opset=14, hidden_size=4, **attrs)
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        check(reference(kind, a, **attrs), sess.run(None, feeds(m, a)), rtol=1e-4, atol=1e-4)


# -- errors --------------------------------------------------------------------------


def test_sequence_lens_known_only_at_run_time_is_an_error():
    x = Value("X1", (5, 2, 3), np.dtype(np.float32))
    w = Value("", (1, 16, 3), np.dtype(np.float32), np.zeros((1, 16, 3), np.float32))
    r = Value("", (1, 16, 4), np.dtype(np.float32), np.zeros((1, 16, 4), np.float32))
    lengths = Value("L1", (2,), np.dtype(np.int32))  # computed at run time
    node = Node(
        op_type="LSTM",
        name="lstm0",
        inputs=(x, w, r, None, lengths),
        attrs={"hidden_size": 4},
        opset=22,
        n_outputs=2,
    )
    with pytest.raises(StripeError, match="sequence_lens .* must be known when compiling"):
        lookup("LSTM").fn(Builder(), node)


@pytest.mark.parametrize(
    "attrs, message",
    [
        ({"hidden_size": 5}, r"W has shape \(1, 16, 3\).* it must be \(1, 20, 3\)"),
        ({"direction": "sideways"}, "direction='sideways' is not valid"),
        ({"activations": ["Sigmoid", "Tanh", "Swish"]}, "activation 'Swish' is not supported"),
        ({"activations": ["Sigmoid", "Tanh"]}, "2 activation functions given; LSTM takes 3"),
        ({"clip": -1.0}, "clip=-1.0 must be positive"),
    ],
)
def test_bad_attributes_are_errors_naming_the_node(attrs, message):
    a = arrays("LSTM", 3, 2, 3, 4)
    m = model("LSTM", a, **{"hidden_size": 4, **attrs})
    m.graph.node[0].name = "lstm0"
    with pytest.raises(StripeError, match=message) as err:
        run_stripeml(m, a)
    assert "lstm0" in str(err.value)


def test_sequence_lens_out_of_range_is_an_error():
    a = arrays("GRU", 3, 2, 3, 4, lengths=[2, 4])
    m = model("GRU", a, runtime=("X", "sequence_lens"))
    with pytest.raises(StripeError, match=r"sequence_lens holds 4; lengths must be in \[0, 3\]"):
        run_stripeml(m, a)


# -- PyTorch -------------------------------------------------------------------------


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_against_pytorch(cls):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = getattr(torch.nn, cls)(8, 16, num_layers=1, batch_first=False).eval()
    x = torch.randn(5, 3, 8)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation notices
        torch.onnx.export(net, (x,), buf, dynamo=False, opset_version=17, input_names=["x"])
    f = so.compile(onnx.load_from_string(buf.getvalue()), target="cpu")
    got = f(x.numpy())
    with torch.no_grad():
        y, state = net(x)
    np.testing.assert_allclose(got[0], y.numpy(), rtol=1e-4, atol=1e-5)
    h_n = state[0] if cls == "LSTM" else state
    np.testing.assert_allclose(got[1], h_n.numpy(), rtol=1e-4, atol=1e-5)
    if cls == "LSTM":
        np.testing.assert_allclose(got[2], state[1].numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_steps_copy_nothing_and_share_their_code(direction):
    """Each step reads its projection row through a view and writes its row of
    Y in place (no copy kernel per step), and the steps of a direction share
    one compiled body per kernel (the rows' offsets are taken out)."""
    from stripeml.analysis.canonical import canonical_kernel
    from stripeml.ir.nodes import Block

    seq, dirs = 12, 2 if direction == "bidirectional" else 1
    a = arrays("LSTM", seq, 1, 8, 16, dirs)
    m = model("LSTM", a, ["Y"], hidden_size=16, direction=direction)
    want = ReferenceEvaluator(m).run(None, feeds(m, a))
    f = so.compile(m, target="cpu")
    check([f(**feeds(m, a))], want)
    program = f.lower(**feeds(m, a)).program
    kernels = [s for s in program.root.stmts if isinstance(s, Block)]
    one_term = re.compile(r"= [=+]\(\w+\[[^\]]*\]\)(,|$)")  # a copy, ``=`` or ``+``
    copies = [k for k in kernels if one_term.search(k.comment) and "fill" not in k.tags]
    assert len(copies) <= dirs, [k.comment for k in copies]  # a last step's row at most
    bodies = {canonical_kernel(program.root, k).text for k in kernels}
    assert len(kernels) >= seq * dirs  # a product and its gate math per step (an LSTM's one kernel)
    assert len(bodies) <= 8 * dirs, len(bodies)


BIDIRECTIONAL_CASES = [
    # kind, attributes, array options
    ("GRU", {"layout": 1}, {"h0": True, "lengths": [5, 5]}),  # equal lengths, shorter than X
    ("GRU", {"linear_before_reset": 1, "clip": 0.8}, {"runtime": INPUTS}),
    ("GRU", {}, {"runtime": INPUTS, "h0": True}),
    ("LSTM", {"activations": ["Sigmoid", "Tanh", "Tanh"] * 2}, {"h0": True, "c0": True, "peep": True}),
    ("LSTM", {"layout": 1}, {"peep": True, "lengths": [6, 2, 0]}),
    ("LSTM", {}, {"h0": True, "c0": True, "lengths": [4, 4, 4]}),
    ("RNN", {"activations": ["Relu", "Relu"]}, {"runtime": INPUTS, "h0": True}),
    # more entries than the per-entry copies take: a gather each way
    ("GRU", {"direction": "reverse"}, {"h0": True, "lengths": [7, 3, 0, 5, 1, 6] * 3}),
    ("RNN", {"layout": 1}, {"lengths": [2, 7, 4] * 6}),
]  # fmt: skip


@pytest.mark.parametrize(
    "case", BIDIRECTIONAL_CASES, ids=lambda c: f"{c[0]}-{sorted(c[1])}-{sorted(c[2])}"
)
def test_bidirectional_against_the_reference(case):
    """Both directions (or a reverse one) with states, peepholes, clip, run-time
    weights, equal lengths shorter than X and unequal ones, in either layout:
    Y, Y_h and Y_c against the NumPy reference."""
    kind, attrs, opts = case
    attrs, opts = {"direction": "bidirectional", **attrs}, dict(opts)
    runtime = tuple(opts.pop("runtime", ("X",)))
    if "lengths" in opts:
        runtime = (*runtime, "sequence_lens")
    batch = len(opts["lengths"]) if "lengths" in opts else 2
    dirs = 2 if attrs["direction"] == "bidirectional" else 1
    a = arrays(kind, 7, batch, 3, 4, dirs, layout=attrs.get("layout", 0), **opts)
    m = model(kind, a, runtime=runtime, **attrs)
    check(run_stripeml(m, a), reference(kind, a, **attrs))


@pytest.mark.parametrize("batch", [3, 17])
def test_unequal_lengths_reverse_through_copies(batch):
    """A reverse direction with unequal lengths reads X and writes Y in
    processing order through one ``=`` copy per batch entry each way (native
    kernels sharing one compiled body per way); past 16 entries through two
    gathers (host steps)."""
    from stripeml.analysis.canonical import canonical_kernel
    from stripeml.ir.nodes import Block, Special

    lengths = [(7 * k + 3) % 8 for k in range(batch)]  # 3, 2, 1, 0, 7 ...
    a = arrays("LSTM", 7, batch, 3, 4, 2, h0=True, lengths=lengths)
    m = model("LSTM", a, runtime=("X", "sequence_lens"), direction="bidirectional")
    f = so.compile(m, target="cpu")
    check(list(f(**feeds(m, a))), reference("LSTM", a, direction="bidirectional"))
    program = f.lower(**feeds(m, a)).program
    gathers = [s for s in program.root.stmts if isinstance(s, Special) and s.op == "gather"]
    assert len(gathers) == (0 if batch <= 16 else 2)
    if batch <= 16:
        reversed_copies = [
            k
            for k in program.root.stmts
            if isinstance(k, Block) and " - t, " in k.comment and "fill" not in k.tags
        ]
        assert len(reversed_copies) == 2 * sum(n > 0 for n in lengths)
        bodies = {canonical_kernel(program.root, k).text for k in reversed_copies}
        assert len(bodies) <= 2, len(bodies)
