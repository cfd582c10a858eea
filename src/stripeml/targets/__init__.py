"""Target descriptions: TOML files with a machine's facts and its pass pipeline.

``load_target("cpu")`` reads the bundled ``cpu.toml``; ``load_target(path)``
reads any ``.toml`` file.  The result is a frozen :class:`Target`; its
``passes()`` are what the backend runs.  A new chip is a new file (see
``docs/targets.md``): nothing here or in the passes names a machine.
"""

from __future__ import annotations

from .host import CacheLevel, HostFacts
from .loader import (
    TARGETS_DIR,
    bundled_targets,
    load_target,
    parse_size,
    resolve_target,
    target_from_toml,
)
from .target import BACKENDS, Memory, PassSpec, Target

__all__ = [
    "BACKENDS",
    "TARGETS_DIR",
    "CacheLevel",
    "HostFacts",
    "Memory",
    "PassSpec",
    "Target",
    "bundled_targets",
    "load_target",
    "parse_size",
    "resolve_target",
    "target_from_toml",
]
