"""The pass registry: pass names to pass classes, and building passes from options.

A pass is a ``@dataclass(frozen=True)`` whose fields are its options, with a
class attribute ``name`` equal to its file stem and ``run(program) -> program``
(the same object when nothing changed).  ``@register`` adds it to
:data:`PASSES`; :func:`make_pass` builds one from a name and options, as a
target file's pipeline does.  Every problem with a name or an option raises
:class:`~stripeml.errors.OptionError` (an unknown pass: ``StripeError``) whose
``option`` names the key, so the target loader can point at it without
reading the message.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Protocol

from ..errors import OptionError, StripeError
from ..ir.nodes import Program

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
