"""Passes: one per file, each a frozen dataclass whose fields are its options.

``PASSES`` maps pass names (the file stems) to their classes; ``register``
adds one; ``make_pass(name, **options)`` builds one, raising a
:class:`~stripeml.errors.StripeError` that names an unknown pass or option.
:mod:`.manager` runs a list of passes (verifying, recording stages, timing).
``docs/passes.md`` describes how to write a pass and what each pass does.

Every module of this package whose name does not start with ``_`` (and is not
the manager or the registry) is a pass and is imported here, so adding a pass
is adding a file.
"""

from __future__ import annotations

import importlib
import pkgutil

from .dce import Dce
from .fuse import Fuse
from .registry import PASSES, Pass, make_pass, pass_options, register

_NOT_PASSES = {"manager", "registry"}
for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_") and _info.name not in _NOT_PASSES:
        importlib.import_module(f"{__name__}.{_info.name}")


__all__ = ["PASSES", "Dce", "Fuse", "Pass", "make_pass", "pass_options", "register"]
