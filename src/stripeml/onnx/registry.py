"""The op registry: ONNX (domain, operator name) -> the function that writes it in Tile.

An op function takes a :class:`~.builder.Builder` and a :class:`~.builder.Node`
and returns one :class:`~.builder.Value` per node output (``None`` for an
optional output it does not produce).  ``static`` lists the input positions
whose *values* (not only shapes) the op needs when compiling: shapes of
``Reshape``, axes of ``ReduceSum``, pads of ``Pad``...  When such an input is
a graph input, the importer specialises the program on its value.

Each domain has its own table (:data:`DOMAINS`): ``ai.onnx`` operators in
:data:`OPS`, ``ai.onnx.ml`` ones (``Binarizer``, ``TreeEnsemble`` ...) in
:data:`ML_OPS`, so a name of one domain never shadows the other's.

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
    # The operator's domain: "" for ai.onnx, else its name ("ai.onnx.ml").
    domain: str = ""


#: The ``ai.onnx`` operators, by name.
OPS: dict[str, OpDef] = {}
#: The ``ai.onnx.ml`` operators, by name.
ML_OPS: dict[str, OpDef] = {}
#: The ``ai.onnx.preview`` operators (``FlexAttention``), by name.
PREVIEW_OPS: dict[str, OpDef] = {}
#: The ``ai.onnx.preview.training`` operators (the optimizers), by name.
TRAINING_OPS: dict[str, OpDef] = {}
#: Every domain's table, by domain ("" for ai.onnx).
DOMAINS: dict[str, dict[str, OpDef]] = {
    "": OPS,
    "ai.onnx.ml": ML_OPS,
    "ai.onnx.preview": PREVIEW_OPS,
    "ai.onnx.preview.training": TRAINING_OPS,
}


def canonical_domain(domain: str) -> str:
    """``domain`` as the tables key it: "" for ai.onnx (written "" or "ai.onnx")."""
    return "" if domain in ("", "ai.onnx") else domain


def op(
    *names: str,
    static: tuple[int, ...] = (),
    foldable: bool = True,
    oldest: int = 0,
    domain: str = "",
) -> Callable[[OpFn], OpFn]:
    """Register ``fn`` as the Tile writer of the ONNX operators ``names`` of
    ``domain`` ("" or "ai.onnx", or "ai.onnx.ml"; ``oldest``: see
    :attr:`OpDef.oldest`)."""
    domain = canonical_domain(domain)
    if domain not in DOMAINS:
        raise ValueError(f"unknown operator domain {domain!r} (one of {sorted(DOMAINS)})")
    table = DOMAINS[domain]

    def register(fn: OpFn) -> OpFn:
        doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        for name in names:
            if name in table:
                raise ValueError(
                    f"ONNX op {name} of domain {domain or 'ai.onnx'!r} registered twice"
                )
            table[name] = OpDef(name, fn, tuple(static), foldable, doc, oldest, domain)
        return fn

    return register
