"""The CPU backend (``target="cpu"``) against NumPy and PyTorch, measured in one run.

Run::

    .venv/bin/python bench/bench_cpu.py                  # every case, target cpu
    .venv/bin/python bench/bench_cpu.py --quick          # fewer repetitions
    .venv/bin/python bench/bench_cpu.py --target interp --quick --small   # smoke test
    .venv/bin/python bench/bench_cpu.py --cases matmul_256,softmax_rows
    .venv/bin/python bench/bench_cpu.py --list
    .venv/bin/python bench/bench_cpu.py --cases conv --torch-process   # PyTorch in its own process

One JSON line per case (fields as in ``bench/run.py``, plus):

``stripeml_compile_s``
    the first ``f.lower(...)`` of the case, with ``STRIPEML_CACHE_DIR`` set to
    a fresh, empty folder for this run (cold on disk; in-process state such as
    the JIT's own start-up is warm after the first case).
``compile_cold_s``, ``compile_warm_fresh_process_s``
    (``matmul_256`` only) ``f.lower(...)`` in a fresh process with a fresh
    cache folder, then in a second fresh process sharing that folder.
``ratio_vs_numpy``, ``ratio_vs_torch``
    baseline seconds / stripeml seconds (above 1: stripeml is faster).
``torch_process``
    with ``--torch-process``: PyTorch ran in a worker process of its own
    (``bench/torch_process.py``), its blocks interleaved with the others'
    (``torch_version``; ``torch_error`` when it could not run).
``ok``, ``max_err``
    each result against idiomatic NumPy without ``out=`` (allclose with
    ``rtol=1e-3``, ``atol=1e-4 * max|reference|``); ``max_err`` is
    ``max|got - reference| / max|reference|``.  ``null`` where nothing ran.
``out``
    whether each contender wrote into output arrays allocated once
    (``out=``), so that no timed call touches fresh pages.
``numpy_blas``
    the BLAS NumPy runs and the kernel it picked at run time.
``env_unset``
    ``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` as they were set, if they
    were: the script re-executes itself without them (they slow a current
    NumPy), so the numbers are of NumPy's own choice of kernel.
``load_avg_1m``
    the machine's load average as the case starts: other work on the cores
    (a test run beside the benchmark) slows every contender, threaded ones most.
``error``
    why stripeml did not run the case (for instance while the target is not
    built); the baselines are still measured.
``quiet_rounds``, ``cpu_share_min``, ``cpu_share_median``, ``handoff_ns_median``, ``handoff_ns_max``
    ``quiet.py``'s samples before and after each pass (on the ``cpu`` target):
    how many passes were quiet (the host left this VM both vCPUs, under one L3
    cache), the least and median share of the FMA peak, and the median and
    longest hand-over between the two threads.  With one quiet pass or more,
    ``stripeml_s_quiet``, ``baselines_quiet`` and the ``ratio_vs_*_quiet``
    figures are the same over the quiet passes only.

Timing: each contender is called once and checked, warmed up, then timed in
blocks of consecutive calls that alternate between contenders over three
passes, with a 0.2 s pause before each block so the previous library's
spinning threads go idle (see ``time_blocks``); the number of calls adapts so that a case takes
a few seconds, each contender an equal share.  ``repeats`` is the fewest
calls a median is over, ``repeats_each`` the count for each contender.  PyTorch is optional (``make bench-deps`` installs the CPU build);
without it the ``torch`` baseline is left out.  The exit status is 1 when a
result is wrong or stripeml fails after its target was found, else 0: nothing
here asserts a speed.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

_BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_UNSET_NOTE = "_STRIPEML_BENCH_ENV_UNSET"


def _reexec_without_blas_overrides() -> None:
    """Re-run this script without the OpenBLAS overrides (before NumPy loads)."""
    found = {k: os.environ[k] for k in _BLAS_ENV if k in os.environ}
    if not found:
        return
    env = {k: v for k, v in os.environ.items() if k not in _BLAS_ENV}
    env[_UNSET_NOTE] = json.dumps(found)
    sys.stdout.flush()
    sys.stderr.flush()
    script = os.path.abspath(__file__)
    os.execve(sys.executable, [sys.executable, script, *sys.argv[1:]], env)


if __name__ == "__main__":
    _reexec_without_blas_overrides()

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quiet import CpuShare, Rounds  # noqa: E402
from torch_process import TorchProcess, serve  # noqa: E402

F32 = np.float32
EPS = 1e-5

MATMUL = """
function (A[M, K], B[K, N]) -> (C) {
    C[m, n : M, N] = +(A[m, k] * B[k, n]);
}
"""
CONV = """
function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co : N, X, Y, CO] = +(I[n, x + kx - 1, y + ky - 1, ci] * K[kx, ky, ci, co]);
}
"""
MLP = """
function (X[B, K], W[K, N], Bias[N]) -> (Y) {
    Z[b, n : B, N] = +(X[b, k] * W[k, n]);
    Y = relu(Z + Bias);
}
"""
SOFTMAX = """
function (X[N, K]) -> (Y) {
    M[n, 0 : N, 1] = >(X[n, k]);
    E = exp(X - M);
    S[n, 0 : N, 1] = +(E[n, k]);
    Y = E / S;
}
"""
LAYERNORM = """
function (X[N, D], G[D], B[D]) -> (Y) {
    S[n, 0 : N, 1] = +(X[n, d]);
    Mean = S / D;
    C = X - Mean;
    Q[n, 0 : N, 1] = +(C[n, d] * C[n, d]);
    Var = Q / D;
    Y = (X - Mean) / sqrt(Var + 0.00001) * G + B;
}
"""
TANH = """
function (A[N], B[N], C[N]) -> (Y) {
    Y = tanh(A * B + C) * 0.5 + A;
}
"""


@dataclass
class Impl:
    """One contender ready to time: ``fn()`` computes, ``post`` turns its result into NumPy."""

    fn: Callable[[], Any]
    out: bool
    post: Callable[[Any], np.ndarray] = np.asarray


@dataclass
class Case:
    name: str
    sizes: dict[str, int]
    source: str
    small: bool  # cheap enough for the interpreter in a smoke test
    inputs: Callable[[np.random.Generator], list[np.ndarray]]
    reference: Callable[..., np.ndarray]  # idiomatic NumPy, fresh arrays
    numpy: Callable[..., Impl]  # NumPy writing into arrays allocated once
    torch: Callable[..., Impl]  # (torch, *inputs) -> Impl


def _normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape, dtype=F32)


# -- matmul ------------------------------------------------------------------
def _matmul_case(n: int) -> Case:
    def numpy_impl(a: np.ndarray, b: np.ndarray) -> Impl:
        c = np.empty((a.shape[0], b.shape[1]), F32)
        return Impl(lambda: np.matmul(a, b, out=c), out=True)

    def torch_impl(torch: Any, a: np.ndarray, b: np.ndarray) -> Impl:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        tc = torch.empty((a.shape[0], b.shape[1]), dtype=torch.float32)
        return Impl(lambda: torch.matmul(ta, tb, out=tc), out=True, post=lambda t: t.numpy())

    return Case(
        name=f"matmul_{n}",
        sizes={"M": n, "K": n, "N": n},
        source=MATMUL,
        small=n <= 256,
        inputs=lambda rng: [_normal(rng, n, n), _normal(rng, n, n)],
        reference=lambda a, b: a @ b,
        numpy=numpy_impl,
        torch=torch_impl,
    )


# -- conv --------------------------------------------------------------------
def _conv_reference(i: np.ndarray, k: np.ndarray) -> np.ndarray:
    ip = np.pad(i, ((0, 0), (1, 1), (1, 1), (0, 0)))
    win = np.lib.stride_tricks.sliding_window_view(ip, k.shape[:2], axis=(1, 2))
    return np.tensordot(win, k, axes=([4, 5, 3], [0, 1, 2]))  # n x y (ci kx ky) · kx ky ci co


def _conv_numpy(i: np.ndarray, k: np.ndarray) -> Impl:
    """im2col into a matrix allocated once, then one GEMM into the output."""
    n, x, y, ci = i.shape
    kx, ky, _, co = k.shape
    padded = np.zeros((n, x + kx - 1, y + ky - 1, ci), F32)
    cols = np.empty((n * x * y, kx * ky * ci), F32)
    cols_view = cols.reshape(n, x, y, kx, ky, ci)
    kmat = np.ascontiguousarray(k.reshape(kx * ky * ci, co))
    o = np.empty((n, x, y, co), F32)
    omat = o.reshape(n * x * y, co)

    def run() -> np.ndarray:
        padded[:, 1 : 1 + x, 1 : 1 + y, :] = i
        win = np.lib.stride_tricks.sliding_window_view(padded, (kx, ky), axis=(1, 2))
        np.copyto(cols_view, win.transpose(0, 1, 2, 4, 5, 3))
        np.matmul(cols, kmat, out=omat)
        return o

    return Impl(run, out=True)


def _conv_torch(torch: Any, i: np.ndarray, k: np.ndarray) -> Impl:
    import torch.nn.functional as F  # noqa: N812

    ti = torch.from_numpy(np.ascontiguousarray(i.transpose(0, 3, 1, 2)))  # NCHW, once
    tk = torch.from_numpy(np.ascontiguousarray(k.transpose(3, 2, 0, 1)))  # OIHW, once
    return Impl(
        lambda: F.conv2d(ti, tk, padding=1),
        out=False,
        post=lambda t: t.permute(0, 2, 3, 1).numpy(),
    )


CONV_CASE = Case(
    name="conv2d_3x3_pad1",
    sizes={"N": 1, "X": 56, "Y": 56, "CI": 64, "CO": 64, "KX": 3, "KY": 3},
    source=CONV,
    small=True,
    inputs=lambda rng: [_normal(rng, 1, 56, 56, 64), _normal(rng, 3, 3, 64, 64)],
    reference=_conv_reference,
    numpy=_conv_numpy,
    torch=_conv_torch,
)


# -- relu(x @ W + b) -----------------------------------------------------------
def _mlp_numpy(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> Impl:
    z = np.empty((x.shape[0], w.shape[1]), F32)

    def run() -> np.ndarray:
        np.matmul(x, w, out=z)
        np.add(z, b, out=z)
        return np.maximum(z, 0, out=z)

    return Impl(run, out=True)


def _mlp_torch(torch: Any, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> Impl:
    tx, tw, tb = (torch.from_numpy(v) for v in (x, w, b))
    tz = torch.empty((x.shape[0], w.shape[1]), dtype=torch.float32)
    return Impl(lambda: torch.addmm(tb, tx, tw, out=tz).relu_(), out=True, post=lambda t: t.numpy())


MLP_CASE = Case(
    name="mlp_relu",
    sizes={"B": 512, "K": 1024, "N": 1024},
    source=MLP,
    small=True,
    inputs=lambda rng: [_normal(rng, 512, 1024), _normal(rng, 1024, 1024), _normal(rng, 1024)],
    reference=lambda x, w, b: np.maximum(x @ w + b, 0),
    numpy=_mlp_numpy,
    torch=_mlp_torch,
)


# -- softmax over rows -----------------------------------------------------------
def _softmax_reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _softmax_numpy(x: np.ndarray) -> Impl:
    m = np.empty((x.shape[0], 1), F32)
    s = np.empty((x.shape[0], 1), F32)
    e = np.empty_like(x)

    def run() -> np.ndarray:
        np.max(x, axis=1, keepdims=True, out=m)
        np.subtract(x, m, out=e)
        np.exp(e, out=e)
        np.sum(e, axis=1, keepdims=True, out=s)
        return np.divide(e, s, out=e)

    return Impl(run, out=True)


def _softmax_torch(torch: Any, x: np.ndarray) -> Impl:
    tx = torch.from_numpy(x)
    return Impl(lambda: torch.softmax(tx, dim=1), out=False, post=lambda t: t.numpy())


SOFTMAX_CASE = Case(
    name="softmax_rows",
    sizes={"N": 4096, "K": 4096},
    source=SOFTMAX,
    small=False,
    inputs=lambda rng: [_normal(rng, 4096, 4096)],
    reference=_softmax_reference,
    numpy=_softmax_numpy,
    torch=_softmax_torch,
)


# -- layernorm over rows -----------------------------------------------------------
def _layernorm_reference(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * g + b


def _layernorm_numpy(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> Impl:
    mean = np.empty((x.shape[0], 1), F32)
    var = np.empty((x.shape[0], 1), F32)
    c = np.empty_like(x)
    y = np.empty_like(x)

    def run() -> np.ndarray:
        np.mean(x, axis=1, keepdims=True, out=mean)
        np.subtract(x, mean, out=c)
        np.square(c, out=y)
        np.mean(y, axis=1, keepdims=True, out=var)
        np.add(var, EPS, out=var)
        np.sqrt(var, out=var)
        np.divide(c, var, out=y)
        np.multiply(y, g, out=y)
        return np.add(y, b, out=y)

    return Impl(run, out=True)


def _layernorm_torch(torch: Any, x: np.ndarray, g: np.ndarray, b: np.ndarray) -> Impl:
    import torch.nn.functional as F  # noqa: N812

    tx, tg, tb = (torch.from_numpy(v) for v in (x, g, b))
    shape = (x.shape[1],)
    return Impl(
        lambda: F.layer_norm(tx, shape, tg, tb, eps=EPS), out=False, post=lambda t: t.numpy()
    )


LAYERNORM_CASE = Case(
    name="layernorm_rows",
    sizes={"N": 8192, "D": 1024},
    source=LAYERNORM,
    small=False,
    inputs=lambda rng: [_normal(rng, 8192, 1024), _normal(rng, 1024), _normal(rng, 1024)],
    reference=_layernorm_reference,
    numpy=_layernorm_numpy,
    torch=_layernorm_torch,
)


# -- tanh(a*b+c)*0.5+a ---------------------------------------------------------------
def _tanh_numpy(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> Impl:
    y = np.empty_like(a)

    def run() -> np.ndarray:
        np.multiply(a, b, out=y)
        np.add(y, c, out=y)
        np.tanh(y, out=y)
        np.multiply(y, 0.5, out=y)
        return np.add(y, a, out=y)

    return Impl(run, out=True)


def _tanh_torch(torch: Any, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> Impl:
    ta, tb, tc = (torch.from_numpy(v) for v in (a, b, c))
    ty = torch.empty_like(ta)

    def run() -> Any:
        torch.mul(ta, tb, out=ty)
        ty.add_(tc)
        torch.tanh(ty, out=ty)
        return ty.mul_(0.5).add_(ta)

    return Impl(run, out=True, post=lambda t: t.numpy())


TANH_N = 16 * 1024 * 1024
TANH_CASE = Case(
    name="tanh_fma_eltwise",
    sizes={"N": TANH_N},
    source=TANH,
    small=False,
    inputs=lambda rng: [_normal(rng, TANH_N) for _ in range(3)],
    reference=lambda a, b, c: np.tanh(a * b + c) * F32(0.5) + a,
    numpy=_tanh_numpy,
    torch=_tanh_torch,
)

CASES = [
    _matmul_case(256),
    _matmul_case(1024),
    CONV_CASE,
    MLP_CASE,
    SOFTMAX_CASE,
    LAYERNORM_CASE,
    TANH_CASE,
]
COMPILE_PROBE_CASE = "matmul_256"


# -- measuring -----------------------------------------------------------------------
@dataclass
class Budget:
    seconds: float  # timed calls of one case, all contenders together
    min_repeats: int
    max_repeats: int
    passes: int  # blocks per contender, alternating between contenders


def _warm_up(fn: Callable[[], Any]) -> float:
    """Call ``fn`` until the previous contender's threads have settled; seconds per call.

    At least one call, then more while they add up to under 50 ms (at most 10).
    """
    calls, start = 0, time.perf_counter()
    while calls == 0 or (calls < 10 and time.perf_counter() - start < 0.05):
        t0 = time.perf_counter()
        fn()
        last = time.perf_counter() - t0
        calls += 1
    return last


SLOW_CALL_S = 0.25  # a call this long needs no warm-up between blocks
# Pause before each block so the previous contender's thread pool (OpenBLAS and
# PyTorch threads spin-wait after a call) has gone idle; the same for everyone.
SETTLE_S = 0.2


@dataclass
class Timed:
    """The calls' seconds of each contender, per pass, and the samples around the
    passes (``quiet.py``; none taken without a ``CpuShare``)."""

    passes: dict[str, list[list[float]]]
    rounds: Rounds

    def times(self, name: str, quiet_only: bool = False) -> list[float]:
        """``name``'s calls, of every pass or of the quiet ones."""
        runs = self.passes[name]
        return [t for run in (self.rounds.quiet_only(runs) if quiet_only else runs) for t in run]


def time_blocks(
    fns: dict[str, Callable[[], Any] | TorchProcess], budget: Budget, share: Any = None
) -> Timed:
    """Seconds of each call of each function, timed in alternating blocks.

    Each contender gets an equal share of the budget.  Calls of one contender
    are consecutive within a block (thread pools of different libraries that
    alternate call by call make each other spin: on two cores both come out
    ten to twenty times slower), and the blocks alternate over a few passes so
    that drift on a noisy machine hits every contender alike.  A slow
    contender gets ``min_repeats`` calls and no warm-up between its blocks.
    A :class:`TorchProcess` times its blocks in its own process.  With
    ``share`` (a ``quiet.CpuShare``) each pass is sampled before and after.
    """
    share_of = budget.seconds / max(len(fns), 1)
    per_pass: dict[str, int] = {}
    slow: set[str] = set()
    for name, fn in fns.items():
        time.sleep(SETTLE_S)
        estimate = max(fn.warm_up() if isinstance(fn, TorchProcess) else _warm_up(fn), 1e-9)
        repeats = max(budget.min_repeats, min(budget.max_repeats, int(share_of / estimate)))
        per_pass[name] = -(-repeats // budget.passes)
        if estimate > SLOW_CALL_S:
            slow.add(name)
    if "stripeml" in sys.modules:  # its cache files, written after the first calls: not timed
        from stripeml.runtime.kept_layouts import wait_writes

        wait_writes()
    timed = Timed({name: [] for name in fns}, Rounds(share))
    for _ in range(budget.passes):
        with timed.rounds.round():
            for name, fn in fns.items():
                time.sleep(SETTLE_S)
                if isinstance(fn, TorchProcess):  # the worker times its own block
                    block = fn.block(per_pass[name], warm=name not in slow)
                    timed.passes[name].append(list(block))
                    continue
                if name not in slow:
                    _warm_up(fn)
                run = []
                for _ in range(per_pass[name]):
                    start = time.perf_counter()
                    fn()
                    run.append(time.perf_counter() - start)
                timed.passes[name].append(run)
    return timed


def check(got: Any, ref: np.ndarray) -> tuple[bool, float | None]:
    """Whether ``got`` matches ``ref``, and the largest error relative to ``max|ref|``."""
    try:
        got = np.asarray(got)
        if got.shape != ref.shape:
            return False, None
        scale = float(np.max(np.abs(ref))) or 1.0
        err = float(np.max(np.abs(got.astype(np.float64) - ref))) / scale
        ok = bool(np.allclose(got, ref, rtol=1e-3, atol=1e-4 * scale))
        return ok, (err if np.isfinite(err) else None)
    except Exception:  # noqa: BLE001 - a malformed result is a wrong result
        return False, None


def accepts_out(fn: Callable[..., Any]) -> bool:
    """Whether a callable takes an ``out=`` keyword."""
    try:
        param = inspect.signature(fn).parameters.get("out")
    except (TypeError, ValueError):
        return False
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return param is not None and param.kind in kinds


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# -- environment facts ---------------------------------------------------------------
def numpy_blas() -> dict[str, Any]:
    """Which BLAS NumPy uses and which kernel it picked (threadpoolctl, else ctypes)."""
    info: dict[str, Any] = {}
    try:
        deps = np.show_config(mode="dicts").get("Build Dependencies", {})
        blas = deps.get("blas", {})
        info.update(
            name=blas.get("name"),
            version=blas.get("version"),
            config=blas.get("openblas configuration"),  # build-time; DYNAMIC_ARCH picks later
        )
    except Exception as exc:  # noqa: BLE001 - a fact we could not read is reported as such
        info["show_config_error"] = _error(exc)
    try:
        import threadpoolctl

        pools = [p for p in threadpoolctl.threadpool_info() if p.get("user_api") == "blas"]
        mine = [p for p in pools if "numpy" in p.get("filepath", "")] or pools
        if mine:
            info.update(
                source="threadpoolctl",
                corename=mine[0].get("architecture"),
                threads=mine[0].get("num_threads"),
                internal_api=mine[0].get("internal_api"),
            )
            return info
    except ImportError:
        pass
    info.update(source="ctypes", **_openblas_runtime())
    return info


def _openblas_runtime() -> dict[str, Any]:
    """The run-time core name and threads of the OpenBLAS shipped with NumPy, via ctypes."""
    import ctypes

    libdir = os.path.dirname(np.__file__) + ".libs"
    paths = sorted(glob.glob(os.path.join(libdir, "*openblas*")))
    if not paths:
        return {"corename": None}
    lib = ctypes.CDLL(paths[0])
    out: dict[str, Any] = {"corename": None}
    for prefix in ("scipy_openblas_", "openblas_"):
        for suffix in ("64_", ""):
            corename = getattr(lib, f"{prefix}get_corename{suffix}", None)
            if corename is None:
                continue
            corename.restype = ctypes.c_char_p
            out["corename"] = corename().decode()
            threads = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
            if threads is not None:
                threads.restype = ctypes.c_int
                out["threads"] = threads()
            return out
    return out


def cpu_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_torch(threads: int) -> Any:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch


# -- compile in fresh processes ------------------------------------------------------
def compile_probe(target: str) -> int:
    """``--compile-probe``: print how long the first ``f.lower`` of matmul_256 takes."""
    try:
        import stripeml

        case = next(c for c in CASES if c.name == COMPILE_PROBE_CASE)
        inputs = case.inputs(np.random.default_rng(0))
        f = stripeml.compile(case.source, target=target)
        start = time.perf_counter()
        f.lower(*inputs)
        print(json.dumps({"lower_s": time.perf_counter() - start}))
    except Exception as exc:  # noqa: BLE001 - the parent records it
        print(json.dumps({"error": _error(exc)}))
    return 0


def compile_in_fresh_processes(target: str) -> dict[str, Any]:
    """Cold, then warm, ``f.lower`` of matmul_256, each in a new process, one cache folder."""
    cache = tempfile.mkdtemp(prefix="stripeml-bench-cache-")
    env = dict(os.environ, STRIPEML_CACHE_DIR=cache)
    cmd = [sys.executable, os.path.abspath(__file__), "--compile-probe", "--target", target]
    result: dict[str, Any] = {}
    try:
        for key in ("compile_cold_s", "compile_warm_fresh_process_s"):
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            try:
                answer = json.loads(proc.stdout.strip().splitlines()[-1])
            except (IndexError, json.JSONDecodeError):
                answer = {"error": f"probe exit {proc.returncode}: {proc.stderr.strip()[-500:]}"}
            result[key] = answer.get("lower_s")
            if "error" in answer:
                result.setdefault("compile_probe_error", answer["error"])
                break
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return result


# -- one case --------------------------------------------------------------------------
def run_case(
    case: Case,
    target: str,
    threads: int,
    torch: Any,
    budget: Budget,
    torch_process: bool = False,
    share: Any = None,
) -> dict:
    """Measure one case; return its JSON record (``_failed`` marks a failure to report).

    ``torch_process``: PyTorch runs in a worker process of its own
    (:mod:`torch_process`), ``torch`` is unused.  ``share``: a ``quiet.CpuShare``
    that samples each pass (the record then has the quiet passes' figures too)."""
    import stripeml
    from stripeml.api import Executable

    api_out = accepts_out(Executable.__call__)  # does the public API take out=?
    inputs = case.inputs(np.random.default_rng(0))
    ref = case.reference(*inputs).astype(F32)
    impls: dict[str, Impl] = {"numpy": case.numpy(*inputs)}
    if torch is not None and not torch_process:
        impls["torch"] = case.torch(torch, *inputs)
    worker: TorchProcess | None = None
    worker_error = None
    if torch_process:
        try:
            worker = TorchProcess(os.path.abspath(__file__), case.name, threads)
        except RuntimeError as exc:
            worker_error = str(exc)

    record: dict[str, Any] = {
        "bench": "cpu",
        "case": case.name,
        "sizes": case.sizes,
        "dtype": "float32",
        "threads": threads,
        "target": target,
        "load_avg_1m": _load_avg(),  # other work on the machine skews every contender
    }
    failed = False
    compile_s = error = None
    try:
        f = stripeml.compile(case.source, target=target)
    except Exception as exc:  # noqa: BLE001 - e.g. the target is not built yet
        error = _error(exc)
    else:
        try:
            start = time.perf_counter()
            exe = f.lower(*inputs)
            compile_s = time.perf_counter() - start
            if api_out:
                bufs = tuple(np.empty(shape, dtype) for _, shape, dtype in exe.output_specs)
                out_arg = bufs[0] if len(bufs) == 1 else bufs
                impls["stripeml"] = Impl(lambda: exe(*inputs, out=out_arg), out=True)
            else:
                impls["stripeml"] = Impl(lambda: exe(*inputs), out=False)
        except Exception as exc:  # noqa: BLE001 - reported, the baselines still run
            error, failed = _error(exc), True

    ok: dict[str, bool | None] = {"stripeml": None}
    max_err: dict[str, float | None] = {"stripeml": None}
    for name, impl in list(impls.items()):
        try:
            ok[name], max_err[name] = check(impl.post(impl.fn()), ref)
        except Exception as exc:  # noqa: BLE001
            ok[name], max_err[name] = False, None
            if name == "stripeml":
                error = _error(exc)
            del impls[name]
        failed |= ok[name] is False

    contenders: dict[str, Callable[[], Any] | TorchProcess] = {k: v.fn for k, v in impls.items()}
    if worker is not None:
        try:
            ok["torch"], max_err["torch"] = check(worker.result(), ref)
        except RuntimeError as exc:
            ok["torch"], max_err["torch"], worker_error = False, None, str(exc)
        failed |= ok["torch"] is False
        if ok["torch"] is not False:
            contenders["torch"] = worker
    try:
        timed = time_blocks(contenders, budget, share)
    finally:
        if worker is not None:
            worker.close()
    times = {k: timed.times(k) for k in timed.passes}
    medians = {k: statistics.median(ts) for k, ts in times.items()}
    repeats = {k: len(ts) for k, ts in times.items()}
    stripeml_s = medians.get("stripeml")
    baselines = {k: v for k, v in medians.items() if k != "stripeml"}
    record.update(
        repeats=min(repeats.values()),
        repeats_each=repeats,
        stripeml_s=stripeml_s,
        stripeml_compile_s=compile_s,
        baselines=baselines,
        ratio_vs_numpy=_ratio(baselines.get("numpy"), stripeml_s),
        ratio_vs_torch=_ratio(baselines.get("torch"), stripeml_s),
        ok=ok,
        max_err=max_err,
        out={"stripeml": api_out} | {k: v.out for k, v in impls.items() if k != "stripeml"},
        torch_process=torch_process,
    )
    record.update(timed.rounds.summary())
    if any(timed.rounds.flags):  # the same figures over the quiet passes only
        quiet_s = {k: statistics.median(timed.times(k, True)) for k in timed.passes}
        ours = quiet_s.get("stripeml")
        record.update(
            stripeml_s_quiet=ours,
            baselines_quiet={k: v for k, v in quiet_s.items() if k != "stripeml"},
            ratio_vs_numpy_quiet=_ratio(quiet_s.get("numpy"), ours),
            ratio_vs_torch_quiet=_ratio(quiet_s.get("torch"), ours),
        )
    if worker is not None:
        record["torch_version"] = worker.version
        record["out"]["torch"] = worker.out
    if worker_error is not None:
        record["torch_error"] = worker_error
    if error is not None:
        record["error"] = error
    record["_failed"] = failed
    return record


def _load_avg() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _ratio(baseline: float | None, ours: float | None) -> float | None:
    if baseline is None or not ours:
        return None
    return baseline / ours


def select(cases: Sequence[Case], names: str | None, small: bool) -> list[Case]:
    chosen = [c for c in cases if not small or c.small]
    if names:
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        unknown = [n for n in wanted if not any(n in c.name for c in cases)]
        if unknown:
            raise SystemExit(f"unknown case(s): {', '.join(unknown)} (see --list)")
        chosen = [c for c in chosen if any(n in c.name for n in wanted)]
    return chosen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="CPU backend benchmarks with NumPy/PyTorch baselines.")
    ap.add_argument("--target", default="cpu", help="stripeml target (default: cpu)")
    ap.add_argument("--quick", action="store_true", help="few repetitions (a smoke run)")
    ap.add_argument("--small", action="store_true", help="only the cases marked small")
    ap.add_argument("--cases", help="comma-separated case names (substrings match)")
    ap.add_argument("--budget", type=float, help="seconds of timed rounds per case")
    ap.add_argument(
        "--passes",
        type=int,
        help="alternating passes per case (default 3; more: more chances "
        "of quiet ones, see quiet_rounds)",
    )
    ap.add_argument("--list", action="store_true", help="print the case names and exit")
    ap.add_argument(
        "--torch-process",
        action="store_true",
        help="time PyTorch in a process of its own (blocks still interleaved)",
    )
    ap.add_argument("--compile-probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--torch-worker", metavar="CASE", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.compile_probe:
        return compile_probe(args.target)
    if args.torch_worker:
        case = next((c for c in CASES if c.name == args.torch_worker), None)
        if case is None:
            print(json.dumps({"error": f"unknown case {args.torch_worker!r}"}), flush=True)
            return 2
        inputs = case.inputs(np.random.default_rng(0))
        case.reference(*inputs)  # the parent's allocator state (see torch_process)
        return serve(lambda t: case.torch(t, *inputs), _warm_up, args.threads or cpu_threads())
    cases = select(CASES, args.cases, args.small)
    if args.list:
        for c in CASES:
            print(c.name, json.dumps(c.sizes), "small" if c.small else "")
        return 0

    budget = Budget(0.5, 3, 10, passes=1) if args.quick else Budget(3.0, 3, 300, passes=3)
    if args.budget is not None:
        budget.seconds = args.budget
    if args.passes is not None:
        budget.passes = max(1, args.passes)
    threads = cpu_threads()
    torch = None if args.torch_process else load_torch(threads)
    env_unset = json.loads(os.environ.pop(_UNSET_NOTE, "{}"))
    common = {
        "numpy_blas": numpy_blas(),
        "env_unset": env_unset,
        "versions": {"numpy": np.__version__, "torch": getattr(torch, "__version__", None)},
    }

    cache = tempfile.mkdtemp(prefix="stripeml-bench-cache-")
    os.environ["STRIPEML_CACHE_DIR"] = cache  # before stripeml loads: every compile is cold
    failed = False
    share = CpuShare(threads) if args.target == "cpu" else None  # after the cache folder is set
    try:
        for case in cases:
            with torch.inference_mode() if torch is not None else contextlib.nullcontext():
                record = run_case(
                    case, args.target, threads, torch, budget, args.torch_process, share
                )
            failed |= record.pop("_failed")
            if case.name == COMPILE_PROBE_CASE:
                record.update(compile_in_fresh_processes(args.target))
            record.update(common)
            if "error" in record:
                print(f"{case.name}: stripeml: {record['error']}", file=sys.stderr)
            print(json.dumps(record), flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
