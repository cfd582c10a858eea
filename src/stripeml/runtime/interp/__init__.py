"""The NumPy reference interpreter (``target="interp"``): the semantic oracle.

``run(program, inputs, outputs=None) -> {name: array}`` executes any valid
Stripe program.  Blocks run vectorised over whole chunks of points
(:mod:`.executor`); leaf kernels that fit a contraction or elementwise pattern
run on strided views with ``np.einsum`` (:mod:`.fastpath`).
"""

from __future__ import annotations

from .frame import MODES, Options
from .program import run

__all__ = ["MODES", "Options", "run"]
