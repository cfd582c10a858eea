"""Stripe IR text format: the parser (hand-written lexer and recursive descent).

``parse(text)`` reads what :func:`stripeml.ir.format` prints (grammar in
``docs/stripe-ir.md``) and returns the :class:`~stripeml.ir.nodes.Program`.
Any malformed text raises :class:`~stripeml.errors.IRSyntaxError` with a
1-based line and column; the parser checks only syntax (``verify`` checks
meaning).

Whitespace and newlines are insignificant.  ``//`` starts a comment that runs
to the end of the line; a comment that directly follows a block's ``(`` on
the same line is that block's ``comment``, every other comment is ignored.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..errors import IRSyntaxError
from .affine import Affine
from .nodes import (
    DEFAULT_LOCATION,
    DIRECTIONS,
    Block,
    Constant,
    Constraint,
    Index,
    Intrinsic,
    Load,
    LoadIndex,
    ParamValue,
    Program,
    Refinement,
    Special,
    Statement,
    Store,
    TensorShape,
)

_T = TypeVar("_T")

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>[ \t\r\n]+)
    |(?P<comment>//[^\n]*)
    |(?P<float>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
    |(?P<int>[0-9]+)
    |(?P<ident>[A-Za-z_][A-Za-z0-9_.]*|\$[A-Za-z0-9_.]+)
    |(?P<string>")
    |(?P<op>->|>=|[\[\](){},:=\#@+\-*])
    """,
    re.VERBOSE,
)
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r"}
_HEX_RE = re.compile(r"\{([0-9a-fA-F]{1,6})\}")


@dataclass(slots=True)
class Token:
    kind: str  # ident | string | int | float | op | eof
    text: str  # the source text (for ``string``: the decoded value)
    pos: int
    comment: tuple[str, int] | None = None  # a ``//`` comment later on the same line


class _Lexer:
    """Splits the source into tokens; knows how to turn offsets into line/column."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", source)]

    def error(self, message: str, pos: int) -> IRSyntaxError:
        line = bisect.bisect_right(self.line_starts, pos)
        column = pos - self.line_starts[line - 1] + 1
        return IRSyntaxError(message, line, column, self.source)

    def line_of(self, pos: int) -> int:
        return bisect.bisect_right(self.line_starts, pos)

    def tokens(self) -> list[Token]:
        out: list[Token] = []
        src, pos = self.source, 0
        while pos < len(src):
            m = _TOKEN_RE.match(src, pos)
            if m is None:
                raise self.error(f"unexpected character {src[pos]!r}", pos)
            kind = m.lastgroup or ""
            if kind == "string":
                value, end = self.string(pos)
                out.append(Token("string", value, pos))
                pos = end
                continue
            if kind == "comment":
                if (
                    out
                    and out[-1].comment is None
                    and self.line_of(out[-1].pos) == self.line_of(pos)
                ):
                    out[-1].comment = (m.group(), pos)
            elif kind != "ws":
                out.append(Token(kind, m.group(), pos))
            pos = m.end()
        out.append(Token("eof", "", len(src)))
        return out

    def string(self, start: int) -> tuple[str, int]:
        """Decode the string literal whose opening quote is at ``start``."""
        src, pos = self.source, start + 1
        chars: list[str] = []
        while True:
            if pos >= len(src) or src[pos] == "\n":
                raise self.error("unterminated string", start)
            ch = src[pos]
            if ch == '"':
                return "".join(chars), pos + 1
            if ch != "\\":
                chars.append(ch)
                pos += 1
                continue
            esc = src[pos + 1 : pos + 2]
            if esc in _SIMPLE_ESCAPES:
                chars.append(_SIMPLE_ESCAPES[esc])
                pos += 2
                continue
            m = _HEX_RE.match(src, pos + 2) if esc == "u" else None
            if m is None or int(m.group(1), 16) > 0x10FFFF:
                raise self.error("bad escape in string", pos)
            chars.append(chr(int(m.group(1), 16)))
            pos = m.end()

    def comment(self, text: str, pos: int) -> str:
        """The text of a ``//`` comment: one leading space dropped; may be a string literal."""
        body = text[2:]
        start = pos + 2
        if body.startswith(" "):
            body, start = body[1:], start + 1
        if body.endswith("\r"):
            body = body[:-1]
        if not body.startswith('"'):
            return body
        value, end = self.string(start)
        if self.source[end : pos + len(text)].strip():
            raise self.error("text after a quoted comment", end)
        return value


class _Parser:
    """Recursive descent over the token list; one method per grammar rule."""

    def __init__(self, source: str) -> None:
        self.lexer = _Lexer(source)
        self.toks = self.lexer.tokens()
        self.i = 0

    # -- token helpers ----------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def advance(self) -> Token:
        tok = self.toks[self.i]
        if tok.kind != "eof":
            self.i += 1
        return tok

    def error(self, message: str, tok: Token | None = None) -> IRSyntaxError:
        return self.lexer.error(message, (tok or self.tok).pos)

    def describe(self, tok: Token) -> str:
        if tok.kind == "eof":
            return "end of input"
        if tok.kind == "string":
            return "a string"
        return repr(tok.text)

    def at(self, text: str) -> bool:
        """Is the current token the operator or bare word ``text``?"""
        return self.tok.kind in ("op", "ident") and self.tok.text == text

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.advance()
            return True
        return False

    def expect(self, text: str) -> Token:
        if not self.at(text):
            raise self.error(f"expected {text!r}, found {self.describe(self.tok)}")
        return self.advance()

    def is_name(self, tok: Token) -> bool:
        return tok.kind in ("ident", "string")

    def name(self, what: str = "a name") -> str:
        if not self.is_name(self.tok):
            raise self.error(f"expected {what}, found {self.describe(self.tok)}")
        return self.advance().text

    def int_value(self, signed: bool = True, high: int = 2**63) -> int:
        """An integer in ``[-2**63, high)``: int64, or up to uint64 for a constant."""
        negative = signed and self.accept("-")
        if self.tok.kind != "int":
            raise self.error(f"expected an integer, found {self.describe(self.tok)}")
        tok = self.advance()
        try:
            value = int(tok.text)
        except ValueError:
            raise self.error("integer too long", tok) from None
        value = -value if negative else value
        if not -(2**63) <= value < high:
            what = "64-bit" if high == 2**64 else "int64"
            raise self.error(f"integer {tok.text} is past the {what} range", tok)
        return value

    def separated(self, item: Callable[[], _T], close: str) -> list[_T]:
        """``item (, item)*`` up to the ``close`` token (consumed); empty allowed."""
        items: list[_T] = []
        if not self.accept(close):
            items.append(item())
            while self.accept(","):
                items.append(item())
            self.expect(close)
        return items

    # -- program and blocks ------------------------------------------------
    def program(self) -> Program:
        if not self.at("block"):
            raise self.error(f"expected 'block', found {self.describe(self.tok)}")
        root = self.block()
        if self.tok.kind != "eof":
            raise self.error(
                f"expected end of input after the root block, found {self.describe(self.tok)}"
            )
        return Program(root)

    def block(self) -> Block:
        self.expect("block")
        name = self.name() if self.is_name(self.tok) else ""
        self.expect("[")
        idxs = self.separated(self.index, "]")
        tags = []
        while self.accept("#"):
            tags.append(self.name("a tag"))
        paren = self.expect("(")
        comment = self.lexer.comment(*paren.comment) if paren.comment else ""
        constraints: list[Constraint] = []
        refs: list[Refinement] = []
        while not self.accept(")"):
            if self.starts_ref():
                refs.append(self.ref())
            else:
                constraints.append(self.constraint())
        self.expect("{")
        stmts: list[Statement] = []
        while not self.accept("}"):
            stmts.append(self.stmt())
        return Block(
            idxs=tuple(idxs),
            refs=tuple(refs),
            stmts=tuple(stmts),
            constraints=tuple(constraints),
            tags=frozenset(tags),
            name=name,
            comment=comment,
        )

    def index(self) -> Index:
        name = self.name("an index name")
        self.expect(":")
        size = self.int_value()
        affine = self.affine() if self.accept("=") else None
        return Index(name, size, affine)

    def constraint(self) -> Constraint:
        tok = self.tok
        if not (tok.kind == "int" or self.is_name(tok) or self.at("-")):
            found = self.describe(tok)
            raise self.error(f"expected a constraint, a refinement or ')', found {found}")
        lhs = self.affine()
        self.expect(">=")
        # One integer on the right: an affine there could run on into the next item.
        return Constraint(lhs - self.int_value())

    def starts_ref(self) -> bool:
        tok = self.tok
        if tok.kind == "ident" and tok.text in DIRECTIONS:
            return True
        # A quoted direction outside the vocabulary: affines never have two names in a row.
        return tok.kind == "string" and self.is_name(self.peek())

    def ref(self) -> Refinement:
        direction = self.advance().text
        into = self.name("a buffer name")
        from_ = ""
        access: tuple[Affine, ...] = ()
        explicit_from = self.accept("=")
        if explicit_from:
            from_ = self.name("a parent buffer name")
        if explicit_from or self.at("["):
            from_ = from_ if explicit_from else into
            self.expect("[")
            access = tuple(self.separated(self.affine, "]"))
        agg = self.name("an aggregation") if self.accept(":") else ""
        dtype = self.name("a dtype")
        sizes = self.int_tuple()
        self.expect(":")
        strides = self.int_tuple()
        location, offset = DEFAULT_LOCATION, None
        if self.accept("@"):
            location = self.name("a memory location")
            if self.accept(":"):
                offset = self.int_value()
        const = self.tok.kind == "ident" and self.tok.text == "const"
        if const:
            self.advance()
        return Refinement(
            dir=direction,
            into=into,
            shape=TensorShape(dtype, sizes, strides),
            from_=from_,
            access=access,
            agg=agg,
            location=location,
            offset=offset,
            const=const,
        )

    def int_tuple(self) -> tuple[int, ...]:
        self.expect("(")
        return tuple(self.separated(self.int_value, ")"))

    # -- affine expressions --------------------------------------------------
    def affine(self) -> Affine:
        """``[-] term ((+|-) term)*`` with ``term = INT | NAME | INT*NAME | NAME*INT``."""
        coeffs: dict[str, int] = {}
        const = 0
        start = self.tok
        sign = -1 if self.accept("-") else 1
        while True:
            name, coeff = self.term()
            if name is None:
                const += sign * coeff
            else:
                coeffs[name] = coeffs.get(name, 0) + sign * coeff
            if self.accept("+"):
                sign = 1
            elif self.accept("-"):
                sign = -1
            else:
                if any(not -(2**63) <= v < 2**63 for v in (const, *coeffs.values())):
                    raise self.error("an affine coefficient is past the int64 range", start)
                return Affine.build(coeffs, const)

    def term(self) -> tuple[str | None, int]:
        # Up to 2**63: the magnitude of -2**63 (the sum is checked in ``affine``).
        if self.tok.kind == "int":
            value = self.int_value(signed=False, high=2**63 + 1)
            if self.accept("*"):
                return self.name("an index name"), value
            return None, value
        if self.is_name(self.tok):
            name = self.advance().text
            return name, (self.int_value(signed=False, high=2**63 + 1) if self.accept("*") else 1)
        raise self.error(f"expected an affine term, found {self.describe(self.tok)}")

    # -- statements ------------------------------------------------------------
    def stmt(self) -> Statement:
        if self.at("block"):
            return self.block()
        if self.accept("special"):
            return self.special()
        if self.tok.kind == "eof":
            raise self.error("expected '}' to close the block, found end of input")
        target = self.name("a statement")
        self.expect("=")
        tok = self.tok
        if tok.kind == "ident" and tok.text in ("load", "store", "index", "const"):
            self.advance()
            self.expect("(")
            if tok.text == "index":
                expr = self.affine()
                self.expect(")")
                return LoadIndex(target, expr)
            if tok.text == "const":
                value = self.scalar()
                self.expect(")")
                self.expect(":")
                return Constant(target, value, self.name("a dtype"))
            operand = self.name("a name")
            self.expect(")")
            return Load(target, operand) if tok.text == "load" else Store(target, operand)
        op = self.name("an operation")
        self.expect("(")
        inputs = tuple(self.separated(self.name, ")"))
        self.expect(":")
        return Intrinsic(op, inputs, target, self.name("a dtype"))

    def special(self) -> Special:
        op = self.name("a special operation")
        self.expect("(")
        inputs = tuple(self.separated(self.name, ")"))
        self.expect("->")
        self.expect("(")
        outputs = tuple(self.separated(self.name, ")"))
        params: list[tuple[str, ParamValue]] = []
        if self.accept("{"):
            params = self.separated(self.param, "}")
        return Special(op, inputs, outputs, tuple(params))

    def param(self) -> tuple[str, ParamValue]:
        key = self.name("a parameter name")
        self.expect("=")
        return key, self.param_value()

    def param_value(self) -> ParamValue:
        """A scalar, a string or a tuple of param values."""
        if self.tok.kind == "string":
            return self.advance().text
        if self.accept("("):
            items: list[ParamValue] = []
            while not self.accept(")"):
                items.append(self.param_value())
                if not self.at(")"):
                    self.expect(",")
            return tuple(items)
        return self.scalar()

    def scalar(self) -> int | float | bool:
        """``true``/``false``, ``[-]INT``, ``[-]FLOAT``, ``[-]inf``, ``nan``."""
        tok = self.tok
        if tok.kind == "ident" and tok.text in ("true", "false"):
            self.advance()
            return tok.text == "true"
        negative = self.accept("-")
        tok = self.tok
        if tok.kind == "int":
            return self.int_value(signed=False, high=2**64) * (-1 if negative else 1)
        if tok.kind == "float" or (tok.kind == "ident" and tok.text in ("inf", "nan")):
            self.advance()
            if tok.text == "nan":
                return math.nan  # one shared object, so equal programs compare equal
            number = float(tok.text)
            return -number if negative else number
        raise self.error(f"expected a value, found {self.describe(tok)}")


def parse(text: str) -> Program:
    """Parse Stripe IR text into a :class:`Program`; raises ``IRSyntaxError`` if malformed."""
    if not isinstance(text, str):
        raise IRSyntaxError(f"expected IR text (str), got {type(text).__name__}", 1, 1)
    parser = _Parser(text)
    try:
        return parser.program()
    except RecursionError:
        raise parser.error("blocks nested too deeply") from None


def parse_affine(text: str) -> Affine:
    """Parse one affine expression such as ``2*x - y + 3``."""
    parser = _Parser(text)
    try:
        expr = parser.affine()
    except RecursionError:  # pragma: no cover - affines do not recurse
        raise parser.error("expression too deep") from None
    if parser.tok.kind != "eof":
        raise parser.error(f"unexpected {parser.describe(parser.tok)} after the expression")
    return expr


__all__ = ["parse", "parse_affine"]
