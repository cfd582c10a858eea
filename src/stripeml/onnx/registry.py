"""The op registry: ONNX operator name -> the function that writes it in Tile.

An op function takes a :class:`~.builder.Builder` and a :class:`~.builder.Node`
and returns one :class:`~.builder.Value` per node output (``None`` for an
optional output it does not produce).  ``static`` lists the input positions
whose *values* (not only shapes) the op needs when compiling: shapes of
``Reshape``, axes of ``ReduceSum``, pads of ``Pad``...  When such an input is
a graph input, the importer specialises the program on its value.

This module only registers: each op module in ``ops/`` imports :func:`op`.
Looking an operator up goes through :mod:`stripeml.onnx.ops`, which imports
every op module first (``ops.lookup``, ``ops.supported_ops``), so the imports
run one way: op modules -> registry, never back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .builder import Builder, Node, Value

OpFn = Callable[[Builder, Node], "list[Value | None]"]


@dataclass(frozen=True)
class OpDef:
    """A registered operator: its Tile writer and what the importer must know about it."""

    name: str
    fn: OpFn
    static: tuple[int, ...] = ()
    foldable: bool = True  # False for ops that must not run at import (random ...)
    doc: str = ""
    # The oldest version of the operator (its ONNX ``since_version``) the writer
    # implements; 0: the one in effect at ``validate.MIN_OPSET``.  Set where the
    # writer handles the older definitions' attributes (``Pad``'s ``paddings``).
    oldest: int = 0


OPS: dict[str, OpDef] = {}


def op(
    *names: str, static: tuple[int, ...] = (), foldable: bool = True, oldest: int = 0
) -> Callable[[OpFn], OpFn]:
    """Register ``fn`` as the Tile writer of the ONNX operators ``names`` (``oldest``:
    see :attr:`OpDef.oldest`)."""

    def register(fn: OpFn) -> OpFn:
        doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        for name in names:
            if name in OPS:
                raise ValueError(f"ONNX op {name} registered twice")
            OPS[name] = OpDef(name, fn, tuple(static), foldable, doc, oldest)
        return fn

    return register
