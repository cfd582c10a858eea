"""The ONNX op library, written in Tile: one module per family of operators.

Importing this package imports (so registers, :func:`~..registry.op`) every op
module; :func:`lookup` and :func:`supported_ops` answer from the complete
table.  A new op module is added to the import list below.
"""

from __future__ import annotations

from ..registry import DOMAINS, OpDef, canonical_domain
from . import (  # noqa: F401  (each registers its operators)
    activations,
    basic,
    control,
    conv,
    data,
    dynamic,
    elementwise,
    functions,
    integer,
    integer_blocks,
    linalg,
    logic,
    misc,
    ml,
    norm,
    pool,
    quantize,
    recurrent,
    reduce,
    resize,
    sampling,
    scatter,
    shape,
    spectral,
    training,
    unary_math,
)


def lookup(op_type: str, domain: str = "") -> OpDef | None:
    """The definition of ONNX operator ``op_type`` of ``domain`` ("" or
    "ai.onnx", "ai.onnx.ml"; ``None``: not supported)."""
    table = DOMAINS.get(canonical_domain(domain))
    return None if table is None else table.get(op_type)


def supported_ops() -> list[OpDef]:
    """Every registered operator, by domain (ai.onnx first), then name."""
    return sorted(
        (d for t in DOMAINS.values() for d in t.values()), key=lambda d: (d.domain, d.name)
    )
