"""``tokenize``'s regular-expression path for common tokens gives exactly the
tokens (kinds, texts, lines, columns, offsets) and errors of the character
scanner it skips, on random strings over the characters that matter (comments,
line breaks of every kind, numbers next to letters and dots, ``& | ^ ~ << >>``) and
on the bundled example programs.  The scanner's own behaviour is pinned by
``test_syntax_errors.py`` and ``test_parser.py``."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from stripeml.errors import TileSyntaxError
from stripeml.tile import lexer

CHARS = list("ab_XY019 .eE+-\t\n\r\x0b#/*()[]{},;:?%<>=!&|^~\u2028\x85")
CHARS += ["//", "->", "1e", "2.", "<<", ">>"]
EXAMPLES = Path(lexer.__file__).resolve().parents[1] / "examples"


def _scanned(source: str) -> object:
    scanner = lexer._Scanner(source)
    out = []
    try:
        while True:
            tok = scanner.next()
            out.append(tok)
            if tok.kind == "eof":
                return out
    except TileSyntaxError as exc:
        return ("error", str(exc))


def _tokenized(source: str) -> object:
    try:
        return lexer.tokenize(source)
    except TileSyntaxError as exc:
        return ("error", str(exc))


def test_random_strings_agree_with_the_scanner() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        s = "".join(rng.choice(CHARS) for _ in range(rng.randint(0, 16)))
        assert _tokenized(s) == _scanned(s), repr(s)


@pytest.mark.parametrize(
    "source",
    [
        "a//b\nc",
        "x = 1 // 2\n",
        "1.5e-3 + 2",
        "3x",
        "a & b",
        "a<<b>>c<<=d>>=e&&&f|||g^~h",
        "a\r\nb\u2028c # note\n  d",
        "C[i : 4] = +(A[i, j] * B[j]);",
        "",
        "   ",
    ],
)
def test_edges_agree_with_the_scanner(source: str) -> None:
    assert _tokenized(source) == _scanned(source)


def test_the_examples_agree_with_the_scanner() -> None:
    files = sorted(EXAMPLES.rglob("*.tile"))
    assert files, EXAMPLES
    for f in files:
        text = f.read_text()
        assert _tokenized(text) == _scanned(text), f.name
