"""The Tile builtins ``reshape``, ``gather`` and ``index`` end to end.

``reshape`` and ``gather`` lower to root-level ``special`` statements between
the kernels; ``index(X, axis)`` lowers to ``index`` statements inside the
elementwise kernel.  Every program runs on the interpreter and on the CPU
backend (full ``cpu`` pipeline) against NumPy, and through every pass of
``stripeml.passes`` (the manager verifies each stage and the interpreter
re-checks each changed stage against the unoptimised results).
"""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from pipelines import cpu_passes
from stripeml.errors import ExecutionError, ShapeError, StripeError
from stripeml.ir import Block, Special, verify
from stripeml.passes import Dce, Fuse, make_pass
from stripeml.passes.cache import Cache
from stripeml.passes.localize import Localize
from stripeml.passes.manager import run_pipeline
from stripeml.passes.pad import Pad
from stripeml.passes.place import Place
from stripeml.passes.prune import Prune
from stripeml.passes.scalarize import Scalarize
from stripeml.runtime.interp import run

from .helpers import run_all

try:
    from passes.memcheck import assert_placed_soundly  # tests/ on sys.path
except ImportError:  # tests/ imported as a package
    from tests.passes.memcheck import assert_placed_soundly

TARGETS = ("interp", "cpu")
rng = np.random.default_rng(11)


def _check(got, want, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)


# -- reshape ------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float64, np.int32])
def test_reshape(target: str, dtype) -> None:
    src = """function (X[A, B, C]) -> (Y, Z) {
        Y = reshape(X, A * B, C);
        Z = reshape(Y, C, 2, A * B / 2);
    }"""
    x = (rng.standard_normal((2, 3, 4)) * 100).astype(dtype)
    f = stripeml.compile(src, target=target)
    _check(f(x), (x.reshape(6, 4), x.reshape(4, 2, 3)))


@pytest.mark.parametrize("target", TARGETS)
def test_reshape_rank0(target: str) -> None:
    src = """function (X[1, 1], S[]) -> (Y, Z) {
        Y = reshape(X);
        Z = reshape(S, 1, 1, 1);
    }"""
    x = np.array([[2.5]], np.float32)
    s = np.array(7, np.int64)
    y, z = stripeml.compile(src, target=target)(x, s)
    _check((y, z), (x.reshape(()), s.reshape(1, 1, 1)))


@pytest.mark.parametrize("target", TARGETS)
def test_reshape_then_elementwise_uses_new_shape(target: str) -> None:
    # The reshaped tensor broadcasts with its new shape.
    src = """function (X[N], B[K]) -> (O) {
        R = reshape(X, N / K, K);
        O = R * B + 1;
    }"""
    x = rng.standard_normal(12).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    _check(stripeml.compile(src, target=target)(x, b), x.reshape(3, 4) * b + 1)


# -- gather -------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("ishape", [(), (4,), (2, 3)])
def test_gather(target: str, axis: int, ishape: tuple[int, ...]) -> None:
    src = f"""function (X, I) -> (O) {{
        O = gather(X, I, {axis});
    }}"""
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    dim = x.shape[axis]
    idx = rng.integers(-dim, dim, ishape).astype(np.int64)
    _check(stripeml.compile(src, target=target)(x, idx), np.take(x, idx, axis=axis))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("xdtype", [np.int64, np.float32, np.float64, np.int32])
@pytest.mark.parametrize("idtype", [np.int32, np.int64, np.uint8])
def test_gather_dtypes(target: str, xdtype, idtype) -> None:
    src = "function (X[N, M], I[K]) -> (O) { O = gather(X, I, 1); }"
    x = (rng.standard_normal((3, 6)) * 1000).astype(xdtype)
    lo = 0 if np.dtype(idtype).kind == "u" else -6
    idx = rng.integers(lo, 6, 9).astype(idtype)
    out = stripeml.compile(src, target=target)(x, idx)
    _check(out, np.take(x, idx, axis=1))


@pytest.mark.parametrize("target", TARGETS)
def test_gather_negative_indices_wrap(target: str) -> None:
    src = "function (X[N], I[K]) -> (O) { O = gather(X, I, 0); }"
    x = np.arange(10, 15, dtype=np.int64)
    idx = np.array([-1, -5, 0, 4, -2], np.int32)
    out = stripeml.compile(src, target=target)(x, idx)
    _check(out, np.array([14, 10, 10, 14, 13], np.int64))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("bad", [5, -6, 1 << 40])
def test_gather_out_of_range_index(target: str, bad: int) -> None:
    src = "function (X[N, M], I[K]) -> (O) { O = gather(X, I, 0); }"
    x = np.zeros((5, 2), np.float32)
    f = stripeml.compile(src, target=target)
    with pytest.raises(ExecutionError, match="out of range") as info:
        f(x, np.array([0, bad, 1], np.int64))
    assert isinstance(info.value, StripeError)
    # The compiled program stays usable.
    _check(f(x, np.array([4, -5], np.int64)), np.zeros((2, 2), np.float32))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("bad", [2**64 - 1, 2**63, 2**64 - 5, 5])
def test_gather_uint64_index_past_int64_is_out_of_range(target: str, bad: int) -> None:
    """A uint64 index is compared in its own dtype: 2**64 - 1 is not -1 (which
    would wrap to the last element), it is out of range."""
    src = "function (X[N], I[K]) -> (O) { O = gather(X, I, 0); }"
    x = np.arange(10, 15, dtype=np.float32)
    f = stripeml.compile(src, target=target)
    with pytest.raises(ExecutionError, match=rf"gather index {bad} .*out of range"):
        f(x, np.array([0, bad, 1], np.uint64))
    _check(f(x, np.array([4, 0, 2], np.uint64)), np.array([14, 10, 12], np.float32))


@pytest.mark.parametrize("target", TARGETS)
def test_gather_from_and_into_program_results(target: str) -> None:
    """A special reads a program result written by an earlier kernel, and
    writes one that a later kernel reads."""
    src = """function (X[N, M], I[K]) -> (A, G, B) {
        A = X * 2;
        G = gather(A, I, 0);
        B = G + 1;
    }"""
    x = rng.standard_normal((4, 3)).astype(np.float32)
    idx = np.array([3, -4, 1], np.int64)
    g = np.take(x * 2, idx, axis=0)
    _check(stripeml.compile(src, target=target)(x, idx), (x * 2, g, g + 1))


# -- index ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_index_positions(target: str) -> None:
    src = """function (X[N, M, K]) -> (A, B, C, D) {
        A = index(X, 0);
        B = index(X, 1);
        C = index(X, -1);
        D = index(X, 0) * 100 + index(X, 1) * 10 + index(X, 2);
    }"""
    x = np.zeros((3, 4, 17), np.float32)
    ii = np.indices(x.shape, dtype=np.int64)
    out = stripeml.compile(src, target=target)(x)
    _check(out, (ii[0], ii[1], ii[2], ii[0] * 100 + ii[1] * 10 + ii[2]))


@pytest.mark.parametrize("target", TARGETS)
def test_index_broadcasts_like_its_tensor(target: str) -> None:
    src = """function (X[N, M], R[M], Col[N, 1]) -> (A, B, C) {
        A = X + index(R, 0);
        B = X + index(Col, 0) * 10 + index(Col, 1);
        C = index(Col, 1) + index(R, -1);
    }"""
    x = rng.standard_normal((5, 16)).astype(np.float32)
    r = np.zeros(16, np.float32)
    col = np.zeros((5, 1), np.float32)
    rows, cols = np.indices((5, 16))
    a = x + cols
    b = x + (rows * 10).astype(np.float64)
    c = np.broadcast_to(np.arange(16, dtype=np.int64), (5, 16))
    _check(stripeml.compile(src, target=target)(x, r, col), (a, b, c))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(7, 5), (33, 130), (1, 9), (4, 1)])
def test_argmax(target: str, shape: tuple[int, int]) -> None:
    src = """function (X[N, K]) -> (A) {
        M[n, 0 : N, 1] = >(X[n, k]);
        C = X == M ? index(X, 1) : 1000000;
        A[n, 0 : N, 1] = <(C[n, k]);
    }"""
    x = rng.standard_normal(shape).astype(np.float32)
    out = stripeml.compile(src, target=target)(x)
    _check(out, np.argmax(x, axis=1)[:, None].astype(np.int64))


@pytest.mark.parametrize("target", TARGETS)
def test_argmax_ties_take_the_first(target: str) -> None:
    src = """function (X[N, K]) -> (A) {
        M[n, 0 : N, 1] = >(X[n, k]);
        C = X == M ? index(X, -1) : K;
        A[n, 0 : N, 1] = <(C[n, k]);
    }"""
    x = rng.integers(0, 3, (6, 40)).astype(np.int32)
    _check(stripeml.compile(src, target=target)(x), np.argmax(x, axis=1)[:, None])


@pytest.mark.parametrize("target", TARGETS)
def test_index_after_matmul_epilogue(target: str) -> None:
    """``index`` in an elementwise kernel the cpu pipeline runs as a matmul epilogue."""
    src = """function (A[M, K], B[K, N]) -> (O) {
        C[m, n : M, N] = +(A[m, k] * B[k, n]);
        O = C + index(C, 1) * 100 + index(C, 0);
    }"""
    a = rng.standard_normal((40, 24)).astype(np.float32)
    b = rng.standard_normal((24, 48)).astype(np.float32)
    rows, cols = np.indices((40, 48))
    want = (a @ b).astype(np.float64) + cols * 100 + rows
    _check(stripeml.compile(src, target=target)(a, b), want, rtol=1e-4, atol=1e-4)


# -- programs mixing specials with kernels ------------------------------------------

MIXED = """function (A[M, K], B[K, N], I[P, Q]) -> (O, S, Arg) {
    C[m, n : M, N] = +(A[m, k] * B[k, n]);
    R = reshape(C, N, M);
    Y = relu(R) + 1;
    G = gather(Y, I, -1);
    E = exp(G - 1);
    S[n, p, 0 : N, P, 1] = +(E[n, p, j]);
    O = E / S;
    Mx[n, 0 : N, 1] = >(Y[n, m]);
    Ix = Y == Mx ? index(Y, 1) : M;
    Arg[n, 0 : N, 1] = <(Ix[n, m]);
}"""


def _mixed_inputs(m=6, k=5, n=8, p=3, q=4):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    idx = rng.integers(-m, m, (p, q)).astype(np.int64)
    return a, b, idx


def _mixed_reference(a, b, idx):
    y = np.maximum((a @ b).reshape(b.shape[1], a.shape[0]), 0) + 1
    g = np.take(y, idx, axis=-1)
    e = np.exp(g - 1)
    s = e.sum(axis=-1)
    return e / s[..., None], s[..., None], np.argmax(y, axis=1)[:, None].astype(np.int64)


@pytest.mark.parametrize("target", TARGETS)
def test_mixed_program(target: str) -> None:
    f = stripeml.compile(MIXED, target=target)
    for shapes in ({}, dict(m=16, k=9, n=32, p=2, q=5)):
        a, b, idx = _mixed_inputs(**shapes)
        want = _mixed_reference(a, b, idx)
        _check(f(a, b, idx), want, rtol=1e-4, atol=1e-5)
        _check(f(a, b, idx), want, rtol=1e-4, atol=1e-5)  # temporaries reused


def test_mixed_program_keeps_specials_between_kernels() -> None:
    """``fuse`` never fuses across a special: each special stays after the kernel
    producing its input and before the kernels reading its output."""
    a, b, idx = _mixed_inputs()
    for target in TARGETS:
        program = stripeml.compile(MIXED, target=target).lower(a, b, idx).program
        stmts = program.root.stmts
        specials = [k for k, s in enumerate(stmts) if isinstance(s, Special)]
        assert [stmts[k].op for k in specials] == ["reshape", "gather"]
        for k in specials:
            sp = stmts[k]
            before = [s for s in stmts[:k] if isinstance(s, Block)]
            after = [s for s in stmts[k + 1 :] if isinstance(s, Block)]
            for name in sp.inputs:
                if program.root.ref(name).dir != "in":
                    assert any(r.from_ == name for s in before for r in s.refs), name
                    assert not any(r.from_ == name and r.dir != "in" for s in after for r in s.refs)
            for name in sp.outputs:
                assert not any(r.from_ == name for s in before for r in s.refs), name
                assert any(r.from_ == name for s in after for r in s.refs), name


def test_dce_keeps_used_specials_and_drops_dead_ones() -> None:
    src = """function (X[N, M], I[K]) -> (O) {
        Dead = reshape(X, M, N);
        Dead2 = gather(X, I, 1);
        R = reshape(X, M, N);
        O = R * 2;
    }"""
    x = rng.standard_normal((2, 3)).astype(np.float32)
    idx = np.array([0, 2], np.int64)
    f = stripeml.compile(src, target="interp")
    program = f.lower(x, idx).program
    assert sum(isinstance(s, Special) for s in program.root.stmts) == 3
    cleaned = Dce().run(program)
    verify(cleaned)
    kept = [s for s in cleaned.root.stmts if isinstance(s, Special)]
    assert [(s.op, s.outputs) for s in kept] == [("reshape", ("R",))]
    assert {r.into for r in cleaned.root.refs} == {"X", "I", "O", "R"}
    _check(run(cleaned, {"X": x, "I": idx})["O"], x.reshape(3, 2) * 2)
    # On the cpu pipeline too.
    _check(stripeml.compile(src, target="cpu")(x, idx), x.reshape(3, 2) * 2)


# -- every pass and pipeline ----------------------------------------------------------


def _every_pass() -> list:
    return [
        Fuse(),
        Fuse(unit_stride_reductions_only=False, reused_inputs=True),
        Dce(),
        make_pass("halo"),
        make_pass("unroll", vector_width=4, rows=2, vectors=1),
        make_pass("vectorize", width=4),
        make_pass("thread", threads=4),
        make_pass("autotile", memory_bytes=256),
        make_pass("autotile", memory_bytes=512, select="kernel"),
        Localize(),
        Scalarize(),
        Cache(location="SRAM", select="kernel"),
        Prune(),
        Pad(multiple=4),
        Place(alignment=16),
    ]


PIPELINES = {
    "cpu": lambda: [*cpu_passes(vector_width=4)],
    "cpu_memory": lambda: [*cpu_passes(vector_width=4), Localize(), Scalarize(), Prune(),
                           Pad(), Place()],
    "autotile_cache": lambda: [Fuse(), Dce(),
                               make_pass("autotile", memory_bytes=512, select="kernel"),
                               Cache(location="SRAM", select="tiled"), Localize(), Scalarize(),
                               Prune(), Pad(multiple=4), Place()],
    "cache_fused": lambda: [Fuse(unit_stride_reductions_only=False, reused_inputs=True), Dce(),
                            Cache(location="L1", select="fused", dirs="all"), Prune(),
                            Place(locations=("DRAM", "L1"), alignment=8)],
}  # fmt: skip

PROGRAMS = {
    "mixed": (MIXED, _mixed_inputs),
    "chain": (
        """function (X[N, M], I[K]) -> (O) {
            T = X * 2 + 1;
            R = reshape(T, M, N);
            U = exp(R) + index(R, 1) * 100 + index(R, 0);
            G = gather(U, I, 0);
            O = G - 1;
        }""",
        lambda: (
            rng.standard_normal((8, 12)).astype(np.float32),
            np.array([0, -1, 5, 3, 11], np.int64),
        ),
    ),
    # Temporaries read both by a kernel that fuses with their producer and by a
    # later special: the producer's stores must stay.
    "shared_temps": (
        """function (X[N, M], I[K]) -> (U, R, V, W, B, G) {
            T = X * 2;
            U = T + 1;
            R = reshape(T, M, N);
            S[n, 0 : N, 1] = +(X[n, m]);
            V = S * 3;
            W = reshape(S, N);
            A[i, j : N, N] = +(X[i, k] * X[j, k]);
            B = A + index(A, 0);
            RA = reshape(A, N * N);
            G = gather(RA, I, 0);
        }""",
        lambda: (
            rng.standard_normal((8, 12)).astype(np.float32),
            np.array([0, -1, 63, 17], np.int64),
        ),
    ),
    "temps_reused": (
        """function (X[N], I[K]) -> (O) {
            T1 = X + 1;
            R1 = reshape(T1, 4, N / 4);
            T2 = R1 * 3;
            R2 = reshape(T2, N);
            G = gather(R2, I, 0);
            O[i : 1] = +(G[k]);
        }""",
        lambda: (rng.standard_normal(32).astype(np.float32), np.arange(-8, 8, dtype=np.int64)),
    ),
}


def _lowered(name: str):
    src, make = PROGRAMS[name]
    args = make()
    f = stripeml.compile(src, target="interp")
    program = f.lower(*args).program
    return program, dict(zip(f.params, args))


def _checker(inputs, expected):
    def check(pass_name, program):
        got = run(program, inputs)
        for k, w in expected.items():
            np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-5, err_msg=pass_name)

    return check


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_pass_alone(name: str) -> None:
    program, inputs = _lowered(name)
    expected = run(program, inputs)
    for p in _every_pass():
        out = run_pipeline(program, [p], check=_checker(inputs, expected)).program
        verify(out)
        ops = [s.op for s in out.root.stmts if isinstance(s, Special)]
        assert ops == [s.op for s in program.root.stmts if isinstance(s, Special)], p.name


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_pipelines(name: str, pipeline: str) -> None:
    program, inputs = _lowered(name)
    expected = run(program, inputs)
    result = run_pipeline(program, PIPELINES[pipeline](), check=_checker(inputs, expected))
    out = result.program
    verify(out)
    got = run(out, inputs, arena=True)
    for k, w in expected.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-5, err_msg="arena")
    assert_placed_soundly(out)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_programs_on_cpu_match_interp(name: str) -> None:
    src, make = PROGRAMS[name]
    args = make()
    want = stripeml.compile(src, target="interp")(*args)
    _check(stripeml.compile(src, target="cpu")(*args), want, rtol=1e-4, atol=1e-5)


# -- shape errors at call time ------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_reshape_count_mismatch_at_call(target: str) -> None:
    src = "function (X[N, M]) -> (O) {\n    O = reshape(X, N, 3);\n}"
    f = stripeml.compile(src, target=target)
    _check(f(np.ones((2, 3), np.float32)), np.ones((2, 3), np.float32))
    with pytest.raises(ShapeError, match=r"^2:5: in 'O = reshape\(X, N, 3\)': cannot reshape"):
        f(np.ones((2, 4), np.float32))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_lowered_programs_agree_in_every_interpreter_mode(name: str) -> None:
    """The lowered (unoptimised) programs: general, fast and chunked interpreter
    modes and the CPU code generator without passes all agree."""
    program, inputs = _lowered(name)
    run_all(program, inputs, rtol=1e-4)


def test_cpu_runs_root_specials_directly(monkeypatch) -> None:
    """On the CPU backend a root ``reshape``/``gather`` is a NumPy copy of whole
    buffers, not the interpreter's element-by-element path (which is patched to
    fail here); the results are NumPy's."""
    import stripeml.runtime.interp.specials as interp_specials

    def refuse(*args, **kwargs):
        raise AssertionError("the interpreter's special ran")

    monkeypatch.setattr(interp_specials, "run_special", refuse)
    src = """function (X[A, B, C], I[K]) -> (Y, G) {
        T = X * 2;
        Y = reshape(T, C, A * B);
        G = gather(Y, I, 1);
    }"""
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    i = np.array([5, -1, 0, 2], np.int64)
    y, g = stripeml.compile(src, target="cpu")(x, i)
    want_y = (x * 2).reshape(4, 6)
    _check((y, g), (want_y, np.take(want_y, i, axis=1)))
    with pytest.raises(StripeError, match="out of range"):
        stripeml.compile(src, target="cpu")(x, np.array([6], np.int64))
