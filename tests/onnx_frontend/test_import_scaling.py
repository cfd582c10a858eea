"""Importing a long ONNX graph takes time linear in its length.

A chain of N elementwise nodes (``Relu``, and ``Add`` of a constant) goes
through everything an import does on the ``cpu`` target: reading and checking
the model, writing and checking the Tile program, binding, lowering, the pass
pipeline (``fuse`` grows one kernel from the whole chain) and the backend.
The test compares the CPU time of two lengths, so it measures growth, not
speed: 8 times the nodes must cost less than 16 times the time (a quadratic
step costs 64 times; before the fix 4,000 nodes cost 30 times what 500 did).
"""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml.ir import Block  # noqa: E402

SHAPE = (4, 8)


def chain(n: int, weights: bool = False, name: str = "chain") -> onnx.ModelProto:
    """``n`` nodes alternating ``Relu`` and ``Add`` of a constant: one shared
    scalar, or (``weights``) a vector of its own per ``Add``."""
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "c")]
    nodes = []
    prev = "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        if i % 2 == 0:
            nodes.append(helper.make_node("Relu", [prev], [out], name=f"n{i}"))
        else:
            c = f"w{i}" if weights else "c"
            if weights:
                inits.append(numpy_helper.from_array(np.full(SHAPE[1:], i / n, np.float32), c))
            nodes.append(helper.make_node("Add", [prev, c], [out], name=f"n{i}"))
        prev = out
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)
    graph = helper.make_graph(nodes, name, [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def reference(n: int, x: np.ndarray, weights: bool = False) -> np.ndarray:
    for i in range(n):
        if i % 2 == 0:
            x = np.maximum(x, 0)
        else:
            x = x + (np.float32(i / n) if weights else np.float32(0.5))
    return x


def import_seconds(n: int, run: int, cache: Path) -> float:
    """CPU seconds (this process, every thread) to import an ``n``-node chain
    (``run`` names the graph) with an empty disk cache of its own (``cache``):
    kernel bodies that other tests compiled would otherwise make one size cheaper
    than the other.  The objects earlier tests left in this process are frozen
    out of the garbage collector first: each full collection walks them all, and
    a larger import triggers more collections, so a big leftover heap made the
    4,000-node import look superlinear in a full run (it is linear alone)."""
    model = chain(n, name=f"chain_{n}_{run}_{time.time_ns()}")
    x = np.ones(SHAPE, np.float32)
    folder = cache / f"{n}_{run}"
    folder.mkdir()
    old = os.environ.get("STRIPEML_CACHE_DIR")
    os.environ["STRIPEML_CACHE_DIR"] = str(folder)
    gc.collect()
    gc.freeze()
    try:
        start = time.process_time()
        f = stripeml.onnx.compile(model, target="cpu")
        f.lower(x)
        return time.process_time() - start
    finally:
        gc.unfreeze()
        if old is None:
            del os.environ["STRIPEML_CACHE_DIR"]
        else:
            os.environ["STRIPEML_CACHE_DIR"] = old


def test_a_long_chain_imports_in_linear_time(tmp_path: Path):
    import_seconds(50, 0, tmp_path)  # warm up: imports, the target, LLVM
    small = min(import_seconds(500, k, tmp_path) for k in range(2))
    big = import_seconds(4000, 0, tmp_path)
    assert big < 16 * small, f"500 nodes: {small:.2f} s, 4000 nodes: {big:.2f} s"


def test_a_long_chain_computes_what_numpy_does():
    x = np.linspace(-2, 2, 32, dtype=np.float32).reshape(SHAPE)
    for weights in (False, True):
        f = stripeml.onnx.compile(chain(301, weights), target="cpu")
        np.testing.assert_allclose(f(x), reference(301, x, weights), rtol=1e-5, atol=1e-5)


def test_a_chain_with_its_own_weights_fuses_into_kernels_of_bounded_size():
    """Each ``Add`` reads its own weight: one kernel would read hundreds of buffers."""
    from stripeml.passes.fuse import MAX_FUSED_REFS

    n = 2 * MAX_FUSED_REFS + 1
    f = stripeml.onnx.compile(chain(n, weights=True), target="cpu")
    x = np.ones(SHAPE, np.float32)
    program = f.lower(x).program
    kernels = [s for s in program.root.stmts if isinstance(s, Block)]
    assert 1 < len(kernels) < n / 8
    assert max(len(k.refs) for k in kernels) <= MAX_FUSED_REFS
    np.testing.assert_allclose(f(x), reference(n, x, True), rtol=1e-5, atol=1e-5)
