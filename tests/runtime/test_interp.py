"""The interpreter on hand-built programs, checked against NumPy computed independently."""

from __future__ import annotations

import numpy as np
import pytest

from stripeml.errors import ExecutionError, ShapeError
from stripeml.ir.nodes import Constant, Intrinsic, Load, LoadIndex, Store
from stripeml.runtime.interp import run

from .helpers import run_all
from .programs_ir import (
    aff,
    block,
    contraction,
    conv2d,
    matmul,
    program,
    root_ref,
    tiled_matmul,
    view,
)

rng = np.random.default_rng(1234)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def test_matmul():
    a, b = randn(7, 5), randn(5, 9)
    out = run_all(matmul(7, 9, 5), {"A": a, "B": b})["C"]
    assert out.dtype == np.float32 and out.shape == (7, 9)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_matmul_float64_and_int():
    a, b = randn(4, 6, dtype=np.float64), randn(6, 3, dtype=np.float64)
    np.testing.assert_allclose(run_all(matmul(4, 3, 6, "f64"), {"A": a, "B": b})["C"], a @ b)
    ai = rng.integers(-50, 50, (4, 6)).astype(np.int32)
    bi = rng.integers(-50, 50, (6, 3)).astype(np.int32)
    out = run_all(matmul(4, 3, 6, "i32"), {"A": ai, "B": bi})["C"]
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, ai @ bi)


def test_int8_wraps():
    a = np.full((2, 4), 100, np.int8)
    b = np.full((4, 2), 3, np.int8)
    out = run_all(matmul(2, 2, 4, "i8"), {"A": a, "B": b})["C"]
    np.testing.assert_array_equal(out, (a.astype(np.int64) @ b).astype(np.int8))


def test_batched_matmul():
    a, b = randn(3, 4, 5), randn(3, 5, 2)
    p = contraction(
        {"A": ("f32", (3, 4, 5)), "B": ("f32", (3, 5, 2))},
        ("C", "f32", (3, 4, 2)),
        {"b": 3, "m": 4, "n": 2, "k": 5},
        {"A": "b, m, k", "B": "b, k, n", "C": "b, m, n"},
    )
    np.testing.assert_allclose(run_all(p, {"A": a, "B": b})["C"], a @ b, rtol=1e-5, atol=1e-5)


def conv_reference(i, k, pad, stride, dilation):
    n, x, y, _ = i.shape
    kx, ky, _, co = k.shape
    ip = np.pad(i, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    ox = (x + 2 * pad - dilation * (kx - 1) - 1) // stride + 1
    oy = (y + 2 * pad - dilation * (ky - 1) - 1) // stride + 1
    out = np.zeros((n, ox, oy, co), np.float64)
    for a in range(kx):
        for b in range(ky):
            xs = a * dilation + stride * np.arange(ox)
            ys = b * dilation + stride * np.arange(oy)
            patch = ip[:, xs][:, :, ys]
            out += np.einsum("nxyc,cd->nxyd", patch, k[a, b])
    return out


@pytest.mark.parametrize(
    "pad,stride,dilation", [(1, 1, 1), (0, 1, 1), (1, 2, 1), (2, 1, 2), (1, 2, 2)]
)
def test_conv(pad, stride, dilation):
    i, k = randn(2, 7, 6, 3), randn(3, 3, 3, 4)
    p = conv2d(2, 7, 6, 3, 4, pad=pad, stride=stride, dilation=dilation)
    out = run_all(p, {"I": i, "K": k})["O"]
    np.testing.assert_allclose(
        out, conv_reference(i, k, pad, stride, dilation), rtol=1e-4, atol=1e-4
    )


def test_dilated_conv_1d():
    """``O[n, x, co] = +(I[n, x + 2*t, ci] * K[t, ci, co])`` (DESIGN §3)."""
    i, k = randn(2, 11, 3), randn(3, 3, 5)
    p = contraction(
        {"I": ("f32", (2, 11, 3)), "K": ("f32", (3, 3, 5))},
        ("O", "f32", (2, 7, 5)),
        {"n": 2, "x": 7, "t": 3, "ci": 3, "co": 5},
        {"I": "n, x + 2*t, ci", "K": "t, ci, co", "O": "n, x, co"},
    )
    ref = sum(np.einsum("nxc,cd->nxd", i[:, 2 * t : 2 * t + 7], k[t]) for t in range(3))
    np.testing.assert_allclose(run_all(p, {"I": i, "K": k})["O"], ref, rtol=1e-5, atol=1e-5)


def test_max_pool():
    i = randn(6, 8)
    p = contraction(
        {"I": ("f32", (6, 8))},
        ("O", "f32", (3, 4)),
        {"x": 3, "y": 4, "i": 2, "j": 2},
        {"I": "2*x + i, 2*y + j", "O": "x, y"},
        agg="max",
        combo=None,
    )
    ref = i.reshape(3, 2, 4, 2).max(axis=(1, 3))
    np.testing.assert_array_equal(run_all(p, {"I": i})["O"], ref)


def test_cumsum():
    """``O[i : N] = +(I[k]), i - k < N`` with the constraint ``i - k >= 0``."""
    x = randn(10)
    p = contraction(
        {"I": ("f32", (10,))},
        ("O", "f32", (10,)),
        {"i": 10, "k": 10},
        {"I": "k", "O": "i"},
        combo=None,
        constraints=["i - k"],
    )
    np.testing.assert_allclose(run_all(p, {"I": x})["O"], np.cumsum(x), rtol=1e-5, atol=1e-5)


def test_transpose():
    x = randn(4, 6)
    p = contraction(
        {"I": ("f32", (4, 6))},
        ("O", "f32", (6, 4)),
        {"n": 6, "m": 4},
        {"I": "m, n", "O": "n, m"},
        agg="assign",
        combo=None,
    )
    np.testing.assert_array_equal(run_all(p, {"I": x})["O"], x.T)


def test_broadcast_elementwise():
    a, b = randn(5, 4), randn(4)
    p = contraction(
        {"A": ("f32", (5, 4)), "B": ("f32", (4,))},
        ("O", "f32", (5, 4)),
        {"i": 5, "j": 4},
        {"A": "i, j", "B": "j", "O": "i, j"},
        agg="assign",
        combo="add",
    )
    np.testing.assert_array_equal(run_all(p, {"A": a, "B": b})["O"], a + b)


AGG_REFS = {
    "add": lambda v: v.sum(axis=1),
    "max": lambda v: v.max(axis=1),
    "min": lambda v: v.min(axis=1),
    "mul": lambda v: v.prod(axis=1),
}


@pytest.mark.parametrize("agg", sorted(AGG_REFS))
def test_aggregation_and_coverage(agg):
    """Only even rows are stored; odd rows keep the prior (preallocated or zero) contents."""
    x = rng.uniform(0.5, 1.5, (8, 3)).astype(np.float32)
    p = contraction(
        {"I": ("f32", (8, 3))},
        ("O", "f32", (8,)),
        {"i": 4, "k": 3},
        {"I": "2*i, k", "O": "2*i"},
        agg=agg,
        combo=None,
    )
    expected = np.zeros(8, np.float32)
    expected[::2] = AGG_REFS[agg](x[::2])
    np.testing.assert_allclose(run_all(p, {"I": x})["O"], expected, rtol=1e-5)
    prior = np.full(8, 7.0, np.float32)
    expected[1::2] = 7.0
    outs = {"O": prior.copy()}
    got = run(p, {"I": x}, outs)
    assert got["O"] is outs["O"]
    np.testing.assert_allclose(got["O"], expected, rtol=1e-5)
    np.testing.assert_allclose(run_all(p, {"I": x}, {"O": prior})["O"], expected, rtol=1e-5)


@pytest.mark.parametrize("agg", ["add", "max", "min", "mul"])
def test_inout_prior_value_participates(agg):
    x = rng.uniform(0.5, 1.5, (4, 3)).astype(np.float32)
    prior = rng.uniform(0.5, 1.5, 4).astype(np.float32)
    o = root_ref("out", "O", "f32", (4,))
    i = root_ref("in", "I", "f32", (4, 3))
    # A first kernel writes the prior values, a second one aggregates into them.
    p0 = root_ref("in", "P", "f32", (4,))
    k1 = block(
        {"a": 4},
        [view("in", "P", p0.shape, "a"), view("out", "O", o.shape, "a")],
        [Load("$p", "P"), Store("O", "$p")],
    )
    k2 = block(
        {"a": 4, "b": 3},
        [view("in", "I", i.shape, "a, b"), view("inout", "O", o.shape, "a", agg=agg)],
        [Load("$x", "I"), Store("O", "$x")],
    )
    prog = program([i, p0, o], [k1, k2])
    ufunc = {"add": np.add, "max": np.maximum, "min": np.minimum, "mul": np.multiply}[agg]
    expected = ufunc(prior, ufunc.reduce(x, axis=1))
    out = run_all(prog, {"I": x, "P": prior})["O"]
    np.testing.assert_allclose(out, expected, rtol=1e-5)


def test_inout_assign_in_place_relu():
    """Loads during a scope see the values from before it."""
    x = randn(6)
    o = root_ref("out", "O", "f32", (6,))
    i = root_ref("in", "I", "f32", (6,))
    k1 = block(
        {"a": 6},
        [view("in", "I", i.shape, "a"), view("out", "O", o.shape, "a")],
        [Load("$x", "I"), Store("O", "$x")],
    )
    k2 = block(
        {"a": 6},
        [view("inout", "O", o.shape, "a")],
        [Load("$x", "O"), Intrinsic("relu", ("$x",), "$y", "f32"), Store("O", "$y")],
    )
    out = run_all(program([i, o], [k1, k2]), {"I": x})["O"]
    np.testing.assert_array_equal(out, np.maximum(x, 0))


@pytest.mark.parametrize("mode", ["general", "fast", "auto"])
def test_assign_race(mode):
    p = contraction(
        {"I": ("f32", (4, 3))},
        ("O", "f32", (4,)),
        {"i": 4, "k": 3},
        {"I": "i, k", "O": "i"},
        agg="assign",
        combo=None,
    )
    with pytest.raises(ExecutionError, match="race"):
        run(p, {"I": randn(4, 3)}, mode=mode)


def test_assign_race_across_chunks():
    p = contraction(
        {"I": ("f32", (4,))},
        ("O", "f32", (2,)),
        {"i": 4},
        {"I": "i", "O": "i - 2*0 - i + 1"},  # every point stores O[1]
        agg="assign",
        combo=None,
    )
    for kw in ({"mode": "general", "chunk_points": 1}, {"mode": "fast"}):
        with pytest.raises(ExecutionError):
            run(p, {"I": randn(4)}, **kw)


def test_no_race_on_disjoint_assign():
    p = contraction(
        {"I": ("f32", (4,))},
        ("O", "f32", (8,)),
        {"i": 4},
        {"I": "i", "O": "2*i + 1"},
        agg="assign",
        combo=None,
    )
    x = randn(4)
    expected = np.zeros(8, np.float32)
    expected[1::2] = x
    np.testing.assert_array_equal(run_all(p, {"I": x})["O"], expected)


def test_tiled_with_cache_and_copy_in():
    a, b = randn(8, 6), randn(6, 12)
    out = run_all(tiled_matmul(8, 12, 6, 4), {"A": a, "B": b})["C"]
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_index_affine_pass_through():
    """Inner indices ``i: 4 = 4*t`` are absolute, so the inner views use them directly."""
    x = randn(16)
    i = root_ref("in", "I", "f32", (16,))
    o = root_ref("out", "O", "f32", (16,))
    inner = block(
        {"i": (4, "4*t")},
        [view("in", "I", i.shape, "i"), view("out", "O", o.shape, "15 - i")],
        [Load("$x", "I"), LoadIndex("$i", aff("i")), Store("O", "$x")],
        tags=(),
    )
    outer = block(
        {"t": 4},
        [view("in", "I", i.shape, "0", (16,)), view("out", "O", o.shape, "0", (16,))],
        [inner],
    )
    np.testing.assert_array_equal(run_all(program([i, o], [outer]), {"I": x})["O"], x[::-1])


def test_load_index():
    o = root_ref("out", "O", "i64", (3, 4))
    k = block(
        {"a": 3, "b": (4, "0")},
        [view("out", "O", o.shape, "a, b")],
        [LoadIndex("$v", aff("10*a - b + 1")), Store("O", "$v")],
    )
    out = run_all(program([o], [k]), {})["O"]
    np.testing.assert_array_equal(out, 10 * np.arange(3)[:, None] - np.arange(4) + 1)


def test_load_index_of_outer_index():
    o = root_ref("out", "O", "i64", (6,))
    inner = block(
        {"b": 2},
        [view("out", "O", o.shape, "b", agg="assign", from_="O")],
        [LoadIndex("$v", aff("100*a + b")), Store("O", "$v")],
        tags=(),
    )
    outer = block({"a": 3}, [view("out", "O", o.shape, "2*a", (2,))], [inner])
    out = run_all(program([o], [outer]), {})["O"]
    np.testing.assert_array_equal(out, [0, 1, 100, 101, 200, 201])


def test_constraint_on_outer_and_inner_indices():
    """A nested block whose constraint mixes its index with the parent's (triangle)."""
    x = randn(5, 5)
    i = root_ref("in", "I", "f32", (5, 5))
    o = root_ref("out", "O", "f32", (5,))
    inner = block(
        {"c": 5},
        [view("in", "I", i.shape, "r, c", from_="I"), view("out", "O", o.shape, "0", agg="add")],
        [Load("$x", "I"), Store("O", "$x")],
        constraints=["r - c"],
        tags=(),
    )
    outer = block(
        {"r": 5},
        [view("in", "I", i.shape, "0, 0", (5, 5)), view("out", "O", o.shape, "r", agg="add")],
        [inner],
    )
    expected = np.tril(x).sum(axis=1)
    np.testing.assert_allclose(
        run_all(program([i, o], [outer]), {"I": x})["O"], expected, rtol=1e-5
    )


def test_program_temporary_between_kernels():
    a, b = randn(3, 4), randn(4, 2)
    ra, rb = root_ref("in", "A", "f32", (3, 4)), root_ref("in", "B", "f32", (4, 2))
    t = root_ref("none", "T", "f32", (3, 2))
    o = root_ref("out", "O", "f32", (3, 2))
    k1 = block(
        {"m": 3, "n": 2, "k": 4},
        [view("in", "A", ra.shape, "m, k"), view("in", "B", rb.shape, "k, n"),
         view("out", "T", t.shape, "m, n", agg="add")],
        [Load("$a", "A"), Load("$b", "B"), Intrinsic("mul", ("$a", "$b"), "$c", "f32"),
         Store("T", "$c")],
    )  # fmt: skip
    k2 = block(
        {"m": 3, "n": 2},
        [view("in", "T", t.shape, "m, n"), view("out", "O", o.shape, "m, n")],
        [Load("$t", "T"), Intrinsic("exp", ("$t",), "$e", "f32"), Store("O", "$e")],
    )
    out = run_all(program([ra, rb, t, o], [k1, k2]), {"A": a, "B": b})["O"]
    np.testing.assert_allclose(out, np.exp(a @ b), rtol=1e-5)


def test_nested_scope_on_per_point_allocation():
    """Each outer point owns a ``none`` accumulator filled by an inner add scope."""
    x = randn(4, 6)
    i = root_ref("in", "I", "f32", (4, 6))
    o = root_ref("out", "O", "f32", (4,))
    acc = root_ref("none", "T", "f32", (1,))
    reduce_ = block(
        {"k": 6},
        [view("in", "I", i.shape, "0, k"), view("out", "T", acc.shape, "0", agg="add")],
        [Load("$x", "I"), Store("T", "$x")],
        tags=(),
    )
    write_ = block(
        {},
        [view("in", "T", acc.shape, "0"), view("out", "O", o.shape, "0")],
        [Load("$t", "T"), Intrinsic("mul", ("$t", "$t"), "$s", "f32"), Store("O", "$s")],
        tags=(),
    )
    outer = block(
        {"r": 4},
        [view("in", "I", i.shape, "r, 0", (1, 6)), view("out", "O", o.shape, "r"), acc],
        [reduce_, write_],
    )
    out = run_all(program([i, o], [outer]), {"I": x})["O"]
    np.testing.assert_allclose(out, x.sum(axis=1) ** 2, rtol=1e-5)


def test_store_to_allocation_is_plain_write():
    x = randn(3, 2)
    i = root_ref("in", "I", "f32", (3, 2))
    o = root_ref("out", "O", "f32", (3, 2))
    buf = root_ref("none", "B", "f32", (2,))
    inner = block(
        {"c": 2},
        [view("in", "I", i.shape, "0, c"), view("out", "B", buf.shape, "c")],
        [Load("$x", "I"), Intrinsic("neg", ("$x",), "$n", "f32"), Store("B", "$n")],
        tags=(),
    )
    back = block(
        {"c": 2},
        [view("in", "B", buf.shape, "1 - c"), view("out", "O", o.shape, "0, c")],
        [Load("$b", "B"), Store("O", "$b")],
        tags=(),
    )
    outer = block(
        {"r": 3},
        [view("in", "I", i.shape, "r, 0", (1, 2)), view("out", "O", o.shape, "r, 0", (1, 2)), buf],
        [inner, back],
    )
    out = run_all(program([i, o], [outer]), {"I": x})["O"]
    np.testing.assert_array_equal(out, -x[:, ::-1])


def test_allocation_is_zero_initialised():
    o = root_ref("out", "O", "f32", (3,))
    buf = root_ref("none", "B", "f32", (1,))
    inner = block({}, [view("in", "B", buf.shape, "0"), view("out", "O", o.shape, "0")],
                  [Load("$b", "B"), Store("O", "$b")], tags=())  # fmt: skip
    outer = block({"r": 3}, [view("out", "O", o.shape, "r"), buf], [inner])
    outs = {"O": np.full(3, 5.0, np.float32)}
    np.testing.assert_array_equal(run_all(program([o], [outer]), {}, outs)["O"], 0.0)


def test_strided_and_overlapping_views():
    """A padded (non-dense) root layout, and overlapping windows of the same input."""
    x = randn(4, 5)
    i = root_ref("in", "I", "f32", (4, 5), strides=(8, 1))
    o = root_ref("out", "O", "f32", (4, 3), strides=(1, 5))
    outer = block(
        {"r": 4, "w": 3},
        [view("in", "I", i.shape, "r, w", (1, 3)), view("out", "O", o.shape, "r, w", agg="add")],
        [block(
            {"t": 3},
            [view("in", "I", i.shape, "0, t"), view("out", "O", o.shape, "0, 0", agg="add")],
            [Load("$x", "I"), Store("O", "$x")],
            tags=(),
        )],
    )  # fmt: skip
    expected = x[:, 0:3] + x[:, 1:4] + x[:, 2:5]
    out = run_all(program([i, o], [outer]), {"I": x})["O"]
    np.testing.assert_allclose(out, expected, rtol=1e-5)


def test_negative_strides():
    x = randn(5)
    i = root_ref("in", "I", "f32", (5,), strides=(-1,))
    o = root_ref("out", "O", "f32", (5,))
    k = block({"a": 5}, [view("in", "I", i.shape, "a"), view("out", "O", o.shape, "a")],
              [Load("$x", "I"), Store("O", "$x")])  # fmt: skip
    np.testing.assert_array_equal(run_all(program([i, o], [k]), {"I": x})["O"], x)


def test_bool_dtype():
    a = rng.random((3, 4)) > 0.5
    b = rng.random((3, 4)) > 0.5
    p = contraction(
        {"A": ("bool", (3, 4)), "B": ("bool", (3, 4))},
        ("O", "bool", (3, 4)),
        {"i": 3, "j": 4},
        {"A": "i, j", "B": "i, j", "O": "i, j"},
        agg="assign",
        combo="and",
    )
    np.testing.assert_array_equal(run_all(p, {"A": a, "B": b})["O"], a & b)


def test_shape_errors():
    p = matmul(2, 3, 4)
    a, b = randn(2, 4), randn(4, 3)
    with pytest.raises(ShapeError):
        run(p, {"A": a})
    with pytest.raises(ShapeError):
        run(p, {"A": a, "B": b.T})
    with pytest.raises(ShapeError):
        run(p, {"A": a.astype(np.float64), "B": b})
    with pytest.raises(ShapeError):
        run(p, {"A": a, "B": b, "Z": b})
    with pytest.raises(ShapeError):
        run(p, {"A": a, "B": b}, {"C": np.zeros((3, 2), np.float32)})
    with pytest.raises(ValueError):
        run(p, {"A": a, "B": b}, mode="turbo")


def test_large_constrained_block_in_chunks():
    """Many chunks, constraints and an add scope that spans them."""
    x = randn(300)
    p = contraction(
        {"I": ("f32", (300,))},
        ("O", "f32", (300,)),
        {"i": 300, "k": 300},
        {"I": "k", "O": "i"},
        combo=None,
        constraints=["i - k"],
    )
    for kw in ({"chunk_points": 1000}, {"chunk_points": 100}, {"mode": "fast"}):
        out = run(p, {"I": x}, **kw)["O"]
        np.testing.assert_allclose(out, np.cumsum(x), rtol=1e-4, atol=1e-4)


def test_scalar_buffers_and_index_free_kernel():
    """Rank-0 root buffers and a kernel without indices."""
    a = root_ref("in", "A", "f64", ())
    o = root_ref("out", "O", "f64", ())
    k = block(
        {},
        [view("in", "A", a.shape, []), view("out", "O", o.shape, [])],
        [Load("$a", "A"), Intrinsic("exp", ("$a",), "$e", "f64"), Store("O", "$e")],
    )
    out = run_all(program([a, o], [k]), {"A": np.array(2.0)})["O"]
    assert out.shape == () and out == np.exp(2.0)


def test_overflow_does_not_warn(recwarn):
    a = np.full((2, 3), 3e38, np.float32)
    b = np.full((3, 2), 10.0, np.float32)
    for mode in ("general", "fast"):
        out = run(matmul(2, 2, 3), {"A": a, "B": b}, mode=mode)["C"]
        assert np.isinf(out).all()
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_three_levels_store_at_every_level_of_one_scope():
    """Stores from the scope block and from blocks nested in it combine into one element."""
    x = randn(4, 3, 2)
    xr, orr = root_ref("in", "X", "f32", (4, 3, 2)), root_ref("out", "O", "f32", (4,))
    inner = block(
        {"k": 2},
        [view("in", "X", xr.shape, "0, 0, k"), view("out", "O", orr.shape, "0", agg="add")],
        [Load("$x", "X"), Store("O", "$x")],
        tags=(),
    )
    middle = block(
        {"c": 3},
        [view("in", "X", xr.shape, "0, c, 0", (1, 1, 2)),
         view("out", "O", orr.shape, "0", agg="add")],
        [Load("$x", "X"), Constant("$ten", 10.0, "f32"),
         Intrinsic("mul", ("$x", "$ten"), "$y", "f32"), Store("O", "$y"), inner],
        tags=(),
    )  # fmt: skip
    outer = block(
        {"r": 4},
        [
            view("in", "X", xr.shape, "r, 0, 0", (1, 3, 2)),
            view("out", "O", orr.shape, "r", agg="add"),
        ],
        [middle],
    )
    expected = 10 * x[:, :, 0].sum(axis=1) + x.sum(axis=(1, 2))
    out = run_all(program([xr, orr], [outer]), {"X": x})["O"]
    np.testing.assert_allclose(out, expected, rtol=1e-5)
