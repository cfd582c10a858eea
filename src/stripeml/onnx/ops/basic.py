"""Graph plumbing: Constant, Identity (the rest live in the family modules)."""

from __future__ import annotations

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op


@op("Constant")
def constant(b: Builder, n: Node) -> list[Value | None]:
    """Constant: the ``value`` (or ``value_float``/``value_ints`` ...) attribute."""
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in n.attrs:
            v = n.attrs[key]
            if key.startswith("value_float"):
                arr = np.array(v, dtype=np.float32)
            elif key.startswith("value_int"):
                arr = np.array(v, dtype=np.int64)
            else:
                arr = np.array(v)
            return [Value("", arr.shape, arr.dtype, arr)]
    raise n.error(f"needs one of the value attributes, got {sorted(n.attrs)}")


@op("Identity")
def identity(b: Builder, n: Node) -> list[Value | None]:
    """Identity: the input itself."""
    return [n.input(0)]
