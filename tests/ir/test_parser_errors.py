"""Malformed IR text raises IRSyntaxError at the right place, and nothing else escapes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stripeml.errors import IRSyntaxError, StripeError
from stripeml.ir import format, parse
from stripeml.ir.parser import parse_affine

from .samples import SAMPLES, every_statement

HEADER = "block [] #program (\n"

CASES = [
    # (text, line, column, part of the message)
    ("", 1, 1, "expected 'block', found end of input"),
    ("blok [] () {}", 1, 1, "expected 'block', found 'blok'"),
    ("block [] () {", 1, 14, "expected '}'"),
    ("block [] () {}\nblock [] () {}", 2, 1, "expected end of input"),
    ("block [i] () {}", 1, 9, "expected ':'"),
    ("block [i:x] () {}", 1, 10, "expected an integer, found 'x'"),
    ("block [] #( ) {}", 1, 11, "expected a tag"),
    (HEADER + "  in A f32(4):(1\n) {}", 3, 3, "expected a constraint, a refinement or ')'"),
    (HEADER + "  in A f32(4)(1)\n) {}", 2, 14, "expected ':', found '('"),
    (HEADER + "  in A[i f32(1):(1)\n) {}", 2, 10, "expected ']'"),
    (HEADER + "  out A[i]: f32(1):(1)\n) {}", 2, 16, "expected a dtype, found '('"),
    (HEADER + "  none T f32(1):(1) @\n) {}", 3, 1, "expected a memory location"),
    (HEADER + "  none T f32(1):(1) @L1:x\n) {}", 2, 25, "expected an integer"),
    (HEADER + "  x + >= 0\n) {}", 2, 7, "expected an affine term, found '>='"),
    (HEADER + "  x >= y\n) {}", 2, 8, "expected an integer, found 'y'"),
    (HEADER + "  2*3 >= 0\n) {}", 2, 5, "expected an index name"),
    ("block [] () {\n  $a = load(A\n}", 3, 1, "expected ')', found '}'"),
    ('block [] () {\n  $a = const("s"): f32\n}', 2, 14, "expected a value, found a string"),
    ("block [] () {\n  $a = const(1.5)\n}", 3, 1, "expected ':'"),
    ("block [] () {\n  $a = mul($b, $c)\n}", 3, 1, "expected ':'"),
    ("block [] () {\n  $x = 1\n}", 2, 8, "expected an operation"),
    ("block [] () {\n  special copy(A) (B)\n}", 2, 19, "expected '->'"),
    ("block [] () {\n  special g(A) -> (B) {axis}\n}", 2, 28, "expected '='"),
    ("block [] () {\n  special g(A) -> (B) {t=(1 2)}\n}", 2, 29, "expected ','"),
    ('block "abc [] () {}', 1, 7, "unterminated string"),
    ('block "a\\q" [] () {}', 1, 9, "bad escape"),
    ('block "\\u{110000}" [] () {}', 1, 8, "bad escape"),
    ("block [] () {\n  ?\n}", 2, 3, "unexpected character '?'"),
    ('block [] ( // "x" y\n) {}', 1, 18, "text after a quoted comment"),
    ('block [] ( // "x\n) {}', 1, 15, "unterminated string"),
    ("block [] (\n  in A f32(" + "9" * 5000 + "):(1)\n) {}", 2, 12, "integer too long"),
]


@pytest.mark.parametrize("text, line, column, message", CASES)
def test_error_position(text: str, line: int, column: int, message: str):
    with pytest.raises(IRSyntaxError) as info:
        parse(text)
    err = info.value
    assert (err.line, err.column) == (line, column), err
    assert message in err.message


def test_error_renders_line_and_caret():
    with pytest.raises(IRSyntaxError) as info:
        parse("block [] () {\n  $x = 1\n}")
    assert str(info.value) == "2:8: expected an operation, found '1'\n      $x = 1\n           ^"


def test_ignored_comments_need_not_be_well_formed():
    parse('block [] () { // "not a string\n}')


def test_deep_nesting_is_a_syntax_error():
    depth = 5000
    text = "block [] () {" * depth + "}" * depth
    with pytest.raises(IRSyntaxError, match="nested too deeply"):
        parse(text)


def test_not_text():
    with pytest.raises(IRSyntaxError):
        parse(b"block [] () {}")  # type: ignore[arg-type]


def test_parse_affine_errors():
    with pytest.raises(IRSyntaxError, match="after the expression"):
        parse_affine("x y")
    with pytest.raises(IRSyntaxError, match="expected an affine term"):
        parse_affine("x +")


ALPHABET = st.sampled_from(list('block[]{}()#@:=,+-*>/$"\\\n ._xi0123456789eafinout'))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=60), st.text(ALPHABET, max_size=80)))
def test_fuzz_random_text(text: str):
    try:
        parse(text)
    except StripeError:
        pass


VALID = [format(build()) for build in SAMPLES.values()]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VALID), st.data())
def test_fuzz_mutated_programs(text: str, data: st.DataObject):
    """Delete, duplicate or replace a slice of a valid program: parse or IRSyntaxError."""
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, min(len(text), i + 8)))
    insert = data.draw(st.one_of(st.just(""), st.text(ALPHABET, max_size=4), st.just(text[i:j])))
    mutated = text[:i] + insert + text[j:]
    try:
        p = parse(mutated)
    except StripeError as err:
        assert isinstance(err, IRSyntaxError)
        assert 1 <= err.line <= mutated.count("\n") + 1 and err.column >= 1
        return
    assert parse(format(p)) == p


def test_valid_text_still_parses():
    assert parse(format(every_statement())) == every_statement()
