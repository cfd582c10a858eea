"""The tag selector language."""

from __future__ import annotations

import pytest

from stripeml.analysis.select import matches, parse_selector
from stripeml.errors import StripeError


@pytest.mark.parametrize(
    "selector, tags, want",
    [
        ("contraction", {"contraction", "kernel"}, True),
        ("contraction", {"eltwise", "kernel"}, False),
        ("kernel,!fill", {"kernel", "eltwise"}, True),
        ("kernel,!fill", {"kernel", "fill"}, False),
        ("contraction|eltwise", {"eltwise"}, True),
        ("contraction|eltwise, !fused", {"eltwise", "fused"}, False),
        ("", set(), True),
        ("*", {"x"}, True),
        ("!*", {"x"}, False),
    ],
)
def test_matches(selector: str, tags: set[str], want: bool) -> None:
    assert matches(selector, tags) is want


@pytest.mark.parametrize("bad", ["kernel,,fill", "!", "a b", "#kernel", "a|"])
def test_bad_selectors_raise(bad: str) -> None:
    with pytest.raises(StripeError, match="bad tag selector"):
        parse_selector(bad)
