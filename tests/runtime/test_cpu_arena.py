"""The CPU runtime gives placed root temporaries views into one arena per location.

``place`` (last in ``cpu.toml``) gives every root temporary an offset; the
runtime then allocates, per concurrent call, one 64-byte aligned arena of
``max(offset + size)`` bytes per location and runs the kernels on views of it,
so buffers that are never live together share memory.  These tests check the
memory really shrinks (``exe.peak_bytes`` is the arena), results stay right
over repeated and concurrent calls, and that temporaries whose initial zeros
are read never see another buffer's bytes.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import stripeml
from stripeml.analysis.memory import allocation_bytes
from stripeml.ir.parser import parse
from stripeml.passes.place import Place
from stripeml.runtime import cpu
from stripeml.runtime.interp import run
from stripeml.targets.loader import TARGETS_DIR

try:
    from programs import conv_nd
except ImportError:  # tests/ imported as a package
    from tests.programs import conv_nd

CHAIN10 = """function (A[N, M], B[N, M]) -> (O) {
    T1 = A * B;
    T2 = exp(T1);
    T3 = T2 + A;
    T4 = tanh(T3);
    T5 = T4 * T1;
    T6 = T5 - B;
    T7 = relu(T6);
    T8 = T7 * T3;
    T9 = sqrt(abs(T8));
    O = T9 + T2;
}"""


def _chain10(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    t1 = a * b
    t2 = np.exp(t1)
    t3 = t2 + a
    t8 = np.maximum(np.tanh(t3) * t1 - b, 0) * t3
    return np.sqrt(np.abs(t8)) + t2


CONV_NET = """function (I[N, X, Y, C], K1[3, 3, C, F], B1[F], K2[3, 3, F, F], B2[F],
                        K3[3, 3, F, F]) -> (O) {
    C1[n, x, y, f : N, X, Y, F] = +(I[n, x + kx - 1, y + ky - 1, c] * K1[kx, ky, c, f]);
    R1 = relu(C1 + B1);
    C2[n, x, y, f : N, X, Y, F] = +(R1[n, x + kx - 1, y + ky - 1, c] * K2[kx, ky, c, f]);
    R2 = relu(C2 + B2);
    C3[n, x, y, f : N, X, Y, F] = +(R2[n, x + kx - 1, y + ky - 1, c] * K3[kx, ky, c, f]);
    O = C3 + R1;
}"""


def _conv_net(a: dict[str, np.ndarray]) -> np.ndarray:
    size = a["I"].shape[1:3]
    r1 = np.maximum(conv_nd(a["I"], a["K1"], pad=1, out=size) + a["B1"], 0)
    r2 = np.maximum(conv_nd(r1, a["K2"], pad=1, out=size) + a["B2"], 0)
    return conv_nd(r2, a["K3"], pad=1, out=size) + r1


def _temporaries(exe: stripeml.api.Executable) -> list:
    return [r for r in exe.program.root.refs if r.dir == "none"]


def _check_arena(exe: stripeml.api.Executable) -> int:
    """The placed temporaries' arena is what ``peak_bytes`` reports; returns it."""
    temps = _temporaries(exe)
    assert temps and all(r.offset is not None and r.location == "DRAM" for r in temps)
    compiled = exe._compiled
    peak = exe.peak_bytes["DRAM"]
    assert compiled.arena_bytes == {"DRAM": peak} == compiled.temp_bytes
    assert peak < sum(allocation_bytes(r) for r in temps)
    assert all(r.offset % 64 == 0 for r in temps)
    storages = compiled._take_temps()
    try:
        bases = {s.base.ctypes.data for s in storages}  # every view into one arena
        assert len(bases) == 1
        # the arena starts 64-byte aligned and every offset is a multiple of 64
        assert all(s.ctypes.data % 64 == 0 for s in storages)
    finally:
        compiled._give_back_temps(storages)
    return peak


def test_unfused_ten_statement_chain_shares_one_arena(tmp_path) -> None:
    # The bundled pipeline fuses the whole chain into one kernel (no temporary
    # left); without `fuse` its nine temporaries are placed.
    text = (TARGETS_DIR / "cpu.toml").read_text()
    assert '[[pipeline]]\npass = "fuse"\n' in text
    target = tmp_path / "cpu_nofuse.toml"
    target.write_text(text.replace('[[pipeline]]\npass = "fuse"\n', ""))
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, (64, 64)).astype(np.float32) for _ in "AB")
    f = stripeml.compile(CHAIN10, target=str(target))
    exe = f.lower(a, b)
    assert len(_temporaries(exe)) == 9
    n = 64 * 64 * 4
    assert _check_arena(exe) == 5 * n  # 9 * n unplaced; T1, T2, T3 live across the chain
    for _ in range(3):  # reused arenas hold the previous call's values
        np.testing.assert_allclose(f(a, b), _chain10(a, b), rtol=1e-5, atol=1e-6)
        a, b = b, a


def test_conv_network_on_cpu_shares_one_arena() -> None:
    rng = np.random.default_rng(1)
    n, x, y, c, f = 2, 12, 10, 8, 16
    shapes = {
        "I": (n, x, y, c),
        "K1": (3, 3, c, f),
        "B1": (f,),
        "K2": (3, 3, f, f),
        "B2": (f,),
        "K3": (3, 3, f, f),
    }
    arrays = {k: rng.uniform(-0.5, 0.5, s).astype(np.float32) for k, s in shapes.items()}
    fn = stripeml.compile(CONV_NET, target="cpu")
    exe = fn.lower(*arrays.values())
    names = {r.into for r in _temporaries(exe)}
    # halo buffers; R2 is written straight into its halo's interior (alias_copy),
    # R1 stays for the residual add
    assert {"R1", "I_halo", "R1_halo", "R2_halo"} <= names and "R2" not in names
    _check_arena(exe)
    for _ in range(3):
        got = fn(*arrays.values())
        np.testing.assert_allclose(got, _conv_net(arrays), rtol=1e-4, atol=1e-4)
        arrays["I"] = arrays["I"][::-1].copy()


# -- dirty memory ------------------------------------------------------------------------------

# T is dead after k2; W is a sum every element of which some point reaches, so it
# may start with T's bytes (the code generator starts each element's sum at 0).
SUM_AFTER_DEAD = """
block sum_after_dead [] #program (
    in A f32(8):(1)
    in B f32(4):(1)
    out P f32(8):(1)
    out O f32(8):(1)
    none T f32(8):(1)
    none W f32(8):(1)
) {
  block k1 [i:8] #eltwise #kernel (
      in A[i] f32(1):(1)
      out T[i]:assign f32(1):(1)
  ) { $a = load(A)  $y = exp($a): f32  T = store($y) }
  block k2 [i:8] #eltwise #kernel (
      in T[i] f32(1):(1)
      out P[i]:assign f32(1):(1)
  ) { $t = load(T)  P = store($t) }
  block k3 [i:8, j:4] #agg_add #contraction #kernel (
      in A[i] f32(1):(1)
      in B[j] f32(1):(1)
      out W[i]:add f32(1):(1)
  ) { $a = load(A)  $b = load(B)  $p = mul($a, $b): f32  W = store($p) }
  block k4 [i:8] #eltwise #kernel (
      in W[i] f32(1):(1)
      out O[i]:assign f32(1):(1)
  ) { $w = load(W)  O = store($w) }
}
"""

# U is a sum that reaches only its even elements, so its odd elements must read
# 0 (the interpreter's fresh buffers): U is live from the start and nothing
# before it may use its bytes.  V, written after U's last use, reuses them: on
# the next call U's bytes hold V's values unless the runtime zeroes U again.
PARTIAL_SUM_THEN_REUSE = """
block partial_sum [] #program (
    in A f32(16):(1)
    out P f32(8):(1)
    out O f32(16):(1)
    out Q f32(16):(1)
    none T f32(8):(1)
    none U f32(16):(1)
    none V f32(16):(1)
) {
  block k1 [i:8] #eltwise #kernel (
      in A[i] f32(1):(1)
      out T[i]:assign f32(1):(1)
  ) { $a = load(A)  $y = exp($a): f32  T = store($y) }
  block k2 [i:8] #eltwise #kernel (
      in T[i] f32(1):(1)
      out P[i]:assign f32(1):(1)
  ) { $t = load(T)  P = store($t) }
  block k3 [i:8, j:2] #agg_add #contraction #kernel (
      in A[2*i + j] f32(1):(1)
      out U[2*i]:add f32(1):(1)
  ) { $a = load(A)  U = store($a) }
  block k4 [i:16] #eltwise #kernel (
      in U[i] f32(1):(1)
      out O[i]:assign f32(1):(1)
  ) { $u = load(U)  O = store($u) }
  block k5 [i:16] #eltwise #kernel (
      in A[i] f32(1):(1)
      out V[i]:assign f32(1):(1)
  ) { $a = load(A)  $3 = const(3.0): f32  $v = mul($a, $3): f32  V = store($v) }
  block k6 [i:16] #eltwise #kernel (
      in V[i] f32(1):(1)
      out Q[i]:assign f32(1):(1)
  ) { $v = load(V)  Q = store($v) }
}
"""


def _placed(text: str):
    program = parse(text)
    placed = Place(root_only=True).run(program)
    return program, {r.into: r.offset for r in placed.root.refs if r.dir == "none"}, placed


def _inputs(program, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {r.into: rng.uniform(-1, 1, r.shape.sizes).astype(np.float32) for r in program.inputs}


@pytest.mark.parametrize("options", [dict(threads=1, vector_width=1), dict(threads=2)])
def test_a_sum_into_a_dead_buffers_bytes(options) -> None:
    program, offsets, placed = _placed(SUM_AFTER_DEAD)
    assert offsets["T"] == offsets["W"]  # W takes T's bytes, full of exp(A)
    compiled = cpu.CpuBackend(cpu.CpuOptions(**options)).compile(placed)
    assert compiled.arena_bytes == {"DRAM": 32}  # one buffer's bytes for both
    for seed in range(3):
        inputs = _inputs(program, seed)
        want = run(program, inputs)
        got = compiled.run(inputs)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_a_partial_sum_never_sees_another_buffers_bytes(monkeypatch) -> None:
    program, offsets, placed = _placed(PARTIAL_SUM_THEN_REUSE)
    assert Place.initial_reads(placed) == {"U"}
    assert offsets["U"] == offsets["V"] != offsets["T"]  # V reuses U's bytes after k4
    compiled = cpu.CpuBackend(cpu.CpuOptions(threads=1)).compile(placed)

    def calls(compiled: cpu.CpuCompiled) -> list[dict[str, np.ndarray]]:
        out = []
        for seed in range(3):
            inputs = _inputs(program, seed)
            got, want = compiled.run(inputs), run(program, inputs)
            out.append({n: (got[n], want[n]) for n in want})
        return out

    for results in calls(compiled):
        for name, (got, want) in results.items():
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
            if name == "O":
                assert not got[1::2].any()  # the odd elements U never receives read 0
    # Without zeroing U again, the second call reads V's values in U's odd elements.
    monkeypatch.setattr(cpu.CpuCompiled, "_initial_reads", lambda self: ())
    stale = cpu.CpuBackend(cpu.CpuOptions(threads=1)).compile(placed)
    first, second, _ = calls(stale)
    assert not first["O"][0][1::2].any()
    assert second["O"][0][1::2].any()


def test_concurrent_calls_each_get_an_arena() -> None:
    program, _, placed = _placed(PARTIAL_SUM_THEN_REUSE)
    compiled = cpu.CpuBackend(cpu.CpuOptions(threads=1)).compile(placed)
    first, second = compiled._take_temps(), compiled._take_temps()
    assert not any(np.shares_memory(s, t) for s in first for t in second)
    compiled._give_back_temps(first)
    compiled._give_back_temps(second)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            for k in range(20):
                inputs = _inputs(program, seed * 100 + k)
                got, want = compiled.run(inputs), run(program, inputs)
                for name in want:
                    np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_unplaced_temporaries_keep_their_own_arrays() -> None:
    program = parse(SUM_AFTER_DEAD)
    compiled = cpu.CpuBackend(cpu.CpuOptions(threads=1)).compile(program)
    assert compiled.arena_bytes == {} and compiled.temp_bytes == {"DRAM": 64}
    inputs = _inputs(program)
    got, want = compiled.run(inputs), run(program, inputs)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
