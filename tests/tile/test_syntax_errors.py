"""Every kind of Tile syntax error: position, message, and the caret rendering.

Each case gives the source, where the error must point (the first occurrence of
a needle, or an explicit ``(line, column)``) and a fragment of the message.
The fuzz tests at the end check that no input makes the front end raise
anything but a ``StripeError``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stripeml import StripeError, TileSyntaxError
from stripeml.tile.check import check
from stripeml.tile.exprs import eval_size, poly_to_affine
from stripeml.tile.parser import MAX_DEPTH, MAX_NESTING, parse

HEAD = "function (A[M, K], B[K, N]) -> (C) {\n"


def locate(src: str, at: str | tuple[int, int]) -> tuple[int, int]:
    if isinstance(at, tuple):
        return at
    offset = src.index(at, len(HEAD) if src.startswith(HEAD) else 0)
    line = src.count("\n", 0, offset) + 1
    return line, offset - (src.rfind("\n", 0, offset) + 1) + 1


def syntax_error(src: str) -> TileSyntaxError:
    with pytest.raises(TileSyntaxError) as info:
        parse(src)
    return info.value


def assert_rendered(err: TileSyntaxError, src: str) -> None:
    """str(err) is 'line:col: message', then the source line, then a caret."""
    lines = str(err).splitlines()
    assert lines[0] == f"{err.line}:{err.column}: {err.message}"
    source_lines = src.splitlines()
    if 1 <= err.line <= len(source_lines):
        assert lines[1] == "    " + source_lines[err.line - 1]
        assert lines[2] == "    " + " " * (err.column - 1) + "^"
    else:
        assert len(lines) == 1


CASES = [
    # (id, source, where, message fragment)
    ("empty", "", (1, 1), "empty program"),
    ("only-comments", "  // nothing\n# here\n", (1, 1), "empty program"),
    ("no-function-keyword", "func (A) -> (B) { B = A; }", "func", "expected 'function'"),
    ("bad-character", HEAD + "  C = A @ B;\n}", "@", "unexpected character '@'"),
    ("ampersand-without-operand", HEAD + "  C = A & ;\n}", ";", "expected an expression"),
    ("tilde-between-operands", HEAD + "  C = A ~ B;\n}", "~", "expected ';' to end the assignment"),
    ("triple-shift", HEAD + "  C = A <<< B;\n}", (2, 11), "expected an expression, found '<'"),
    ("exponent-without-digits", HEAD + "  C = A * 1e;\n}", "1e", "malformed number '1e'"),
    ("number-glued-to-name", HEAD + "  C = 2x;\n}", "2x", "malformed number '2x'"),
    ("number-two-dots", HEAD + "  C = 1.2.3;\n}", "1.2", "malformed number '1.2.3'"),
    ("params-open", "function A) -> (B) { B = A; }", "A)", "expected '(' to open the parameter"),
    ("param-not-a-name", "function (A, 3) -> (B) { }", "3", "expected a parameter name"),
    (
        "param-separator",
        "function (A B) -> (C) { }",
        "B)",
        "expected ',' or ')' after parameter 'A'",
    ),
    (
        "shape-entry",
        "function (A[-1]) -> (C) { }",
        "-",
        "dimension name or size in the shape of 'A'",
    ),
    (
        "shape-separator",
        "function (A[M K]) -> (C) { }",
        "K",
        "expected ',' or ']' in the shape of 'A'",
    ),
    (
        "shape-unclosed",
        "function (A[M, K) -> (C) { }",
        ")",
        "expected ',' or ']' in the shape of 'A'",
    ),
    ("missing-arrow", "function (A) (C) { }", "(C", "expected '->' after the parameter list"),
    ("outputs-open", "function (A) -> C { }", "C", "expected '(' to open the output list"),
    ("outputs-empty", "function (A) -> () { }", ") {", "expected an output name"),
    ("outputs-separator", "function (A) -> (B C) { }", "C)", "',' or ')' in the output list"),
    ("body-open", "function (A) -> (B) B = A;", "B =", "expected '{' to open the function body"),
    (
        "body-unterminated",
        "function (A) -> (B) {\n  B = A;\n",
        (2, 9),
        "expected '}' to close the function body opened at 1:21, found end of input",
    ),
    ("trailing-garbage", "function (A) -> (B) { B = A; } B", (1, 32), "end of input"),
    ("statement-start", HEAD + "  ;\n}", ";", "expected a statement"),
    ("statement-number", HEAD + "  3 = A;\n}", "3", "expected a statement"),
    ("statement-second-token", HEAD + "  C + A;\n}", "+", "expected '[' or '=' after 'C'"),
    ("assignment-semicolon", HEAD + "  C = A\n}", "}", "expected ';' to end the assignment to 'C'"),
    ("assignment-agg-hint", HEAD + "  C = +(A[i]);\n}", "+", "needs an output index list"),
    ("expression-missing", HEAD + "  C = ;\n}", ";", "expected an expression, found ';'"),
    ("unclosed-paren", HEAD + "  C = (A + B;\n}", ";", "expected ')' to close the '(' at 2:7"),
    ("indexing-elementwise", HEAD + "  C = A[i];\n}", "[", "cannot index 'A' here"),
    ("ternary-colon", HEAD + "  C = A ? B;\n}", ";", "expected ':' for the '?' at 2:9"),
    ("call-separator", HEAD + "  C = max(A B);\n}", "B)", "',' or ')' in the arguments of 'max'"),
    ("output-sizes-missing", HEAD + "  C[m] = +(A[m, 0]);\n}", "]", "':' and the output sizes"),
    ("output-index-separator", HEAD + "  C[m n : M] = +(A[m, 0]);\n}", "n :", "':' or ','"),
    (
        "output-size-count",
        HEAD + "  C[m, n : M] = +(A[m, n]);\n}",
        "M]",
        "has 2 indices but 1 size",
    ),
    ("output-unclosed", HEAD + "  C[m : M = +(A[m, 0]);\n}", "=", "']' to close the output index"),
    (
        "contraction-equals",
        HEAD + "  C[m : M] +(A[m, 0]);\n}",
        "+",
        "expected '=' after the output",
    ),
    ("aggregation-op", HEAD + "  C[m : M] = -(A[m, 0]);\n}", "-", "an aggregation operator"),
    ("aggregation-paren", HEAD + "  C[m : M] = +A[m, 0];\n}", "A[m", "'(' after the aggregation"),
    ("operand-number", HEAD + "  C[m : M] = +(2);\n}", "2)", "a tensor access like 'A[i]'"),
    ("operand-unindexed", HEAD + "  C[m : M] = +(A);\n}", ")", "'[' to index 'A'"),
    (
        "operand-unclosed",
        HEAD + "  C[m : M] = +(A[m, 0;\n}",
        ";",
        "expected ']' to close the index list of 'A', found ';'",
    ),
    ("combo-op", HEAD + "  C[m : M] = +(A[m, 0] - B[0, m]);\n}", "- B", "or '*', '+' or '=='"),
    ("combo-second", HEAD + "  C[m : M] = +(A[m, 0] * 3);\n}", "3)", "operand after '*'"),
    ("combo-close", HEAD + "  C[m : M] = +(A[m, 0] * B[0, m];\n}", ";", "')' to close the aggr"),
    (
        "cond-value",
        HEAD + "  C[m : M] = +(A[m, 0] == B[0, m] ? (A[m, 0];\n}",
        ";",
        "value after '?'",
    ),
    ("constraint-le", HEAD + "  C[m : M] = +(A[m, k]), k <= 2;\n}", "<=", "'<' in the constraint"),
    ("constraint-missing", HEAD + "  C[m : M] = +(A[m, k]), ;\n}", ";", "a constraint 'poly < b"),
    (
        "default-name",
        HEAD + "  C[m : M] = +(A[m, k]), default 3;\n}",
        "3;",
        "tensor name after 'def",
    ),
    (
        "default-twice",
        HEAD + "  C[m : M] = +(A[m, k]), default A, default B;\n}",
        "default B",
        "second 'default'",
    ),
    (
        "contraction-end",
        HEAD + "  C[m : M] = +(A[m, k]) B;\n}",
        "B;",
        "or ';' to end the contraction",
    ),
    ("error-on-later-line", HEAD + "  C = A;\n  D = A +* B;\n}", "* B", "expected an expression"),
]


@pytest.mark.parametrize(
    ("src", "at", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_syntax_error(src: str, at: str | tuple[int, int], fragment: str) -> None:
    err = syntax_error(src)
    assert (err.line, err.column) == locate(src, at)
    assert fragment in err.message
    assert err.source == src
    assert_rendered(err, src)


def test_found_token_is_described() -> None:
    err = syntax_error(HEAD + "  C[m : M] = +(A[m, 0] B);\n}")
    assert err.message.endswith("found identifier 'B'")
    err = syntax_error(HEAD + "  C = A 2;\n}")
    assert err.message.endswith("found number '2'")


def test_crlf_positions() -> None:
    src = "function (A) -> (B) {\r\n  B = A @;\r\n}"
    err = syntax_error(src)
    assert (err.line, err.column) == (2, 9)
    assert_rendered(err, src)


def test_tab_positions() -> None:
    src = "function (A) -> (B) {\n\tB = A @;\n}"
    err = syntax_error(src)
    assert (err.line, err.column) == (2, 8)
    assert str(err).splitlines()[2] == "    " + " " * 7 + "^"


def test_nesting_limit() -> None:
    deep = "(" * (MAX_NESTING + 5) + "A" + ")" * (MAX_NESTING + 5)
    err = syntax_error(f"function (A) -> (B) {{ B = {deep}; }}")
    assert "nested too deeply" in err.message
    err = syntax_error(f"function (A) -> (B) {{ B = {'-' * 5000}A; }}")
    assert "nested too deeply" in err.message


def test_depth_limit() -> None:
    long_sum = " + ".join(["A"] * (MAX_DEPTH + 5))
    err = syntax_error(f"function (A) -> (B) {{ B = {long_sum}; }}")
    assert "too deep" in err.message
    ok = " + ".join(["A"] * (MAX_DEPTH - 5))
    parse(f"function (A) -> (B) {{ B = {ok}; }}")


# -- fuzzing ------------------------------------------------------------------

VALID = [
    "function (A[M, K], B[K, N]) -> (C) {\n  C[m, n : M, N] = +(A[m, k] * B[k, n]);\n}",
    "function (I[X, Y]) -> (O) {\n"
    "  O[x, y : X / 2, Y / 2] = >(I[2 * x + i, 2 * y + j]), i < 2, j < 2;\n}",
    "function (I[N]) -> (O) { O[i : N] = +(I[k]), i - k < N; }",
    "function (X[N, K]) -> (Y) {\n  M[n, 0 : N, 1] = >(X[n, k]);  E = exp(X - M);\n"
    "  S[n, 0 : N, 1] = +(E[n, k]);\n  Y = E / S;  # softmax\n}",
    "function (I[M, N], D[N, M]) -> (O) { O[n, m : N, M] = =(I[m, n]), default D; }",
    "function (A, B) -> (C) { C = A > 0 ? -A * .5 : as_float(B, 32) / 1e-3 || !A && B % 2; }",
    "function (A[N], B[N], C[N]) -> (O) { O[i, j : N, N] = +(A[i] == B[j] ? (C[i])); }",
    "function (S[]) -> (O) { O[] = +(S[]); }",
]
TOKENS = (
    "function ( ) [ ] { } , ; : ? -> + - * / % < > <= >= == != && || ! = & | ^ ~ << >> "
    "A B M N i j k 0 1 2 2.5 .5 1e3 exp max as_int default"
).split()


def front_end(src: str) -> None:
    """Parse, check, and evaluate every polynomial and size: only StripeError may escape."""
    try:
        fn = parse(src)
        check(fn)
    except StripeError:
        return
    dims = dict.fromkeys("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 3)
    for stmt in fn.stmts:
        if hasattr(stmt, "sizes"):
            for e in stmt.sizes:
                try:
                    eval_size(e, dims)
                except StripeError:
                    pass
            for access in stmt.operands:
                for e in access.indices:
                    try:
                        poly_to_affine(e, dims)
                    except StripeError:
                        pass


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.text(max_size=200))
def test_fuzz_random_text(src: str) -> None:
    front_end(src)
    front_end("function (A, B) -> (C) { " + src)


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=60))
def test_fuzz_token_soup(tokens: list[str]) -> None:
    front_end(" ".join(tokens))
    front_end("function (A[M], B) -> (C) { C" + " ".join(tokens) + " }")


@FUZZ
@given(st.sampled_from(VALID), st.data())
def test_fuzz_mutated_programs(src: str, data: st.DataObject) -> None:
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(src)))
        j = data.draw(st.integers(i, min(len(src), i + 8)))
        kind = data.draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        if kind == "delete":
            src = src[:i] + src[j:]
        elif kind == "duplicate":
            src = src[:j] + src[i:j] + src[j:]
        else:
            piece = data.draw(st.one_of(st.sampled_from(TOKENS), st.text(max_size=3)))
            src = src[:i] + piece + (src[j:] if kind == "replace" else src[i:])
    front_end(src)


@pytest.mark.parametrize("src", VALID)
def test_fuzz_seeds_are_valid(src: str) -> None:
    check(parse(src))
