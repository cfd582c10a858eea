"""The cap on a kernel's plateau walk (``KernelSearch.MAX_UNTIMED``): a search
whose candidates all give programs already timed ends after that many compiles
instead of walking the whole space, and the analytic choice is still the first
thing compiled and timed.  The measurer is made up: no test depends on this
machine's timings."""

from __future__ import annotations

from types import SimpleNamespace

from stripeml.tuning.measure import Timing
from stripeml.tuning.search import KernelSearch
from stripeml.tuning.space import Axis, choice_key

#: 6 options of 6 values: 46656 points, every one a step from another
SPACE = [Axis("unroll", f"o{n}", tuple(range(6)), 0) for n in range(6)]


class _Measurer:
    """Every choice checks out; ``texts`` gives a choice's program (default: the
    analytic one, a plateau); a time is the program's ``speed``."""

    def __init__(self, texts=None, speed=None) -> None:
        self.texts = texts or {}
        self.speed = speed or {}
        self.calls: list[tuple[str, list]] = []

    def _text(self, c) -> str:
        return self.texts.get(choice_key(c), "analytic")

    def check(self, job, choices):
        self.calls.append(("check", list(choices)))
        return [(self._text(c), None) for c in choices]

    def time(self, job, choices, rounds):
        self.calls.append(("time", list(choices)))
        return [Timing(self.speed.get(self._text(c), 1.0), rounds) for c in choices]


def _search(measurer, **kw) -> KernelSearch:
    job = SimpleNamespace(key="k", label="k0", count=1)
    s = KernelSearch(job, SPACE, measurer, **kw)  # type: ignore[arg-type]
    s.start()
    s.run(float("inf"))
    return s


def _untimed_runs(calls) -> list[int]:
    """Candidates compiled between one timing and the next (or the end)."""
    runs = [0]
    for kind, choices in calls:
        if kind == "check":
            runs[-1] += len(choices)
        else:
            runs.append(0)
    return runs


def test_a_plateau_walk_ends_at_the_cap():
    m = _Measurer()
    s = _search(m)
    assert s.done
    # the analytic choice first: compiled alone, then timed alone
    assert m.calls[0] == ("check", [{}]) and m.calls[1] == ("time", [{}])
    # nothing else was timed; the walk compiled the cap's worth, not the space
    assert [c for c in m.calls if c[0] == "time"] == [("time", [{}])]
    assert s.result.compiled == 1 + KernelSearch.MAX_UNTIMED
    assert KernelSearch.MAX_UNTIMED < 6**6 // 10
    assert s.result.choice == {}


def test_a_walk_that_finds_a_new_program_within_the_cap_times_it():
    """A program three steps along the plateau is found and timed; the count
    starts again after each timing, so every run of compiles between timings
    stays within the cap, and the faster program is the search's best."""
    far = {"unroll": {"o0": 3}}
    m = _Measurer({choice_key(far): "faster"}, {"faster": 0.5})
    s = _search(m, max_untimed=40)
    assert m.calls[0] == ("check", [{}]) and m.calls[1] == ("time", [{}])
    assert any(kind == "time" and far in choices for kind, choices in m.calls)
    assert s.best == far
    runs = _untimed_runs(m.calls[1:])
    assert max(runs) <= 40
    assert s.result.compiled > 40  # the cap is per walk, not per kernel
