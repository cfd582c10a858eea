"""A warm start rebuilds nothing it can load: a model that validated before is
not checked again (``stripeml.onnx.validated``: its ``ai.onnx`` opset is
remembered in the disk cache's ``models/`` folder, keyed by the model's bytes
and the frontend's sources), and a warm process neither builds the passes nor
imports ``concurrent.futures`` (the weight layouts' helper thread is a plain
one) or ``sqlite3`` (there is no tuning database to read); what a node folded
on the interpreter is remembered too (``folds/``), so a warm process does not
import the passes and isl to fold it again.  A model that fails a check, or
that changed, is checked; a changed constant is folded; a damaged entry is a
miss.  Every result is checked against NumPy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml.onnx import OnnxError, graph, validate  # noqa: E402

from .warm import RNG, B, W, X, dense_model  # noqa: E402

_model = dense_model


def _expected(alpha: float = 0.0) -> np.ndarray:
    z = X.astype(np.float64) @ W + B
    return np.where(z > 0, z, alpha * z)


@pytest.fixture
def checks(tmp_path, monkeypatch) -> list[str]:
    """A private disk cache, and the names of the checks run (``check_model`` and
    the conversion check), in order."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "cache"))
    ran: list[str] = []
    check_model, upgraded = graph.check_model, validate.upgraded

    def counted_check(*args, **kwargs):
        ran.append("check_model")
        return check_model(*args, **kwargs)

    def counted_upgraded(*args, **kwargs):
        ran.append("upgraded")
        return upgraded(*args, **kwargs)

    monkeypatch.setattr(graph, "check_model", counted_check)
    monkeypatch.setattr(validate, "upgraded", counted_upgraded)
    return ran


def _write(path: Path, model: onnx.ModelProto) -> str:
    path.write_bytes(model.SerializeToString())
    return str(path)


def test_a_model_that_validated_is_not_checked_again(tmp_path, checks) -> None:
    path = _write(tmp_path / "m.onnx", _model())
    first = stripeml.onnx.compile(path, target="interp")
    assert checks == ["upgraded", "check_model"]
    np.testing.assert_allclose(first(X), _expected(), rtol=1e-5, atol=1e-5)
    assert len(list((tmp_path / "cache" / "models").iterdir())) == 1
    checks.clear()
    again = stripeml.onnx.compile(path, target="interp")
    assert checks == []  # the opset came from the cache
    assert again.graph.opset == first.graph.opset == 17
    np.testing.assert_allclose(again(X), _expected(), rtol=1e-5, atol=1e-5)
    checks.clear()
    stripeml.onnx.compile(_model(), target="interp")  # a ModelProto: the same bytes
    assert checks == []


def test_a_changed_model_is_checked_again(tmp_path, checks) -> None:
    path = tmp_path / "m.onnx"
    stripeml.onnx.compile(_write(path, _model()), target="interp")
    checks.clear()
    changed = stripeml.onnx.compile(_write(path, _model(alpha=0.25)), target="interp")
    assert checks == ["upgraded", "check_model"]
    np.testing.assert_allclose(changed(X), _expected(0.25), rtol=1e-5, atol=1e-5)


def test_a_model_that_fails_is_never_remembered(tmp_path, checks) -> None:
    bad = _model()
    bad.graph.node[2].attribute.append(helper.make_attribute("no_such_attribute", 1))
    path = _write(tmp_path / "bad.onnx", bad)
    for _ in range(2):
        with pytest.raises(OnnxError, match="no_such_attribute"):
            stripeml.onnx.compile(path, target="interp")
        assert checks.count("check_model") >= 1
        checks.clear()
    assert not (tmp_path / "cache" / "models").exists() or not any(
        (tmp_path / "cache" / "models").iterdir()
    )


def test_a_damaged_entry_is_a_miss(tmp_path, checks) -> None:
    path = _write(tmp_path / "m.onnx", _model())
    stripeml.onnx.compile(path, target="interp")
    (entry,) = (tmp_path / "cache" / "models").iterdir()
    data = bytearray(entry.read_bytes())
    data[-1] ^= 1  # the opset's last digit
    entry.write_bytes(bytes(data))
    checks.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = stripeml.onnx.compile(path, target="interp")
    assert any("forged" in str(w.message) for w in caught)
    assert checks == ["upgraded", "check_model"]  # checked again, and remembered again
    np.testing.assert_allclose(fn(X), _expected(), rtol=1e-5, atol=1e-5)
    assert len(list((tmp_path / "cache" / "models").iterdir())) == 1


def test_a_changed_frontend_checks_again(tmp_path, checks, monkeypatch) -> None:
    from stripeml.onnx import validated

    path = _write(tmp_path / "m.onnx", _model())
    stripeml.onnx.compile(path, target="interp")
    monkeypatch.setattr(validated, "frontend_fingerprint", lambda: b"other sources")
    checks.clear()
    stripeml.onnx.compile(path, target="interp")
    assert checks == ["upgraded", "check_model"]


def test_a_model_file_with_large_weights_is_remembered(tmp_path, checks, monkeypatch) -> None:
    """Read by path, a model's weights are read apart from its message (which holds
    only its structure): it is remembered like a small model however large its
    weights (128 KiB here, with ``MAX_BYTES`` lowered to 16 KiB), and as a
    ``ModelProto`` with the weights inside it is checked every time."""
    from stripeml.onnx import validated

    monkeypatch.setattr(validated, "MAX_BYTES", 16 << 10)
    w = RNG.standard_normal((16, 2048)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2048])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = _write(tmp_path / "m.onnx", model)
    want = X.astype(np.float64) @ w
    for source, again in ((path, []), (model, ["upgraded", "check_model"])):
        stripeml.onnx.compile(source, target="interp")
        checks.clear()
        fn = stripeml.onnx.compile(source, target="interp")
        assert checks == again
        np.testing.assert_allclose(fn(X), want, rtol=1e-5, atol=1e-4)


def test_a_model_with_large_weights_inside_is_checked_every_time(
    tmp_path, checks, monkeypatch
) -> None:
    """Over ``MAX_BYTES`` (here lowered to 100 bytes: the weights are 544) a
    ``ModelProto`` is checked at every import and never remembered."""
    from stripeml.onnx import validated

    monkeypatch.setattr(validated, "MAX_BYTES", 100)
    for _ in range(2):
        checks.clear()
        fn = stripeml.onnx.compile(_model(), target="interp")
        assert checks == ["upgraded", "check_model"]
        np.testing.assert_allclose(fn(X), _expected(), rtol=1e-5, atol=1e-5)
    assert not (tmp_path / "cache" / "models").exists()


@pytest.mark.parametrize("raw", [True, False])
def test_the_weights_size_is_what_their_values_take(raw, monkeypatch) -> None:
    """The size that decides, without serialising the message, whether a model is
    too large to remember: its initializers' values, from their shapes and types,
    whether held as ``raw_data`` or as typed fields; it stops counting once over
    the bound."""
    from stripeml.onnx import validated

    arrays = [W, B, np.arange(6, dtype=np.int64).reshape(2, 3), np.zeros(0, np.float32)]
    if raw:
        tensors = [numpy_helper.from_array(a, f"t{i}") for i, a in enumerate(arrays)]
    else:
        tensors = [
            helper.make_tensor(
                f"t{i}", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape, a.ravel()
            )
            for i, a in enumerate(arrays)
        ]
        assert not any(t.raw_data for t in tensors)
    g = helper.make_graph([], "g", [], [], tensors)
    model = helper.make_model(g)
    values = sum(a.nbytes for a in arrays)  # 512 + 32 + 48 + 0
    assert validated._weights_bytes(model) == values == 592
    assert values <= model.ByteSize()
    for t in model.graph.initializer:  # the values read apart, as from a file
        t.ClearField("raw_data")
        for field in ("float_data", "int64_data"):
            t.ClearField(field)
    assert validated._weights_bytes(model) == 0
    model = helper.make_model(helper.make_graph([], "g", [], [], tensors))
    monkeypatch.setattr(validated, "MAX_BYTES", 520)
    assert validated._weights_bytes(model) == 544  # W and B: over, so no more counted
    assert validated.model_key(model) is None


# A convolution whose weights (256 x 128 x 3 x 3) the native layout splits over
# two threads, compiled from its file and run in a fresh process.
_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import stripeml.onnx
    from stripeml.onnx import graph
    checked = []
    check_model = graph.check_model
    graph.check_model = lambda *a, **k: checked.append(1) or check_model(*a, **k)
    x, w = np.load(sys.argv[2])["x"], np.load(sys.argv[2])["w"]
    y = stripeml.onnx.compile(sys.argv[1], target="cpu")(x)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    want = np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))
    print(json.dumps({
        "error": float(np.max(np.abs(y - want)) / np.max(np.abs(want))),
        "checked": len(checked),
        "passes": "stripeml.passes" in sys.modules,
        "futures": "concurrent.futures" in sys.modules,
        "sqlite3": "sqlite3" in sys.modules,
    }))
    """
)


def test_a_warm_process_checks_nothing_and_imports_little(tmp_path) -> None:
    rng = np.random.default_rng(5)
    w = rng.standard_normal((256, 128, 3, 3)).astype(np.float32)
    x = rng.standard_normal((1, 128, 6, 6)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    g = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256, 6, 6])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = _write(tmp_path / "conv.onnx", model)
    np.savez(tmp_path / "data.npz", x=x, w=w)

    def child() -> dict:
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, path, str(tmp_path / "data.npz")],
            env={**os.environ, "STRIPEML_CACHE_DIR": str(tmp_path / "cache")},
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    cold = child()
    assert cold["error"] < 1e-5 and cold["checked"] == 1 and cold["passes"]
    warm = child()
    assert warm["error"] < 1e-5
    assert (warm["checked"], warm["passes"], warm["futures"], warm["sqlite3"]) == (0,) + (
        False,
    ) * 3


# -- folded constants -------------------------------------------------------------

A = RNG.standard_normal((4, 8)).astype(np.float32)
C = RNG.standard_normal(8).astype(np.float32)


def _folding_model() -> onnx.ModelProto:
    """``y = x * (a * c) + c``: ``a * c`` is folded at import, on the interpreter."""
    nodes = [
        helper.make_node("Mul", ["a", "c"], ["ac"]),
        helper.make_node("Mul", ["x", "ac"], ["xac"]),
        helper.make_node("Add", ["xac", "c"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "fold",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(A, "a"), numpy_helper.from_array(C, "c")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _folded_expected(x: np.ndarray) -> np.ndarray:
    return x * (A * C) + C  # float32, as the model computes


def test_a_fold_is_remembered_and_a_damaged_one_is_a_miss(tmp_path, monkeypatch) -> None:
    from stripeml import api
    from stripeml.onnx import folding
    from stripeml.runtime import kept_layouts

    monkeypatch.setattr(folding, "_programs", type(folding._programs)())

    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "cache"))
    runs: list[str] = []
    compile_ = api.compile

    def counted(source, target="cpu", **kwargs):
        if target == "interp":
            runs.append(source)
        return compile_(source, target, **kwargs)

    monkeypatch.setattr(api, "compile", counted)
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    first = stripeml.onnx.compile(_folding_model(), target="interp")
    np.testing.assert_allclose(first(x), _folded_expected(x), rtol=1e-6)
    assert len(runs) == 1  # a * c, on the interpreter
    kept_layouts.wait_writes()  # (written on a thread of its own once the compile is done)
    (entry,) = (tmp_path / "cache" / "folds").iterdir()
    runs.clear()
    again = stripeml.onnx.compile(_folding_model(), target="interp")
    np.testing.assert_allclose(again(x), _folded_expected(x), rtol=1e-6)
    assert runs == []  # from the cache
    data = bytearray(entry.read_bytes())
    data[-1] ^= 0x40  # the last element's bytes
    entry.write_bytes(bytes(data))
    # the process keeps the fold's program compiled (folding._program): without it
    # a fold computed again compiles it again, which ``runs`` counts
    monkeypatch.setattr(folding, "_programs", type(folding._programs)())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        third = stripeml.onnx.compile(_folding_model(), target="interp")
        np.testing.assert_allclose(third(x), _folded_expected(x), rtol=1e-6)
    assert len(runs) == 1 and any("forged" in str(w.message) for w in caught)


def test_a_changed_constant_folds_again(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "cache"))
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    stripeml.onnx.compile(_folding_model(), target="interp")(x)
    model = _folding_model()
    other = (A + 1).astype(np.float32)
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(other, "a"))
    got = stripeml.onnx.compile(model, target="interp")(x)
    np.testing.assert_allclose(got, x * (other * C) + C, rtol=1e-6)


_FOLD_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import stripeml.onnx
    x = np.load(sys.argv[2])["x"]
    y = stripeml.onnx.compile(sys.argv[1], target="cpu")(x)
    print(json.dumps({
        "y": y.tolist(),
        "passes": "stripeml.passes" in sys.modules,
        "islpy": "islpy" in sys.modules,
    }))
    """
)


def test_a_warm_process_folds_without_the_passes(tmp_path) -> None:
    path = _write(tmp_path / "fold.onnx", _folding_model())
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)

    def child() -> dict:
        out = subprocess.run(
            [sys.executable, "-c", _FOLD_CHILD, path, str(tmp_path / "x.npz")],
            env={**os.environ, "STRIPEML_CACHE_DIR": str(tmp_path / "cache")},
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    cold = child()
    assert cold["passes"] and cold["islpy"]
    warm = child()
    assert (warm["passes"], warm["islpy"]) == (False, False)
    for got in (cold, warm):
        np.testing.assert_allclose(np.array(got["y"]), _folded_expected(x), rtol=1e-6, atol=1e-7)
