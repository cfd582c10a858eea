"""Affine expressions over named integer indices: ``sum(coeff * index) + const``.

Affines are immutable values.  Terms are kept sorted by index name with no
zero coefficients, so structural equality is semantic equality.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Union

import numpy as np

AffineLike = Union["Affine", int]


def _make(terms: tuple[tuple[str, int], ...], const: int) -> Affine:
    """An Affine from terms already sorted, unique and non-zero (not checked: the
    arithmetic below keeps them so, and skips ``__post_init__``'s check, the
    compiler's hottest few lines)."""
    a = object.__new__(Affine)
    object.__setattr__(a, "terms", terms)
    object.__setattr__(a, "const", const)
    return a


def _merge(
    x: tuple[tuple[str, int], ...], y: tuple[tuple[str, int], ...], sign: int
) -> tuple[tuple[str, int], ...]:
    """The terms of ``x + sign * y`` (both sorted by name), zero coefficients dropped."""
    if not y:
        return x
    if not x:
        return y if sign == 1 else tuple((n, -c) for n, c in y)
    out = []
    i = j = 0
    while i < len(x) and j < len(y):
        nx, cx = x[i]
        ny, cy = y[j]
        if nx == ny:
            c = cx + sign * cy
            if c:
                out.append((nx, c))
            i += 1
            j += 1
        elif nx < ny:
            out.append(x[i])
            i += 1
        else:
            out.append((ny, sign * cy))
            j += 1
    out.extend(x[i:])
    out.extend((n, sign * c) for n, c in y[j:])
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Affine:
    """``const + sum(c * name for name, c in terms)`` with integer coefficients."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    def __post_init__(self) -> None:
        names = [n for n, _ in self.terms]
        if names != sorted(set(names)) or any(c == 0 for _, c in self.terms):
            raise ValueError(f"Affine terms must be sorted, unique and non-zero: {self.terms!r}")

    # -- construction -------------------------------------------------
    @staticmethod
    def index(name: str, coeff: int = 1) -> Affine:
        return _make(((name, int(coeff)),) if coeff else (), 0)

    @staticmethod
    def constant(value: int) -> Affine:
        return _make((), int(value))

    @staticmethod
    def build(coeffs: Mapping[str, int], const: int = 0) -> Affine:
        return _make(tuple(sorted((n, int(c)) for n, c in coeffs.items() if c)), int(const))

    @staticmethod
    def lift(value: AffineLike) -> Affine:
        return value if isinstance(value, Affine) else Affine.constant(value)

    # -- queries --------------------------------------------------------
    @property
    def coeffs(self) -> dict[str, int]:
        return dict(self.terms)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.terms)

    def coeff(self, name: str) -> int:
        for n, c in self.terms:
            if n == name:
                return c
        return 0

    @property
    def is_constant(self) -> bool:
        return not self.terms

    # -- arithmetic -----------------------------------------------------
    def __add__(self, other: AffineLike) -> Affine:
        if isinstance(other, Affine):
            return _make(_merge(self.terms, other.terms, 1), self.const + other.const)
        if isinstance(other, bool) or not isinstance(other, (int, np.integer)):
            return NotImplemented
        return _make(self.terms, self.const + int(other)) if other else self

    __radd__ = __add__

    def __neg__(self) -> Affine:
        return _make(tuple((n, -c) for n, c in self.terms), -self.const)

    def __sub__(self, other: AffineLike) -> Affine:
        if isinstance(other, Affine):
            return _make(_merge(self.terms, other.terms, -1), self.const - other.const)
        if isinstance(other, bool) or not isinstance(other, (int, np.integer)):
            return NotImplemented
        return _make(self.terms, self.const - int(other)) if other else self

    def __rsub__(self, other: AffineLike) -> Affine:
        return Affine.lift(other) - self

    def __mul__(self, k: int) -> Affine:
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
            return NotImplemented
        k = int(k)
        if k == 0:
            return _make((), 0)
        if k == 1:
            return self
        return _make(tuple((n, c * k) for n, c in self.terms), self.const * k)

    __rmul__ = __mul__

    def substitute(self, mapping: Mapping[str, AffineLike]) -> Affine:
        """Replace indices by affines (names not in ``mapping`` stay)."""
        if not any(n in mapping for n, _ in self.terms):
            return self
        coeffs: dict[str, int] = {}
        const = self.const
        for n, c in self.terms:
            if n in mapping:
                value = Affine.lift(mapping[n])
                const += value.const * c
                for m, d in value.terms:
                    coeffs[m] = coeffs.get(m, 0) + d * c
            else:
                coeffs[n] = coeffs.get(n, 0) + c
        return Affine.build(coeffs, const)

    def rename(self, mapping: Mapping[str, str]) -> Affine:
        coeffs: dict[str, int] = {}
        for n, c in self.terms:
            m = mapping.get(n, n)
            coeffs[m] = coeffs.get(m, 0) + c
        return Affine.build(coeffs, self.const)

    def evaluate(self, env: Mapping[str, int | np.ndarray]) -> int | np.ndarray:
        """Evaluate with ``env`` mapping names to ints or integer NumPy arrays."""
        result: int | np.ndarray = self.const
        for n, c in self.terms:
            v = env[n]
            result = result + (v if c == 1 else v * c)
        return result

    # -- text -------------------------------------------------------------
    def __str__(self) -> str:
        parts: list[str] = []
        for n, c in self.terms:
            mag = abs(c)
            term = n if mag == 1 else f"{mag}*{n}"
            if not parts:
                parts.append(term if c > 0 else f"-{term}")
            else:
                parts.append(f"+ {term}" if c > 0 else f"- {term}")
        if self.const or not parts:
            if not parts:
                parts.append(str(self.const))
            else:
                parts.append(f"+ {self.const}" if self.const > 0 else f"- {-self.const}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Affine({str(self)!r})"


def box_interval(expr: Affine, ranges: Mapping[str, int]) -> tuple[int, int]:
    """Min and max of ``expr`` over the box ``0 <= name < ranges[name]``: at its
    corners, exactly (each index on its own).  The verifier's bounds check, the
    passes' tiling and halo arithmetic all ask this."""
    lo = hi = expr.const
    for name, coeff in expr.terms:
        span = coeff * (ranges[name] - 1)
        if span < 0:
            lo += span
        else:
            hi += span
    return lo, hi
