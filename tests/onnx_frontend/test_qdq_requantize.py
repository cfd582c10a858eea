"""Quantised blocks kept in bytes (onnx/qdq.py, onnx/ops/integer.py).

A QDQ model writes ``Conv -> [Relu ->] QuantizeLinear`` and ``Add(DequantizeLinear,
DequantizeLinear) -> QuantizeLinear``; the importer folds each quantisation into
the node before it (``_QConv``, ``_QAdd``): one multiply-add and a rounding per
element, over the quantised bytes, where the nodes as written divide and pass
4-byte floats between them.  The multiplier differs from the division by float
rounding, so a value within a rounding of a tie may land one step away: each
case is checked against onnx's reference evaluator (NumPy) to one step of the
output's scale, on a few elements at most, and asserts the form the program
took.  The runtime part: a ``bitview`` that ``place`` gave its source's bytes is
not run at all."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml.onnx  # noqa: E402

RNG = np.random.default_rng(5)
S_OUT = 0.05  # the block output's scale: the unit of the tolerance


def _block_model(
    c=16, hw=(6, 7), dtype=np.uint8, conv_relu=False, add_relu=False, group=1, side=None
):
    """X -> Q -> DQ -> Conv 1x1 -> Q -> DQ (r) -> Conv 3x3 [-> Relu] -> Q -> DQ ->
    Add(., r or DQ(Q(side))) [-> Relu] -> Q -> DQ -> Y: a residual block as
    ``quantize_static`` writes it (both operands of the sum channels-last, or
    the side input quantised on its own)."""

    def zero(z):
        return np.array(z if dtype == np.uint8 else z - 128, dtype)

    def weights(name, k, groups=1):
        return [
            nh.from_array(RNG.integers(-127, 128, (c, c // groups, k, k)).astype(np.int8), name),
            nh.from_array((RNG.random(c) * 0.01 + 0.002).astype(np.float32), "s" + name),
            nh.from_array(np.zeros(c, np.int8), "z" + name),
            nh.from_array(RNG.standard_normal(c).astype(np.float32), "b" + name),
        ]

    inits = [
        nh.from_array(np.array(0.04, np.float32), "sx"),
        nh.from_array(zero(120), "zx"),
        *weights("w0", 1),
        *weights("w1", 3, group),
        nh.from_array(np.array(0.06, np.float32), "sr"),
        nh.from_array(zero(110), "zr"),
        nh.from_array(np.array(0.07, np.float32), "s1"),
        nh.from_array(zero(0 if conv_relu else 100), "z1"),
        nh.from_array(np.array(S_OUT, np.float32), "s2"),
        nh.from_array(zero(90), "z2"),
        nh.from_array(np.array(0.03, np.float32), "ss"),
        nh.from_array(zero(140), "zs"),
    ]
    nodes = [
        h.make_node("QuantizeLinear", ["X", "sx", "zx"], ["xq"]),
        h.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        h.make_node("DequantizeLinear", ["w0", "sw0", "zw0"], ["w0d"], axis=0),
        h.make_node("Conv", ["xd", "w0d", "bw0"], ["r"]),
        h.make_node("QuantizeLinear", ["r", "sr", "zr"], ["rq"]),
        h.make_node("DequantizeLinear", ["rq", "sr", "zr"], ["rd"]),
        h.make_node("DequantizeLinear", ["w1", "sw1", "zw1"], ["w1d"], axis=0),
        h.make_node("Conv", ["rd", "w1d", "bw1"], ["c"], pads=[1, 1, 1, 1], group=group),
    ]
    conv_out = "c"
    if conv_relu:
        nodes.append(h.make_node("Relu", ["c"], ["cr"]))
        conv_out = "cr"
    nodes += [
        h.make_node("QuantizeLinear", [conv_out, "s1", "z1"], ["cq"]),
        h.make_node("DequantizeLinear", ["cq", "s1", "z1"], ["cd"]),
    ]
    inputs = [h.make_tensor_value_info("X", T.FLOAT, (1, c, *hw))]
    residual = "rd"
    if side is not None:  # another input, quantised on its own, broadcast in the sum
        inputs.append(h.make_tensor_value_info("S", T.FLOAT, side))
        nodes += [
            h.make_node("QuantizeLinear", ["S", "ss", "zs"], ["sq"]),
            h.make_node("DequantizeLinear", ["sq", "ss", "zs"], ["sd"]),
        ]
        residual = "sd"
    nodes.append(h.make_node("Add", ["cd", residual], ["a"]))
    add_out = "a"
    if add_relu:
        nodes.append(h.make_node("Relu", ["a"], ["ar"]))
        add_out = "ar"
    nodes += [
        h.make_node("QuantizeLinear", [add_out, "s2", "z2"], ["yq"]),
        h.make_node("DequantizeLinear", ["yq", "s2", "z2"], ["Y"]),
    ]
    out = [h.make_tensor_value_info("Y", T.FLOAT, None)]
    g = h.make_graph(nodes, "qblock", inputs, out, inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)])


def _feeds(model):
    feeds = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = (RNG.standard_normal(shape) * 1.5).astype(np.float32)
    return feeds


def _within_a_step(got, want, step=S_OUT):
    """Equal but for a few elements one quantisation step away (ties rounded
    after a multiply instead of a division)."""
    assert got.shape == want.shape
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert float(diff.max()) <= step * 1.001
    assert int((diff > step * 1e-3).sum()) <= max(2, diff.size // 200)


def _source(fn, feeds):
    return fn.specialise([feeds[n] for n in fn.input_names]).source


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("conv_relu, add_relu", [(False, False), (True, True)])
def test_a_residual_block_is_requantised_without_division(dtype, conv_relu, add_relu):
    model = _block_model(dtype=dtype, conv_relu=conv_relu, add_relu=add_relu)
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    fn = stripeml.onnx.compile(model, target="cpu")
    _within_a_step(fn(**feeds), want)
    src = _source(fn, feeds)
    # the graph input's QuantizeLinear divides; the convolution's and the sum's
    # quantisation are multiply-adds folded into them, their Relus too
    assert src.count(" / ") == 1, src
    assert "// _QAdd" in src and "// Relu" not in src
    # the sum joins the convolution's kernel and reads its clamped float, not
    # its bytes; the residual's bytes (the first convolution's) are read as such
    added = src.split("// _QAdd\n", 1)[1].split("\n", 1)[0]
    assert added.count("as_float(T") == 1 and " ? " in added, added
    assert "dot4(" in fn.lower(**feeds).ir


def test_a_residual_block_against_onnxruntime():
    """onnxruntime requantises with its own multipliers and integer bias: it is
    a few steps from the reference on a few elements; stripeml no farther from it."""
    ort = pytest.importorskip("onnxruntime")
    model = _block_model(c=32, hw=(9, 8))
    feeds = _feeds(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, feeds)[0]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = stripeml.onnx.compile(model, target="cpu")(**feeds)
    _within_a_step(got, want)
    assert float(np.abs(got - theirs).max()) <= float(np.abs(theirs - want).max()) + S_OUT * 1.001


def test_a_sum_with_a_broadcast_operand_in_another_layout():
    """The residual a (1, C, 1, 1) input quantised on its own: the sum reads both
    as logical tensors, broadcasting."""
    model = _block_model(side=(1, 16, 1, 1))
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    fn = stripeml.onnx.compile(model, target="cpu")
    _within_a_step(fn(**feeds), want)
    assert "// _QAdd" in _source(fn, feeds)


def test_a_grouped_convolution_keeps_the_float_form_and_its_quantisation():
    """No integer form (two groups): the float convolution, then the folded
    Relu and QuantizeLinear as the model writes them (a division)."""
    model = _block_model(conv_relu=True, group=2)
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    fn = stripeml.onnx.compile(model, target="cpu")
    _within_a_step(fn(**feeds), want)
    src = _source(fn, feeds)
    assert src.count("dot4(") == 1  # the 1x1 convolution's only
    assert src.count(" / ") == 2  # the input's and the 3x3 convolution's quantisation


def test_a_sum_of_dequantised_values_read_as_floats_is_the_models():
    """``Add(DQ(a), DQ(b))`` with no QuantizeLinear after it: the dequantised sum,
    read straight from the bytes."""
    inits = [
        nh.from_array(np.array(0.02, np.float32), "sa"),
        nh.from_array(np.array(3, np.uint8), "za"),
        nh.from_array(np.array(0.5, np.float32), "sb"),
        nh.from_array(np.array(-4, np.int8), "zb"),
    ]
    nodes = [
        h.make_node("DequantizeLinear", ["A", "sa", "za"], ["ad"]),
        h.make_node("DequantizeLinear", ["B", "sb", "zb"], ["bd"]),
        h.make_node("Add", ["ad", "bd"], ["Y"]),
    ]
    g = h.make_graph(
        nodes,
        "qsum",
        [
            h.make_tensor_value_info("A", T.UINT8, (3, 5)),
            h.make_tensor_value_info("B", T.INT8, (5,)),
        ],
        [h.make_tensor_value_info("Y", T.FLOAT, None)],
        inits,
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    feeds = {
        "A": RNG.integers(0, 256, (3, 5)).astype(np.uint8),
        "B": RNG.integers(-128, 128, (5,)).astype(np.int8),
    }
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    fn = stripeml.onnx.compile(model, target="cpu")
    np.testing.assert_allclose(fn(**feeds), want, rtol=1e-6, atol=1e-6)
    src = _source(fn, feeds)
    written = src.split("// _QAdd\n", 1)[1].split("\n", 1)[0]  # its statement reads the bytes
    assert "as_float(X1, 32)" in written and "as_float(X2, 32)" in written, src


def test_a_quantisation_read_elsewhere_too_is_not_folded():
    """The convolution's float result is also a graph output: its QuantizeLinear
    stays a node of its own, and both results are the model's."""
    model = _block_model()
    model.graph.output.append(h.make_tensor_value_info("c", T.FLOAT, None))
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)
    fn = stripeml.onnx.compile(model, target="cpu")
    got = fn(**feeds)
    _within_a_step(got[0], want[0])
    scale = float(np.abs(want[1]).max())
    np.testing.assert_allclose(got[1], want[1], atol=scale * 1e-5)
    src = _source(fn, feeds)
    assert src.count(" / ") == 2 and "// _QAdd" in src  # the input's and the 3x3 convolution's


def test_a_bitview_given_its_sources_bytes_is_not_run():
    """``place`` gives each ``view_int`` of a convolution's input its source's
    bytes: the runtime leaves those specials out of the run (none appears in the
    profile), and the results are unchanged."""
    model = _block_model(c=32)
    feeds = _feeds(model)
    fn = stripeml.onnx.compile(model, target="cpu")
    arrays = [feeds[n] for n in fn.input_names]
    spec = fn.specialise(arrays)
    args = spec.call_args(arrays)
    exe = spec.function.lower(*args)
    assert "bitview" in exe.ir
    exe(*args)
    rows = exe.profile(*args, repeat=1)
    assert not [r.kernel for r in rows if r.kernel.startswith("special")]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    _within_a_step(fn(**feeds), want)


@pytest.mark.parametrize("same", [True, False])
def test_a_max_pool_between_quantisations_runs_on_the_bytes(same):
    """``Q(MaxPool(DQ(x)))`` with one scale and zero point: the pool of the bytes
    (a stem's max pool), no float copy of the image; another scale after it
    keeps the model's nodes."""
    inits = [
        nh.from_array(np.array(0.04, np.float32), "sx"),
        nh.from_array(np.array(120, np.uint8), "zx"),
        nh.from_array(RNG.integers(-127, 128, (8, 8, 3, 3)).astype(np.int8), "w"),
        nh.from_array((RNG.random(8) * 0.01 + 0.002).astype(np.float32), "sw"),
        nh.from_array(np.zeros(8, np.int8), "zw"),
        nh.from_array(np.array(0.07, np.float32), "s1"),
        nh.from_array(np.array(0, np.uint8), "z1"),
        nh.from_array(np.array(0.07 if same else 0.09, np.float32), "s2"),
        nh.from_array(np.array(0, np.uint8), "z2"),
    ]
    nodes = [
        h.make_node("QuantizeLinear", ["X", "sx", "zx"], ["xq"]),
        h.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        h.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
        h.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("QuantizeLinear", ["c", "s1", "z1"], ["cq"]),
        h.make_node("DequantizeLinear", ["cq", "s1", "z1"], ["cd"]),
        h.make_node(
            "MaxPool", ["cd"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        ),
        h.make_node("QuantizeLinear", ["p", "s2", "z2"], ["pq"]),
        h.make_node("DequantizeLinear", ["pq", "s2", "z2"], ["Y"]),
    ]
    g = h.make_graph(
        nodes,
        "qpool",
        [h.make_tensor_value_info("X", T.FLOAT, (1, 8, 11, 10))],
        [h.make_tensor_value_info("Y", T.FLOAT, None)],
        inits,
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    fn = stripeml.onnx.compile(model, target="cpu")
    _within_a_step(fn(**feeds), want, step=0.09)
    src = _source(fn, feeds)
    pooled = src.split("// MaxPool\n", 1)[1].split("\n", 1)[0]
    assert src.count(" / ") == (1 if same else 2), src
    read = pooled.split(" = >(", 1)[1].split("[", 1)[0]
    defined = next(t.strip() for t in src.splitlines() if t.strip().startswith(f"{read} = "))
    assert defined.startswith(f"{read} = as_uint(") == same, src  # the bytes, or their floats


@pytest.mark.parametrize("depth, integer", [(64, True), (30, False)])
def test_a_quantised_classifier_layer_is_an_integer_product(depth, integer):
    """``Q(Gemm(DQ(a), DQ(w), c))`` (a classifier's last layer, ``transB``, weights
    per output column): the bytes times the weights packed as int8 words, where
    the nodes read the weights dequantised to four times their bytes; a depth that
    is not a multiple of four keeps the float product."""
    cols = 24
    inits = [
        nh.from_array(np.array(0.04, np.float32), "sa"),
        nh.from_array(np.array(7, np.uint8), "za"),
        nh.from_array(RNG.integers(-127, 128, (cols, depth)).astype(np.int8), "w"),
        nh.from_array((RNG.random(cols) * 0.01 + 0.002).astype(np.float32), "sw"),
        nh.from_array(np.zeros(cols, np.int8), "zw"),
        nh.from_array(RNG.standard_normal(cols).astype(np.float32), "c"),
        nh.from_array(np.array(S_OUT, np.float32), "sy"),
        nh.from_array(np.array(128, np.uint8), "zy"),
    ]
    nodes = [
        h.make_node("QuantizeLinear", ["X", "sa", "za"], ["aq"]),
        h.make_node("DequantizeLinear", ["aq", "sa", "za"], ["ad"]),
        h.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
        h.make_node("Gemm", ["ad", "wd", "c"], ["g"], transB=1),
        h.make_node("QuantizeLinear", ["g", "sy", "zy"], ["gq"]),
        h.make_node("DequantizeLinear", ["gq", "sy", "zy"], ["Y"]),
    ]
    g = h.make_graph(
        nodes,
        "qgemm",
        [h.make_tensor_value_info("X", T.FLOAT, (3, depth))],
        [h.make_tensor_value_info("Y", T.FLOAT, None)],
        inits,
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    fn = stripeml.onnx.compile(model, target="cpu")
    _within_a_step(fn(**feeds), want)
    src = _source(fn, feeds)
    assert ("dot4(" in src) == integer and "// _QGemm" in src
    assert src.count(" / ") == (1 if integer else 2), src


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_a_quantised_sum_rounds_ties_to_even_and_saturates(dtype):
    """Scales whose ratios are exact (1/2 and 2): every other ``a`` lands on a tie,
    which goes to the even neighbour as the reference's division does, and sums
    past the type's range saturate; so the bytes equal the reference's."""
    info = np.iinfo(dtype)
    inits = [
        nh.from_array(np.array(0.5, np.float32), "sa"),
        nh.from_array(np.array(3, dtype), "za"),
        nh.from_array(np.array(2.0, np.float32), "sc"),
        nh.from_array(np.array(-2 if dtype == np.int8 else 128, dtype), "zc"),
        nh.from_array(np.array(1.0, np.float32), "sy"),
        nh.from_array(np.array(-5 if dtype == np.int8 else 5, dtype), "zy"),
    ]
    elem = T.INT8 if dtype == np.int8 else T.UINT8
    nodes = [
        h.make_node("DequantizeLinear", ["A", "sa", "za"], ["ad"]),
        h.make_node("DequantizeLinear", ["C", "sc", "zc"], ["cd"]),
        h.make_node("Add", ["ad", "cd"], ["s"]),
        h.make_node("QuantizeLinear", ["s", "sy", "zy"], ["Y"]),
    ]
    g = h.make_graph(
        nodes,
        "qties",
        [
            h.make_tensor_value_info("A", elem, (4, 64)),
            h.make_tensor_value_info("C", elem, (4, 64)),
        ],
        [h.make_tensor_value_info("Y", elem, None)],
        inits,
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    feeds = {
        "A": RNG.integers(info.min, info.max + 1, (4, 64)).astype(dtype),
        "C": RNG.integers(info.min, info.max + 1, (4, 64)).astype(dtype),
    }
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    fn = stripeml.onnx.compile(model, target="cpu")
    got = fn(**feeds)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert {int(want.min()), int(want.max())} == {int(info.min), int(info.max)}  # saturated
    assert "// _QAdd" in _source(fn, feeds)
