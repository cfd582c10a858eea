"""The pass registry: pass names to pass classes, and building passes from options.

A pass is a ``@dataclass(frozen=True)`` whose fields are its options, with a
class attribute ``name`` equal to its file stem and ``run(program) -> program``
(the same object when nothing changed).  ``@register`` adds it to
:data:`PASSES`; :func:`make_pass` builds one from a name and options, as a
target file's pipeline does.  Every problem with a name or an option raises
:class:`~stripeml.errors.OptionError` (an unknown pass: ``StripeError``) whose
``option`` names the key, so the target loader can point at it without
reading the message.

Passes check their options' domains in ``__post_init__`` with the helpers at
the end (:func:`check_positive`, :func:`check_non_negative`,
:func:`check_fraction`, :func:`check_location_names`, :func:`check_selector`).
Options that name things a target defines follow one convention:
:data:`LOCATION_OPTIONS` name memory locations and :data:`SELECTOR_OPTIONS`
are tag selectors; :func:`check_names` checks them against a target's memories
and the tag vocabulary (the target loader calls it).
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections.abc import Collection, Iterable
from typing import Protocol

from ..analysis.select import parse_selector
from ..errors import OptionError, StripeError
from ..ir.nodes import Program
from ..ir.tags import DECLARED

PASSES: dict[str, type] = {}

_SCALARS = (bool, int, float, str)


class Pass(Protocol):
    """A pass: a frozen dataclass (its fields are its options) with ``name`` and ``run``."""

    name: str

    def run(self, program: Program) -> Program: ...


def register(cls: type) -> type:
    """Class decorator: add a pass class to :data:`PASSES` under its ``name``."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"pass class {cls.__name__} needs a class attribute 'name'")
    params = getattr(cls, "__dataclass_params__", None)
    if not dataclasses.is_dataclass(cls) or params is None or not params.frozen:
        raise TypeError(f"pass class {cls.__name__} must be a frozen dataclass")
    if name in PASSES and PASSES[name] is not cls:
        raise TypeError(f"two passes are named '{name}'")
    PASSES[name] = cls
    return cls


def pass_options(cls: type) -> dict[str, object]:
    """The options of a pass class: field name to its type (as annotated)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, object) for f in dataclasses.fields(cls)}


def pass_class(name: str) -> type:
    """The class registered as ``name``; :class:`StripeError` listing the known ones."""
    cls = PASSES.get(name)
    if cls is None:
        known = ", ".join(sorted(PASSES)) or "none"
        raise StripeError(f"unknown pass '{name}' (known passes: {known})")
    return cls


def make_pass(name: str, **options: object) -> Pass:
    """The pass ``name`` with ``options``, checked once: an unknown option or a
    value of the wrong scalar type, then the pass's own ``__post_init__`` checks
    (which raise :class:`OptionError` naming their option)."""
    cls = pass_class(name)
    fields = pass_options(cls)
    for key, value in options.items():
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise OptionError(key, f"pass '{name}' has no option '{key}' (its options: {known})")
        want = fields[key]
        if want in _SCALARS and not _fits(value, want):
            raise OptionError(
                key,
                f"pass '{name}': option '{key}' must be {getattr(want, '__name__', want)}, "
                f"got {type(value).__name__} {value!r}",
            )
    return cls(**options)


def _fits(value: object, want: object) -> bool:
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want) if isinstance(want, type) else True


def check_option(option: str, check: typing.Callable[[], object]) -> None:
    """Run ``check()`` (a pass's own validation of one option, in ``__post_init__``);
    a :class:`StripeError` it raises becomes an :class:`OptionError` naming ``option``."""
    try:
        check()
    except OptionError:
        raise
    except StripeError as exc:
        raise OptionError(option, str(exc)) from None


# --------------------------------------------------------------------------
# Option domains (a pass's ``__post_init__`` calls these)

#: Option names that, in every pass, name memory locations (a string or a list).
LOCATION_OPTIONS = ("location", "locations")
#: Option names that, in every pass, are tag selectors (:mod:`stripeml.analysis.select`).
SELECTOR_OPTIONS = ("select",)

_LOCATION = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _bad(p: object, option: str, what: str) -> OptionError:
    value = getattr(p, option)
    return OptionError(
        option, f"pass '{getattr(p, 'name', '?')}': option '{option}' must be {what}, got {value!r}"
    )


def check_positive(p: object, *options: str) -> None:
    """Each of ``options`` of pass ``p`` is a number > 0 (sizes, counts, widths)."""
    for option in options:
        value = getattr(p, option)
        if not (value > 0 and math.isfinite(value)):
            raise _bad(p, option, "positive")


def check_non_negative(p: object, *options: str) -> None:
    """Each of ``options`` of pass ``p`` is a number >= 0 (sizes where 0 means off)."""
    for option in options:
        value = getattr(p, option)
        if not (value >= 0 and math.isfinite(value)):
            raise _bad(p, option, "0 or more")


def check_choice(p: object, option: str, choices: Collection[object]) -> None:
    """Option ``option`` of pass ``p`` is one of ``choices``."""
    if getattr(p, option) not in choices:
        raise _bad(p, option, "one of " + ", ".join(map(repr, choices)))


def check_fraction(p: object, *options: str) -> None:
    """Each of ``options`` of pass ``p`` is a share of something: in (0, 1]."""
    for option in options:
        if not 0 < getattr(p, option) <= 1:  # NaN fails too
            raise _bad(p, option, "in (0, 1] (a share of the level)")


def check_location_names(p: object, option: str) -> tuple[str, ...]:
    """Option ``option`` of ``p`` as a tuple of memory location names: a string
    (comma separated, for ``locations``) or a sequence of strings, each an
    identifier (``DRAM``, ``L1``, ``SHARED``)."""
    value = getattr(p, option)
    if isinstance(value, str):
        names: Iterable[object] = (w.strip() for w in value.split(",") if w.strip())
    elif isinstance(value, (tuple, list)):
        names = value
    else:
        raise _bad(p, option, "a location name or a list of them")
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not _LOCATION.match(name):
            raise OptionError(
                option,
                f"pass '{getattr(p, 'name', '?')}': option '{option}': {name!r} is not a "
                "memory location name (letters, digits, _)",
            )
        out.append(name)
    return tuple(out)


def check_selector(p: object, option: str = "select") -> None:
    """Option ``option`` of ``p`` parses as a tag selector."""
    try:
        parse_selector(getattr(p, option))
    except StripeError as exc:
        raise OptionError(option, f"pass '{getattr(p, 'name', '?')}': {exc}") from None


def selector_tags(text: str) -> set[str]:
    """The tags a selector names (``*`` excluded)."""
    return {tag for term in parse_selector(text).terms for _, tag in term if tag != "*"}


def check_names(p: object, locations: Collection[str]) -> None:
    """The options of ``p`` that name things a target defines: each location
    (:data:`LOCATION_OPTIONS`) among ``locations``, each tag of a selector
    (:data:`SELECTOR_OPTIONS`) in the tag vocabulary (``ir/tags.py``: a
    selector naming another tag never matches).  :class:`OptionError` naming
    the option."""
    name = getattr(p, "name", "?")
    for option in LOCATION_OPTIONS:
        value = getattr(p, option, None)
        names = (value,) if isinstance(value, str) else value or ()
        unknown = [n for n in names if n not in locations]
        if unknown:
            raise OptionError(
                option,
                f"pass '{name}': option '{option}': no memory named {', '.join(map(repr, unknown))} "
                f"(the target has {', '.join(locations)})",
            )
    for option in SELECTOR_OPTIONS:
        value = getattr(p, option, None)
        if isinstance(value, str):
            unknown = sorted(selector_tags(value) - DECLARED)
            if unknown:
                raise OptionError(
                    option,
                    f"pass '{name}': option '{option}': {', '.join(map(repr, unknown))} is not a "
                    f"tag (tags: {', '.join(sorted(DECLARED))})",
                )


# --------------------------------------------------------------------------
# Tunable options (the search space of ``stripeml tune``, docs/tuning.md)
#
# A pass whose options change how fast its kernels run, not what they compute,
# declares them in a class attribute ``tunable``: option name -> the values
# worth trying, in order (neighbours in that order are what the search steps
# between).  Only passes that decide each root kernel on its own (no look at
# the kernels around it) may declare any: the pass manager then runs such a
# pass with other options on one kernel only (:mod:`._kernel_choices`).  A pass
# that decides per chain of kernels declares ``chain_choices = True`` and a
# method ``run_choices(program, options_for)``: it is given each kernel's
# options and takes a chain's from the chain's first kernel (``nest``).  A pass
# whose options are reshaped before use (``unroll``'s ``registers``) gives
# ``tuning_start()``: the options the analytic choice really uses, which the
# search starts from and every candidate replaces fields of.


# --------------------------------------------------------------------------
# Repeated layers (:mod:`._replicate`)
#
# A pass that decides each root statement from that statement, the statements
# around it and where the buffers it touches are used (nothing counted over the
# whole program) declares ``layer_local = True``: the pass manager may then run
# it over three repeats of a model's repeated layers and copy the middle one's
# result for the others.  ``place``, which lays out all of a program's
# temporaries at once, does not; nor does a pass that declares nothing.


def layer_local(p: object) -> bool:
    """Whether pass ``p`` (object or class) declares ``layer_local``."""
    return bool(getattr(p, "layer_local", False))


def tunable_options(p: object) -> dict[str, tuple[object, ...]]:
    """Option -> values to try, of a pass (object or class); ``{}``: none."""
    declared = getattr(p, "tunable", None) or {}
    return {name: tuple(values) for name, values in dict(declared).items()}


def tuning_start(p: Pass) -> Pass:
    """The options the pass ``p`` decides with (its ``tuning_start()``, else ``p``)."""
    start = getattr(p, "tuning_start", None)
    return start() if callable(start) else p


def with_choice(p: Pass, choice: typing.Mapping[str, object]) -> Pass:
    """``p`` from its tuning start with ``choice``'s options replaced, each checked
    to be one of its tunable options (an :class:`OptionError` naming it if not)
    and by the pass's own ``__post_init__``."""
    allowed = tunable_options(p)
    for key in choice:
        if key not in allowed:
            raise OptionError(key, f"pass '{p.name}': option '{key}' is not tunable")
    return dataclasses.replace(tuning_start(p), **dict(choice))  # type: ignore[type-var]
