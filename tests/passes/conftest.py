"""Fixtures the pass tests share."""

from __future__ import annotations

import pytest

from stripeml.passes import nest as nest_module


@pytest.fixture
def unified(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per chain whose rows the pass tried to unify."""
    calls: list[int] = []
    real = nest_module._unify

    def counting(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(nest_module, "_unify", counting)
    return calls
