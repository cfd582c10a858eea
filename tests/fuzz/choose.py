"""Where the generators' random choices come from.

The program generators are written against :class:`Chooser`, a handful of
primitive choices, so one generator serves two masters: hypothesis tests
(:class:`DrawChooser` wraps ``draw``, keeping hypothesis' shrinking) and the
seeded fuzzer (:class:`RandomChooser` wraps ``random.Random``, so a seed alone
reproduces a program).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Chooser(Protocol):
    """The primitive random choices a generator makes."""

    def integer(self, lo: int, hi: int) -> int:
        """An integer in ``lo..hi`` (both included)."""
        ...

    def choice(self, items: Sequence[T]) -> T:
        """One of ``items``."""
        ...

    def boolean(self) -> bool: ...

    def subset(self, items: Sequence[T], lo: int, hi: int) -> list[T]:
        """Between ``lo`` and ``hi`` distinct items, in a random order."""
        ...

    def permutation(self, items: Sequence[T]) -> list[T]: ...

    def chance(self, p: float) -> bool:
        """True with probability ``p`` (the fuzzer's knobs are rates)."""
        ...


class RandomChooser:
    """Choices from a seeded :class:`random.Random`."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, items: Sequence[T]) -> T:
        return items[self.rng.randrange(len(items))]

    def boolean(self) -> bool:
        return self.rng.random() < 0.5

    def subset(self, items: Sequence[T], lo: int, hi: int) -> list[T]:
        return self.rng.sample(list(items), self.rng.randint(lo, min(hi, len(items))))

    def permutation(self, items: Sequence[T]) -> list[T]:
        return self.rng.sample(list(items), len(items))

    def chance(self, p: float) -> bool:
        return self.rng.random() < p


class DrawChooser:
    """Choices drawn through hypothesis (``draw`` of an ``st.composite``)."""

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        from hypothesis import strategies as st

        return self.draw(st.integers(lo, hi))

    def choice(self, items: Sequence[T]) -> T:
        from hypothesis import strategies as st

        return self.draw(st.sampled_from(list(items)))

    def boolean(self) -> bool:
        from hypothesis import strategies as st

        return self.draw(st.booleans())

    def subset(self, items: Sequence[T], lo: int, hi: int) -> list[T]:
        from hypothesis import strategies as st

        return self.draw(
            st.lists(st.sampled_from(list(items)), min_size=lo, max_size=hi, unique=True)
        )

    def permutation(self, items: Sequence[T]) -> list[T]:
        from hypothesis import strategies as st

        return self.draw(st.permutations(list(items)))

    def chance(self, p: float) -> bool:
        """True with probability about ``p`` (a draw in 0..99, so hypothesis can shrink it)."""
        return self.integer(0, 99) < round(100 * p)
