"""The pass registry: pass names to pass classes, and building passes from options.

A pass is a ``@dataclass(frozen=True)`` whose fields are its options, with a
class attribute ``name`` equal to its file stem and ``run(program) -> program``
(the same object when nothing changed).  ``@register`` adds it to
:data:`PASSES`; :func:`make_pass` builds one from a name and options, as a
target file's pipeline will.
"""

from __future__ import annotations

import dataclasses
import typing

from ..errors import StripeError

PASSES: dict[str, type] = {}

_SCALARS = (bool, int, float, str)


def register(cls: type) -> type:
    """Class decorator: add a pass class to :data:`PASSES` under its ``name``."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"pass class {cls.__name__} needs a class attribute 'name'")
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"pass class {cls.__name__} must be a frozen dataclass")
    if name in PASSES and PASSES[name] is not cls:
        raise TypeError(f"two passes are named '{name}'")
    PASSES[name] = cls
    return cls


def pass_options(cls: type) -> dict[str, object]:
    """The options of a pass class: field name to its type (as annotated)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, object) for f in dataclasses.fields(cls)}


def make_pass(name: str, **options: object):
    """The pass ``name`` with ``options``; :class:`StripeError` names what is wrong."""
    cls = PASSES.get(name)
    if cls is None:
        known = ", ".join(sorted(PASSES)) or "none"
        raise StripeError(f"unknown pass '{name}' (known passes: {known})")
    fields = pass_options(cls)
    for key, value in options.items():
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise StripeError(f"pass '{name}' has no option '{key}' (its options: {known})")
        want = fields[key]
        if want in _SCALARS and not _fits(value, want):
            raise StripeError(
                f"pass '{name}': option '{key}' must be {want.__name__}, "  # type: ignore[union-attr]
                f"got {type(value).__name__} {value!r}"
            )
    return cls(**options)


def _fits(value: object, want: object) -> bool:
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)  # type: ignore[arg-type]
