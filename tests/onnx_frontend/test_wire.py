"""A model read by path takes its weights from the file into arrays once
(``stripeml.onnx.wire.read_split``): the structure left for protobuf and the
arrays together are the model ``onnx.load`` reads, for every kind of tensor
the file may hold; a file cut or damaged anywhere is an ``OnnxError``; and a
model compiled from its path computes what the same model compiled from a
``ModelProto`` computes, which onnx's reference evaluator checks."""

from __future__ import annotations

import random

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml.onnx import OnnxError  # noqa: E402
from stripeml.onnx.wire import read_split  # noqa: E402

RNG = np.random.default_rng(11)


def _model() -> onnx.ModelProto:
    """``y = relu(x @ w + b) * s`` with weights of several kinds: a large float32
    matrix (split out), a small float32 bias (kept in the message), an int64
    shape, a float16 scale cast up (split out when large), a float64 tensor given
    as ``double_data`` (no raw bytes) and a string tensor (not plain)."""
    w = RNG.standard_normal((64, 48)).astype(np.float32)
    b = RNG.standard_normal(48).astype(np.float32)
    s = RNG.standard_normal((64, 48)).astype(np.float16)
    d = helper.make_tensor("d", TensorProto.DOUBLE, [3], [1.0, 2.0, 3.0])
    names = helper.make_tensor("names", TensorProto.STRING, [2], [b"a", b"b"])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["z"]),
        helper.make_node("Relu", ["z"], ["r"]),
        helper.make_node("Cast", ["s"], ["s32"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["r", "s32"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 48])],
        [
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(b, "b"),
            numpy_helper.from_array(s, "s"),
            numpy_helper.from_array(np.array([64, 48], np.int64), "shape"),
            d,
            names,
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _whole(data: bytes, raws: dict[int, np.ndarray]) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.ParseFromString(data)
    for k, raw in raws.items():
        t = m.graph.initializer[k]
        assert not t.HasField("raw_data")
        t.raw_data = raw.tobytes()
    return m


def test_the_split_is_the_model(tmp_path) -> None:
    model = _model()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    data, raws = read_split(path)
    assert sorted(raws) == [0, 2]  # w (12 KB float32) and s (6 KB float16); b is small
    assert all(not r.flags.writeable for r in raws.values())
    assert len(data) < 2000
    back = _whole(data, raws)
    assert back.SerializeToString() == model.SerializeToString()
    for a, b in zip(back.graph.initializer, model.graph.initializer):
        np.testing.assert_array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))


def test_repeated_fields_mean_what_protobuf_makes_of_them(tmp_path) -> None:
    """A second raw_data in one tensor replaces the first; a second graph merges
    into the first (its initializers after the first's): as ``onnx.load`` reads
    the same file."""
    model = _model()
    w2 = RNG.standard_normal((64, 48)).astype(np.float32)
    tensor = (
        model.graph.initializer[0].SerializeToString()
        + TensorProto(raw_data=w2.tobytes()).SerializeToString()
    )
    rest = onnx.GraphProto()
    rest.CopyFrom(model.graph)
    del rest.initializer[0]
    graph = b"\x2a" + _varint(len(tensor)) + tensor + rest.SerializeToString()  # field 5
    head = onnx.ModelProto()
    head.CopyFrom(model)
    head.ClearField("graph")
    more = onnx.GraphProto()
    more.initializer.add().CopyFrom(numpy_helper.from_array(w2 * 2, "w_more"))
    second = onnx.ModelProto(graph=more).SerializeToString()  # field 7 again
    path = tmp_path / "twice.onnx"
    path.write_bytes(head.SerializeToString() + b"\x3a" + _varint(len(graph)) + graph + second)
    loaded = onnx.load(path)
    data, raws = read_split(path)
    back = _whole(data, raws)
    assert back.SerializeToString() == loaded.SerializeToString()
    assert [t.name for t in back.graph.initializer][-1] == "w_more"
    np.testing.assert_array_equal(numpy_helper.to_array(back.graph.initializer[0]), w2)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def test_a_damaged_file_is_an_onnx_error_or_the_model(tmp_path) -> None:
    """Cut anywhere, or a byte changed anywhere: an ``OnnxError`` naming the file,
    or (a change protobuf and the checks accept) a model that runs."""
    data = _model().SerializeToString()
    rng = random.Random(4)
    path = tmp_path / "bad.onnx"
    cuts = sorted({rng.randrange(1, len(data)) for _ in range(40)})
    flips = [(rng.randrange(len(data)), rng.randrange(256)) for _ in range(60)]
    cases = [data[:c] for c in cuts] + [
        data[:i] + bytes([v]) + data[i + 1 :] for i, v in flips if data[i] != v
    ]
    errors = 0
    for case in cases:
        path.write_bytes(case)
        try:
            stripeml.onnx.compile(str(path), target="interp")
        except OnnxError as exc:
            assert "bad.onnx" in str(exc) or "initializer" in str(exc) or "node" in str(exc)
            errors += 1
        except stripeml.StripeError:
            errors += 1  # a shape the checks refuse further on, still the library's own error
    assert errors >= len(cuts) // 2  # most cuts leave a malformed file


def test_compiled_from_the_path_as_from_the_message(tmp_path) -> None:
    model = _model()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    x = RNG.standard_normal((64, 64)).astype(np.float32)
    by_path = stripeml.onnx.compile(str(path), target="cpu")
    got = by_path(x)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(got, stripeml.onnx.compile(model, target="cpu")(x))
    # the function's model is the whole one, read again from the file when asked
    assert by_path.model.SerializeToString() == model.SerializeToString()


# ---- the weights read in a thread of their own (wire.start_split) ------------------


def _conv_bn_model() -> onnx.ModelProto:
    """A convolution whose weights are split out of the message (4.6 KB), then a
    batch normalisation, which the import folds into them (reading them)."""
    w = RNG.standard_normal((16, 8, 3, 3)).astype(np.float32)
    stats = [RNG.standard_normal(16).astype(np.float32) for _ in range(4)]
    stats[3] = np.abs(stats[3]) + 0.5  # a variance
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"]),
    ]
    inits = [numpy_helper.from_array(w, "w")]
    inits += [numpy_helper.from_array(a, n) for a, n in zip(stats, "gbmv")]
    graph = helper.make_graph(
        nodes,
        "conv_bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 10, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _fill_after(monkeypatch: pytest.MonkeyPatch, first) -> list[int]:
    """The reading thread runs ``first()`` before it reads; the list counts its reads."""
    from stripeml.onnx import wire

    fill = wire._Reader.fill
    calls: list[int] = []

    def later(self) -> None:
        calls.append(len(self.unread or ()))
        first()
        fill(self)

    monkeypatch.setattr(wire._Reader, "fill", later)
    return calls


def test_nothing_reads_the_weights_before_they_are_read(tmp_path, monkeypatch) -> None:
    """A reading thread slowed down: the import, which folds the batch
    normalisation into the convolution's weights (reading them), still sees
    their values (without the wait, it reads the fresh arrays' zeros)."""
    import time

    model = _conv_bn_model()
    path = tmp_path / "conv_bn.onnx"
    path.write_bytes(model.SerializeToString())
    calls = _fill_after(monkeypatch, lambda: time.sleep(0.3))
    x = RNG.standard_normal((1, 8, 10, 10)).astype(np.float32)
    for target in ("interp", "cpu"):
        got = stripeml.onnx.compile(str(path), target=target)(x)
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert calls and all(n >= 1 for n in calls)  # the weights were read by the thread


def test_a_file_cut_while_its_weights_are_read_is_an_onnx_error(tmp_path, monkeypatch) -> None:
    path = tmp_path / "cut.onnx"
    data = _conv_bn_model().SerializeToString()
    path.write_bytes(data)
    _fill_after(monkeypatch, lambda: path.write_bytes(data[: len(data) // 2]))
    with pytest.raises(OnnxError, match=r"cut\.onnx: not a valid ONNX model .*ended early"):
        stripeml.onnx.compile(str(path), target="interp")


def test_weights_read_in_the_background_are_read_only_and_whole(tmp_path, monkeypatch) -> None:
    import threading

    from stripeml.onnx.wire import start_split
    from stripeml.runtime.host import immutable

    model = _model()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    go = threading.Event()
    _fill_after(monkeypatch, go.wait)
    data, raws, reading = start_split(path)
    assert raws
    for raw in raws.values():  # not read yet: the caller cannot write them either
        assert not raw.flags.writeable
        with pytest.raises(ValueError):
            raw[0] = 1
    go.set()
    reading.wait()
    for raw in raws.values():
        assert immutable(raw.view(np.uint8)[1:])
    assert _whole(data, raws).SerializeToString() == model.SerializeToString()
