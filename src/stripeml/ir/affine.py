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
        return Affine(((name, coeff),) if coeff else (), 0)

    @staticmethod
    def constant(value: int) -> Affine:
        return Affine((), int(value))

    @staticmethod
    def build(coeffs: Mapping[str, int], const: int = 0) -> Affine:
        return Affine(tuple(sorted((n, int(c)) for n, c in coeffs.items() if c)), int(const))

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
        other = Affine.lift(other)
        coeffs = self.coeffs
        for n, c in other.terms:
            coeffs[n] = coeffs.get(n, 0) + c
        return Affine.build(coeffs, self.const + other.const)

    __radd__ = __add__

    def __neg__(self) -> Affine:
        return Affine(tuple((n, -c) for n, c in self.terms), -self.const)

    def __sub__(self, other: AffineLike) -> Affine:
        return self + (-Affine.lift(other))

    def __rsub__(self, other: AffineLike) -> Affine:
        return Affine.lift(other) - self

    def __mul__(self, k: int) -> Affine:
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
            return NotImplemented
        k = int(k)
        if k == 0:
            return Affine()
        return Affine(tuple((n, c * k) for n, c in self.terms), self.const * k)

    __rmul__ = __mul__

    def substitute(self, mapping: Mapping[str, AffineLike]) -> Affine:
        """Replace indices by affines (names not in ``mapping`` stay)."""
        out = Affine.constant(self.const)
        for n, c in self.terms:
            out = out + (Affine.lift(mapping[n]) * c if n in mapping else Affine.index(n, c))
        return out

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
