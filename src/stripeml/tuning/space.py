"""The search space of a target's pipeline, and the steps between its points.

Each pass from the tuning point on that declares tunable options
(``tunable`` on the pass class, :func:`stripeml.passes.registry.tunable_options`)
adds one axis per option: the declared values, plus the value the pass
decides with (:func:`~stripeml.passes.registry.tuning_start`) where the
declared list lacks it.  A point is a *choice*: pass -> option -> value for
the options that differ from that start; ``{}`` is the analytic choice, the
target file's own.  A step changes one option to a neighbouring value.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from ..passes._kernel_choices import Choice
from ..passes.registry import tunable_options, tuning_start
from ..targets import Target

__all__ = ["Axis", "axes", "choice_key", "neighbours"]


@dataclass(frozen=True)
class Axis:
    """One tunable option: its pass, name, values in order, and the start value."""

    pass_name: str
    option: str
    values: tuple[object, ...]
    start: object


def axes(target: Target, point: int) -> list[Axis]:
    """The axes of ``target``'s pipeline from index ``point`` on."""
    out: list[Axis] = []
    seen: set[tuple[str, str]] = set()
    for p in target.passes[point:]:
        start = tuning_start(p)
        for option, declared in tunable_options(p).items():
            if (p.name, option) in seen:
                continue  # a pass twice in a pipeline: one choice for both
            seen.add((p.name, option))
            value = getattr(start, option)
            values = list(declared)
            if value not in values:
                values.append(value)
                if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                    values.sort(key=lambda v: float(v))  # type: ignore[arg-type]
            out.append(Axis(p.name, option, tuple(values), value))
    return out


def choice_key(choice: Choice) -> str:
    """A choice as canonical text (dictionary key, database column)."""
    return json.dumps(choice, sort_keys=True)


def _value(choice: Choice, axis: Axis) -> object:
    return choice.get(axis.pass_name, {}).get(axis.option, axis.start)


def _with(choice: Choice, axis: Axis, value: object) -> Choice:
    out = {p: dict(opts) for p, opts in choice.items()}
    opts = out.setdefault(axis.pass_name, {})
    if value == axis.start and type(value) is type(axis.start):
        opts.pop(axis.option, None)
    else:
        opts[axis.option] = value
    return {p: o for p, o in out.items() if o}


#: An axis of at most this many values is a step wide: each of its values is
#: one step from any other (``nest``'s ``fraction``: a chain whose
#: intermediates fit a quarter of L2 nests only at an eighth, and the quarter
#: between is the analytic program again, a plateau the beam does not cross
#: once a timed generation gains nothing).
SHORT_AXIS = 3


def neighbours(choice: Choice, space: list[Axis]) -> Iterator[Choice]:
    """The choices one step from ``choice``: each option one value up or down (any
    other value, on an axis of at most :data:`SHORT_AXIS` values)."""
    for axis in space:
        now = _value(choice, axis)
        try:
            n = axis.values.index(now)
        except ValueError:
            continue
        if len(axis.values) <= SHORT_AXIS:
            near = [m for m in range(len(axis.values)) if m != n]
        else:
            near = [m for m in (n - 1, n + 1) if 0 <= m < len(axis.values)]
        for m in near:
            yield _with(choice, axis, axis.values[m])
