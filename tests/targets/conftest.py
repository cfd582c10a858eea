"""Fixtures of the target tests."""

from __future__ import annotations

import pytest

from stripeml.passes import PASSES

from .helpers import Probe


@pytest.fixture
def probe_pass(monkeypatch: pytest.MonkeyPatch) -> type:
    """Registers :class:`Probe` as pass ``probe`` for one test."""
    monkeypatch.setitem(PASSES, "probe", Probe)
    return Probe
