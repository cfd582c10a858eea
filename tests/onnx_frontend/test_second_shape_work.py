"""A second input shape of a model redoes less: the shape arithmetic that depends
on the new shape (``Shape`` -> ``Gather`` -> ``Unsqueeze`` -> ``Concat`` ->
``Reshape``, as PyTorch exports a sequence axis) compiles no program on the
interpreter, a constant program folded at the first shape is not compiled again
at the next (only run on its new inputs), and the final program is printed once
per compile.  Results against ONNX's reference evaluator and NumPy at every
shape, never against stripeml itself."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml import api  # noqa: E402
from stripeml.ir import printer  # noqa: E402
from stripeml.onnx import folding  # noqa: E402
from stripeml.onnx.builder import OnnxError  # noqa: E402

RNG = np.random.default_rng(14)
HIDDEN = 8


def _model() -> onnx.ModelProto:
    """``X (1, seq, 8) @ W + B``, split into 2 heads of 4 by a shape computed from
    ``X``'s (as an exported attention layer does), a softmax along the sequence,
    and the heads joined back; ``Slice`` of the shape folds on the interpreter."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32)
    bias = rng.standard_normal(HIDDEN).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["XW"]),
        helper.make_node("Add", ["XW", "B"], ["Y"]),
        helper.make_node("Shape", ["X"], ["S"]),
        helper.make_node("Gather", ["S", "zero"], ["batch"], axis=0),  # a scalar
        helper.make_node("Gather", ["S", "one"], ["seq"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["b1"]),
        helper.make_node("Unsqueeze", ["seq", "axes"], ["s1"]),
        helper.make_node("Concat", ["b1", "s1", "heads"], ["split"], axis=0),
        helper.make_node("Reshape", ["Y", "split"], ["Yh"]),  # (1, seq, 2, 4)
        helper.make_node("Softmax", ["Yh"], ["P"], axis=1),
        helper.make_node("Slice", ["S", "zero1", "two1"], ["S2"]),  # (1, seq): folded
        helper.make_node("Concat", ["S2", "minus1"], ["joined"], axis=0),
        helper.make_node("Reshape", ["P", "joined"], ["Z"]),  # (1, seq, 8)
    ]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, "seq", HIDDEN])
    outs = [helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)]
    ints = {
        "zero": np.array(0, np.int64),
        "one": np.array(-2, np.int64),  # counted from the end: the sequence
        "axes": np.array([0], np.int64),
        "heads": np.array([2, 4], np.int64),
        "zero1": np.array([0], np.int64),
        "two1": np.array([2], np.int64),
        "minus1": np.array([-1], np.int64),
    }
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(bias, "B")]
    inits += [numpy_helper.from_array(v, k) for k, v in ints.items()]
    graph = helper.make_graph(nodes, "g", [x], outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _numpy(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The model in NumPy, written from its description (not from stripeml)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    y = (x @ inits["W"] + inits["B"]).reshape(1, x.shape[1], 2, 4)
    e = np.exp(y - y.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(1, x.shape[1], HIDDEN)


@pytest.fixture
def interp_compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the folds' programs compiled for the interpreter, in order
    (a fresh memo of them: none from an earlier test)."""
    compiled: list[str] = []
    real = api.compile

    def counting(source, target="cpu", **kwargs):
        if target == "interp" and kwargs.get("name", "").startswith("fold_"):
            compiled.append(kwargs["name"])
        return real(source, target, **kwargs)

    monkeypatch.setattr(api, "compile", counting)
    monkeypatch.setattr(folding, "_programs", type(folding._programs)())
    return compiled


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_each_shape_matches_the_references_and_folds_compile_once(
    target: str, interp_compiles: list[str], tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))  # no folds from an earlier run
    model = _model()
    f = stripeml.onnx.compile(model, target=target)
    ref = ReferenceEvaluator(model)
    folds = []
    for seq in (6, 3, 6, 5):
        x = RNG.standard_normal((1, seq, HIDDEN)).astype(np.float32)
        before = len(interp_compiles)
        got = f(x)
        (want,) = ref.run(None, {"X": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, _numpy(model, x), rtol=1e-5, atol=1e-6)
        folds.append(interp_compiles[before:])
    # the first shape compiles the Slice of the shape for the interpreter (the
    # Gathers of the shape's entries are taken at import); later shapes only run
    # it on their shape
    assert folds == [["fold_Slice"], [], [], []]


def test_known_integers_are_gathered_at_import(interp_compiles: list[str]) -> None:
    """Gathers of known integers (negative and scalar indices, any axis) take no
    interpreter program, and give NumPy's ``take``; one index out of range is
    the node's error."""
    data = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    cases = {
        "a": (np.array(-1, np.int64), 0),
        "b": (np.array([[2, -3], [0, 1]], np.int32), 1),
        "c": (np.array([3, -4, 0], np.int64), -1),
    }
    nodes = [
        helper.make_node("Gather", ["D", f"i{k}"], [k], axis=ax) for k, (_, ax) in cases.items()
    ]
    nodes.append(helper.make_node("Add", ["X", "a"], ["Y"]))  # something to compile
    x = helper.make_tensor_value_info("X", TensorProto.INT64, [2, 3, 4])
    outs = [helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in ["a", "b", "c", "Y"]]
    inits = [numpy_helper.from_array(data, "D")]
    inits += [numpy_helper.from_array(i, f"i{k}") for k, (i, _) in cases.items()]
    graph = helper.make_graph(nodes, "g", [x], outs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    xs = RNG.integers(-5, 5, (2, 3, 4)).astype(np.int64)
    a, b, c, y = stripeml.onnx.compile(model, target="interp")(xs)
    np.testing.assert_array_equal(a, data[1])
    np.testing.assert_array_equal(b, np.take(data, [[2, 0], [0, 1]], axis=1))
    np.testing.assert_array_equal(c, np.take(data, [3, 0, 0], axis=2))
    np.testing.assert_array_equal(y, xs + data[1])
    assert interp_compiles == []

    bad = helper.make_node("Gather", ["D", "i"], ["z"], axis=2, name="pick")
    outs = [helper.make_tensor_value_info("z", TensorProto.INT64, None)]
    inits = [numpy_helper.from_array(data, "D"), numpy_helper.from_array(np.array([1, -5]), "i")]
    graph = helper.make_graph([bad], "g", [], outs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(OnnxError, match=r"(?s)pick.*index -5 is out of range"):
        stripeml.onnx.compile(model, target="interp")()


def test_the_final_program_is_printed_once(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The code generator's canonical kernels do not take the printer's memo of
    the whole program, which the kernel cache's key and the executable's ``ir``
    both print."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    f = stripeml.onnx.compile(_model(), target="cpu")
    x = RNG.standard_normal((1, 7, HIDDEN)).astype(np.float32)
    arrays = f._arrays([x], {})
    spec = f.specialise(arrays)
    assert spec.function is not None
    roots = []
    real = printer.format_block

    def counting(block, indent=0):
        if indent == 0 and block.name == spec.function.name:
            roots.append(block)
        return real(block, indent)

    monkeypatch.setattr(printer, "format_block", counting)
    exe = spec.function.lower(*spec.call_args(arrays))
    assert exe.ir.startswith(f"block {spec.function.name}")
    assert len(roots) == 1
    np.testing.assert_allclose(f(x), _numpy(_model(), x), rtol=1e-5, atol=1e-6)
