"""Bundled pipelines for tests, built through the target loader as ``compile`` builds them.

``cpu_passes()`` is the ``cpu`` target's pipeline for this machine;
``cpu_passes(vector_width=8)`` the same file resolved for a host with 8 f32
lanes (its ``$vector_width`` references take that value), so a test sees the
same passes on every machine.
"""

from __future__ import annotations

from stripeml.passes.registry import Pass
from stripeml.targets import HostFacts, load_target


def cpu_passes(vector_width: int | None = None) -> list[Pass]:
    """The passes of the bundled ``cpu.toml``, for this host or another vector width."""
    host = HostFacts(vector_width=vector_width) if vector_width is not None else None
    return list(load_target("cpu", host=host).passes)
