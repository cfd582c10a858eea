"""Every intrinsic of ir/intrinsics.py against NumPy, through whole programs."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from stripeml.ir.dtypes import to_numpy
from stripeml.ir.intrinsics import INTRINSICS
from stripeml.ir.nodes import Constant, Intrinsic, Load, Store
from stripeml.runtime.interp.intrinsics import erf

from .helpers import run_all
from .programs_ir import block, program, root_ref, view

N = 9
rng = np.random.default_rng(7)


def eltwise(op: str, in_dtypes: list[str], out_dtype: str):
    """``O[i] = op(X0[i], X1[i], ...)`` as one kernel."""
    roots = [root_ref("in", f"X{k}", dt, (N,)) for k, dt in enumerate(in_dtypes)]
    out = root_ref("out", "O", out_dtype, (N,))
    refs = [view("in", r.into, r.shape, "i") for r in roots] + [view("out", "O", out.shape, "i")]
    stmts = [Load(f"$x{k}", r.into) for k, r in enumerate(roots)]
    stmts += [Intrinsic(op, tuple(f"$x{k}" for k in range(len(roots))), "$y", out_dtype),
              Store("O", "$y")]  # fmt: skip
    return program([*roots, out], [block({"i": N}, refs, stmts)])


def call(op, args, out_dtype):
    dts = [_name(a.dtype) for a in args]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the interpreter must not warn
        out = run_all(eltwise(op, dts, out_dtype), {f"X{k}": a for k, a in enumerate(args)},
                      rtol=0, atol=0, chunk=False)["O"]  # fmt: skip
    assert out.dtype == to_numpy(out_dtype)
    return out


def _name(dt):
    from stripeml.ir.dtypes import from_numpy

    return from_numpy(dt)


FLOATS = np.array([-2.5, -1.0, -0.5, 0.0, 0.5, 1.5, 2.5, 3.7, 100.0])
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1e-30, 2.0])
INTS = np.array([-7, -3, -1, 0, 1, 2, 5, 7, 100])

UNARY_F = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "floor": np.floor, "ceil": np.ceil, "round": np.rint,
    "neg": np.negative, "abs": np.abs, "ident": lambda x: x,
    "relu": lambda x: np.maximum(x, 0), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}  # fmt: skip


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
@pytest.mark.parametrize("op", sorted(UNARY_F))
def test_unary_float(op, dtype):
    for values in (FLOATS, SPECIAL):
        with np.errstate(all="ignore"):
            x = values.astype(to_numpy(dtype))
            expected = np.asarray(UNARY_F[op](x)).astype(x.dtype)
        np.testing.assert_allclose(
            call(op, [x], dtype), expected, rtol=1e-6 if dtype != "f16" else 1e-3
        )


def test_round_is_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 3.5, 0.49, 0.51, -2.5], np.float32)
    np.testing.assert_array_equal(call("round", [x], "f32"), [0, 2, 2, -0, -2, 4, 0, 1, -2])


def test_erf():
    x = np.concatenate([np.linspace(-7, 7, 1001), [0.0, 1e-10, -1e-10, 1.0, -1.0, 30, -30]])
    expected = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(erf(x), expected, rtol=1e-14, atol=1e-16)
    special = erf(np.array([np.nan, np.inf, -np.inf]))
    assert np.isnan(special[0]) and special[1] == 1.0 and special[2] == -1.0
    x32 = FLOATS.astype(np.float32)
    np.testing.assert_allclose(call("erf", [x32], "f32"), [math.erf(v) for v in x32], rtol=1e-6)


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
    "min": np.minimum, "pow": np.power,
}  # fmt: skip


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("op", sorted(BINARY) + ["div", "mod"])
def test_binary_float(op, dtype):
    a = FLOATS.astype(to_numpy(dtype))
    b = np.roll(SPECIAL, 3).astype(a.dtype)
    b[0] = 0.0
    fn = {"div": np.true_divide, "mod": np.mod, **BINARY}[op]
    for x, y in ((a, b), (b, a), (a, np.roll(a, 1))):
        with np.errstate(all="ignore"):
            expected = fn(x, y)
        np.testing.assert_allclose(call(op, [x, y], dtype), expected, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["i8", "i32", "i64", "u8", "u32"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min", "div", "mod"])
def test_binary_int(op, dtype):
    dt = to_numpy(dtype)
    a = INTS.astype(dt)
    b = np.roll(INTS, 4).astype(dt)  # includes a zero divisor
    fn = {"div": np.floor_divide, "mod": np.mod, **BINARY}[op]
    with np.errstate(all="ignore"):
        expected = fn(a, b)
    out = call(op, [a, b], dtype)
    np.testing.assert_array_equal(out, expected)
    if op in ("div", "mod"):
        assert (out[b == 0] == 0).all()


def test_int_division_is_floor():
    a = np.array([7, -7, 7, -7, 5, 0, -1, 3, 9], np.int32)
    b = np.array([2, 2, -2, -2, 0, 3, 2, -4, 3], np.int32)
    np.testing.assert_array_equal(call("div", [a, b], "i32"), [3, -4, -4, 3, 0, 0, -1, -1, 3])
    np.testing.assert_array_equal(call("mod", [a, b], "i32"), [1, 1, -1, -1, 0, 0, 1, -1, 0])


@pytest.mark.parametrize("dtype", ["i32", "i64", "i8"])
@pytest.mark.parametrize("op", ["neg", "abs", "ident", "relu"])
def test_unary_int(op, dtype):
    x = INTS.astype(to_numpy(dtype))
    expected = {"neg": -x, "abs": np.abs(x), "ident": x, "relu": np.maximum(x, 0)}[op]
    np.testing.assert_array_equal(call(op, [x], dtype), expected)


CMP = {"cmp_lt": np.less, "cmp_le": np.less_equal, "cmp_gt": np.greater,
       "cmp_ge": np.greater_equal, "cmp_eq": np.equal, "cmp_ne": np.not_equal}  # fmt: skip


@pytest.mark.parametrize("dtype", ["f32", "i32", "u8"])
@pytest.mark.parametrize("op", sorted(CMP))
def test_compare(op, dtype):
    base = SPECIAL if dtype == "f32" else np.abs(INTS)
    a = base.astype(to_numpy(dtype))
    b = np.roll(a, 2)
    b[3] = a[3]
    np.testing.assert_array_equal(call(op, [a, b], "bool"), CMP[op](a, b))


def test_logic_and_select():
    a = rng.random(N) > 0.5
    b = rng.random(N) > 0.5
    np.testing.assert_array_equal(call("and", [a, b], "bool"), a & b)
    np.testing.assert_array_equal(call("or", [a, b], "bool"), a | b)
    np.testing.assert_array_equal(call("not", [a], "bool"), ~a)
    x, y = FLOATS.astype(np.float32), SPECIAL.astype(np.float32)
    np.testing.assert_array_equal(call("select", [a, x, y], "f32"), np.where(a, x, y))


def test_bool_arithmetic():
    a = np.array([True, True, False, False] * 2 + [True])
    b = np.array([True, False, True, False] * 2 + [False])
    np.testing.assert_array_equal(call("add", [a, b], "bool"), a | b)
    np.testing.assert_array_equal(call("mul", [a, b], "bool"), a & b)
    np.testing.assert_array_equal(call("sub", [a, b], "bool"), a ^ b)
    np.testing.assert_array_equal(call("max", [a, b], "bool"), a | b)


@pytest.mark.parametrize(
    "src,dst",
    [("f32", "i32"), ("f64", "i8"), ("i32", "f32"), ("f32", "bool"), ("bool", "f32"),
     ("i64", "u8"), ("f32", "f16"), ("f64", "f32"), ("i32", "i8")],
)  # fmt: skip
def test_cast(src, dst):
    x = (FLOATS * 3 if src[0] == "f" else INTS * 37).astype(to_numpy(src))
    if src == "bool":
        x = rng.random(N) > 0.5
    np.testing.assert_array_equal(call("cast", [x], dst), x.astype(to_numpy(dst)))


def test_cast_nan_does_not_warn():
    call("cast", [SPECIAL.astype(np.float32)], "i32")


INT_DTYPES = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"]
BITWISE = {"bit_and": np.bitwise_and, "bit_or": np.bitwise_or, "bit_xor": np.bitwise_xor,
           "shl": np.left_shift, "shr": np.right_shift}  # fmt: skip


def _random_ints(dt: np.dtype) -> np.ndarray:
    info = np.iinfo(dt)
    x = rng.integers(int(info.min), int(info.max), N, dtype=dt, endpoint=True)
    x[:2] = (info.min, info.max)
    return x


def _shift_amounts(dt: np.dtype) -> np.ndarray:
    """0, 1, width - 1, width and beyond, the largest amount and (signed) a negative one."""
    w = 8 * dt.itemsize
    info = np.iinfo(dt)
    last = -1 if dt.kind == "i" else 3
    return np.array([0, 1, w - 1, w, w + 1, 2 * w, int(info.max), last, w // 2], dt)


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("op", sorted(BITWISE))
def test_bitwise_int(op, dtype):
    """Against NumPy's operators: shifts by the width or more (or a negative amount)
    give 0, or -1 for an arithmetic right shift of a negative value."""
    dt = to_numpy(dtype)
    a = _random_ints(dt)
    b = _shift_amounts(dt) if op in ("shl", "shr") else _random_ints(dt)
    np.testing.assert_array_equal(call(op, [a, b], dtype), BITWISE[op](a, b))
    if op in ("shl", "shr"):
        np.testing.assert_array_equal(call(op, [b, b], dtype), BITWISE[op](b, b))


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bit_not_int(dtype):
    a = _random_ints(to_numpy(dtype))
    np.testing.assert_array_equal(call("bit_not", [a], dtype), ~a)


def test_bitwise_bool_is_logical():
    a = np.array([True, True, False, False] * 2 + [True])
    b = np.array([True, False, True, False] * 2 + [False])
    for op in ("bit_and", "bit_or", "bit_xor"):
        np.testing.assert_array_equal(call(op, [a, b], "bool"), BITWISE[op](a, b))
    np.testing.assert_array_equal(call("bit_not", [a], "bool"), ~a)


@pytest.mark.parametrize(
    "src,dst",
    [("f32", "i32"), ("i32", "f32"), ("f32", "u32"), ("f64", "i64"), ("u64", "f64"),
     ("i8", "u8"), ("u16", "i16"), ("f16", "u16"), ("i16", "f16"), ("bool", "u8"),
     ("bool", "i8"), ("u32", "i32")],
)  # fmt: skip
def test_bitcast(src, dst):
    """The bits of the input, NaN payloads and negative zeros included."""
    bits = to_numpy("u" + str(to_numpy(dst).itemsize * 8))
    raw = rng.integers(0, np.iinfo(bits).max, N, dtype=bits, endpoint=True)
    if src == "bool":
        x = rng.random(N) > 0.5
    else:
        x = raw.view(to_numpy(src)) if to_numpy(src).itemsize == raw.itemsize else raw
        if to_numpy(src).kind == "f":  # a quiet NaN with a payload, -0.0, inf
            specials = np.array([np.nan, -0.0, np.inf], to_numpy(src)).view(bits)
            specials[0] |= 1
            x[: len(specials)] = specials.view(x.dtype)
    got = call("bitcast", [x], dst)
    np.testing.assert_array_equal(got.view(bits), x.view(bits))


def test_dot4():
    """Four uint8 bytes of a times four int8 bytes of b (little-endian), summed;
    the reference views the words' bytes with NumPy and sums in int64."""
    edges = np.array([0, -1, 2**31 - 1, -(2**31), 0x7F7F7F7F, 0x01020304, -0x7F7F7F80])
    a = rng.integers(-(2**31), 2**31, N).astype(np.int32)
    b = rng.integers(-(2**31), 2**31, N).astype(np.int32)
    a[: len(edges)], b[-len(edges):] = edges, edges  # fmt: skip
    a[len(edges) : 2 * len(edges)] = -1
    b[len(edges) : 2 * len(edges)] = np.int32(0x80808080 - 2**32)
    ua = a.astype("<i4").view(np.uint8).reshape(N, 4).astype(np.int64)
    sb = b.astype("<i4").view(np.int8).reshape(N, 4).astype(np.int64)
    np.testing.assert_array_equal(call("dot4", [a, b], "i32"), (ua * sb).sum(1))


def test_every_intrinsic_is_covered():
    covered = set(UNARY_F) | set(BINARY) | set(CMP) | set(BITWISE) | {
        "div", "mod", "erf", "and", "or", "not", "select", "cast", "bit_not", "bitcast",
        "dot4"}  # fmt: skip
    assert covered == set(INTRINSICS)


@pytest.mark.parametrize(
    "value,dtype",
    [(1.5, "f32"), (float("inf"), "f64"), (float("-inf"), "f32"), (float("nan"), "f32"),
     (-3, "i32"), (True, "bool"), (255, "u8"), (2, "f16")],
)  # fmt: skip
def test_constants(value, dtype):
    out = root_ref("out", "O", dtype, (3,))
    k = block({"i": 3}, [view("out", "O", out.shape, "i")], [Constant("$c", value, dtype),
              Store("O", "$c")])  # fmt: skip
    got = run_all(program([out], [k]), {}, rtol=0, atol=0)["O"]
    np.testing.assert_array_equal(got, np.full(3, value, dtype=to_numpy(dtype)))
