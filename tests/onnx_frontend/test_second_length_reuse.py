"""A second sequence length of a transformer block redoes less:

* the verifier's incremental mode: a kernel equal to a verified one up to
  names (the second layer's, at each length) runs only the block rules its
  key does not decide (``verifier._KEYED_BLOCK_RULES``): never the index,
  constraint and int64 rules again;
* the program is bound once per length: the ONNX frontend's check of the
  program it wrote and the lowering share one binding (``tile.bind``).

Results against NumPy (float64), written from the model's description, never
against stripeml itself."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml import api  # noqa: E402
from stripeml.ir import verifier  # noqa: E402
from stripeml.tile import bind as tile_bind  # noqa: E402

HIDDEN, HEADS = 16, 2
LAYERS = 2


def _weights() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(6)
    return [
        {
            n: (rng.standard_normal((HIDDEN, HIDDEN)) / 4).astype(np.float32)
            for n in ("q", "k", "v", "o")
        }
        for _ in range(LAYERS)
    ]


def _model(weights: list[dict[str, np.ndarray]]) -> onnx.ModelProto:
    """Two self-attention layers (two heads of 8, a residual after each) over
    ``X`` of shape ``(1, seq, 16)``, the sequence length symbolic."""
    nodes, inits = [], []
    dh = HIDDEN // HEADS
    inits.append(numpy_helper.from_array(np.array([1, -1, HEADS, dh], np.int64), "heads"))
    inits.append(numpy_helper.from_array(np.array([1, -1, HIDDEN], np.int64), "joined"))
    inits.append(numpy_helper.from_array(np.array(1 / np.sqrt(dh), np.float32), "scale"))
    x = "X"
    for n, w in enumerate(weights):
        p = f"l{n}_"
        for name, arr in w.items():
            inits.append(numpy_helper.from_array(arr, p + "W" + name))
        nodes += [
            helper.make_node("MatMul", [x, p + "Wq"], [p + "q"]),
            helper.make_node("MatMul", [x, p + "Wk"], [p + "k"]),
            helper.make_node("MatMul", [x, p + "Wv"], [p + "v"]),
            helper.make_node("Reshape", [p + "q", "heads"], [p + "q4"]),
            helper.make_node("Reshape", [p + "k", "heads"], [p + "k4"]),
            helper.make_node("Reshape", [p + "v", "heads"], [p + "v4"]),
            helper.make_node("Transpose", [p + "q4"], [p + "qt"], perm=[0, 2, 1, 3]),
            helper.make_node("Transpose", [p + "k4"], [p + "kt"], perm=[0, 2, 3, 1]),
            helper.make_node("Transpose", [p + "v4"], [p + "vt"], perm=[0, 2, 1, 3]),
            helper.make_node("MatMul", [p + "qt", p + "kt"], [p + "s"]),
            helper.make_node("Mul", [p + "s", "scale"], [p + "ss"]),
            helper.make_node("Softmax", [p + "ss"], [p + "p"], axis=-1),
            helper.make_node("MatMul", [p + "p", p + "vt"], [p + "a"]),
            helper.make_node("Transpose", [p + "a"], [p + "at"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [p + "at", "joined"], [p + "a3"]),
            helper.make_node("MatMul", [p + "a3", p + "Wo"], [p + "o"]),
            helper.make_node("Add", [p + "o", x], [p + "y"]),
        ]
        x = p + "y"
    nodes.append(helper.make_node("Identity", [x], ["Y"]))
    graph = helper.make_graph(
        nodes,
        "attention",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, "seq", HIDDEN])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _numpy(weights: list[dict[str, np.ndarray]], x: np.ndarray) -> np.ndarray:
    """The model in NumPy (float64), from its description."""
    h = x.astype(np.float64)
    seq, dh = x.shape[1], HIDDEN // HEADS
    for w in weights:
        q, k, v = (
            (h @ w[n].astype(np.float64)).reshape(1, seq, HEADS, dh).transpose(0, 2, 1, 3)
            for n in "qkv"
        )
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        a = (e / e.sum(axis=-1, keepdims=True)) @ v
        h = a.transpose(0, 2, 1, 3).reshape(1, seq, HIDDEN) @ w["o"].astype(np.float64) + h
    return h


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_two_lengths_match_numpy_and_name_twins_skip_the_keyed_rules(
    private_cache, monkeypatch
) -> None:
    monkeypatch.delenv(api.VERIFY_VARIABLE, raising=False)  # the users' incremental mode
    weights = _weights()
    model = _model(weights)
    inside = {"only": 0, "rules in only": 0}
    real_only, real_magnitudes = verifier._verify_block_only, verifier.Scope.magnitudes

    def only(scope):
        inside["only"] += 1
        inside["now"] = True
        try:
            return real_only(scope)
        finally:
            inside["now"] = False

    def magnitudes(self):  # read by the int64 rule, one of the keyed block rules
        if inside.get("now"):
            inside["rules in only"] += 1
        return real_magnitudes(self)

    monkeypatch.setattr(verifier, "_verify_block_only", only)
    monkeypatch.setattr(verifier.Scope, "magnitudes", magnitudes)
    fn = stripeml.onnx.compile(model, target="cpu")
    rng = np.random.default_rng(1)
    for seq in (19, 11):  # lengths no other test compiles
        x = rng.standard_normal((1, seq, HIDDEN)).astype(np.float32)
        np.testing.assert_allclose(fn(X=x), _numpy(weights, x), rtol=1e-4, atol=1e-5)
    assert inside["only"] > 0  # the second layer's kernels matched the first's
    assert inside["rules in only"] == 0


def test_each_length_binds_its_program_once(private_cache, monkeypatch) -> None:
    """The frontend's check and the lowering bind the model's program for the
    same signature: the parameters' sizes are checked once per length (each
    length compiled for itself: no shorter length through the first's program)."""
    monkeypatch.setenv("STRIPEML_LENGTHS", "0")
    weights = _weights()
    fn = stripeml.onnx.compile(_model(weights), target="cpu")
    checked: list[str] = []
    real = tile_bind._checkformat_bytes

    def checkformat(name, info, total, at):
        checked.append(name)
        return real(name, info, total, at)

    monkeypatch.setattr(tile_bind, "_checkformat_bytes", checkformat)
    rng = np.random.default_rng(2)
    for seq in (23, 13):
        checked.clear()
        x = rng.standard_normal((1, seq, HIDDEN)).astype(np.float32)
        np.testing.assert_allclose(fn(X=x), _numpy(weights, x), rtol=1e-4, atol=1e-5)
        params = [p.name for p in fn.specialise([x]).function.ast.params]
        # each binding of the model's program checks its parameters in order
        runs = sum(checked[k : k + len(params)] == params for k in range(len(checked)))
        assert runs == 1


def test_each_length_asks_constness_and_peak_bytes_of_its_program_once(
    private_cache, monkeypatch
) -> None:
    """The CPU runtime's constants, the program cache's summary and the first
    run's memory check share one constness and one peak of the final program
    (each length compiled for itself)."""
    from stripeml.analysis import constness, memory

    monkeypatch.setenv("STRIPEML_LENGTHS", "0")
    asked: list[tuple[str, object]] = []
    real_constness, real_peak = constness.constness, memory.peak_bytes

    def counting_constness(program):
        asked.append(("constness", program))
        return real_constness(program)

    def counting_peak(program):
        asked.append(("peak", program))
        return real_peak(program)

    monkeypatch.setattr(constness, "constness", counting_constness)
    # a runtime that imported the function itself (stripeml before this memo)
    monkeypatch.setattr("stripeml.runtime.cpu_run.constness", counting_constness, raising=False)
    monkeypatch.setattr(memory, "peak_bytes", counting_peak)
    weights = _weights()
    fn = stripeml.onnx.compile(_model(weights), target="cpu")
    rng = np.random.default_rng(3)
    for seq in (29, 17):
        asked.clear()
        x = rng.standard_normal((1, seq, HIDDEN)).astype(np.float32)
        np.testing.assert_allclose(fn(X=x), _numpy(weights, x), rtol=1e-4, atol=1e-5)
        final = fn.lower(X=x).program
        assert [what for what, p in asked if p is final] == ["constness", "peak"]
