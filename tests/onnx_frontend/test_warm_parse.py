"""A warm start does not parse the Tile program the importer wrote: the disk cache
holds the optimised program of that exact source, so ``stripeml.api.Function``
(given the parameters' and outputs' names by the frontend) parses it only when a
compile lowers it, and the importer's own shape check runs then.  Every result
is checked against NumPy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import stripeml  # noqa: E402
import stripeml.onnx  # noqa: E402
from stripeml.errors import InternalError  # noqa: E402
from stripeml.onnx import builder  # noqa: E402
from stripeml.tile import parser  # noqa: E402

from .warm import B, W, X, cold_then_warm, dense_model  # noqa: E402


def _path(tmp_path: Path) -> str:
    path = tmp_path / "m.onnx"
    path.write_bytes(dense_model().SerializeToString())
    return str(path)


@pytest.fixture
def counted(tmp_path, monkeypatch) -> dict[str, int]:
    """A private disk cache; how often Tile is parsed and the builder's check runs."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path / "cache"))
    seen = {"parse": 0, "check": 0}
    parse, check = parser.parse, builder.Builder.check

    def counted_parse(*args, **kwargs):
        seen["parse"] += 1
        return parse(*args, **kwargs)

    def counted_check(self, fn):
        seen["check"] += 1
        return check(self, fn)

    monkeypatch.setattr(parser, "parse", counted_parse)
    monkeypatch.setattr(builder.Builder, "check", counted_check)
    return seen


def test_a_warm_start_parses_no_tile(tmp_path, counted) -> None:
    path = _path(tmp_path)
    want = np.maximum(X.astype(np.float64) @ W + B, 0)
    cold = stripeml.onnx.compile(path, target="cpu")
    np.testing.assert_allclose(cold(X), want, rtol=1e-5, atol=1e-5)
    assert counted == {"parse": 1, "check": 1}  # a miss: parsed and checked once
    warm = stripeml.onnx.compile(path, target="cpu")  # a new model: only the disk cache
    got = warm(X)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert counted == {"parse": 1, "check": 1}, "the warm start parsed the program again"
    assert np.array_equal(got, cold(X))
    # the tree is still there when asked for (parsed and checked then)
    fn = warm._cache.get(next(iter(warm._cache._entries))).function
    assert [p.name for p in fn.ast.params] == list(fn.every)
    assert counted == {"parse": 2, "check": 2}


MATMUL = "function (A[M, K], W[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * W[k, n]); }"


def test_names_the_source_does_not_declare_are_an_internal_error(tmp_path, counted) -> None:
    f = stripeml.api.Function(MATMUL, "cpu", names=(["A", "V"], ["C"]))
    assert counted["parse"] == 0
    with pytest.raises(InternalError, match="declares parameters"):
        f(X, W)
    g = stripeml.api.Function(MATMUL, "cpu", names=(["A", "W"], ["D"]))
    with pytest.raises(InternalError, match="outputs"):
        g.ast  # noqa: B018


def test_the_frontends_check_runs_once_when_parsed(tmp_path, counted) -> None:
    trees: list = []
    f = stripeml.api.Function(
        MATMUL, "cpu", constants={"W": W}, names=(["A", "W"], ["C"]), on_parse=trees.append
    )
    assert f.params == ("A",) and f.outputs == ("C",) and not trees
    np.testing.assert_allclose(f(X), X @ W, rtol=1e-5, atol=1e-5)  # a miss: lowered
    assert len(trees) == 1 and trees[0] is f.ast
    np.testing.assert_allclose(f(2 * X), 2 * X @ W, rtol=1e-5, atol=1e-5)
    assert len(trees) == 1
    # without names: parsed at once, its errors raised at once
    with pytest.raises(stripeml.StripeError):
        stripeml.api.Function("function (A) -> (B) { B = ; }", "cpu")


def test_the_apis_signatures_are_the_binders() -> None:
    from stripeml.api.executable import signature_of
    from stripeml.tile.bind import signature_of as binders

    arrays = [np.zeros((2, 3), np.float32), np.ones(4, np.int64), np.float16(1.0), np.array(True)]
    arrays = [np.asarray(a) for a in arrays]
    assert signature_of(arrays) == binders(arrays)
    assert signature_of(arrays) == (
        ((2, 3), "float32"),
        ((4,), "int64"),
        ((), "float16"),
        ((), "bool"),
    )


_CHILD = """
import json, sys
import numpy as np
import stripeml.onnx
x = np.load(sys.argv[2])
y = stripeml.onnx.compile(sys.argv[1], target="cpu")(x)
np.save(sys.argv[3], y)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("stripeml.tile"))))
"""


def test_a_warm_process_imports_no_tile_frontend(tmp_path) -> None:
    runs = cold_then_warm(_CHILD, _path(tmp_path), X, tmp_path)
    (cold_mods, cold), (warm_mods, warm) = runs
    assert "stripeml.tile.parser" in cold_mods
    assert warm_mods == [], warm_mods
    np.testing.assert_array_equal(warm, cold)
    np.testing.assert_allclose(
        warm, np.maximum(X.astype(np.float64) @ W + B, 0), rtol=1e-5, atol=1e-5
    )
