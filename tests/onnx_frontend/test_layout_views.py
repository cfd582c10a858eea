"""Transposes and reshapes as layouts: results against ONNX's reference
evaluator, and the copies the CPU program is left with (channel shuffles,
attention heads, transposed operands of MatMul)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml.ir.nodes import Block, Load, Special, Store  # noqa: E402

RNG = np.random.default_rng(17)


def _graph(nodes, inputs, outputs, inits=None):
    vis = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(nodes, "g", vis, outs, initializer=init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _copies(exe) -> int:
    """Root kernels that only move data (loads and assigning stores: not a max
    or a sum), and root specials."""

    def only_moves(blk: Block) -> bool:
        assigns = all(r.agg in ("", "assign") for r in blk.refs if r.dir != "in")
        return assigns and all(
            only_moves(s) if isinstance(s, Block) else isinstance(s, (Load, Store))
            for s in blk.stmts
        )

    stmts = exe.program.root.stmts
    return sum(
        1 for s in stmts if isinstance(s, Special) or (isinstance(s, Block) and only_moves(s))
    )


def _check(model, feeds, target="cpu"):
    want = ReferenceEvaluator(model).run(None, feeds)
    fn = stripeml.onnx.compile(model, target=target)
    got = fn(**feeds)
    got = got if isinstance(got, (list, tuple)) else [got]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    arrays = [feeds[n] for n in fn.input_names]
    spec = fn.specialise(arrays)
    return spec.function.lower(*spec.call_args(arrays))


def _const(name, *shape, scale=0.3):
    return name, (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_channel_shuffle_is_one_copy(target):
    """Conv -> Reshape (split channels) -> Transpose -> Reshape (merge) -> Conv:
    the shuffle is one channels-last copy, not NCHW round trips."""
    w1, w2 = dict([_const("w1", 12, 3, 1, 1)]), dict([_const("w2", 5, 12, 3, 3)])
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Reshape", ["r", "s5"], ["g"]),
        helper.make_node("Transpose", ["g"], ["t"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t", "s4"], ["m"]),
        helper.make_node("Conv", ["m", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    inits = {**w1, **w2, "s5": np.array([1, 3, 4, 6, 7]), "s4": np.array([1, 12, 6, 7])}
    model = _graph(nodes, {"x": [1, 3, 6, 7]}, ["y"], inits)
    x = RNG.standard_normal((1, 3, 6, 7)).astype(np.float32)
    exe = _check(model, {"x": x}, target)
    if target == "cpu":
        # the input's NCHW -> NHWC, the shuffle and the output's NHWC -> NCHW (the
        # shuffle writes the padded convolution's halo directly: alias_copy)
        assert _copies(exe) == 3


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_attention_heads_and_transposed_keys_are_not_copied(target):
    """Q/K/V projections split into heads, K transposed for the scores, the
    heads merged back: the MatMuls read the projections through views."""
    s, d, h = 8, 12, 3
    inits = dict(
        [_const("wq", d, d), _const("wk", d, d), _const("wv", d, d)],
        shape4=np.array([1, s, h, d // h]),
        shape3=np.array([1, s, d]),
    )
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Reshape", ["q", "shape4"], ["q4"]),
        helper.make_node("Reshape", ["k", "shape4"], ["k4"]),
        helper.make_node("Reshape", ["v", "shape4"], ["v4"]),
        helper.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qh", "kt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "shape3"], ["y"]),
    ]
    model = _graph(nodes, {"x": [1, s, d]}, ["y"], inits)
    x = RNG.standard_normal((1, s, d)).astype(np.float32)
    exe = _check(model, {"x": x}, target)
    if target == "cpu":
        # the merge of the heads ([1, h, s, d/h] to [1, s, h, d/h]) is the kernel
        # that divides the product by the softmax's sums (divide_late): no copy
        assert _copies(exe) == 0


def test_transposes_compose_and_cancel():
    """Two transposes that cancel cost nothing; a transposed result is
    materialised once, at the output."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["a"], perm=[2, 0, 1]),
        helper.make_node("Exp", ["a"], ["e"]),
        helper.make_node("Transpose", ["e"], ["b"], perm=[1, 2, 0]),
        helper.make_node("Transpose", ["x"], ["c"], perm=[1, 0, 2]),
    ]
    model = _graph(nodes, {"x": [2, 3, 4]}, ["b", "c"])
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    exe = _check(model, {"x": x})
    assert _copies(exe) == 1  # c, a transposed graph input


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_shape_ops_of_channels_last_values(target):
    """Flatten, Squeeze and Unsqueeze of NHWC activations (a classifier head)."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Squeeze", ["p", "axes"], ["q"]),
        helper.make_node("Unsqueeze", ["q", "axes0"], ["u"]),
        helper.make_node("Reshape", ["a", "flat"], ["r"]),
    ]
    inits = dict(
        [_const("w", 6, 4, 1, 1)],
        axes=np.array([2, 3]),
        axes0=np.array([0]),
        flat=np.array([1, 6, 20]),
    )
    model = _graph(nodes, {"x": [1, 4, 4, 5]}, ["f", "u", "r"], inits)
    x = RNG.standard_normal((1, 4, 4, 5)).astype(np.float32)
    _check(model, {"x": x}, target)


@pytest.mark.parametrize(
    "shape",
    [(8, 3, 3, 3), (16, 1, 3, 3), (200, 70, 1, 1), (5, 7, 1, 3), (6, 1, 1, 1), (130, 4, 2, 5)],
)
def test_weights_laid_out_channels_last_in_blocks(shape):
    """The blocked copy of convolution weights is NumPy's transpose, contiguous."""
    from stripeml.onnx.layout_conv import _channels_last

    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = _channels_last(w)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, w.transpose(2, 3, 1, 0))
    # a batch normalisation's per-channel factor, folded in on the way: the same
    # float32 products as scaling first, then transposing
    s = np.random.default_rng(1).standard_normal(shape[0]).astype(np.float32)
    scaled = _channels_last(w, s)
    assert scaled.flags.c_contiguous and scaled.flags.owndata
    np.testing.assert_array_equal(scaled, (w * s[:, None, None, None]).transpose(2, 3, 1, 0))
