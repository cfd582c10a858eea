"""Errors raised by stripeml.

Every error a user can cause derives from :class:`StripeError`, so callers can
catch one type.  Source errors carry a location and render the offending line
with a caret.
"""

from __future__ import annotations


class StripeError(Exception):
    """Base of every error stripeml raises on bad input."""


class TileSyntaxError(StripeError):
    """A Tile program does not parse.

    ``line`` and ``column`` are 1-based; ``str(err)`` shows the message, the
    source line and a caret under the column.
    """

    def __init__(self, message: str, line: int, column: int, source: str = "") -> None:
        self.message = message
        self.line = line
        self.column = column
        self.source = source
        super().__init__(format_located(message, line, column, source))


class TileNameError(StripeError):
    """A Tile program refers to something that is not defined (or misuses a name).

    ``line`` and ``column`` (1-based) are set when the checker locates the error.
    """

    line: int | None = None
    column: int | None = None


class TileTypeError(StripeError):
    """A Tile statement is ill-formed: wrong arity, non-affine index, bad dtype use.

    ``line`` and ``column`` (1-based) are set when the checker locates the error.
    """

    line: int | None = None
    column: int | None = None


class ShapeError(StripeError):
    """Bad shapes or dtypes at call time, or sizes that come out invalid."""


class IRSyntaxError(StripeError):
    """Stripe IR text does not parse."""

    def __init__(self, message: str, line: int, column: int, source: str = "") -> None:
        self.message = message
        self.line = line
        self.column = column
        super().__init__(format_located(message, line, column, source))


class VerifyError(StripeError):
    """A Stripe program is not valid IR (see ``stripeml.ir.verify``)."""


class TargetError(StripeError):
    """A target description (a ``.toml`` file) cannot be found, read or validated.

    The message names the file, the key (``memory[1].size``,
    ``pipeline[2].options.fraction``) and what is wrong with it.
    """


class OptionError(StripeError):
    """A pass option has a bad value; ``option`` names it (the target loader
    reports it as ``pipeline[i].options.<option>``)."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(message)


class ExecutionError(StripeError):
    """A program failed while running (for example a race on an ``assign`` output)."""


class EdslError(StripeError):
    """The Python EDSL (:mod:`stripeml.edsl`) was misused while tracing a function:
    indexing with something that is not an index, binding a tensor's dims twice
    differently, returning something that is not a tensor, ...  The message
    starts with the user's ``file:line``; ``python_file`` and ``python_line``
    hold them."""

    python_file: str | None = None
    python_line: int | None = None


class InternalError(StripeError):
    """A bug in stripeml surfaced while handling valid-looking input.

    Raised in place of a raw Python exception so callers only ever see
    :class:`StripeError`; the original exception is chained as ``__cause__``.
    """


def format_located(message: str, line: int, column: int, source: str = "") -> str:
    """Render ``message`` at 1-based ``line``/``column`` with the line and a caret."""
    head = f"{line}:{column}: {message}"
    excerpt = source_excerpt(line, column, source)
    return f"{head}\n{excerpt}" if excerpt else head


def source_excerpt(line: int, column: int, source: str) -> str:
    """Line ``line`` of ``source`` and a caret under ``column`` (both indented),
    or "" when the source has no such line."""
    lines = source.splitlines()
    if not (1 <= line <= len(lines)):
        return ""
    text = lines[line - 1].expandtabs(1)
    caret = " " * (max(column, 1) - 1) + "^"
    return f"    {text}\n    {caret}"


def format_bytes(n: int) -> str:
    """A byte count for messages: exact, with a binary-prefixed size when large
    (``1099511627776 bytes (1.0 TiB)``); past 2**128, only how big it is."""
    if n.bit_length() > 128:
        return "more than 2**128 bytes"
    if n < 1 << 20:
        return f"{n} bytes"
    for unit in ("EiB", "PiB", "TiB", "GiB", "MiB"):
        scale = 1 << (10 * (" KMGTPE".index(unit[0])))
        if n >= scale:
            return f"{n} bytes ({n / scale:.1f} {unit})"
    return f"{n} bytes"  # pragma: no cover - n >= 1 MiB has a unit above
