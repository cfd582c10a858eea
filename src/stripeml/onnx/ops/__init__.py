"""The ONNX op library, written in Tile: one module per family of operators.

Importing this package imports (so registers, :func:`~..registry.op`) every op
module; :func:`lookup` and :func:`supported_ops` answer from the complete
table.  A new op module is added to the import list below.
"""

from __future__ import annotations

from ..registry import OPS, OpDef
from . import (  # noqa: F401  (each registers its operators)
    activations,
    basic,
    control,
    conv,
    data,
    dynamic,
    elementwise,
    functions,
    linalg,
    logic,
    norm,
    pool,
    quantize,
    recurrent,
    reduce,
    resize,
    scatter,
    shape,
    spectral,
    unary_math,
)


def lookup(op_type: str, domain: str = "") -> OpDef | None:
    """The definition of ONNX operator ``op_type`` (``None``: not supported)."""
    if domain not in ("", "ai.onnx"):
        return None
    return OPS.get(op_type)


def supported_ops() -> list[OpDef]:
    """Every registered operator, by name."""
    return sorted(OPS.values(), key=lambda d: d.name)
