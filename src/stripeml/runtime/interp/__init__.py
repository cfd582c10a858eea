"""The NumPy reference interpreter (``target="interp"``): the semantic oracle.

``run(program, inputs, outputs=None) -> {name: array}`` executes any valid
Stripe program.  Blocks run vectorised over whole chunks of points
(:mod:`.executor`); leaf kernels that fit a contraction or elementwise pattern
run on strided views with ``np.einsum`` (:mod:`.fastpath`).
``run_with_report`` also counts the bytes moved per memory location
(:mod:`.traffic`).
"""

from __future__ import annotations

from .frame import MODES, Options
from .program import run, run_with_report
from .traffic import Traffic

__all__ = ["MODES", "Options", "Traffic", "run", "run_with_report"]
