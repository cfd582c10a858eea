"""Passes: one per file, each a frozen dataclass whose fields are its options.

``PASSES`` maps pass names (the file stems) to their classes; ``register``
adds one; ``make_pass(name, **options)`` builds one, raising a
:class:`~stripeml.errors.StripeError` that names an unknown pass or option.
:mod:`.manager` runs a list of passes (verifying, recording stages, timing).
``docs/passes.md`` describes how to write a pass and what each pass does.
"""

from __future__ import annotations

from .dce import Dce
from .fuse import Fuse
from .registry import PASSES, make_pass, pass_options, register


def cpu_pipeline() -> list:
    """The CPU backend's passes (until target files carry pipelines)."""
    return [Fuse(), Dce()]


__all__ = ["PASSES", "Dce", "Fuse", "cpu_pipeline", "make_pass", "pass_options", "register"]
