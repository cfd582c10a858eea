"""The builtins ``reshape``, ``gather`` (whole statements) and ``index`` (in
elementwise expressions): parsing, static checks, binding and lowering.

Execution on both targets is tested in ``tests/runtime/test_tile_builtins.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.errors import ShapeError, StripeError, TileNameError, TileTypeError
from stripeml.ir import LoadIndex, Special, verify
from stripeml.tile import ast
from stripeml.tile.check import check
from stripeml.tile.parser import parse


def fn(body: str, params: str = "A[M, K], B[K, N], S, J[L]", outputs: str = "O") -> str:
    return f"function ({params}) -> ({outputs}) {{\n  {body}\n}}"


def fails(src: str, cls: type[StripeError], fragment: str, stmt: str) -> str:
    """``src`` fails its static checks with ``cls``, at ``stmt``'s position, quoting it."""
    with pytest.raises(cls) as info:
        check(parse(src))
    message = str(info.value)
    assert fragment in message.splitlines()[0], message
    offset = src.index(stmt)
    line = src.count("\n", 0, offset) + 1
    column = offset - (src.rfind("\n", 0, offset) + 1) + 1
    assert message.startswith(f"{line}:{column}: in '{stmt}': "), message
    assert (info.value.line, info.value.column) == (line, column)
    return message


def call_fails(
    src: str, args: list[np.ndarray], cls: type[StripeError], fragment: str, at: str
) -> str:
    """Compiling succeeds; calling fails with ``cls`` located at the text ``at``."""
    f = stripeml.compile(src, target="interp")
    with pytest.raises(cls) as info:
        f(*args)
    message = str(info.value)
    assert fragment in message, message
    offset = src.index(at)
    line = src.count("\n", 0, offset) + 1
    column = offset - (src.rfind("\n", 0, offset) + 1) + 1
    assert message.startswith(f"{line}:{column}: "), message
    return message


# -- parsing ------------------------------------------------------------------------


def test_parse_statement_builtins() -> None:
    f = parse(fn("R = reshape(A, M * K);\n  G = gather(R, J, -1);\n  O = index(G, 0);"))
    r, g, o = f.stmts
    assert isinstance(r, ast.Builtin) and r.func == "reshape" and r.output == "R"
    assert r.text == "R = reshape(A, M * K)"
    assert r.func_pos == ast.Pos(2, 7)
    assert isinstance(g, ast.Builtin) and g.func == "gather" and len(g.args) == 3
    assert isinstance(o, ast.Assignment) and isinstance(o.expr, ast.Call)


# -- valid programs -------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "O = reshape(A, M * K);",
        "O = reshape(A, K, M);",
        "O = reshape(S);",
        "O = reshape(A, (M + 1) * K / 2 - 1, 2);",
        "O = gather(A, J, 0);",
        "O = gather(A, J, -1);",
        "O = gather(A, S, 1);",
        "O = index(A, 0);",
        "O = index(A, -1) + index(J, 0) * 2.5;",
        "O = A > 0 ? index(A, 1) : K;",
        "R = reshape(A, M * K);\n  O[i : M * K] = +(R[i]);",
        "G = gather(A, J, 0);\n  O[i, j, k : L, K, 1] = +(G[i, j]);",
    ],
)
def test_valid(body: str) -> None:
    check(parse(fn(body)))


# -- static errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "stmt, cls, fragment",
    [
        ("O = reshape()", TileTypeError, "'reshape' needs the tensor to reshape"),
        ("O = reshape(A + 1, 4)", TileTypeError, "must be a tensor name, got 'A + 1'"),
        ("O = reshape(Z, 4)", TileNameError, "argument of 'reshape' 'Z' is not defined"),
        ("O = reshape(M, 4)", TileNameError, "'M' is a dimension, not a tensor"),
        ("O = reshape(A, i)", TileTypeError, "index 'i' in the sizes of 'reshape'"),
        ("O = reshape(A, 2.5)", TileTypeError, "not allowed in the sizes of 'reshape'"),
        ("O = reshape(A, B)", TileTypeError, "tensor 'B' in the sizes of 'reshape'"),
        ("O = reshape(A, Q)", TileNameError, "unknown dimension 'Q' in the sizes of 'reshape'"),
        ("O = gather(A, J)", TileTypeError, "'gather' takes 3 arguments"),
        ("O = gather(A, J, 0, 1)", TileTypeError, "'gather' takes 3 arguments"),
        ("O = gather(A, J, M)", TileTypeError, "axis of 'gather' must be an integer literal"),
        ("O = gather(A, J, 1.0)", TileTypeError, "axis of 'gather' must be an integer literal"),
        ("O = gather(A, J, 1 + 1)", TileTypeError, "axis of 'gather' must be an integer literal"),
        ("O = gather(A, J * 2, 0)", TileTypeError, "the indices (an argument of 'gather')"),
        ("O = gather(A, j, 0)", TileNameError, "'j' is not a tensor name"),
        ("O = relu(reshape(A, 4))", TileTypeError, "'reshape' cannot be used inside an expr"),
        ("O = reshape(A, M * K) + 1", TileTypeError, "'reshape' cannot be used inside an expr"),
        ("O = A * gather(A, J, 0)", TileTypeError, "'gather' cannot be used inside an expr"),
        ("O = reshape", TileNameError, "'reshape' is a statement builtin"),
        ("O = index(A)", TileTypeError, "'index' takes 2 arguments, got 1"),
        ("O = index(A, K)", TileTypeError, "axis of 'index' must be an integer literal"),
        ("O = index(A + 1, 0)", TileTypeError, "must be a tensor name, got 'A + 1'"),
        ("O = index(M, 0)", TileNameError, "'M' is a dimension, not a tensor"),
        ("O = index(Z, 0)", TileNameError, "'Z' is not defined"),
        ("O = index", TileNameError, "function 'index' must be called"),
    ],
)
def test_static_errors(stmt: str, cls: type[StripeError], fragment: str) -> None:
    fails(fn(stmt + ";"), cls, fragment, stmt)


def test_builtin_output_ranks_are_known() -> None:
    src = fn("R = reshape(A, M * K);\n  O[i : M] = +(R[i, j]);")
    fails(src, TileTypeError, "'R' has rank 1 but is indexed with 2", "O[i : M] = +(R[i, j])")
    src = fn("G = gather(A, J, 1);\n  O[i : M] = +(G[i]);")
    fails(src, TileTypeError, "'G' has rank 2 but is indexed with 1 index", "O[i : M] = +(G[i])")


def test_builtin_assignment_rules() -> None:
    fails(
        fn("A = reshape(B, K * N);"), TileNameError, "assigns to parameter", "A = reshape(B, K * N)"
    )
    src = fn("O = reshape(A, M * K);\n  O = gather(A, J, 0);")
    fails(src, TileNameError, "already assigned", "O = gather(A, J, 0)")
    src = fn("O = reshape(T, 4);\n  T = A + 1;")
    fails(src, TileNameError, "used before it is assigned", "O = reshape(T, 4)")


def test_errors_raised_by_compile() -> None:
    with pytest.raises(TileTypeError):
        stripeml.compile(fn("O = exp(reshape(A, 4));"), target="interp")


# -- errors when shapes bind ----------------------------------------------------------


def test_reshape_count_mismatch() -> None:
    src = "function (X[N, M]) -> (O) {\n    O = reshape(X, N * 2, M);\n}"
    msg = call_fails(
        src, [np.zeros((2, 3), np.float32)], ShapeError, "cannot reshape 'X'", "O = reshape"
    )
    assert "in 'O = reshape(X, N * 2, M)'" in msg and "(2, 3) (6 elements) to (4, 3)" in msg


def test_reshape_size_not_positive() -> None:
    src = "function (X[N, M]) -> (O) {\n    O = reshape(X, N - N, M);\n}"
    call_fails(src, [np.zeros((2, 3))], ShapeError, "sizes must be positive", "O = reshape")


@pytest.mark.parametrize("axis", ["2", "-3", "7"])
def test_gather_axis_out_of_range(axis: str) -> None:
    src = f"function (X[N, M], I[K]) -> (O) {{\n    O = gather(X, I, {axis});\n}}"
    args = [np.zeros((2, 3)), np.zeros(2, np.int64)]
    msg = call_fails(src, args, ShapeError, f"axis {axis} is out of range", f"{axis});")
    assert "axes run from -2 to 1" in msg


def test_gather_from_rank0() -> None:
    src = "function (X, I) -> (O) {\n    O = gather(X, I, 0);\n}"
    call_fails(src, [np.zeros(()), np.zeros(2, np.int64)], ShapeError, "no axes", "0);")


@pytest.mark.parametrize("dtype", [np.float32, np.bool_, np.float64])
def test_gather_indices_must_be_integers(dtype) -> None:
    src = "function (X[N], I[K]) -> (O) {\n    O = gather(X, I, 0);\n}"
    args = [np.zeros(4), np.zeros(2, dtype)]
    call_fails(src, args, TileTypeError, "they must be integers", "I, 0)")


def test_index_axis_out_of_range() -> None:
    src = "function (X[N, M]) -> (O) {\n    O = X + index(X, -3);\n}"
    msg = call_fails(src, [np.zeros((2, 3))], ShapeError, "axis -3 is out of range", "-3)")
    assert "in 'O = X + index(X, -3)'" in msg
    src = "function (X) -> (O) {\n    O = index(X, 0);\n}"
    call_fails(src, [np.zeros(())], ShapeError, "no axes", "0)")


# -- shapes, dtypes and lowering ------------------------------------------------------


def _program(src: str, *args: np.ndarray):
    exe = stripeml.compile(src, target="interp").lower(*args)
    verify(exe.program)
    return exe.program


def test_lowering_to_root_specials() -> None:
    src = """function (X[N, M], I[P, Q]) -> (G, R) {
        R = reshape(X, M, N);
        G = gather(R, I, -1);
    }"""
    p = _program(src, np.zeros((2, 3), np.float32), np.zeros((4, 5), np.int32))
    assert p.root.stmts == (
        Special("reshape", ("X",), ("R",)),
        Special("gather", ("R", "I"), ("G",), (("axis", 1),)),
    )
    shapes = {r.into: (r.shape.sizes, r.shape.dtype) for r in p.root.refs}
    assert shapes["R"] == ((3, 2), "f32")
    assert shapes["G"] == ((3, 4, 5), "f32")


@pytest.mark.parametrize(
    "xshape, ishape, axis, want",
    [
        ((5,), (), 0, ()),
        ((5,), (2, 3), 0, (2, 3)),
        ((4, 5, 6), (7,), 1, (4, 7, 6)),
        ((4, 5, 6), (2, 3), -1, (4, 5, 2, 3)),
        ((4, 5, 6), (), -3, (5, 6)),
    ],
)
def test_gather_shapes(xshape, ishape, axis, want) -> None:
    src = f"function (X, I) -> (O) {{ O = gather(X, I, {axis}); }}"
    p = _program(src, np.zeros(xshape, np.int64), np.zeros(ishape, np.uint16))
    out = p.outputs[0].shape
    assert (out.sizes, out.dtype) == (want, "i64")


def test_index_lowers_to_load_index_in_the_kernel() -> None:
    src = """function (X[N, M], C[N, 1]) -> (O) {
        O = index(X, 1) * 10 + index(C, 0) + index(C, 1) + index(X, -1);
    }"""
    p = _program(src, np.zeros((2, 3), np.float32), np.zeros((2, 1), np.float32))
    (kernel,) = p.root.stmts
    assert [r.into for r in kernel.refs] == ["O"]  # index(X, a) does not read X
    exprs = [str(s.expr) for s in kernel.stmts if isinstance(s, LoadIndex)]
    assert exprs == ["i1", "i0"]  # loaded once per dimension; index(C, 1) is the constant 0
    assert p.outputs[0].shape.dtype == "i64"


def test_index_dtype_follows_promotion() -> None:
    src = "function (X[N]) -> (A, B, C) { A = index(X, 0); B = X + index(X, 0); C = index(X, 0) * 0.5; }"
    p = _program(src, np.zeros(3, np.float32))
    assert [r.shape.dtype for r in p.outputs] == ["i64", "f64", "f64"]
