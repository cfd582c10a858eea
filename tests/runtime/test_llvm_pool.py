"""Compiling modules on every core (runtime/llvm_pool.py): the helpers' objects
are the bytes this process makes, a helper that dies is replaced by this process,
and bad IR is an InternalError wherever it was compiled."""

from __future__ import annotations

import numpy as np
import pytest

from stripeml.errors import InternalError
from stripeml.runtime import jit, llvm_pool


def _add(name: str, n: int) -> str:
    """``name(void **bufs, i64 start, i64 end)``: bufs[2][i] = bufs[0][i] * n + bufs[1][i]."""
    return f"""
define void @{name}(ptr %bufs, i64 %start, i64 %end) {{
entry:
  %pa = load ptr, ptr %bufs
  %qb = getelementptr ptr, ptr %bufs, i64 1
  %pb = load ptr, ptr %qb
  %qc = getelementptr ptr, ptr %bufs, i64 2
  %pc = load ptr, ptr %qc
  %empty = icmp sge i64 %start, %end
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ %start, %entry ], [ %next, %loop ]
  %a = getelementptr float, ptr %pa, i64 %i
  %b = getelementptr float, ptr %pb, i64 %i
  %c = getelementptr float, ptr %pc, i64 %i
  %x = load float, ptr %a
  %y = load float, ptr %b
  %m = fmul float %x, {float(n):.1f}
  %s = fadd float %m, %y
  store float %s, ptr %c
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %end
  br i1 %more, label %loop, label %done
done:
  ret void
}}
"""


MODULES = [(_add(f"add{n}", n), opt) for n in range(1, 9) for opt in (1, 3)]


@pytest.fixture
def helpers(monkeypatch):
    monkeypatch.setenv(llvm_pool.WORKERS_VARIABLE, "2")
    yield
    llvm_pool._close_all()


def test_helpers_make_the_objects_this_process_makes(helpers) -> None:
    serial = [jit.compile_ir(text, opt=opt) for text, opt in MODULES]
    before = jit.STATS["emit"]
    parallel = llvm_pool.compile_modules(MODULES)
    assert parallel == serial
    assert jit.STATS["emit"] - before < len(MODULES)  # the helpers compiled some of them
    assert llvm_pool._HELPERS  # and are still there for the next program


def test_the_objects_run(helpers) -> None:
    objects = llvm_pool.compile_modules(MODULES)
    loaded = jit.load_object(objects)  # several objects, one engine
    import ctypes

    a = np.arange(16, dtype=np.float32)
    b = np.ones(16, np.float32)
    c = np.zeros(16, np.float32)
    bufs = (ctypes.c_void_p * 3)(a.ctypes.data, b.ctypes.data, c.ctypes.data)
    loaded.kernel("add5")(bufs, 0, 16)
    np.testing.assert_array_equal(c, a * 5 + 1)


def test_a_helper_that_dies_is_replaced_by_this_process(helpers) -> None:
    llvm_pool.compile_modules(MODULES[:4])
    for helper in llvm_pool._HELPERS:
        helper.proc.kill()
        helper.proc.wait()
    with pytest.warns(RuntimeWarning, match="in this process only"):
        llvm_pool._WARNED = False
        objects = llvm_pool.compile_modules(MODULES)
    assert objects == [jit.compile_ir(text, opt=opt) for text, opt in MODULES]


@pytest.mark.parametrize("where", ["helper", "here"])
def test_bad_ir_is_an_internal_error(helpers, monkeypatch, where) -> None:
    if where == "here":
        monkeypatch.setenv(llvm_pool.WORKERS_VARIABLE, "0")
    bad = [*MODULES[:5], ("define void @broken( {", 3)]
    with pytest.raises(InternalError, match="invalid"):
        llvm_pool.compile_modules(bad)


def test_the_worker_count_comes_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv(llvm_pool.WORKERS_VARIABLE, "3")
    assert llvm_pool.worker_count() == 3
    monkeypatch.setenv(llvm_pool.WORKERS_VARIABLE, "none")
    with pytest.warns(RuntimeWarning, match="not a number"):
        assert llvm_pool.worker_count() == 0
    monkeypatch.delenv(llvm_pool.WORKERS_VARIABLE)
    assert llvm_pool.worker_count() >= 0


_POOL_CHILD = """
import json
import numpy as np
import stripeml
from stripeml.runtime import native_pool
from stripeml.runtime.cpu import CpuBackend, CpuOptions
from stripeml.runtime.kernel_cache import KernelCache
folder = KernelCache(folder="runtime").directory
a = np.arange(4096, dtype=np.float32)
b = np.ones(4096, np.float32)
fn = stripeml.compile("function (A, B) -> (C) { C = A * 3 + B; }", target="interp")
compiled = CpuBackend(CpuOptions(threads=2)).compile(fn.lower(a, b).program)
# compiled: the pool's code was compiled with the kernels, not loaded yet
stored = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
loaded = len(native_pool._LOADED)
c = compiled.run({"A": a, "B": b})["C"]
print(json.dumps({"stored": stored, "loaded_before_run": loaded,
                  "ok": bool(np.array_equal(c, a * 3 + b))}))
"""


def test_a_cold_compile_compiles_the_pools_code_with_its_kernels(tmp_path) -> None:
    """In a fresh process with an empty cache, compiling for two threads stores the
    native pool's code (compiled beside the kernels) before the first run loads it;
    the results are NumPy's."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, STRIPEML_CACHE_DIR=str(tmp_path), STRIPEML_COMPILE_WORKERS="1")
    env.pop("STRIPEML_THREADS", None)
    done = subprocess.run(
        [sys.executable, "-c", _POOL_CHILD], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["ok"]
    assert got["loaded_before_run"] == 0 and len(got["stored"]) == 1
    # the stored object is the one this process makes from the same IR
    from stripeml.runtime import native_pool
    from stripeml.runtime.kernel_cache import KernelCache, cache_key

    text = native_pool._ir(native_pool._futex_syscall() is None)
    key = cache_key(f"native pool\0{text}", jit.target_description())
    entry = KernelCache(tmp_path, folder="runtime").get(key)
    assert entry is not None and entry.object_code == jit.compile_ir(text, count=False)
