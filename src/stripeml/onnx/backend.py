"""ONNX's backend interface (``onnx.backend.base``) for stripeml.

``onnx.backend.test.BackendTest(stripeml.onnx.backend, __name__)`` runs the
node and model tests shipped with the ``onnx`` package through this module.
The target is ``cpu`` unless ``prepare(..., target=...)`` says otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from .graph import Graph
from .importer import OnnxFunction

DEFAULT_TARGET = "cpu"


class StripeRep(BackendRep):
    """A prepared model: ``run(inputs)`` returns the outputs as a tuple."""

    def __init__(self, fn: OnnxFunction):
        self.function = fn

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            outs = self.function._run(self.function._arrays((), dict(inputs)))
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            outs = self.function.run(list(inputs))
        return tuple(outs)


class StripeBackend(Backend):
    @classmethod
    def is_compatible(cls, model: Any, device: str = "CPU", **kwargs: Any) -> bool:
        try:
            graph = Graph(model)
        except Exception:  # noqa: BLE001 - anything the importer cannot read is incompatible
            return False
        return cls.supports_device(device) and not graph.unsupported()

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> StripeRep:
        if not cls.supports_device(device):
            raise RuntimeError(f"stripeml's ONNX backend runs on CPU only, not {device}")
        target = kwargs.get("target", DEFAULT_TARGET)
        return StripeRep(OnnxFunction(model, target))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: Any,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Any = None,
        **kwargs: Any,
    ) -> tuple:
        """Run one node on ``inputs`` (arrays in the node's input order)."""
        arrays = [np.asarray(x) for x in inputs]
        names = [n for n in node.input]
        vis = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip(names, arrays)
            if n
        ]
        outs = [
            helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in node.output
        ]
        graph = helper.make_graph([node], "node", vis, outs)
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        return cls.prepare(model, device, **kwargs).run([a for n, a in zip(names, arrays) if n])

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            return Device(device).type == DeviceType.CPU
        except Exception:  # noqa: BLE001 - unknown device strings
            return False


prepare = StripeBackend.prepare
run_model = StripeBackend.run_model
run_node = StripeBackend.run_node
supports_device = StripeBackend.supports_device
is_compatible = StripeBackend.is_compatible
