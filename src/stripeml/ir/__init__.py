"""Stripe IR: nodes, affine expressions, dtypes, the text format and the verifier.

``parse(text) -> Program`` and ``format(program) -> str`` round-trip exactly.
"""

from __future__ import annotations

from .affine import Affine
from .nodes import (
    Block,
    Constant,
    Constraint,
    Index,
    Intrinsic,
    Load,
    LoadIndex,
    Program,
    Refinement,
    Special,
    Store,
    TensorShape,
    walk_blocks,
)
from .parser import parse
from .printer import format
from .verifier import verify

__all__ = [
    "Affine",
    "Block",
    "Constant",
    "Constraint",
    "Index",
    "Intrinsic",
    "Load",
    "LoadIndex",
    "Program",
    "Refinement",
    "Special",
    "Store",
    "TensorShape",
    "format",
    "parse",
    "verify",
    "walk_blocks",
]
