"""Tag selectors: the tiny language passes use to pick blocks (after loopy's ``match``).

A selector is a comma-separated list of terms that must all hold; a term is
one or more alternatives separated by ``|`` (any may hold); an alternative is
a tag name, optionally negated with ``!``; ``*`` holds for every block::

    "contraction"            tagged #contraction
    "kernel,!fill"           tagged #kernel and not #fill
    "contraction|eltwise"    either tag
    ""  or  "*"              every block

Requires nothing.  Guarantees: :func:`parse_selector` raises a
:class:`~stripeml.errors.StripeError` naming the selector and the problem.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache

from ..errors import StripeError

__all__ = ["Selector", "matches", "parse_selector"]


@dataclass(frozen=True, slots=True)
class Selector:
    """All ``terms`` hold; a term holds when one of its ``(negated, tag)`` alternatives does."""

    terms: tuple[tuple[tuple[bool, str], ...], ...]

    def __call__(self, tags: Collection[str]) -> bool:
        return all(
            any((tag == "*" or tag in tags) != negated for negated, tag in term)
            for term in self.terms
        )


@lru_cache(maxsize=256)
def parse_selector(text: str) -> Selector:
    """The selector written ``text`` (see the module docstring)."""
    if not text.strip():
        return Selector(())
    terms = []
    for raw in text.split(","):
        alts = []
        for alt in raw.split("|"):
            alt = alt.strip()
            negated = alt.startswith("!")
            tag = alt[1:].strip() if negated else alt
            if not tag or any(c in tag for c in " !#\t"):
                raise StripeError(f"bad tag selector {text!r}: {alt!r} is not a tag")
            alts.append((negated, tag))
        terms.append(tuple(alts))
    return Selector(tuple(terms))


def matches(selector: str, tags: Collection[str]) -> bool:
    """Whether a block with ``tags`` is selected by ``selector``."""
    return parse_selector(selector)(tags)
