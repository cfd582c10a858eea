"""Accuracy of the inline LLVM math functions (codegen/llvm_math.py) against NumPy.

Each case JIT-compiles a loop over an array that calls ``emit_math`` on
``<8 x float>``, ``<4 x double>`` or scalars, runs it on random samples over
many magnitudes plus special values, and bounds the error in ulps (or
absolute/relative terms for erf).  float32 results are compared with the
function computed in float64; float64 results with ``np.longdouble`` (x87
80-bit) where NumPy has it, ``math.erf`` for erf.
"""

from __future__ import annotations

import ctypes
import math
import re
from functools import cache

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from stripeml.codegen.llvm_math import MATH_FUNCTIONS, emit_math

# ---------------------------------------------------------------------------
# JIT harness
# ---------------------------------------------------------------------------


@cache
def _target_machine() -> llvm.TargetMachine:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
    )


_ENGINES: list[object] = []  # keep JIT'd code alive


def _optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine) -> None:
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def build_module(name: str, dtype: type, lanes: int, arity: int) -> ir.Module:
    """``void kernel(ptr a, ptr b, ptr out, i64 n)``: out[i] = name(a[i], b[i]) in steps of ``lanes``.

    ``lanes == 0`` calls the scalar function once per element.
    """
    fty = ir.FloatType() if dtype == np.float32 else ir.DoubleType()
    vty = ir.VectorType(fty, lanes) if lanes else fty
    step = lanes or 1
    mod = ir.Module(name=f"{name}_{dtype.__name__}_{lanes}")
    mod.triple = llvm.get_process_triple()
    ptr = ir.PointerType()
    i64 = ir.IntType(64)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr, ptr, ptr, i64]), "kernel")
    pa, pb, pout, n = fn.args
    for p in (pa, pb, pout):
        p.add_attribute("noalias")
    entry = fn.append_basic_block("entry")
    loop = fn.append_basic_block("loop")
    done = fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    align = 4 if dtype == np.float32 else 8
    args = [b.load(b.gep(p, [i], source_etype=fty), typ=vty, align=align) for p in (pa, pb)[:arity]]
    res = emit_math(b, name, args)
    b.store(res, b.gep(pout, [i], source_etype=fty), align=align)
    nxt = b.add(i, ir.Constant(i64, step))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return mod


def compile_module(mod: ir.Module, optimize: bool = True) -> tuple[int, llvm.ModuleRef]:
    tm = _target_machine()
    llmod = llvm.parse_assembly(str(mod))
    llmod.verify()
    if optimize:
        _optimize(llmod, tm)
    engine = llvm.create_mcjit_compiler(llmod, tm)
    engine.finalize_object()
    _ENGINES.append(engine)
    return engine.get_function_address("kernel"), llmod


@cache
def jit(name: str, dtype: type, lanes: int):
    """A Python callable running ``name`` elementwise on NumPy arrays."""
    arity = 2 if name == "pow" else 1
    addr, _ = compile_module(build_module(name, dtype, lanes, arity))
    cfunc = ctypes.CFUNCTYPE(
        None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64
    )(addr)
    step = lanes or 1

    def run(*xs: np.ndarray) -> np.ndarray:
        n = xs[0].size
        padded = -(-n // step) * step
        bufs = []
        for x in xs:
            buf = np.zeros(padded, dtype)
            buf[:n] = x
            bufs.append(buf)
        while len(bufs) < 2:
            bufs.append(bufs[0])
        out = np.empty(padded, dtype)
        cfunc(bufs[0].ctypes.data, bufs[1].ctypes.data, out.ctypes.data, padded)
        return out[:n]

    return run


# ---------------------------------------------------------------------------
# Samples and error measures
# ---------------------------------------------------------------------------


def samples(dtype: type, lo: float, hi: float, n: int = 200_000, seed: int = 0) -> np.ndarray:
    """Random magnitudes log-uniform in [lo, hi], both signs, plus special values."""
    rng = np.random.default_rng(seed)
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    sign = rng.choice([-1.0, 1.0], n)
    info = np.finfo(dtype)
    special = [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        float(info.tiny),
        float(info.smallest_subnormal),
        -float(info.smallest_subnormal),
        float(info.max),
        -float(info.max),
        1.0,
        -1.0,
        0.5,
        2.0,
    ]
    lin = rng.uniform(-4, 4, n // 4)
    return np.concatenate([mag * sign, lin, special]).astype(dtype)


def ulp_error(got: np.ndarray, ref: np.ndarray, dtype: type) -> np.ndarray:
    """|got - ref| in units of the spacing of ``dtype`` at ``ref``; inf on a NaN/inf mismatch.

    Subnormal references use the subnormal spacing.
    """
    ref = np.asarray(ref, np.float64 if dtype == np.float32 else np.longdouble)
    got_w = got.astype(ref.dtype)
    both_nan = np.isnan(got_w) & np.isnan(ref)
    with np.errstate(over="ignore"):
        ref_rounded = ref.astype(dtype)  # overflows to inf where dtype does
    same_inf = np.isinf(ref_rounded) & (got == ref_rounded)
    with np.errstate(all="ignore"):
        spacing = np.spacing(np.abs(ref).astype(dtype)).astype(ref.dtype)
        spacing = np.maximum(spacing, np.asarray(np.finfo(dtype).smallest_subnormal, ref.dtype))
        err = np.abs(got_w - ref) / spacing
    err = np.where(both_nan | same_inf, 0.0, err)
    return np.where(np.isnan(err), np.inf, err).astype(np.float64)


def worst(err: np.ndarray, x: np.ndarray) -> str:
    i = int(np.argmax(err))
    return f"max {err[i]:.3g} at x={x[i]!r}"


# references ------------------------------------------------------------------


def _ref(name: str, x: np.ndarray, y: np.ndarray | None, dtype: type) -> np.ndarray:
    wide = np.float64 if dtype == np.float32 else np.longdouble
    xw = x.astype(wide)
    with np.errstate(all="ignore"):
        if name == "sigmoid":
            return 1 / (1 + np.exp(-xw))
        if name == "erf":
            return np.array([math.erf(v) for v in x.astype(np.float64)], np.float64)
        if name == "pow":
            return np.power(xw, y.astype(wide))
        return getattr(np, name)(xw)


# (name, low magnitude, high magnitude, float32 max ulp, float64 max ulp)
ULP_CASES = [
    ("exp", 1e-8, 750.0, 1.5, 1.5),
    ("log", 1e-40, 1e38, 1.5, 1.5),
    ("tanh", 1e-8, 30.0, 2.0, 2.0),
    ("sigmoid", 1e-8, 800.0, 3.0, 3.0),
    ("sin", 1e-8, 1e5, 2.0, 2.0),
    ("cos", 1e-8, 1e5, 2.0, 2.0),
    ("tan", 1e-8, 1e5, 3.0, 3.0),
]

# (dtype, lanes): the AVX2 widths, scalars (lanes 0) and two other widths
VARIANTS = [(np.float32, 8), (np.float32, 0), (np.float64, 4), (np.float64, 0)]
OTHER_WIDTHS = [(np.float32, 16), (np.float64, 2)]


def _ids(v: tuple[type, int]) -> str:
    return f"{v[0].__name__}x{v[1] or 'scalar'}"


@pytest.mark.parametrize("variant", VARIANTS + OTHER_WIDTHS, ids=_ids)
@pytest.mark.parametrize("case", ULP_CASES, ids=lambda c: c[0])
def test_ulp_accuracy(case: tuple, variant: tuple[type, int]) -> None:
    name, lo, hi, tol32, tol64 = case
    dtype, lanes = variant
    x = samples(dtype, lo, hi)
    if dtype == np.float32 and name in ("exp", "sigmoid"):
        x = x[np.abs(x) < 200]  # beyond: 0/inf/1, covered by the special values
    x = x[~(np.abs(x) > hi)]  # the range under test (keeps inf and nan)
    got = jit(name, dtype, lanes)(x)
    err = ulp_error(got, _ref(name, x, None, dtype), dtype)
    tol = tol32 if dtype == np.float32 else tol64
    assert err.max() <= tol, f"{name} {_ids(variant)}: {worst(err, x)}"


@pytest.mark.parametrize("name", ["sin", "cos", "tan"])
def test_trig_large_arguments(name: str) -> None:
    """The documented accurate range: |x| < 1e6 (float), 1e15 (double)."""
    for dtype, lanes, hi in [(np.float32, 8, 1e6), (np.float64, 4, 1e15)]:
        x = samples(dtype, 1e4, hi, n=100_000)
        x = x[np.isfinite(x) & (np.abs(x) <= hi)]
        err = ulp_error(jit(name, dtype, lanes)(x), _ref(name, x, None, dtype), dtype)
        assert err.max() <= (3.0 if name == "tan" else 2.0), (
            f"{name} {dtype.__name__}: {worst(err, x)}"
        )


@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
def test_erf(variant: tuple[type, int]) -> None:
    dtype, lanes = variant
    x = samples(dtype, 1e-10, 10.0, n=100_000)
    got = jit("erf", dtype, lanes)(x).astype(np.float64)
    ref = _ref("erf", x, None, dtype)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan)
    normal = ~nan & (np.abs(ref) >= np.finfo(dtype).tiny)  # relative error is meaningless below
    abs_err = np.abs(got - ref)[~nan]
    rel_err = np.abs(got - ref)[normal] / np.abs(ref[normal])
    if dtype == np.float32:
        assert abs_err.max() <= 5e-7, worst(abs_err, x[~nan])
        assert rel_err.max() <= 5e-7, worst(rel_err, x[normal])
    else:
        assert rel_err.max() <= 5e-16, worst(rel_err, x[normal])
    assert ulp_error(got.astype(dtype), ref, dtype)[~normal & ~nan].max() <= 1.0
    assert got[x == np.inf].tolist() == [1.0] and got[x == -np.inf].tolist() == [-1.0]
    assert np.signbit(jit("erf", dtype, lanes)(np.array([-0.0], dtype))[0])


@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
def test_pow(variant: tuple[type, int]) -> None:
    dtype, lanes = variant
    rng = np.random.default_rng(1)
    n = 100_000
    x = np.exp(rng.uniform(-20, 20, n)) * rng.choice([-1.0, 1.0], n)
    y = rng.uniform(-30, 30, n)
    y[: n // 3] = np.round(y[: n // 3])  # integer exponents, negative bases allowed
    x[n // 3 :] = np.abs(x[n // 3 :])
    x, y = x.astype(dtype), y.astype(dtype)
    got = jit("pow", dtype, lanes)(x, y)
    err = ulp_error(got, _ref("pow", x, y, dtype), dtype)
    tol = 1.0 if dtype == np.float32 else 1.5  # float runs the double code
    assert err.max() <= tol, worst(err, x)
    # big results: the double-double log keeps y*log(x) exact enough
    xb = np.array([1.0000001, 10.0, 0.5, 3.0, 7.5], dtype)
    yb = np.array(
        [
            8e8 if dtype == np.float64 else 8e6,
            300.0 if dtype == np.float64 else 38.0,
            1074.0 if dtype == np.float64 else 149.0,
            600.5 if dtype == np.float64 else 80.5,
            -100.0,
        ],
        dtype,
    )
    err = ulp_error(jit("pow", dtype, lanes)(xb, yb), _ref("pow", xb, yb, dtype), dtype)
    assert err.max() <= tol, worst(err, xb)


SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
def test_pow_special_cases(dtype: type) -> None:
    xs, ys = np.meshgrid(np.array(SPECIAL, dtype), np.array(SPECIAL, dtype))
    xs, ys = xs.ravel(), ys.ravel()
    got = jit("pow", dtype, 8 if dtype == np.float32 else 4)(xs, ys)
    with np.errstate(all="ignore"):
        ref = np.power(xs, ys)
    same = (got == ref) & (np.signbit(got) == np.signbit(ref)) | (np.isnan(got) & np.isnan(ref))
    # finite, nonzero results (3^-1, 0.5^-0.5, ...) are held to the ulp bound of test_pow
    close = np.isfinite(ref) & (ref != 0) & (ulp_error(got, ref, dtype) <= 1.5)
    bad = ~(same | close)
    assert not bad.any(), list(zip(xs[bad], ys[bad], got[bad], ref[bad]))


@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "sin", "cos", "tan", "erf"])
def test_special_values(name: str, variant: tuple[type, int]) -> None:
    dtype, lanes = variant
    info = np.finfo(dtype)
    x = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            -np.nan,
            1e-45 if dtype == np.float32 else 5e-324,
            float(info.max),
            -float(info.max),
        ],
        dtype,
    )
    got = jit(name, dtype, lanes)(x)
    with np.errstate(all="ignore"):
        ref = _ref(name, x, None, dtype).astype(dtype)
    if name == "sigmoid":
        ref = np.where(np.isfinite(x) | np.isnan(x), ref, (x > 0).astype(dtype))
    ok = (np.isnan(got) & np.isnan(ref)) | ((got == ref) & (np.signbit(got) == np.signbit(ref)))
    if name in ("sin", "cos", "tan"):  # huge finite arguments: out of the accurate range
        bound = np.inf if name == "tan" else 1.0
        ok |= np.isfinite(x) & (np.abs(x) > 1e30) & (np.abs(got) <= bound)
    if name == "log":  # smallest subnormal: the scaled path
        with np.errstate(invalid="ignore"):
            close = np.abs(got - ref) <= 2 * np.spacing(np.abs(ref))
        ok |= (x > 0) & (x < info.tiny) & close
    assert ok.all(), list(zip(x[~ok], got[~ok], ref[~ok]))


def test_exp_saturation_and_subnormals() -> None:
    for dtype, lanes in [(np.float32, 8), (np.float64, 4)]:
        info = np.finfo(dtype)
        lmax = float(
            np.log(np.float64(info.max)) if dtype == np.float32 else np.log(np.longdouble(info.max))
        )
        x = np.array(
            [lmax * 0.999999, lmax * 1.000001, -lmax * 1.01, -lmax * 1.02, -1000.0, 1000.0], dtype
        )
        got = jit("exp", dtype, lanes)(x)
        err = ulp_error(got, _ref("exp", x, None, dtype), dtype)
        assert err.max() <= 1.5, worst(err, x)
        assert got[-1] == np.inf and got[-2] == 0.0


@pytest.mark.parametrize("name", ["sqrt", "floor", "ceil", "round", "abs"])
@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
def test_exact_functions(name: str, variant: tuple[type, int]) -> None:
    dtype, lanes = variant
    x = samples(dtype, 1e-6, 1e8, n=20_000)
    x = np.concatenate([x, np.arange(-10, 10, 0.5, dtype=dtype)])  # ties for round
    ref = {"round": np.round, "abs": np.abs}.get(name, getattr(np, name))
    with np.errstate(all="ignore"):
        want = ref(x)
    got = jit(name, dtype, lanes)(x)
    assert np.array_equal(got, want, equal_nan=True)


def test_tanh_saturates_exactly() -> None:
    x = np.array([9.2, 10.0, 20.0, 100.0, -9.5, -50.0], np.float32)
    assert jit("tanh", np.float32, 8)(x).tolist() == [1.0, 1.0, 1.0, 1.0, -1.0, -1.0]
    x = np.array([20.0, 40.0, -22.0], np.float64)
    assert jit("tanh", np.float64, 4)(x).tolist() == [1.0, 1.0, -1.0]


# ---------------------------------------------------------------------------
# Shape of the generated IR
# ---------------------------------------------------------------------------


def test_definitions_are_shared_and_branch_free() -> None:
    mod = ir.Module()
    fn = ir.Function(mod, ir.FunctionType(ir.FloatType(), [ir.FloatType()]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    v = b.fadd(emit_math(b, "exp", [fn.args[0]]), emit_math(b, "exp", [fn.args[0]]))
    for name in sorted(MATH_FUNCTIONS):
        v = emit_math(b, name, [v] * (2 if name == "pow" else 1))
    b.ret(v)
    text = str(mod)
    assert text.count('define internal float @"stripeml.exp.f32"') == 1
    for f in mod.functions:
        if f.name.startswith("stripeml."):
            assert len(f.blocks) == 1
            assert "alwaysinline" in f.attributes
    calls = {
        line.split("@")[1].split("(")[0].strip('"')
        for line in text.splitlines()
        if " call " in line
    }
    assert all(c.startswith(("llvm.", "stripeml.")) for c in calls), calls
    llvm.parse_assembly(text).verify()


def test_scalar_loop_is_vectorised() -> None:
    """After inlining, LLVM's loop vectoriser widens a scalar loop calling exp/tanh."""
    features = llvm.get_host_cpu_features().flatten()
    if "+avx2" not in features:
        pytest.skip("host without AVX2")
    # LLVM widens to 8 lanes with AVX2; with AVX-512 to 16, or to 8 where the CPU
    # prefers 256-bit vectors (its cost model's choice, e.g. some Zen 4 hosts).
    widths = ("<8 x float>", "<16 x float>") if "+avx512f" in features else ("<8 x float>",)
    for name in ("exp", "tanh", "log", "sin"):
        _, llmod = compile_module(build_module(name, np.float32, 0, 1))
        body = str(llmod.get_function("kernel"))
        assert any(w in body for w in widths), name
        callees = re.findall(r"call [^@]*@([\w.\"]+)", body)
        assert all(c.strip('"').startswith("llvm.") for c in callees), (name, callees)


def test_rejects_bad_input() -> None:
    mod = ir.Module()
    fn = ir.Function(mod, ir.FunctionType(ir.IntType(32), [ir.IntType(32)]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    with pytest.raises(TypeError):
        emit_math(b, "exp", [fn.args[0]])
    with pytest.raises(ValueError):
        emit_math(b, "nope", [fn.args[0]])


@pytest.mark.parametrize("native", [True, False], ids=["ldexp", "two_steps"])
@pytest.mark.parametrize("variant", [(np.float32, 16), (np.float32, 0), (np.float64, 4)], ids=_ids)
def test_both_ways_of_scaling_by_two_to_the_n(
    native: bool, variant: tuple[type, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """exp and sigmoid scale by 2^n with one ``vscalef`` on AVX-512 hosts (a float
    exponent for vectors, ``llvm.ldexp`` for scalars) and in two exponent-bit
    steps elsewhere: both keep the accuracy,
    overflow and subnormal results of the table (both are tested on every host
    where the native one exists)."""
    import stripeml.codegen.llvm_math as lm

    dtype, lanes = variant
    if native and not lm._native_ldexp(llvm.get_process_triple()):
        pytest.skip("llvm.ldexp is not one instruction on this host")
    monkeypatch.setattr(lm, "_native_ldexp", lambda triple: native)
    info = np.finfo(dtype)
    big = 700.0 if dtype == np.float64 else 88.0
    x = np.concatenate(
        [samples(dtype, 1e-6, big * 1.05, n=50_000), np.array([-1000.0, 1000.0, np.nan], dtype)]
    )
    for name in ("exp", "sigmoid"):
        mod = build_module(name, dtype, lanes, 1)
        assert bool(re.search(r"llvm\.ldexp|avx512\.mask\.scalef", str(mod))) == native
        addr, _ = compile_module(mod)
        cfunc = ctypes.CFUNCTYPE(
            None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64
        )(addr)
        step = lanes or 1
        n = -(-x.size // step) * step
        buf = np.zeros(n, dtype)
        buf[: x.size] = x
        out = np.empty(n, dtype)
        cfunc(buf.ctypes.data, buf.ctypes.data, out.ctypes.data, n)
        got = out[: x.size]
        ref = _ref(name, x, None, dtype)
        err = ulp_error(got, ref, dtype)
        assert err.max() <= (1.5 if name == "exp" else 3.0), f"{name}: {worst(err, x)}"
        if name == "exp":  # the subnormal results, rounded once, and the saturation
            sub = (ref > 0) & (ref < info.tiny)
            assert sub.any() and np.all(np.abs(got[sub] - ref[sub]) <= info.smallest_subnormal)
            assert got[-3] == 0.0 and got[-2] == np.inf and np.isnan(got[-1])
