"""Shared by the code generator's tests: a Tile function's program, run on the
CPU backend, and a BERT-style ``gelu(X @ W + C)`` ONNX model."""

from __future__ import annotations

from typing import Any

import numpy as np

import stripeml
from stripeml.runtime.cpu import CpuBackend, CpuOptions


def program(src: str, *arrays):
    return stripeml.compile(src, target="interp").lower(*arrays).program


def run(src: str, *arrays, **options):
    p = program(src, *arrays)
    compiled = CpuBackend(CpuOptions(**options)).compile(p)
    return compiled.run(dict(zip([r.into for r in p.inputs], arrays)))


def gelu_matmul_model(
    k: int, n: int, seed: int, *, sin: bool = False
) -> tuple[Any, np.ndarray, np.ndarray]:
    """``gelu(X @ W + C)`` (the erf form BERT exports; ``sin(X)`` first with
    ``sin``) over a sequence of any length: the model, ``W`` and ``C``."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((k, n)) * 0.03).astype(np.float32)
    c = (rng.standard_normal(n) * 0.1).astype(np.float32)
    consts = {"s2": 1.4142135, "one": 1.0, "half": 0.5}
    first = [helper.make_node("Sin", ["X"], ["S"])] if sin else []
    nodes = [
        *first,
        helper.make_node("MatMul", ["S" if sin else "X", "W"], ["Z"]),
        helper.make_node("Add", ["Z", "C"], ["A"]),
        helper.make_node("Div", ["A", "s2"], ["D"]),
        helper.make_node("Erf", ["D"], ["E"]),
        helper.make_node("Add", ["E", "one"], ["F"]),
        helper.make_node("Mul", ["A", "F"], ["G"]),
        helper.make_node("Mul", ["G", "half"], ["Y"]),
    ]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(c, "C")]
    inits += [numpy_helper.from_array(np.array(v, np.float32), name) for name, v in consts.items()]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, "S", k])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, "S", n])
    name = "sin_gelu_matmul" if sin else "gelu_matmul"
    graph = helper.make_graph(nodes, name, [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w, c
