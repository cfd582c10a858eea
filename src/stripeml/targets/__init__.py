"""Target descriptions: TOML files with a machine's facts and its pass pipeline.

``load_target("cpu")`` reads the bundled ``cpu.toml``; ``load_target(path)``
reads any ``.toml`` file; ``resolve(name_path_or_target)`` is what
``stripeml.compile`` calls (``"interp"`` included, files loaded once per
modification).  The result is a frozen :class:`Target`: hardware facts and
the pipeline, each pass built and validated once (``target.passes``).  A new chip is a new file (see
``docs/targets.md``): nothing here or in the passes names a machine.
"""

from __future__ import annotations

from .files import bundled_targets, load_target, resolve, resolve_target
from .host import CacheLevel, CpuId, HostFacts
from .loader import TARGETS_DIR, parse_size, target_from_toml
from .target import BACKENDS, GPU_BACKENDS, INTERP, Memory, PassSpec, Target

__all__ = [
    "BACKENDS",
    "GPU_BACKENDS",
    "INTERP",
    "TARGETS_DIR",
    "CacheLevel",
    "CpuId",
    "HostFacts",
    "Memory",
    "PassSpec",
    "Target",
    "bundled_targets",
    "load_target",
    "parse_size",
    "resolve",
    "resolve_target",
    "target_from_toml",
]
