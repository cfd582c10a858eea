"""The specials ``scatter``, ``scatter_nd`` and ``topk``: hand-written Stripe
programs on the interpreter (every mode) and the CPU backend against plain
Python loops (the ONNX reference's), the Tile builtins end to end on both
targets, and every pass and pipeline on programs using them.

The loops below are the definitions: updates in row-major order of the
indices, each combined with the element it lands on (``none``: replaced).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import stripeml
from stripeml.errors import ExecutionError, StripeError
from stripeml.ir import Special, verify
from stripeml.passes.manager import run_pipeline
from stripeml.runtime.interp import run

from .helpers import run_all, run_cpu
from .programs_ir import block, program, root_ref, view
from .test_tile_builtins import PIPELINES, _check, _every_pass

try:
    from passes.memcheck import assert_placed_soundly  # tests/ on sys.path
except ImportError:  # tests/ imported as a package
    from tests.passes.memcheck import assert_placed_soundly

rng = np.random.default_rng(29)
TARGETS = ("interp", "cpu")
REDUCTIONS = ("none", "add", "mul", "max", "min")
DTYPES = (np.float32, np.float64, np.int32, np.int64, np.uint8, np.float16, np.bool_)
_CODES = {
    np.float32: "f32",
    np.float64: "f64",
    np.int32: "i32",
    np.int64: "i64",
    np.uint8: "u8",
    np.float16: "f16",
    np.bool_: "bool",
    np.int16: "i16",
    np.uint64: "u64",
}


def _code(dtype) -> str:
    return _CODES[np.dtype(dtype).type]


def _combine(old, new, reduce: str):
    if reduce == "none":
        return new
    if reduce == "add":
        return old + new
    if reduce == "mul":
        return old * new
    return np.maximum(old, new) if reduce == "max" else np.minimum(old, new)


def scatter_ref(x, idx, upd, axis: int, reduce: str) -> np.ndarray:
    out = x.copy()
    axis %= x.ndim
    with np.errstate(all="ignore"):
        for p in np.ndindex(idx.shape):
            at = list(p)
            at[axis] = int(idx[p])
            out[tuple(at)] = _combine(out[tuple(at)], upd[p], reduce)
    return out


def scatter_nd_ref(x, idx, upd, reduce: str) -> np.ndarray:
    out = x.copy()
    with np.errstate(all="ignore"):
        for q in np.ndindex(idx.shape[:-1]):
            at = tuple(int(v) for v in idx[q])
            out[at] = _combine(out[at], upd[q], reduce)
    return out


def topk_ref(x, axis: int, k: int, largest: bool) -> np.ndarray:
    """Per line along ``axis``: positions sorted by value (NaN above all), ties by position."""
    moved = np.moveaxis(x, axis, -1)
    out = np.zeros(moved.shape[:-1] + (k,), np.int64)
    for lead in np.ndindex(moved.shape[:-1]):
        line = moved[lead]

        def key(j, line=line):
            value = float(line[j])
            nan = value != value
            if largest:
                return (0, 0.0, j) if nan else (1, -value, j)
            return (1, 0.0, j) if nan else (0, value, j)

        out[lead] = sorted(range(line.size), key=key)[:k]
    return np.moveaxis(out, -1, axis)


def _data(shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "u":
        return rng.integers(0, 6, shape).astype(dtype)
    if dtype.kind == "i":
        return rng.integers(-5, 6, shape).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def scatter_program(op: str, x, idx, upd, params) -> object:
    refs = [
        root_ref("in", "X", _code(x.dtype), x.shape),
        root_ref("in", "I", _code(idx.dtype), idx.shape),
        root_ref("in", "U", _code(upd.dtype), upd.shape),
        root_ref("out", "Y", _code(x.dtype), x.shape),
    ]
    p = program(refs, [Special(op, ("X", "I", "U"), ("Y",), tuple(params))])
    verify(p)
    return p


def topk_program(x, axis: int, k: int, order: str) -> object:
    shape = list(x.shape)
    shape[axis] = k
    refs = [root_ref("in", "X", _code(x.dtype), x.shape), root_ref("out", "Y", "i64", shape)]
    params = (("axis", axis), ("k", k), ("order", order))
    p = program(refs, [Special("topk", ("X",), ("Y",), params)])
    verify(p)
    return p


def _exact(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


# -- scatter (along an axis) -----------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape, axis", [((7,), 0), ((4, 5), 1), ((3, 4, 5), 0), ((2, 3, 4, 3), -2)]
)
def test_scatter_every_reduction(dtype, shape, axis) -> None:
    """Duplicate and negative indices, every reduction, interp (every mode) and cpu."""
    x = _data(shape, dtype)
    ishape = [max(1, s - 1) for s in shape]
    ishape[axis] = shape[axis] + 3  # more updates than slots: duplicates
    dim = shape[axis]
    idx = rng.integers(-dim, dim, ishape).astype(np.int64)
    upd = _data(ishape, dtype)
    for reduce in REDUCTIONS:
        p = scatter_program("scatter", x, idx, upd, (("axis", axis), ("reduce", reduce)))
        got = run_all(p, {"X": x, "I": idx, "U": upd}, rtol=0, atol=0)["Y"]
        _exact(got, scatter_ref(x, idx, upd, axis, reduce))


@pytest.mark.parametrize("idtype", [np.int32, np.uint8, np.int16, np.uint64])
def test_scatter_index_dtypes(idtype) -> None:
    x = _data((6, 3), np.float32)
    lo = 0 if np.dtype(idtype).kind == "u" else -6
    idx = rng.integers(lo, 6, (9, 3)).astype(idtype)
    upd = _data((9, 3), np.float32)
    p = scatter_program("scatter", x, idx, upd, (("axis", 0), ("reduce", "add")))
    got = run_all(p, {"X": x, "I": idx, "U": upd})["Y"]
    np.testing.assert_allclose(got, scatter_ref(x, idx, upd, 0, "add"), rtol=1e-6)


def test_scatter_none_last_update_wins() -> None:
    x = np.zeros(4, np.int64)
    idx = np.array([1, -3, 2, 1, 3, -1])
    upd = np.array([10, 20, 30, 40, 50, 60], np.int64)
    p = scatter_program("scatter", x, idx, upd, (("axis", 0), ("reduce", "none")))
    for got in (run(p, {"X": x, "I": idx, "U": upd}), run_cpu(p, {"X": x, "I": idx, "U": upd})):
        _exact(got["Y"], np.array([0, 40, 30, 60]))


def test_scatter_reductions_in_order_and_nan() -> None:
    """Integers wrap, bool add is or, max/min propagate NaN."""
    x = np.array([250, 1], np.uint8)
    idx = np.array([0, 0, 1])
    upd = np.array([3, 4, 7], np.uint8)
    p = scatter_program("scatter", x, idx, upd, (("axis", 0), ("reduce", "add")))
    _exact(run_cpu(p, {"X": x, "I": idx, "U": upd})["Y"], np.array([1, 8], np.uint8))
    f = np.array([1.0, np.nan, 2.0], np.float32)
    upd = np.array([np.nan, 5.0, 1.0], np.float32)
    idx = np.array([0, 1, 2])
    for reduce, want in (("max", [np.nan, np.nan, 2.0]), ("min", [np.nan, np.nan, 1.0])):
        p = scatter_program("scatter", f, idx, upd, (("axis", 0), ("reduce", reduce)))
        np.testing.assert_array_equal(run_all(p, {"X": f, "I": idx, "U": upd})["Y"], want)
    b = np.array([False, True])
    p = scatter_program(
        "scatter", b, np.array([0, 0]), np.array([True, True]), (("axis", 0), ("reduce", "add"))
    )
    _exact(
        run(p, {"X": b, "I": np.array([0, 0]), "U": np.array([True, True])})["Y"],
        np.array([True, True]),
    )


@pytest.mark.parametrize("bad", [5, -6, 1 << 40])
def test_scatter_out_of_range_is_an_execution_error(bad: int) -> None:
    x = np.zeros((2, 5), np.float32)
    idx = np.array([[0, 1], [bad, 2]], np.int64)
    upd = np.ones((2, 2), np.float32)
    p = scatter_program("scatter", x, idx, upd, (("axis", 1), ("reduce", "add")))
    for runner in (run, run_cpu):
        with pytest.raises(ExecutionError) as info:
            runner(p, {"X": x, "I": idx, "U": upd})
        assert isinstance(info.value, StripeError)
        message = str(info.value)
        assert f"scatter index {bad} at position (1, 0)" in message, message
        assert "axis 1 of size 5 (valid: -5 to 4)" in message


def test_scatter_uint64_past_int64_is_out_of_range() -> None:
    """A uint64 index of 2**64 - 1 is not -1."""
    x = np.zeros(5, np.float32)
    idx = np.array([2**64 - 1], np.uint64)
    p = scatter_program("scatter", x, idx, np.ones(1, np.float32), (("axis", 0),))
    for runner in (run, run_cpu):
        with pytest.raises(ExecutionError, match="18446744073709551615"):
            runner(p, {"X": x, "I": idx, "U": np.ones(1, np.float32)})


def test_scatter_with_no_updates_copies() -> None:
    x = _data((3, 4), np.float32)
    idx, upd = np.zeros((3, 0), np.int64), np.zeros((3, 0), np.float32)
    p = scatter_program("scatter", x, idx, upd, (("axis", 1), ("reduce", "mul")))
    _exact(run_all(p, {"X": x, "I": idx, "U": upd})["Y"], x)


# -- scatter_nd -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xshape, ishape", [((6,), (8, 1)), ((4, 5), (3, 2, 1)),
                                           ((4, 5), (7, 2)), ((3, 4, 2), (5, 2)),
                                           ((3, 4, 2), (2, 2, 3))])  # fmt: skip
def test_scatter_nd_every_reduction(dtype, xshape, ishape) -> None:
    x = _data(xshape, dtype)
    k = ishape[-1]
    idx = np.stack([rng.integers(-xshape[j], xshape[j], ishape[:-1]) for j in range(k)], -1)
    upd = _data(ishape[:-1] + xshape[k:], dtype)
    for reduce in REDUCTIONS:
        p = scatter_program("scatter_nd", x, idx, upd, (("reduce", reduce),))
        got = run_all(p, {"X": x, "I": idx, "U": upd}, rtol=0, atol=0)["Y"]
        _exact(got, scatter_nd_ref(x, idx, upd, reduce))


def test_scatter_nd_whole_tensor_tuples() -> None:
    """Tuples of length 0 address the whole tensor: every update replaces it all."""
    x = _data((2, 3), np.float32)
    idx = np.zeros((2, 0), np.int64)
    upd = _data((2, 2, 3), np.float32)
    p = scatter_program("scatter_nd", x, idx, upd, (("reduce", "add"),))
    np.testing.assert_allclose(run(p, {"X": x, "I": idx, "U": upd})["Y"], x + upd[0] + upd[1])


def test_scatter_nd_out_of_range() -> None:
    x = np.zeros((3, 4), np.int32)
    idx = np.array([[0, 1], [2, -5]])
    p = scatter_program("scatter_nd", x, idx, np.ones(2, np.int32), (("reduce", "none"),))
    for runner in (run, run_cpu):
        with pytest.raises(ExecutionError, match=r"scatter_nd index -5 at position \(1, 1\)"):
            runner(p, {"X": x, "I": idx, "U": np.ones(2, np.int32)})


# -- topk ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float16, np.float64, np.int32, np.uint8, np.bool_]
)
@pytest.mark.parametrize("shape, axis", [((9,), 0), ((4, 7), 1), ((5, 3, 4), 0), ((2, 3, 6), -1)])
def test_topk(dtype, shape, axis) -> None:
    """Many ties (values drawn from a few), NaN in floats, both orders, every k."""
    x = rng.integers(0, 4, shape).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[rng.random(shape) < 0.2] = np.nan
    dim = shape[axis]
    for k, order in itertools.product(sorted({1, dim // 2, dim}), ("largest", "smallest")):
        p = topk_program(x, axis % len(shape), k, order)
        got = run_all(p, {"X": x}, rtol=0, atol=0)["Y"]
        _exact(got, topk_ref(x, axis, k, order == "largest"))


def test_topk_matches_onnx_reference() -> None:
    from onnx.reference.ops.op_topk import topk_sorted_implementation

    x = rng.integers(-3, 3, (6, 40)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan
    x[rng.random(x.shape) < 0.1] = -0.0
    for largest in (0, 1):
        _, want = topk_sorted_implementation(x, 25, 1, largest)
        order = "largest" if largest else "smallest"
        got = run_cpu(topk_program(x, 1, 25, order), {"X": x})["Y"]
        _exact(got, want.astype(np.int64))


def test_specials_per_point_of_a_block() -> None:
    """In a nested block, the specials run on each point's views (the interpreter)."""
    x = _data((3, 6), np.float32)
    idx = rng.integers(-6, 6, (3, 4))
    upd = _data((3, 4), np.float32)
    xr, ir = root_ref("in", "X", "f32", (3, 6)), root_ref("in", "I", "i64", (3, 4))
    ur, yr = root_ref("in", "U", "f32", (3, 4)), root_ref("out", "Y", "f32", (3, 6))
    tr = root_ref("out", "T", "i64", (3, 2))
    k = block(
        {"r": 3},
        [view("in", "X", xr.shape, "r, 0", (1, 6)), view("in", "I", ir.shape, "r, 0", (1, 4)),
         view("in", "U", ur.shape, "r, 0", (1, 4)), view("out", "Y", yr.shape, "r, 0", (1, 6)),
         view("out", "T", tr.shape, "r, 0", (1, 2))],
        [Special("scatter", ("X", "I", "U"), ("Y",), (("axis", 1), ("reduce", "add"))),
         Special("topk", ("X",), ("T",), (("axis", 1), ("k", 2)))],
    )  # fmt: skip
    p = program([xr, ir, ur, yr, tr], [k])
    verify(p)
    got = run_all(p, {"X": x, "I": idx, "U": upd})
    np.testing.assert_allclose(got["Y"], scatter_ref(x, idx, upd, 1, "add"), rtol=1e-6)
    _exact(got["T"], topk_ref(x, 1, 2, True))


# -- the Tile builtins, end to end --------------------------------------------------------

PROGRAM = """function (X[N, M], I[P, Q], U[P, Q], J[R, 1], V[R, M]) -> (A, B, C, T, S) {
    Y = X * 2 + 1;
    A = scatter(Y, I, U, 1);
    B = scatter(X, I, U, -1, add);
    C = scatter_nd(A, J, V, max);
    T = topk(C, M, -1);
    S = topk(X, 2, 0, smallest);
}"""


def _inputs(n=5, m=6, p=4, q=7, r=9):
    x = rng.standard_normal((n, m)).astype(np.float32)
    i = rng.integers(-m, m, (p, q))
    u = rng.standard_normal((p, q)).astype(np.float32)
    j = rng.integers(-n, n, (r, 1))
    v = rng.standard_normal((r, m)).astype(np.float32)
    return x, i, u, j, v


def _reference(x, i, u, j, v):
    a = scatter_ref(x * 2 + 1, i, u, 1, "none")
    b = scatter_ref(x, i, u, 1, "add")
    c = scatter_nd_ref(a, j, v, "max")
    return a, b, c, topk_ref(c, 1, x.shape[1], True), topk_ref(x, 0, 2, False)


@pytest.mark.parametrize("target", TARGETS)
def test_tile_builtins(target: str) -> None:
    f = stripeml.compile(PROGRAM, target=target)
    for shapes in ({}, dict(n=3, m=9, p=2, q=12, r=1)):
        args = _inputs(**shapes)
        _check(f(*args), _reference(*args))


@pytest.mark.parametrize("target", TARGETS)
def test_tile_out_of_range_leaves_the_function_usable(target: str) -> None:
    f = stripeml.compile(PROGRAM, target=target)
    x, i, u, j, v = _inputs()
    bad = j.copy()
    bad[3, 0] = 5
    with pytest.raises(ExecutionError, match=r"scatter_nd index 5 at position \(3, 0\)"):
        f(x, i, u, bad, v)
    _check(f(x, i, u, j, v), _reference(x, i, u, j, v))


def test_opencl_runs_them_on_the_host() -> None:
    pytest.importorskip("pyopencl")
    args = _inputs()
    try:
        f = stripeml.compile(PROGRAM, target="opencl_pocl")
        got = f(*args)
    except StripeError as exc:  # no OpenCL device here
        if "device" not in str(exc).lower() and "platform" not in str(exc).lower():
            raise
        pytest.skip(str(exc))
    _check(got, _reference(*args))


def _lowered():
    args = _inputs()
    f = stripeml.compile(PROGRAM, target="interp")
    return f.lower(*args).program, dict(zip(f.params, args))


def test_every_pass_alone() -> None:
    program_, inputs = _lowered()
    expected = run(program_, inputs)

    def check(pass_name, p):
        got = run(p, inputs)
        for k, w in expected.items():
            np.testing.assert_array_equal(got[k], w, err_msg=pass_name)

    ops = [s.op for s in program_.root.stmts if isinstance(s, Special)]
    assert ops == ["scatter", "scatter", "scatter_nd", "topk", "topk"]
    for p in _every_pass():
        out = run_pipeline(program_, [p], check=check).program
        verify(out)
        assert [s.op for s in out.root.stmts if isinstance(s, Special)] == ops, p.name


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_pipelines(pipeline: str) -> None:
    program_, inputs = _lowered()
    expected = run(program_, inputs)
    out = run_pipeline(program_, PIPELINES[pipeline]()).program
    verify(out)
    got = run(out, inputs, arena=True)
    for k, w in expected.items():
        np.testing.assert_array_equal(got[k], w, err_msg=pipeline)
    assert_placed_soundly(out)


def test_cpu_runs_them_on_whole_buffers(monkeypatch) -> None:
    """On the CPU a root scatter/topk runs on NumPy views of the buffers, not the
    interpreter's per-point path (patched to fail here)."""
    import stripeml.runtime.interp.specials as interp_specials

    def refuse(*args, **kwargs):
        raise AssertionError("the interpreter's special ran")

    monkeypatch.setattr(interp_specials, "run_special", refuse)
    args = _inputs()
    _check(stripeml.compile(PROGRAM, target="cpu")(*args), _reference(*args))


def test_host_runs_every_whole_special_directly() -> None:
    from stripeml.ir.stmt_rules import SPECIALS
    from stripeml.runtime import host
    from stripeml.runtime.interp import specials

    assert host._WHOLE == specials.WHOLE
    assert set(host._DIRECT) == set(SPECIALS)
