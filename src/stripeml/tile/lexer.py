"""Tokenizer for the Tile language.

The lexer is hand-written so that every token knows its exact 1-based line and
column and its character offsets in the source; the parser uses the offsets to
rebuild each statement's text and the positions to point carets at errors.

Line breaks are counted the way :meth:`str.splitlines` counts them (``\\r\\n``
is one break), so the line numbers in errors always match the line that
:func:`stripeml.errors.format_located` prints.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..errors import TileSyntaxError

# Token kinds: "ident", "int", "float", "eof", or the punctuation text itself.
PUNCTUATION = (
    # two-character operators first so the longest match wins
    "->",
    "<<",
    ">>",
    "<=",
    ">=",
    "==",
    "!=",
    "&&",
    "||",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ";",
    ":",
    "?",
    "+",
    "-",
    "*",
    "/",
    "%",
    "<",
    ">",
    "=",
    "!",
    "&",
    "|",
    "^",
    "~",
)

# Characters str.splitlines treats as line boundaries ("\r\n" counts once).
_NEWLINES = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
_BLANKS = frozenset(" \t")
_DIGITS = frozenset("0123456789")
_IDENT_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_IDENT_REST = _IDENT_START | _DIGITS


class Token(NamedTuple):
    """One token: ``kind`` (see module docs), its text, position and offsets (a
    named tuple: a program's ten thousand tokens are made in a third of the time
    a frozen dataclass takes)."""

    kind: str
    text: str
    line: int
    column: int
    start: int  # offset of the first character
    end: int  # offset one past the last character

    def describe(self) -> str:
        """How error messages name this token ("';'", "identifier 'A'", ...)."""
        if self.kind == "eof":
            return "end of input"
        if self.kind == "ident":
            return f"identifier '{self.text}'"
        if self.kind in ("int", "float"):
            return f"number '{self.text}'"
        return f"'{self.text}'"


class _Scanner:
    def __init__(self, source: str) -> None:
        self.src = source
        self.i = 0
        self.line = 1
        self.line_start = 0  # offset where the current line begins
        # Position just past the last non-blank character, for the EOF token:
        # a caret there is visible, unlike one on an empty trailing line.
        self.last = (1, 1, 0)

    def column(self, offset: int) -> int:
        return offset - self.line_start + 1

    def error(self, message: str, offset: int) -> TileSyntaxError:
        return TileSyntaxError(message, self.line, self.column(offset), self.src)

    def newline(self) -> None:
        if self.src[self.i] == "\r" and self.src.startswith("\n", self.i + 1):
            self.i += 1
        self.i += 1
        self.line += 1
        self.line_start = self.i

    def skip_blanks_and_comments(self) -> None:
        src = self.src
        while self.i < len(src):
            c = src[self.i]
            if c in _NEWLINES:
                self.newline()
            elif c in _BLANKS:
                self.i += 1
            elif c == "#" or src.startswith("//", self.i):
                while self.i < len(src) and src[self.i] not in _NEWLINES:
                    self.i += 1
                self.last = (self.line, self.column(self.i), self.i)
            else:
                return

    def number(self) -> Token:
        src, start = self.src, self.i
        i = start
        while i < len(src) and src[i] in _DIGITS:
            i += 1
        is_float = False
        if i < len(src) and src[i] == ".":
            is_float = True
            i += 1
            while i < len(src) and src[i] in _DIGITS:
                i += 1
        if i < len(src) and src[i] in "eE":
            is_float = True
            i += 1
            if i < len(src) and src[i] in "+-":
                i += 1
            if i >= len(src) or src[i] not in _DIGITS:
                self.i = i
                raise self.error(
                    f"malformed number '{src[start:i]}': expected digits in the exponent", start
                )
            while i < len(src) and src[i] in _DIGITS:
                i += 1
        if i < len(src) and (src[i] in _IDENT_START or src[i] == "."):
            j = i
            while j < len(src) and (src[j] in _IDENT_REST or src[j] == "."):
                j += 1
            raise self.error(f"malformed number '{src[start:j]}'", start)
        return self.make("float" if is_float else "int", start, i)

    def make(self, kind: str, start: int, end: int) -> Token:
        self.i = end
        tok = Token(kind, self.src[start:end], self.line, self.column(start), start, end)
        self.last = (self.line, self.column(end), end)
        return tok

    def next(self) -> Token:
        self.skip_blanks_and_comments()
        src, start = self.src, self.i
        if start >= len(src):
            line, column, offset = self.last
            return Token("eof", "", line, column, offset, offset)
        c = src[start]
        if c in _IDENT_START:
            end = start + 1
            while end < len(src) and src[end] in _IDENT_REST:
                end += 1
            return self.make("ident", start, end)
        if c in _DIGITS or (c == "." and src[start + 1 : start + 2] in _DIGITS):
            return self.number()
        for p in PUNCTUATION:
            if src.startswith(p, start):
                return self.make(p, start, start + len(p))
        shown = c if c.isprintable() else repr(c)[1:-1]
        raise self.error(f"unexpected character '{shown}'", start)


# The common tokens, after blanks on the same line: an identifier, an integer that
# no digit, ".", exponent or letter follows, or punctuation (not a comment's
# "//").  Anything else (a line break, a comment, a float, a malformed number, a
# stray character, the end) is the scanner's, one token at a time.
_FAST = re.compile(
    r"[ \t]*(?:([A-Za-z_][A-Za-z0-9_]*)|([0-9]+)(?![0-9.eEA-Za-z_])"
    r"|(->|<<|>>|<=|>=|==|!=|&&|\|\||/(?!/)|[()\[\]{},;:?+\-*%<>=!&|^~]))"
)


def tokenize(source: str) -> list[Token]:
    """Split ``source`` into tokens, ending with one ``eof`` token.

    Raises :class:`~stripeml.errors.TileSyntaxError` on a character that
    starts no token or on a malformed number.
    """
    scanner = _Scanner(source)
    tokens: list[Token] = []
    match = _FAST.match
    append = tokens.append
    while True:
        m = match(source, scanner.i)
        if m is not None:
            ident, number, punct = m.groups()
            kind = "ident" if ident is not None else "int" if number is not None else punct
            start, end = m.start(m.lastindex or 0), m.end()
            line, column = scanner.line, start - scanner.line_start + 1
            append(Token(kind, source[start:end], line, column, start, end))
            scanner.i = end
            scanner.last = (line, column + end - start, end)
            continue
        tok = scanner.next()
        append(tok)
        if tok.kind == "eof":
            return tokens
