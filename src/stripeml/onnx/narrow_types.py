"""The narrow element types (bfloat16, float8, float4, int4 ...): how each is held
in a wider Tile type and rounded into (the rounding itself is in narrow.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["FORMATS", "Format", "is_narrow", "wide_dtype"]


@dataclass(frozen=True)
class Format:
    """A narrow type: its ``ml_dtypes`` dtype and how values round into it."""

    dtype: np.dtype
    # "bf16" (rounded on the float32 bits), "float" (exponent/mantissa), "e8m0" (a
    # power of two: the float32 exponent), "int"
    kind: str
    mantissa: int = 0  # stored mantissa bits
    min_exp: int = 0  # the exponent of the smallest normal value
    max: float = 0.0  # the largest finite value
    overflow: str = "inf"  # past max: "inf", "nan" or "max" (saturates)
    negative_zero: bool = True  # the FNUZ formats have none
    bits: int = 0  # the narrow integers' width
    signed: bool = True

    @property
    def wide(self) -> np.dtype:
        """The Tile type that holds the values."""
        if self.kind != "int":
            return np.dtype(np.float32)
        return np.dtype(np.int8 if self.signed else np.uint8)


def _formats() -> dict[np.dtype, Format]:
    try:
        import ml_dtypes as m
    except ImportError:  # onnx brings ml_dtypes; without it there are no such arrays
        return {}
    f: dict[np.dtype, Format] = {}

    def add(t: object, **kw: object) -> None:
        d = np.dtype(t)  # type: ignore[call-overload]
        f[d] = Format(d, **kw)  # type: ignore[arg-type]

    add(m.bfloat16, kind="bf16")
    add(m.float8_e4m3fn, kind="float", mantissa=3, min_exp=-6, max=448.0, overflow="nan")
    add(
        m.float8_e4m3fnuz,
        kind="float",
        mantissa=3,
        min_exp=-7,
        max=240.0,
        overflow="nan",
        negative_zero=False,
    )
    add(m.float8_e5m2, kind="float", mantissa=2, min_exp=-14, max=57344.0, overflow="inf")
    add(
        m.float8_e5m2fnuz,
        kind="float",
        mantissa=2,
        min_exp=-15,
        max=57344.0,
        overflow="nan",
        negative_zero=False,
    )
    add(m.float4_e2m1fn, kind="float", mantissa=1, min_exp=0, max=6.0, overflow="max")
    add(m.float8_e8m0fnu, kind="e8m0")
    add(m.int4, kind="int", bits=4, signed=True)
    add(m.uint4, kind="int", bits=4, signed=False)
    add(m.int2, kind="int", bits=2, signed=True)
    add(m.uint2, kind="int", bits=2, signed=False)
    return f


FORMATS = _formats()


def is_narrow(dtype: object) -> bool:
    return np.dtype(dtype) in FORMATS  # type: ignore[call-overload]


def wide_dtype(dtype: np.dtype) -> np.dtype:
    """The Tile type a tensor of ``dtype`` is held in (itself when not narrow)."""
    fmt = FORMATS.get(np.dtype(dtype))
    return dtype if fmt is None else fmt.wide
