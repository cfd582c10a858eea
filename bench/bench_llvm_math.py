"""Throughput of the inline LLVM math functions (codegen/llvm_math.py) against NumPy.

One JSON line per (function, dtype), fields as documented in ``bench/run.py``
plus ``function``, ``dtype`` and ``ns_per_element``:

``jit_vector``
    a JIT-compiled loop over ``<8 x float>`` / ``<4 x double>`` calling
    ``emit_math`` (``stripeml_s`` is this one);
``jit_scalar``
    the same loop written on scalars, left to LLVM's loop vectoriser;
``numpy``
    the NumPy ufunc into a preallocated output (``1/(1+exp(-x))`` for
    sigmoid; ``math.erf`` through ``np.frompyfunc`` for erf, which NumPy
    lacks).

The array (``N`` elements) fits in L2, so this measures the functions, not
memory.  Single-threaded.  Not a test: nothing asserts a speed.
"""

from __future__ import annotations

import ctypes
import json
import math
import statistics
import sys
import time
from collections.abc import Callable

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from stripeml.codegen.llvm_math import emit_math

N = 1 << 14
REPEATS = 51
FUNCTIONS = ["exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "tan", "pow", "sqrt"]

_erf = np.frompyfunc(math.erf, 1, 1)
NUMPY: dict[str, Callable[..., object]] = {
    "exp": lambda x, o: np.exp(x, out=o),
    "log": lambda x, o: np.log(x, out=o),
    "tanh": lambda x, o: np.tanh(x, out=o),
    "sigmoid": lambda x, o: np.divide(
        1, np.add(1, np.exp(np.negative(x, out=o), out=o), out=o), out=o
    ),
    "erf": lambda x, o: _erf(x),
    "sin": lambda x, o: np.sin(x, out=o),
    "cos": lambda x, o: np.cos(x, out=o),
    "tan": lambda x, o: np.tan(x, out=o),
    "pow": lambda x, y, o: np.power(x, y, out=o),
    "sqrt": lambda x, o: np.sqrt(x, out=o),
}

_ENGINES: list[object] = []


def _target_machine() -> llvm.TargetMachine:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
    )


def jit_loop(tm: llvm.TargetMachine, name: str, dtype: type, lanes: int) -> Callable[..., None]:
    """``kernel(a, b, out, n)``: out[i:i+step] = name(a[i:i+step], ...); ``lanes=0`` is scalar."""
    fty = ir.FloatType() if dtype == np.float32 else ir.DoubleType()
    vty = ir.VectorType(fty, lanes) if lanes else fty
    i64, ptr = ir.IntType(64), ir.PointerType()
    mod = ir.Module(name="bench")
    mod.triple = llvm.get_process_triple()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr, ptr, ptr, i64]), "kernel")
    for p in fn.args[:3]:
        p.add_attribute("noalias")
    pa, pb, pout, n = fn.args
    entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    align = dtype().itemsize
    arity = 2 if name == "pow" else 1
    args = [b.load(b.gep(p, [i], source_etype=fty), typ=vty, align=align) for p in (pa, pb)[:arity]]
    b.store(emit_math(b, name, args), b.gep(pout, [i], source_etype=fty), align=align)
    nxt = b.add(i, ir.Constant(i64, lanes or 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()

    llmod = llvm.parse_assembly(str(mod))
    llmod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb_ = llvm.create_pass_builder(tm, pto)
    pb_.getModulePassManager().run(llmod, pb_)
    engine = llvm.create_mcjit_compiler(llmod, tm)
    engine.finalize_object()
    _ENGINES.append(engine)
    proto = ctypes.CFUNCTYPE(
        None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64
    )
    return proto(engine.get_function_address("kernel"))


def inputs(name: str, dtype: type, rng: np.random.Generator) -> list[np.ndarray]:
    if name in ("log", "sqrt"):
        return [np.exp(rng.uniform(-20, 20, N)).astype(dtype)]
    if name == "pow":
        return [rng.uniform(0.01, 10, N).astype(dtype), rng.uniform(-5, 5, N).astype(dtype)]
    if name in ("exp", "sigmoid"):
        return [rng.uniform(-20, 20, N).astype(dtype)]
    return [rng.uniform(-6, 6, N).astype(dtype)]


def median_ns(fn: Callable[[], object]) -> float:
    fn()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times)


def main() -> int:
    tm = _target_machine()
    rng = np.random.default_rng(0)
    for name in FUNCTIONS:
        for dtype, lanes in ((np.float32, 8), (np.float64, 4)):
            xs = inputs(name, dtype, rng)
            a, b = xs[0], xs[-1]
            out = np.empty(N, dtype)
            vec = jit_loop(tm, name, dtype, lanes)
            sca = jit_loop(tm, name, dtype, 0)
            args = (a.ctypes.data, b.ctypes.data, out.ctypes.data, N)
            t_vec = median_ns(lambda f=vec, args=args: f(*args))
            t_sca = median_ns(lambda f=sca, args=args: f(*args))
            t_np = median_ns(lambda xs=xs, out=out, name=name: NUMPY[name](*xs, out))
            print(
                json.dumps(
                    {
                        "bench": "llvm_math",
                        "case": f"{name}_{dtype.__name__}",
                        "function": name,
                        "dtype": dtype.__name__,
                        "sizes": {"N": N},
                        "threads": 1,
                        "target": "cpu",
                        "repeats": REPEATS,
                        "stripeml_s": t_vec * 1e-9,
                        "baselines": {"numpy": t_np * 1e-9},
                        "ns_per_element": {
                            "jit_vector": round(t_vec / N, 3),
                            "jit_scalar": round(t_sca / N, 3),
                            "numpy": round(t_np / N, 3),
                        },
                    }
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
