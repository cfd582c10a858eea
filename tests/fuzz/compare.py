"""Comparing a backend's output with the reference's value and error bound.

* Integers and bools: exact wherever the reference is sure (bound 0); an
  element whose value hangs on an unsure comparison or truncation is skipped.
* Floats: ``|got - ref| <= K * err + floor(dtype)`` with ``K = 4``: the
  reference and the backend each lie within ``err`` of the exact result
  (first-order analysis, reference.py), so they are within ``2 * err`` of each
  other; the second factor 2 covers what first order neglects.  ``floor`` is
  the smallest normal number of the dtype, so flushing a subnormal to zero is
  not a mismatch.  NaN must meet NaN, infinities must be equal, and where the
  reference is an exact zero (bound 0) the sign of zero must agree (1 / x
  tells them apart).  An infinite bound skips the element.
"""

from __future__ import annotations

import numpy as np

K = 4.0


def floor_of(dtype: np.dtype) -> float:
    return float(np.finfo(dtype).tiny) if dtype.kind == "f" else 0.0


def mismatches(got: np.ndarray, ref: np.ndarray, err: np.ndarray) -> np.ndarray:
    """A boolean mask of the elements of ``got`` that the reference rejects."""
    err = np.broadcast_to(err, ref.shape)
    if ref.dtype.kind != "f":
        return (err == 0) & (got != ref)
    with np.errstate(all="ignore"):
        g, r = got.astype(np.float64), ref.astype(np.float64)
        same = (g == r) | (np.isnan(g) & np.isnan(r))
        near = np.abs(g - r) <= K * err + floor_of(ref.dtype)
        near &= np.isfinite(g) == np.isfinite(r)
        sign = (r == 0) & (err == 0) & (g == 0) & (np.signbit(g) != np.signbit(r))
    return ~np.isinf(err) & ((~same & ~near) | sign)


def describe(name: str, got: object, ref: np.ndarray, err: np.ndarray) -> str | None:
    """``None`` when ``got`` matches, else a short description of the first differences."""
    if not isinstance(got, np.ndarray):
        return f"{name}: got {type(got).__name__}, expected an array"
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return f"{name}: got {got.shape} {got.dtype}, expected {ref.shape} {ref.dtype}"
    bad = mismatches(got, ref, err)
    if not bad.any():
        return None
    where = [tuple(int(i) for i in p) for p in np.argwhere(bad)[:3]]
    err = np.broadcast_to(err, ref.shape)
    shown = ", ".join(
        f"[{', '.join(map(str, p))}] got {got[p]!r} expected {ref[p]!r} (bound {err[p]:.3g})"
        for p in where
    )
    return f"{name}: {int(bad.sum())} of {ref.size} elements differ: {shown}"
