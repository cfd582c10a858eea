"""The Tile parser builds the expected syntax tree for every construct."""

from __future__ import annotations

import pytest

from stripeml.tile import ast
from stripeml.tile.ast import Access, Binary, Contraction, IntLit, Name, Pos
from stripeml.tile.exprs import format_expr
from stripeml.tile.parser import parse


def wrap(body: str, params: str = "A, B, C", outputs: str = "O") -> ast.Function:
    return parse(f"function ({params}) -> ({outputs}) {{ {body} }}")


def col(body: str, needle: str, params: str = "A, B, C") -> int:
    """1-based column of ``needle`` in the one-line program ``wrap`` builds."""
    return len(f"function ({params}) -> (O) {{ ") + body.index(needle) + 1


def one(body: str, params: str = "A, B, C") -> ast.Statement:
    (stmt,) = wrap(body, params).stmts
    return stmt


def expr_of(text: str) -> str:
    """Parse ``O = text;`` and print the expression back fully parenthesised."""
    stmt = one(f"O = {text};")
    assert isinstance(stmt, ast.Assignment)
    return _paren(stmt.expr)


def _paren(e: ast.Expr) -> str:
    if isinstance(e, ast.Binary):
        return f"({_paren(e.lhs)} {e.op} {_paren(e.rhs)})"
    if isinstance(e, ast.Unary):
        return f"({e.op}{_paren(e.operand)})"
    if isinstance(e, ast.Ternary):
        return f"({_paren(e.cond)} ? {_paren(e.then)} : {_paren(e.other)})"
    if isinstance(e, ast.Call):
        return f"{e.func}({', '.join(_paren(a) for a in e.args)})"
    return format_expr(e)


def test_matmul_full_tree() -> None:
    src = "function (A[M, K], B[K, N]) -> (C) {\n    C[m, n : M, N] = +(A[m, k] * B[k, n]);\n}\n"
    fn = parse(src)
    assert fn.source == src
    assert fn.params == (
        ast.Param("A", (Name("M", Pos(1, 13)), Name("K", Pos(1, 16))), Pos(1, 11)),
        ast.Param("B", (Name("K", Pos(1, 22)), Name("N", Pos(1, 25))), Pos(1, 20)),
    )
    assert fn.outputs == (ast.OutputDecl("C", Pos(1, 33)),)
    assert fn.stmts == (
        Contraction(
            output="C",
            out_indices=(Name("m", Pos(2, 7)), Name("n", Pos(2, 10))),
            sizes=(Name("M", Pos(2, 14)), Name("N", Pos(2, 17))),
            agg="add",
            combo="mul",
            operands=(
                Access("A", (Name("m", Pos(2, 26)), Name("k", Pos(2, 29))), Pos(2, 24)),
                Access("B", (Name("k", Pos(2, 36)), Name("n", Pos(2, 39))), Pos(2, 34)),
            ),
            constraints=(),
            default=None,
            pos=Pos(2, 5),
            text="C[m, n : M, N] = +(A[m, k] * B[k, n])",
        ),
    )


def test_params_dims_forms() -> None:
    fn = parse("function (A[M, 3], S, T[], U[N,2,M]) -> (O, P) { O = S; P = S; }")
    a, s, t, u = fn.params
    assert a.dims == (Name("M", Pos(1, 13)), IntLit(3, Pos(1, 16)))
    assert s.dims is None and s.name == "S"
    assert t.dims == ()
    assert [type(d).__name__ for d in u.dims] == ["Name", "IntLit", "Name"]
    assert [o.name for o in fn.outputs] == ["O", "P"]


def test_no_params_and_empty_body() -> None:
    fn = parse("function () -> (O) { }")
    assert fn.params == () and fn.stmts == ()


@pytest.mark.parametrize(
    ("agg", "name"), [("+", "add"), ("*", "mul"), (">", "max"), ("<", "min"), ("=", "assign")]
)
def test_aggregations(agg: str, name: str) -> None:
    stmt = one(f"O[i : N] = {agg}(A[i]);")
    assert isinstance(stmt, Contraction) and stmt.agg == name and stmt.combo == "none"


@pytest.mark.parametrize("spacing", ["==(", "= =(", "=\n=("])
def test_assign_aggregation_without_space(spacing: str) -> None:
    stmt = one(f"O[i : N]{spacing}A[i]);")
    assert isinstance(stmt, Contraction) and stmt.agg == "assign"


@pytest.mark.parametrize(("op", "combo"), [("*", "mul"), ("+", "add"), ("==", "eq")])
def test_binary_combos(op: str, combo: str) -> None:
    stmt = one(f"O[i, j : N, M] = +(A[i] {op} B[j]);")
    assert isinstance(stmt, Contraction)
    assert stmt.combo == combo
    assert [a.tensor for a in stmt.operands] == ["A", "B"]


@pytest.mark.parametrize("value", ["(C[i])", "C[i]"])
def test_conditional_combo(value: str) -> None:
    body = f"O[i : N] = +(A[i] == B[i] ? {value});"
    stmt = one(body)
    assert isinstance(stmt, Contraction)
    assert stmt.combo == "cond"
    assert [a.tensor for a in stmt.operands] == ["A", "B", "C"]
    assert stmt.operands[2].pos == Pos(1, col(body, "C["))


def test_constraints_and_default() -> None:
    body = "O[i : N] = +(A[k]), i - k < N, k < 2 * N + 1, default B;"
    stmt = one(body)
    assert isinstance(stmt, Contraction)
    polys = [(format_expr(c.poly), format_expr(c.bound)) for c in stmt.constraints]
    assert polys == [("i - k", "N"), ("k", "2 * N + 1")]
    assert stmt.default == Name("B", Pos(1, col(body, "B;")))
    assert stmt.constraints[0].pos == Pos(1, col(body, "i - k"))


def test_default_before_constraint() -> None:
    stmt = one("O[i : N] = =(A[i]), default B, i < 3;")
    assert isinstance(stmt, Contraction)
    assert stmt.default is not None and stmt.default.name == "B"
    assert len(stmt.constraints) == 1


def test_constant_output_indices() -> None:
    body = "M[n, 0 : N, 1] = >(X[n, k]);"
    stmt = one(body)
    assert isinstance(stmt, Contraction)
    assert stmt.out_indices == (
        Name("n", Pos(1, col(body, "n"))),
        IntLit(0, Pos(1, col(body, "0"))),
    )
    assert stmt.sizes == (Name("N", Pos(1, col(body, "N"))), IntLit(1, Pos(1, col(body, "1"))))


@pytest.mark.parametrize("out", ["O[]", "O[:]", "O[ : ]"])
def test_rank0_output(out: str) -> None:
    stmt = one(f"{out} = +(I[i]);")
    assert isinstance(stmt, Contraction)
    assert stmt.out_indices == () and stmt.sizes == ()


def test_rank0_operand() -> None:
    stmt = one("O[i : N] = +(S[]);")
    assert isinstance(stmt, Contraction)
    assert stmt.operands[0].indices == ()


def test_index_polynomials() -> None:
    stmt = one("O[x, y : X / 2, (Y - 1) / 2 + 1] = >(I[2 * x + i, -y + Y - 1 - j]);")
    assert isinstance(stmt, Contraction)
    assert [format_expr(e) for e in stmt.sizes] == ["X / 2", "(Y - 1) / 2 + 1"]
    assert [format_expr(e) for e in stmt.operands[0].indices] == ["2 * x + i", "-y + Y - 1 - j"]


def test_elementwise_precedence_levels() -> None:
    assert expr_of("a || b && c == d < e + f * -g") == (
        "(a || (b && (c == (d < (e + (f * (-g)))))))"
    )
    assert expr_of("A * B + C") == "((A * B) + C)"
    assert expr_of("A - B - C") == "((A - B) - C)"
    assert expr_of("A / B % C * D") == "(((A / B) % C) * D)"
    assert expr_of("A < B == C > D") == "((A < B) == (C > D))"
    assert expr_of("A <= B != C >= D") == "((A <= B) != (C >= D))"
    assert expr_of("A || B || C") == "((A || B) || C)"
    assert expr_of("!A && B") == "((!A) && B)"
    assert expr_of("-(A + B) * C") == "((-(A + B)) * C)"
    assert expr_of("--A") == "(-(-A))"


def test_bitwise_precedence_is_c() -> None:
    """C's levels: ``|`` < ``^`` < ``&`` < equality < relational < shifts < ``+``."""
    assert expr_of("a | b ^ c & d") == "(a | (b ^ (c & d)))"
    assert expr_of("A & B == C") == "(A & (B == C))"
    assert expr_of("A == B & C") == "((A == B) & C)"
    assert expr_of("A | B && C | D") == "((A | B) && (C | D))"
    assert expr_of("A || B ^ C") == "(A || (B ^ C))"
    assert expr_of("A << B + C") == "(A << (B + C))"
    assert expr_of("A < B << C") == "(A < (B << C))"
    assert expr_of("A >> B << C") == "((A >> B) << C)"
    assert expr_of("A & B & C") == "((A & B) & C)"
    assert expr_of("~A & -B") == "((~A) & (-B))"
    assert expr_of("~~A") == "(~(~A))"
    assert expr_of("!~A") == "(!(~A))"
    assert expr_of("A ^ B ? C : D") == "((A ^ B) ? C : D)"


def test_ternary() -> None:
    assert expr_of("A > 0 ? A : 0.5 * A") == "((A > 0) ? A : (0.5 * A))"
    # right-associative, and a ternary may nest in the middle
    assert expr_of("A ? B : C ? D : E") == "(A ? B : (C ? D : E))"
    assert expr_of("A ? B ? C : D : E") == "(A ? (B ? C : D) : E)"
    assert expr_of("(A ? B : C) + 1") == "((A ? B : C) + 1)"


@pytest.mark.parametrize(
    ("text", "value", "kind"),
    [
        ("7", 7, ast.IntLit),
        ("0", 0, ast.IntLit),
        ("1.5", 1.5, ast.FloatLit),
        ("2.", 2.0, ast.FloatLit),
        (".5", 0.5, ast.FloatLit),
        ("1e-3", 1e-3, ast.FloatLit),
        ("2E+4", 2e4, ast.FloatLit),
        ("3.25e2", 325.0, ast.FloatLit),
    ],
)
def test_numbers(text: str, value: float, kind: type) -> None:
    stmt = one(f"O = {text};")
    assert isinstance(stmt, ast.Assignment)
    assert isinstance(stmt.expr, kind) and stmt.expr.value == value


def test_calls() -> None:
    stmt = one("O = max(exp(A), as_float(B, 64)) + relu(0 - C) + f();")
    assert isinstance(stmt, ast.Assignment)
    calls = []
    stack = [stmt.expr]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Call):
            calls.append((e.func, len(e.args)))
        if isinstance(e, Binary):
            stack += [e.lhs, e.rhs]
        elif isinstance(e, ast.Call):
            stack += list(e.args)
    assert sorted(calls) == [("as_float", 2), ("exp", 1), ("f", 0), ("max", 2), ("relu", 1)]


def test_binary_position_is_first_character() -> None:
    body = "O = (A + B) * C;"
    stmt = one(body)
    assert isinstance(stmt, ast.Assignment) and isinstance(stmt.expr, Binary)
    assert stmt.expr.pos == Pos(1, col(body, "("))
    assert stmt.expr.lhs.pos == Pos(1, col(body, "A"))


def test_comments_and_statement_text() -> None:
    src = """# a comment line
function (A[N], B[N]) -> (O, P) {   // trailing comment
    O[i : N] = +(A[i]   # operand
                 *   B[i]);
    P  =  O  *
        2;
}  # done
"""
    fn = parse(src)
    o, p = fn.stmts
    assert o.text == "O[i : N] = +(A[i] * B[i])"
    assert p.text == "P = O * 2"
    assert o.pos == Pos(3, 5) and p.pos == Pos(5, 5)


def test_text_keeps_tight_spelling() -> None:
    stmt = one("O[i:N]=+(A[i+1]),i<N-1;")
    assert stmt.text == "O[i:N]=+(A[i+1]),i<N-1"


def test_crlf_and_tabs() -> None:
    fn = parse("function (A)\r\n->\t(O)\r\n{\r\n\tO = A;\r\n}\r\n")
    assert fn.stmts[0].pos == Pos(4, 2)


DESIGN_EXAMPLES = [
    ("O[x, y : X / 2, Y / 2] = >(I[2 * x + i, 2 * y + j]), i < 2, j < 2;", "max", 2),
    ("O[i : N] = +(I[k]), i - k < N;", "add", 1),
    ("O[n, x, co : N, X - 2 * (T - 1), CO] = +(I[n, x + 2 * t, ci] * K[t, ci, co]);", "add", 0),
    ("M[n, 0 : N, 1] = >(X[n, k]);", "max", 0),
    ("O[n, m : N, M] = =(I[m, n]);", "assign", 0),
]


@pytest.mark.parametrize(("stmt", "agg", "nconstraints"), DESIGN_EXAMPLES)
def test_design_examples(stmt: str, agg: str, nconstraints: int) -> None:
    c = one(stmt, params="I, K, X")
    assert isinstance(c, Contraction)
    assert c.agg == agg and len(c.constraints) == nconstraints
    assert c.text == stmt[:-1]


def test_softmax_pieces() -> None:
    fn = parse(
        """function (X[N, K]) -> (Y) {
            M[n, 0 : N, 1] = >(X[n, k]);
            E = exp(X - M);
            S[n, 0 : N, 1] = +(E[n, k]);
            Y = E / S;
        }"""
    )
    kinds = [type(s).__name__ for s in fn.stmts]
    assert kinds == ["Contraction", "Assignment", "Contraction", "Assignment"]
    assert fn.stmts[1].text == "E = exp(X - M)"


def test_example_corpus_parses() -> None:
    from programs import CASES  # tests/programs.py, the shared end-to-end corpus

    for case in CASES:
        fn = parse(case.source)
        assert fn.stmts, case.name
