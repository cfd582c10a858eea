"""The statement builtins ``scatter``, ``scatter_nd`` and ``topk``: parsing,
static checks (errors located at line and column), binding and lowering.

Execution on both targets is tested in ``tests/runtime/test_scatter_topk.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.errors import ShapeError, TileNameError, TileTypeError
from stripeml.ir import Special, verify
from stripeml.tile import ast
from stripeml.tile.check import check
from stripeml.tile.parser import parse

from .test_builtins import call_fails, fails

PARAMS = "X[N, M], I[N, P], U[N, P], J[Q, 2], V[Q]"


def fn(body: str, params: str = PARAMS, outputs: str = "O") -> str:
    return f"function ({params}) -> ({outputs}) {{\n  {body}\n}}"


def test_parse() -> None:
    f = parse(
        fn("A = scatter(X, I, U, 1, max);\n  B = scatter_nd(X, J, V);\n  O = topk(A, M - 1, -1);")
    )
    a, b, o = f.stmts
    assert isinstance(a, ast.Builtin) and a.func == "scatter" and len(a.args) == 5
    assert isinstance(a.args[4], ast.Name) and a.args[4].name == "max"
    assert isinstance(b, ast.Builtin) and b.func == "scatter_nd" and len(b.args) == 3
    assert isinstance(o, ast.Builtin) and o.func == "topk" and o.text == "O = topk(A, M - 1, -1)"


@pytest.mark.parametrize(
    "stmt",
    [
        "O = scatter(X, I, U, 0);",
        "O = scatter(X, I, U, -1, none);",
        "O = scatter(X, I, U, 1, add);",
        "O = scatter(X, I, U, 1, mul);",
        "O = scatter(X, I, U, 1, max);",
        "O = scatter(X, I, U, 1, min);",
        "O = scatter_nd(X, J, V);",
        "O = scatter_nd(X, J, V, add);",
        "O = topk(X, 2, 1);",
        "O = topk(X, M, -1, largest);",
        "O = topk(X, N / 2 + 1, 0, smallest);",
    ],
)
def test_valid(stmt: str) -> None:
    check(parse(fn(stmt)))


def test_result_rank_is_the_sources() -> None:
    check(parse(fn("T = topk(X, 2, 1);\n  O[i : N] = +(T[i, j]);")))
    check(parse(fn("S = scatter(X, I, U, 1);\n  O[i : N] = +(S[i, j]);")))
    fails(
        fn("S = scatter_nd(X, J, V);\n  O[i : N] = +(S[i]);"),
        TileTypeError,
        "rank",
        "O[i : N] = +(S[i])",
    )


@pytest.mark.parametrize(
    "stmt, cls, fragment",
    [
        ("O = scatter(X, I, U)", TileTypeError, "'scatter' takes 4 arguments and an optional"),
        ("O = scatter(X, I, U, 0, add, 1)", TileTypeError, "'scatter' takes 4 arguments"),
        ("O = scatter_nd(X, J)", TileTypeError, "'scatter_nd' takes 3 arguments"),
        ("O = topk(X, 2)", TileTypeError, "'topk' takes 3 arguments and an optional order"),
        ("O = scatter(X, I, U, M)", TileTypeError, "axis of 'scatter' must be an integer"),
        ("O = topk(X, 2, 1.5)", TileTypeError, "axis of 'topk' must be an integer literal"),
        ("O = scatter(X + 1, I, U, 0)", TileTypeError, "the tensor to scatter into (an arg"),
        ("O = scatter(X, I * 2, U, 0)", TileTypeError, "the indices (an argument of 'scatter')"),
        ("O = scatter_nd(X, J, V * 2)", TileTypeError, "the updates (an argument of 'scatter_n"),
        ("O = scatter(X, I, Z, 0)", TileNameError, "argument of 'scatter' 'Z' is not defined"),
        ("O = topk(i, 2, 0)", TileNameError, "'i' is not a tensor name"),
        ("O = topk(X, j, 0)", TileTypeError, "index 'j' in the count 'K' of 'topk'"),
        ("O = topk(X, X, 0)", TileTypeError, "tensor 'X' in the count 'K' of 'topk'"),
        ("O = relu(topk(X, 2, 0))", TileTypeError, "'topk' cannot be used inside an expr"),
        ("O = X + scatter(X, I, U, 0)", TileTypeError, "'scatter' cannot be used inside an"),
        ("O = scatter_nd", TileNameError, "'scatter_nd' is a statement builtin"),
    ],
)
def test_check_errors(stmt: str, cls, fragment: str) -> None:
    fails(fn(stmt + ";"), cls, fragment, stmt)


@pytest.mark.parametrize(
    "stmt, word",
    [
        ("O = scatter(X, I, U, 0, sum);", "sum"),
        ("O = scatter_nd(X, J, V, largest);", "largest"),
        ("O = topk(X, 2, 0, add);", "add"),
        ("O = topk(X, 2, 0, X);", "X"),
        ("O = scatter(X, I, U, 0, 1);", "1"),
    ],
)
def test_bad_words_are_located_at_the_word(stmt: str, word: str) -> None:
    src = fn(stmt)
    with pytest.raises(TileTypeError) as info:
        check(parse(src))
    message = str(info.value)
    offset = src.index(word + ")")
    line = src.count("\n", 0, offset) + 1
    column = offset - (src.rfind("\n", 0, offset) + 1) + 1
    assert message.startswith(f"{line}:{column}: "), message
    assert (info.value.line, info.value.column) == (line, column)
    assert "must be one of" in message and f"got '{word}'" in message


# -- binding ------------------------------------------------------------------------


def _args(n=3, m=4, p=2, q=5, idtype=np.int64, udtype=np.float32):
    return [
        np.zeros((n, m), np.float32),
        np.zeros((n, p), idtype),
        np.zeros((n, p), udtype),
        np.zeros((q, 2), np.int64),
        np.zeros((q,), np.float32),
    ]


SCATTER = fn("O = scatter(X, I, U, 1, add);")


def test_scatter_bind_errors() -> None:
    call_fails(SCATTER, _args(idtype=np.float32), TileTypeError, "must be integers", "I, U, 1")
    call_fails(
        SCATTER,
        _args(udtype=np.float64),
        TileTypeError,
        "have dtype f64, not the dtype f32",
        "U, 1",
    )
    stripeml.compile(SCATTER, target="interp")(*_args(p=7))  # more than M along the axis
    src = fn("O = scatter(X, I, U, 0, add);")
    msg = call_fails(
        src, _args(p=7), ShapeError, "larger than 'X' of shape (3, 4) on axis 1", "O = s"
    )
    assert msg.startswith("2:3: in 'O = scatter(X, I, U, 0, add)': "), msg
    src = fn("O = scatter(X, I, U, 2);")
    call_fails(src, _args(), ShapeError, "axis 2 is out of range", "2);")
    src = fn("O = scatter(X, I, U, 0);", params="X[N, M, R], I[N, P], U[N, P], J, V")
    args = [np.zeros((3, 4, 2), np.float32), *_args()[1:]]
    call_fails(src, args, ShapeError, "must have the rank 3 of 'X'", "O = scatter")
    src = fn("O = scatter(X, I, V, 0);")
    call_fails(src, _args(), ShapeError, "the updates 'V' have shape (5,)", "O = scatter")


def test_scatter_nd_bind_errors() -> None:
    np.testing.assert_array_equal(
        stripeml.compile(fn("O = scatter_nd(X, J, V);"), target="interp")(*_args()),
        np.zeros((3, 4), np.float32),
    )
    src = fn("O = scatter_nd(X, J, U);")
    call_fails(src, _args(), ShapeError, "needs (5,)", "O = scatter_nd")
    src = fn("O = scatter_nd(X, U, V);")
    call_fails(src, _args(), TileTypeError, "must be integers", "U, V)")
    src = fn("O = scatter_nd(X, I, V);", params="X[N], I[N, P], U[N, P], J[Q, 2], V[Q]")
    args = [np.zeros(3, np.float32), *_args()[1:]]
    call_fails(src, args, ShapeError, "at most 1 entries", "O = scatter_nd")


def test_topk_bind_errors() -> None:
    src = fn("O = topk(X, M + 1, 1);")
    call_fails(src, _args(), ShapeError, "topk of 5 elements from axis 1", "O = topk")
    src = fn("O = topk(X, N - M, 1);")
    call_fails(src, _args(), ShapeError, "evaluates to -1", "O = topk")
    src = fn("O = topk(X, 1, -3);")
    call_fails(src, _args(), ShapeError, "axis -3 is out of range", "-3);")


# -- lowering -----------------------------------------------------------------------


def _program(src: str, *args: np.ndarray):
    exe = stripeml.compile(src, target="interp").lower(*args)
    verify(exe.program)
    return exe.program


def test_lowering_to_root_specials() -> None:
    src = fn(
        "A = scatter(X, I, U, -1);\n  B = scatter(X, I, U, 0, mul);\n"
        "  C = scatter_nd(X, J, V, min);\n  D = topk(X, M - 1, -1, smallest);\n"
        "  E = topk(X, 2, 0);",
        outputs="A, B, C, D, E",
    )
    p = _program(src, *_args())
    assert p.root.stmts == (
        Special("scatter", ("X", "I", "U"), ("A",), (("axis", 1), ("reduce", "none"))),
        Special("scatter", ("X", "I", "U"), ("B",), (("axis", 0), ("reduce", "mul"))),
        Special("scatter_nd", ("X", "J", "V"), ("C",), (("reduce", "min"),)),
        Special("topk", ("X",), ("D",), (("axis", 1), ("k", 3), ("order", "smallest"))),
        Special("topk", ("X",), ("E",), (("axis", 0), ("k", 2), ("order", "largest"))),
    )
    shapes = {r.into: (r.shape.sizes, r.shape.dtype) for r in p.root.refs}
    assert shapes["A"] == shapes["C"] == ((3, 4), "f32")
    assert shapes["D"] == ((3, 3), "i64") and shapes["E"] == ((2, 4), "i64")


def test_empty_results_need_no_special() -> None:
    src = fn("O = topk(X, 0, 1);\n  S = scatter(X, I, U, 1);", outputs="O, S")
    args = _args(p=0)
    p = _program(src, *args)
    assert [s.op for s in p.root.stmts if isinstance(s, Special)] == ["scatter"]
    o, s = stripeml.compile(src, target="cpu")(*[a + 1 for a in args])
    assert o.shape == (3, 0) and o.dtype == np.int64
    np.testing.assert_array_equal(s, np.ones((3, 4), np.float32))
