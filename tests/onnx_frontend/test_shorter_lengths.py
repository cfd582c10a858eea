"""Shorter lengths through the longer length's program (``onnx/lengths.py``).

A model with a symbolic sequence is compiled once, at the first length; a
shorter length runs that program on inputs padded to it, with the
reductions over the sequence masked, and is compiled for its own size only
after ``CALLS_BEFORE_OWN`` calls.  Every result is checked against NumPy
(float64), written from the model's description, never against stripeml;
that no compile happened is read from the compile profile (``phases``).
Models whose values depend on the length (a mean over the sequence), or
that move positions (a convolution along it), keep compiling per length,
with correct results."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml import phases  # noqa: E402
from stripeml.onnx import lengths  # noqa: E402

H = 8
RNG = np.random.default_rng(11)
WQ, WK, WV = ((RNG.standard_normal((H, H)) / 3).astype(np.float32) for _ in range(3))


def _model(extra: list, outputs: list[str], batch: object = 1) -> onnx.ModelProto:
    """``X`` (1, seq, 8) and ``M`` (1, seq), the mask, through one masked
    self-attention (``A``), then ``extra`` nodes; ``outputs`` are graph outputs."""
    inits = [
        numpy_helper.from_array(WQ, "Wq"),
        numpy_helper.from_array(WK, "Wk"),
        numpy_helper.from_array(WV, "Wv"),
        numpy_helper.from_array(np.array(0.35, np.float32), "scale"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(-1e4, np.float32), "big"),
        numpy_helper.from_array(np.array([1], np.int64), "ax1"),
    ]
    nodes = [
        helper.make_node("MatMul", ["X", "Wq"], ["q"]),
        helper.make_node("MatMul", ["X", "Wk"], ["k"]),
        helper.make_node("MatMul", ["X", "Wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Sub", ["one", "M"], ["nm"]),
        helper.make_node("Mul", ["nm", "big"], ["bias2"]),
        helper.make_node("Unsqueeze", ["bias2", "ax1"], ["bias"]),
        helper.make_node("Add", ["ss", "bias"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["A"]),
        *extra,
    ]
    graph = helper.make_graph(
        nodes,
        "masked_attention",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [batch, "seq", H]),
            helper.make_tensor_value_info("M", TensorProto.FLOAT, [batch, "seq"]),
        ],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _attention(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    x, m = x.astype(np.float64), m.astype(np.float64)
    q, k, v = x @ WQ, x @ WK, x @ WV
    s = (q @ k.transpose(0, 2, 1)) * 0.35 + ((1.0 - m) * -1e4)[:, None, :]
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ v


def _inputs(seq: int, seed: int, batch: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, seq, H)).astype(np.float32)
    m = np.ones((batch, seq), np.float32)
    m[:, seq // 2 :: 3] = 0.0  # some keys masked by the model itself
    return x, m


def _call(fn, x, m):
    with phases.recording() as rec:
        out = fn(X=x, M=m)
    compiled = any(name.startswith("pass ") or name == "codegen" for name in rec.seconds)
    return (out if isinstance(out, tuple) else (out,)), compiled


def test_a_shorter_length_runs_the_first_program_then_gets_its_own():
    """Attention, a max and a sum over the sequence, and the first position
    (``Gather`` of index 0): at 12, then 7, 5 and 1 without compiling,
    then 7's own program after two calls; 20 (longer) compiles its masked
    program, which 15 then runs."""
    extra = [
        helper.make_node("ReduceMax", ["A"], ["mx"], axes=[1], keepdims=1),
        helper.make_node("ReduceSum", ["A", "ax1"], ["sm_"], keepdims=1),
        helper.make_node("Gather", ["A", "zero"], ["cls"], axis=1),
    ]
    model = _model(extra, ["A", "mx", "sm_", "cls"])
    model.graph.initializer.append(numpy_helper.from_array(np.array(0, np.int64), "zero"))
    fn = stripeml.onnx.compile(model, target="cpu")

    def check(seq: int, seed: int) -> bool:
        x, m = _inputs(seq, seed)
        (a, mx, sm, cls), compiled = _call(fn, x, m)
        want = _attention(x, m)
        np.testing.assert_allclose(a, want, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(mx, want.max(1, keepdims=True), rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(sm, want.sum(1, keepdims=True), rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(cls, want[:, 0], rtol=2e-5, atol=2e-5)
        return compiled

    assert check(12, 0)  # the first length compiles the masked program
    assert fn._lengths is not None and fn._lengths.n == 12
    assert "index(" in fn._lengths.source and "LEN" in fn._lengths.source
    assert not check(7, 1)
    assert not check(5, 2)
    assert not check(1, 3)
    assert not check(7, 4)  # a second call at 7: still the program of 12
    assert check(7, 5)  # the third compiles 7's own
    assert not check(7, 6)  # which the calls after it run
    assert check(20, 7)  # longer than the first: compiled, masked, for 20
    assert fn._lengths.n == 20
    assert not check(12, 8)  # the program of 12 runs it still
    assert not check(15, 9)  # through the program of 20

    # positional arrays take the call's fast path (the last signature's
    # program): the count of calls through the longer program holds there too
    x, m = _inputs(9, 10)
    want = _attention(x, m)
    for compiles in (False, False, True, False):
        with phases.recording() as rec:
            a = fn(x, m)[0]
        assert ("codegen" in rec.seconds) == compiles
        np.testing.assert_allclose(a, want, rtol=2e-5, atol=2e-5)


def test_a_batch_and_a_sequence_each_shorter():
    """Both dimensions symbolic: a first call of 3 x 10 masks both (the
    sequence's reductions by its length); fewer rows, a shorter sequence or
    both run that program; a batch of 4 compiles its own masked program."""
    fn = stripeml.onnx.compile(_model([], ["A"], batch="batch"), target="cpu")

    def check(batch: int, seq: int, seed: int) -> bool:
        x, m = _inputs(seq, seed, batch)
        (a,), compiled = _call(fn, x, m)
        np.testing.assert_allclose(a, _attention(x, m), rtol=2e-5, atol=2e-5)
        return compiled

    assert check(3, 10, 0)
    assert fn._lengths is not None and fn._lengths.ns == (10, 3)
    assert "LEN1" in fn._lengths.source
    assert not check(2, 6, 1)
    assert not check(3, 4, 2)
    assert not check(1, 10, 3)
    assert check(4, 5, 4)  # a longer batch
    assert fn._lengths.ns == (5, 4)
    assert not check(2, 3, 5)


def test_each_reduction_is_masked_with_its_identity():
    """A minimum (+inf), a product (1), and an int32 maximum (its least value)
    and sum (0) over the sequence: the shorter lengths run the first program
    and give NumPy's results."""
    extra = [
        helper.make_node("ReduceMin", ["A"], ["mn"], axes=[1], keepdims=1),
        helper.make_node("Sigmoid", ["A"], ["sg"]),
        helper.make_node("ReduceProd", ["sg"], ["pr"], axes=[1], keepdims=1),
        helper.make_node("Cast", ["A"], ["ai"], to=TensorProto.INT32),
        helper.make_node("ReduceMax", ["ai"], ["imx"], axes=[1], keepdims=1),
        helper.make_node("ReduceSum", ["ai", "ax1"], ["isum"], keepdims=1),
    ]
    fn = stripeml.onnx.compile(_model(extra, ["mn", "pr", "imx", "isum"]), target="cpu")
    for seq, seed, compiles in ((10, 0, True), (6, 1, False), (3, 2, False)):
        x, m = _inputs(seq, seed)
        (mn, pr, imx, isum), compiled = _call(fn, x * 5, m)
        assert compiled == compiles
        a = _attention(x * 5, m)
        ai = a.astype(np.float32).astype(np.int32)  # as the model's Cast rounds
        np.testing.assert_allclose(mn, a.min(1, keepdims=True), rtol=2e-5, atol=2e-5)
        sig = 1 / (1 + np.exp(-a))
        np.testing.assert_allclose(pr, sig.prod(1, keepdims=True), rtol=2e-5, atol=1e-9)
        np.testing.assert_array_equal(imx, ai.max(1, keepdims=True))
        np.testing.assert_array_equal(isum, ai.sum(1, keepdims=True))
    fills = [line.split(" : ")[-1] for line in fn._lengths.source.splitlines() if "index(" in line]
    assert {"LEN_HI_FLOAT32;", "1;", "LEN_LO_INT32;", "0;"} <= set(fills)


def test_values_that_depend_on_the_length_keep_a_program_per_length():
    """A mean over the sequence divides by the length: no shorter-length
    program, and every length still computes the mean of its own."""
    model = _model(
        [helper.make_node("ReduceMean", ["A"], ["mean"], axes=[1], keepdims=1)], ["mean"]
    )
    fn = stripeml.onnx.compile(model, target="cpu")
    for seq, seed in ((10, 0), (6, 1)):
        x, m = _inputs(seq, seed)
        (mean,), compiled = _call(fn, x, m)
        assert compiled
        np.testing.assert_allclose(
            mean, _attention(x, m).mean(1, keepdims=True), rtol=2e-5, atol=2e-5
        )
    assert fn._lengths is None


def test_a_convolution_along_the_sequence_keeps_a_program_per_length():
    """A convolution over the sequence reads the neighbouring positions (the
    last one's right neighbour is the padding, not the zero border)."""
    w = (RNG.standard_normal((H, H, 3)) / 3).astype(np.float32)
    extra = [
        helper.make_node("Transpose", ["A"], ["at"], perm=[0, 2, 1]),
        helper.make_node("Conv", ["at", "W"], ["c"], pads=[1, 1], kernel_shape=[3]),
    ]
    model = _model(extra, ["c"])
    model.graph.initializer.append(numpy_helper.from_array(w, "W"))
    fn = stripeml.onnx.compile(model, target="cpu")
    for seq, seed in ((9, 0), (4, 1)):
        x, m = _inputs(seq, seed)
        (c,), compiled = _call(fn, x, m)
        assert compiled
        a = np.pad(_attention(x, m).transpose(0, 2, 1), ((0, 0), (0, 0), (1, 1)))
        want = sum(np.einsum("oi,bis->bos", w[:, :, t], a[:, :, t : t + seq]) for t in range(3))
        np.testing.assert_allclose(c, want, rtol=2e-5, atol=2e-5)
    assert fn._lengths is None


def test_turned_off(monkeypatch):
    """``STRIPEML_LENGTHS=0``: every length is compiled."""
    monkeypatch.setenv("STRIPEML_LENGTHS", "0")
    fn = stripeml.onnx.compile(_model([], ["A"]), target="cpu")
    for seq, seed in ((8, 0), (3, 1)):
        x, m = _inputs(seq, seed)
        (a,), compiled = _call(fn, x, m)
        assert compiled
        np.testing.assert_allclose(a, _attention(x, m), rtol=2e-5, atol=2e-5)
    assert fn._lengths is None


def test_a_reduction_that_leaves_an_operand_out_is_not_masked():
    """``+(A[k] * B[j])`` over a marked ``k``: masking ``A`` would leave
    ``B`` counted once per padded position, so the rule refuses it; a sum
    over the positions of a product of two operands read along them gets
    both masked with 0, a maximum its operand with -inf."""
    from stripeml.onnx import lengths_rules as rules
    from stripeml.tile.parser import parse

    src = (
        "function (A[1, 9], B[1, 9], C[4]) -> (O, P, Q) {\n"
        "    O[j : 4] = +(A[0, k] * C[j]);\n"
        "    P[i : 1] = +(A[i, k] * B[i, k]);\n"
        "    Q[i : 1] = >(A[i, k]);\n"
        "}\n"
    )
    tree = parse(src)
    marks = {"A": {1: 0}, "B": {1: 0}}
    shapes = {"A": (1, 9), "B": (1, 9), "C": (4,), "O": (4,), "P": (1,), "Q": (1,)}
    assert rules.masks(tree, marks, shapes, set()) is None
    ok = parse(src.replace("    O[j : 4] = +(A[0, k] * C[j]);\n", ""))
    masks, gathered, least = rules.masks(ok, marks, shapes, set())
    assert masks == {0: [("A", 1, "0", 0), ("B", 1, "0", 0)], 1: [("A", 1, "-inf", 0)]}
    assert gathered == [] and least == {}
    assert lengths.CALLS_BEFORE_OWN >= 1


_WARM_CHILD = """
import json, sys
sys.path.insert(0, {here!r})
import numpy as np
import stripeml.onnx
from stripeml.onnx import lengths
from test_shorter_lengths import _model, _inputs

imports = []
real = lengths._quietly
lengths._quietly = lambda owner, arrays: imports.append(arrays[0].shape) or real(owner, arrays)
fn = stripeml.onnx.compile(_model([], ["A"]), target="cpu")
out = {{}}
for seq, seed in ((12, 0), (7, 1)):
    x, m = _inputs(seq, seed)
    out[seq] = np.asarray(fn(X=x, M=m)).tolist()
print(json.dumps({{"imports": imports, "out": out, "masked": fn._lengths is not None}}))
"""


def test_a_warm_start_does_not_probe_again(tmp_path):
    """The first process probes the model at 11 and remembers what it found
    (``lengths/`` in the disk cache); a second process imports it at 12 only
    (and at 7 for that call's check), with the same results."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "STRIPEML_CACHE_DIR": str(tmp_path / "cache")}
    code = _WARM_CHILD.format(here=str(Path(__file__).parent))
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["masked"] and warm["masked"]
    assert [1, 11, 8] in cold["imports"]  # the probe
    assert warm["imports"] == [[1, 7, 8]]  # only the shorter call's check
    assert (tmp_path / "cache" / "lengths").is_dir()
    for seq, seed in ((12, 0), (7, 1)):
        x, m = _inputs(seq, seed)
        np.testing.assert_allclose(
            np.array(warm["out"][str(seq)]), _attention(x, m), rtol=2e-5, atol=2e-5
        )
