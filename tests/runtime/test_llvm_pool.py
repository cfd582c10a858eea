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
