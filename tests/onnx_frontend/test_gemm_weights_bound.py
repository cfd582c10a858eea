"""A ``Gemm``'s constant ``B`` with ``transB`` is stored ``K x N`` by the importer
(``stripeml.api.reversed_axes``, read-only, as any view of it): ``compile`` binds
that array as the constant, with no second copy.  Checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml import api  # noqa: E402
from stripeml.runtime.host import immutable  # noqa: E402

RNG = np.random.default_rng(77)


def test_reversed_axes_is_read_only_and_so_are_its_views() -> None:
    src = RNG.standard_normal((40, 300, 1)).astype(np.float32)
    out = api.reversed_axes(src)
    np.testing.assert_array_equal(out, src.transpose(2, 1, 0))
    view = out.reshape(300, 40)
    assert not out.flags.writeable and immutable(out) and immutable(view)


def test_a_transposed_gemm_weight_is_bound_without_a_copy(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "cache"))
    made: list[np.ndarray] = []
    real = api.reversed_axes
    monkeypatch.setattr(api, "reversed_axes", lambda *a: made.append(real(*a)) or made[-1])
    w = RNG.standard_normal((1000, 256)).astype(np.float32)  # N x K, transB=1
    b = RNG.standard_normal(1000).astype(np.float32)
    x = RNG.standard_normal((2, 256)).astype(np.float32)
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
    g = helper.make_graph(
        [node],
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1000])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    fn = stripeml.onnx.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    got = fn(x)
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.T + b, rtol=1e-4, atol=1e-4)
    exe = fn.lower(x)
    assert exe is not None and made
    constants = list(exe.function.constants.values())
    assert any(np.shares_memory(c, made[0]) for c in constants), "B was copied at bind"
