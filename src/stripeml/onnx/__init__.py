"""The ONNX frontend: import a model, compile the whole graph with stripeml.

::

    f = stripeml.onnx.compile("model.onnx", target="cpu")
    y = f(x)                       # NumPy in, NumPy out
    stripeml.onnx.backend          # ONNX's backend interface, for onnx.backend.test

Each ONNX operator is written in Tile (``stripeml/onnx/ops``); the importer
writes one Tile program for the graph, so fusion and memory planning work
across operators.  Needs the ``onnx`` package (``pip install 'stripeml[onnx]'``).
"""

from __future__ import annotations

from .builder import OnnxError
from .importer import OnnxFunction, compile
from .ops import supported_ops

__all__ = ["OnnxError", "OnnxFunction", "backend", "compile", "supported_ops"]


def __getattr__(name: str):
    if name == "backend":
        import importlib

        return importlib.import_module(".backend", __name__)
    raise AttributeError(name)
