"""Known bugs, each a class of programs the fuzzer can leave out.

Each entry is a bug the fuzzer found or was told of (issue 12), the backends it
hit and, where it raises, the error it showed.  All are fixed now, so
:data:`EXCLUDED_NOW` is empty: the CI slice and ``make fuzz`` generate every
class, and the oracle expects NumPy's values or the language's error for it.
When a new bug is found and cannot be fixed at once, add it here and to
:data:`EXCLUDED_NOW` (``make fuzz EXCLUDE=none`` still runs it), with a
regression case marked ``xfail``; remove it from :data:`EXCLUDED_NOW` with the
fix.  ``EXCLUDE=all`` leaves out every class listed, to check the switches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownBug:
    name: str
    what: str
    slice: str  # who fixes it
    backends: tuple[str, ...]  # where it shows; others still run
    events: tuple[str, ...] = ()  # reference events that mark an affected program
    message: str = ""  # a regex matching the error this bug raises, where it raises one


KNOWN_BUGS = {
    b.name: b
    for b in [
        KnownBug(
            "int_div_overflow",
            "integer / and % of INT_MIN by a tensor holding -1 kill the cpu process (SIGFPE)",
            "int division/remainder semantics on cpu/opencl",
            ("cpu", "opencl", "opencl_pocl"),
            ("int_div_overflow",),
        ),
        KnownBug(
            "int_div_zero",
            "integer / and % by zero (0 in NumPy and the docs): reported to differ",
            "int division/remainder semantics on cpu/opencl",
            ("cpu", "opencl", "opencl_pocl"),
            ("int_div_zero",),
        ),
        KnownBug(
            "assign_race",
            "an '=' contraction storing an element twice returns a value instead of an error",
            "'=' (assign) races",
            ("cpu", "opencl", "opencl_pocl"),
            ("assign_conflict",),
        ),
        KnownBug(
            "float_mod_sign",
            "float % gives -0.0 where NumPy gives +0.0",
            "int division/remainder semantics on cpu/opencl",
            ("opencl", "opencl_pocl"),
            ("float_mod_zero",),
        ),
        KnownBug(
            "out_alias",
            "f(x, out=x): an output aliasing an input gives wrong values",
            "out= aliasing and user-facing error types/sizes",
            ("interp", "cpu", "opencl", "opencl_pocl", "examples/npu", "examples/two_level_cpu"),
        ),
        KnownBug(
            "default_dtype",
            "a 'default' tensor of another dtype than the contraction: the lowered IR fails "
            "to verify (VerifyError naming an IR block, not the source)",
            "found by the fuzzer; reported, not yet owned",
            ("interp", "cpu", "opencl", "opencl_pocl", "examples/npu", "examples/two_level_cpu"),
            message=r"_fill' \(// fill .*default .*: dtype \w+ differs from the parent's",
        ),
        KnownBug(
            "weak_literal_range",
            "a weak literal out of the range of the integer dtype it meets (int32 A + 3000000000, "
            "max(uint16, -1)) silently wraps; NumPy 2, which the docs follow, raises",
            "found by the fuzzer; reported, not yet owned",
            ("interp", "cpu", "opencl", "opencl_pocl", "examples/npu", "examples/two_level_cpu"),
            ("weak_out_of_range",),
        ),
        KnownBug(
            "huge_size",
            "an output size past memory (N + 9223372036854775808, a negated huge literal) raises "
            "InternalError (MemoryError, 'Maximum allowed dimension exceeded') instead of a ShapeError",
            "out= aliasing and user-facing error types/sizes (reported)",
            ("interp",),
            message=r"internal error .*(MemoryError|Maximum allowed dimension exceeded|Unable to allocate|array is too big)",
        ),
        KnownBug(
            "tile_long_int",
            "a Tile integer literal of more than 4300 digits raises Python's ValueError from the parser",
            "found by the fuzzer; reported, not yet owned",
            ("interp",),
            message=r"Exceeds the limit \(4300 digits\) for integer string conversion",
        ),
    ]
}
KNOWN = frozenset(KNOWN_BUGS)
# The classes left out today by the CI slice and by `make fuzz` (EXCLUDE=none runs
# everything): none, every known bug is fixed.
EXCLUDED_NOW: frozenset[str] = frozenset()


def known_error(exclude: frozenset[str], message: str) -> str | None:
    """The excluded class an error message shows, if any (mutants can hit them too)."""
    for b in KNOWN_BUGS.values():
        if b.name in exclude and b.message and re.search(b.message, message):
            return b.name
    return None


def affected(exclude: frozenset[str], events: set[str], backend: str) -> list[str]:
    """The excluded classes whose event the reference saw and that hit ``backend``."""
    return [
        b.name
        for b in KNOWN_BUGS.values()
        if b.name in exclude and events & set(b.events) and backend in b.backends
    ]
