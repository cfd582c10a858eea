"""Static checks: one test per rule, and valid programs pass."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from stripeml.errors import StripeError, TileNameError, TileTypeError
from stripeml.tile import ast
from stripeml.tile.check import check
from stripeml.tile.parser import parse


def ok(src: str) -> None:
    check(parse(src))


def fails(src: str, cls: type[StripeError], fragment: str, stmt: str | None = None) -> str:
    """Check ``src`` fails with ``cls``; return the message.

    When ``stmt`` (a statement's text) is given, the message must start with
    that statement's ``line:col:`` and quote it.
    """
    with pytest.raises(cls) as info:
        check(parse(src))
    message = str(info.value)
    assert fragment in message.splitlines()[0], message
    if stmt is not None:
        offset = src.index(stmt)
        line = src.count("\n", 0, offset) + 1
        column = offset - (src.rfind("\n", 0, offset) + 1) + 1
        assert message.startswith(f"{line}:{column}: in '{stmt}': "), message
        assert (info.value.line, info.value.column) == (line, column)
    return message


def fn(body: str, params: str = "A[M, K], B[K, N], S", outputs: str = "O") -> str:
    return f"function ({params}) -> ({outputs}) {{\n  {body}\n}}"


# -- valid programs ---------------------------------------------------------------


def test_example_corpus_passes() -> None:
    from programs import CASES  # tests/programs.py, the shared end-to-end corpus

    for case in CASES:
        ok(case.source)


@pytest.mark.parametrize(
    "body",
    [
        "O[m, n : M, N] = +(A[m, k] * B[k, n]);",
        "O[x, y : M / 2, K / 2] = >(A[2 * x + i, 2 * y + j]), i < 2, j < 2;",
        "O[i : M] = +(A[k, 0]), i - k < M;",
        "O[m, 0 : M, 1] = >(A[m, k]);",
        "O[k, m : K, M] = =(A[m, k]);",
        "O[m : M] = =(A[M - 1 - m, 0]);",  # a dimension as a constant in a poly
        "O[m, k : M, K] = =(A[m, k] == A[m, k] ? (A[m, k]));",  # '=' with any combo
        "O[m, k : M, K] = <(A[m, k] + A[m, k]), default A;",
        "O[] = +(A[m, k]);",
        "O[m, n : M, N] = +(A[m, k] == B[k, n]);",
        "O[i : 2 * (M + 1) - K / 3] = +(A[i - -1, -i]);",
        "O = as_float(A, 16) + as_int(S, 8) + as_uint(S, 64) + as_bool(S) * M;",
        "O = pow(max(A, 0), min(S, 1)) ? relu(-A) : !A || A % 2 != 1 && A >= 0.5;",
        "T = exp(log(sqrt(tanh(sigmoid(sin(cos(tan(abs(erf(A))))))))));"
        "  O = floor(ceil(round(T)));",
        "U = A;  O = S;",  # an unused intermediate is fine
        "O = 3;",
        "O = K;",  # a dimension in an elementwise expression
    ],
)
def test_valid_statements(body: str) -> None:
    ok(fn(body))


def test_params_without_dims_have_any_rank() -> None:
    ok(fn("O[i, j : M, M] = +(S[i, j, k]) ; P[] = +(S[]);", outputs="O, P"))


# -- names ------------------------------------------------------------------------


def test_undefined_tensor() -> None:
    fails(fn("O = A + Q;"), TileNameError, "'Q' is not defined", "O = A + Q")


def test_use_before_definition() -> None:
    src = fn("O = T * 2;\n  T = A;")
    msg = fails(src, TileNameError, "'T' is used before it is assigned (at 3:3)", "O = T * 2")
    assert "\n    " in msg  # the source line and caret follow


def test_contraction_operand_undefined() -> None:
    fails(fn("O[i : M] = +(Q[i]);"), TileNameError, "'Q' is not defined", "O[i : M] = +(Q[i])")


def test_contraction_reads_its_own_output() -> None:
    fails(fn("O[i : M] = +(O[i]);"), TileNameError, "before it is assigned", "O[i : M] = +(O[i])")


def test_parameter_must_be_upper_case() -> None:
    msg = fails("function (a) -> (O) { O = 1; }", TileNameError, "parameter 'a' must start")
    assert msg.startswith("1:11: ")


def test_dimension_must_be_upper_case() -> None:
    msg = fails("function (A[m]) -> (O) { O = A; }", TileNameError, "dimension of 'A' 'm'")
    assert msg.startswith("1:13: ")


def test_output_must_be_upper_case() -> None:
    fails("function (A) -> (o) { o = A; }", TileNameError, "output 'o' must start")


def test_assigned_name_must_be_upper_case() -> None:
    fails(fn("o = A;  O = A;"), TileNameError, "assigned tensor 'o' must start", "o = A")


def test_index_in_elementwise() -> None:
    fails(fn("O = A * i;"), TileNameError, "index 'i' in an elementwise expression", "O = A * i")


def test_function_name_without_call() -> None:
    fails(fn("O = exp;"), TileNameError, "function 'exp' must be called", "O = exp")


def test_unknown_dimension_in_poly() -> None:
    fails(
        fn("O[i : M] = +(A[i, Z]);"),
        TileNameError,
        "unknown dimension 'Z'",
        "O[i : M] = +(A[i, Z])",
    )


def test_tensor_used_as_index() -> None:
    fails(fn("O[i : M] = +(A[i, S]);"), TileNameError, "tensor 'S' used in the index list of 'A'")


def test_dimension_named_like_a_tensor() -> None:
    msg = fails("function (A[N], N) -> (O) { O = A; }", TileNameError, "dimension 'N' of 'A'")
    assert msg.startswith("1:13: ")


def test_assigning_a_dimension_name() -> None:
    fails(fn("M = A;  O = M;"), TileNameError, "assigns to 'M', which is a dimension", "M = A")


def test_unknown_function() -> None:
    fails(fn("O = softplus(A);"), TileNameError, "unknown function 'softplus'", "O = softplus(A)")


def test_assigned_twice() -> None:
    src = fn("O = A;\n  O = S;")
    fails(src, TileNameError, "'O' is already assigned at 2:3", "O = S")


def test_assigning_a_parameter() -> None:
    fails(fn("S = A;  O = S;"), TileNameError, "assigns to parameter 'S'", "S = A")


def test_output_never_assigned() -> None:
    msg = fails(fn("O = A;", outputs="O, P"), TileNameError, "output 'P' is never assigned")
    assert msg.startswith("1:39: ")


def test_output_that_is_a_parameter() -> None:
    fails(fn("O = A;", outputs="O, S"), TileNameError, "output 'S' is also a parameter")


def test_output_declared_twice() -> None:
    fails(fn("O = A;", outputs="O, O"), TileNameError, "output 'O' is declared twice")


def test_parameter_declared_twice() -> None:
    fails("function (A, A) -> (O) { O = A; }", TileNameError, "parameter 'A' is declared twice")


def test_default_must_exist() -> None:
    stmt = "O[m : M] = +(A[m, k]), default D"
    fails(fn(stmt + ";"), TileNameError, "default 'D' is not defined", stmt)


def test_default_must_be_a_tensor() -> None:
    stmt = "O[m : M] = +(A[m, k]), default M"
    fails(fn(stmt + ";"), TileNameError, "default 'M' is a dimension", stmt)


def test_operand_must_be_a_tensor_not_a_dimension() -> None:
    stmt = "O[m : M] = +(A[m, k] * K[k])"
    fails(fn(stmt + ";"), TileNameError, "operand 'K' is a dimension, not a tensor", stmt)


# -- contraction structure --------------------------------------------------------


def test_product_of_indices() -> None:
    stmt = "O[m : M] = +(A[m * k, k])"
    fails(fn(stmt + ";"), TileTypeError, "'m * k' in the index list of 'A' multiplies", stmt)


def test_product_of_index_expressions() -> None:
    stmt = "O[m : M] = +(A[(m + 1) * (k - 1), k])"
    fails(fn(stmt + ";"), TileTypeError, "multiplies two indices", stmt)


def test_division_of_an_index() -> None:
    stmt = "O[m : M] = +(A[m / 2, k])"
    fails(fn(stmt + ";"), TileTypeError, "'m / 2' in the index list of 'A' divides an index", stmt)


def test_division_by_an_index() -> None:
    fails(fn("O[m : M] = +(A[M / (m + 1), 0]);"), TileTypeError, "divides an index")


def test_constant_division_in_poly_is_fine() -> None:
    ok(fn("O[m : M] = +(A[M / 2 - m, 0]);"))


def test_non_affine_output_index() -> None:
    stmt = "O[m * m : M] = +(A[m, 0])"
    fails(fn(stmt + ";"), TileTypeError, "in the output index list of 'O' multiplies", stmt)


@pytest.mark.parametrize(
    ("index", "fragment"),
    [
        ("m % 2", "'m % 2' is not allowed in the index list of 'A'"),
        ("m < 2", "'m < 2' is not allowed"),
        ("abs(m)", "'abs(m)' is not allowed"),
        ("(m > 0 ? m : 0)", "is not allowed"),
        ("!m", "'!m' is not allowed"),
        ("1.5", "non-integer constant 1.5"),
    ],
)
def test_non_polynomial_index(index: str, fragment: str) -> None:
    fails(fn(f"O[m : M] = +(A[{index}, 0]);"), TileTypeError, fragment)


def test_index_in_size_expression() -> None:
    stmt = "O[m : M + m] = +(A[m, 0])"
    fails(fn(stmt + ";"), TileTypeError, "index 'm' in the sizes of 'O'", stmt)


@pytest.mark.parametrize(
    ("size", "cls", "fragment"),
    [
        ("M % 2", TileTypeError, "'M % 2' is not allowed in the sizes of 'O'"),
        ("M < 2", TileTypeError, "'M < 2' is not allowed"),
        ("max(M, K)", TileTypeError, "is not allowed"),
        ("2.5", TileTypeError, "'2.5' is not allowed"),
        ("S", TileTypeError, "tensor 'S' in the sizes of 'O'"),
        ("Z", TileNameError, "unknown dimension 'Z' in the sizes of 'O'"),
    ],
)
def test_bad_size_expression(size: str, cls: type[StripeError], fragment: str) -> None:
    fails(fn(f"O[m : {size}] = +(A[m, 0]);"), cls, fragment)


def test_constraint_bound_is_a_size_expression() -> None:
    stmt = "O[m : M] = +(A[m, k]), k < m + 1"
    fails(fn(stmt + ";"), TileTypeError, "index 'm' in the bound of a constraint", stmt)


def test_constraint_poly_is_affine() -> None:
    stmt = "O[m : M] = +(A[m, k]), k * m < 4"
    fails(fn(stmt + ";"), TileTypeError, "in a constraint multiplies two indices", stmt)


def test_rank_of_declared_parameter() -> None:
    stmt = "O[m : M] = +(A[m])"
    fails(fn(stmt + ";"), TileTypeError, "'A' is declared as A[M, K] but is indexed with 1 index")


def test_rank_of_contraction_result() -> None:
    src = fn("T[m : M] = +(A[m, k]);\n  O[m : M] = +(T[m, 0]);")
    fails(
        src, TileTypeError, "'T' has rank 1 but is indexed with 2 indices", "O[m : M] = +(T[m, 0])"
    )


def test_fixed_size_dims_count_for_rank() -> None:
    fails("function (A[3, N]) -> (O) { O[i : 3] = +(A[i]); }", TileTypeError, "A[3, N]")


def _contraction(src: str) -> tuple[ast.Function, ast.Contraction]:
    f = parse(src)
    (stmt,) = f.stmts
    assert isinstance(stmt, ast.Contraction)
    return f, stmt


@pytest.mark.parametrize(("combo", "count"), [("none", 2), ("mul", 1), ("eq", 3), ("cond", 2)])
def test_combo_operand_count(combo: str, count: int) -> None:
    f, stmt = _contraction(fn("O[m, k : M, K] = +(A[m, k] == A[m, k] ? (A[m, k]));"))
    bad = dataclasses.replace(stmt, combo=combo, operands=stmt.operands[:count])
    if count > len(stmt.operands):  # pragma: no cover - table guard
        raise AssertionError
    with pytest.raises(TileTypeError, match="operand"):
        check(dataclasses.replace(f, stmts=(bad,)))


def test_index_and_size_counts_must_match() -> None:
    f, stmt = _contraction(fn("O[m, k : M, K] = +(A[m, k]);"))
    bad = dataclasses.replace(stmt, sizes=stmt.sizes[:1])
    with pytest.raises(TileTypeError, match="2 indices but 1 sizes"):
        check(dataclasses.replace(f, stmts=(bad,)))


def test_unknown_aggregation_or_combo() -> None:
    f, stmt = _contraction(fn("O[m : M] = +(A[m, 0]);"))
    with pytest.raises(TileTypeError, match="unknown aggregation"):
        check(dataclasses.replace(f, stmts=(dataclasses.replace(stmt, agg="sum"),)))
    with pytest.raises(TileTypeError, match="unknown combination"):
        check(dataclasses.replace(f, stmts=(dataclasses.replace(stmt, combo="sub"),)))


# -- functions and casts ------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        ("exp(A, S)", "'exp' takes 1 argument, got 2"),
        ("relu()", "'relu' takes 1 argument, got 0"),
        ("pow(A)", "'pow' takes 2 arguments, got 1"),
        ("max(A, S, S)", "'max' takes 2 arguments, got 3"),
        ("as_float(A)", "'as_float' takes 2 arguments, got 1"),
        ("as_bool(A, 8)", "'as_bool' takes 1 argument, got 2"),
    ],
)
def test_function_arity(call: str, fragment: str) -> None:
    fails(fn(f"O = {call};"), TileTypeError, fragment, f"O = {call}")


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        ("as_float(A, 8)", "'as_float' supports 16, 32, 64 bits, got 8"),
        ("as_int(A, 128)", "'as_int' supports 8, 16, 32, 64 bits, got 128"),
        ("as_uint(A, 1)", "'as_uint' supports 8, 16, 32, 64 bits, got 1"),
        ("as_float(A, M)", "bit width of 'as_float' must be an integer literal, got 'M'"),
        ("as_int(A, 16 + 16)", "must be an integer literal"),
        ("as_float(A, 32.0)", "must be an integer literal"),
    ],
)
def test_cast_bits(call: str, fragment: str) -> None:
    fails(fn(f"O = {call};"), TileTypeError, fragment, f"O = {call}")


def test_first_error_wins_in_statement_order() -> None:
    src = fn("T = exp(A, A);\n  O = Q;")
    fails(src, TileTypeError, "'exp' takes 1 argument", "T = exp(A, A)")


def test_language_reference_examples_pass() -> None:
    """Every ```tile block in docs/tile-language.md parses and checks."""
    doc = (Path(__file__).parents[2] / "docs" / "tile-language.md").read_text()
    blocks = re.findall(r"```tile\n(.*?)```", doc, re.S)
    assert len(blocks) >= 10
    for block in blocks:
        ok(block)
