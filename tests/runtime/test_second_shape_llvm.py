"""LLVM's share of a second input shape (docs/cpu-backend.md, "New input shapes"):
dead-store elimination's walk limit changes no object, the costliest module is
compiled first, and a softmax's division moves after its product when the
product's result is as large as the quotient (a head of 64 at sequence 64), so
a transformer's attention has the same kernels at every sequence length from
the head's size up."""

from __future__ import annotations

import dataclasses

import llvmlite.binding as llvm
import numpy as np
import pytest

import stripeml
from attention import ATTENTION, attention_reference
from stripeml import api
from stripeml.codegen.llvm import body_opt_level
from stripeml.ir.nodes import Block, Intrinsic
from stripeml.runtime import cpu, jit, llvm_pool, llvm_worker
from stripeml.targets.host import detect_vector_width


def _inputs(h: int, m: int, n: int, d: int, e: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    shapes = ((h, m, d), (h, n, d), (h, n, e))
    return [(2 * rng.standard_normal(s)).astype(np.float32) for s in shapes]


def _attention_bodies() -> list[tuple[str, int]]:
    """The bodies of an attention program large enough for ``nest`` (12 heads, 128
    queries and keys: one body runs the whole chain, intermediates on its stack)."""
    args = _inputs(12, 128, 128, 64, 64)
    exe = stripeml.compile(ATTENTION, target="cpu").lower(*args)
    assert any("nest" in s.tags for s in exe.program.root.stmts if isinstance(s, Block))
    module = cpu.generate_module(exe.program, detect_vector_width())
    return [(b.llvm_ir, b.opt) for b in module.bodies if b.llvm_ir]


def _tiny_module() -> str:
    return "define void @f(ptr %p) {\nentry:\n  store float 1.0, ptr %p\n  ret void\n}\n"


def test_the_walk_limit_is_set_where_modules_are_optimised() -> None:
    assert "-dse-memoryssa-walklimit=10" in llvm_worker.EFFORT_OPTIONS
    jit.compile_ir(_tiny_module(), opt=3)
    assert llvm_worker._EFFORT_SET


def test_the_walk_limit_changes_no_object() -> None:
    # the attention nest's body (O2, where dead-store elimination runs too): a
    # quarter of its O3 time was these walks
    bodies = _attention_bodies()
    assert any(opt >= 2 for _, opt in bodies)
    limited = [jit.compile_ir(text, opt=opt) for text, opt in bodies]
    try:
        llvm.set_option("stripeml", "-dse-memoryssa-walklimit=90")  # LLVM's default
        default = [jit.compile_ir(text, opt=opt) for text, opt in bodies]
    finally:
        llvm_worker._EFFORT_SET = False
        llvm_worker.limit_effort()
    assert limited == default


def _without_exp(blk: Block) -> Block:
    stmts = tuple(
        _without_exp(t)
        if isinstance(t, Block)
        else dataclasses.replace(t, op="log")
        if isinstance(t, Intrinsic) and t.op == "exp"
        else t
        for t in blk.stmts
    )
    return dataclasses.replace(blk, stmts=stmts)


def test_attention_nests_compile_at_o2_and_match_numpy() -> None:
    """The attention nest (a contraction and an ``exp``) gets LLVM's O2: as fast
    as O3 for a third of the compile; its results are NumPy's."""
    args = _inputs(12, 128, 128, 64, 64)
    f = stripeml.compile(ATTENTION, target="cpu")
    exe = f.lower(*args)
    nests = [s for s in exe.program.root.stmts if isinstance(s, Block) and "nest" in s.tags]
    assert nests
    assert all(body_opt_level(n, detect_vector_width()) == 2 for n in nests)
    # the same nest with a ``log`` for the ``exp`` (no softmax: a convolution
    # chain's nest, say) stays at O3
    assert all(body_opt_level(_without_exp(n), detect_vector_width()) == 3 for n in nests)
    np.testing.assert_allclose(f(*args), attention_reference(*args), rtol=1e-4, atol=1e-5)


def test_a_nest_costs_more_than_a_flat_module_of_its_length() -> None:
    nest = "".join(f"l{n}.head.{n}:\n  br label %x\n" for n in range(40))
    flat = "x" * len(nest)
    assert llvm_pool.cost(nest, 3) > llvm_pool.cost(flat, 3)
    assert llvm_pool.cost(nest, 3) > llvm_pool.cost(nest, 1) > llvm_pool.cost(nest, 0)


def test_the_costliest_pending_module_goes_first() -> None:
    # an O3 body with loops before a far longer O0 module, before an O1 copy
    o3 = "".join(f"l{n}.head.{n}:\n" for n in range(60))
    o0 = "w" * 100_000
    o1 = "c" * len(o3)
    stream = llvm_pool.Stream(1)  # fewer than MIN_PARALLEL: no helper takes any
    for text, opt in ((o1, 1), (o0, 0), (o3, 3)):
        stream.submit(text, opt)
    order = []
    while (k := stream._take(wait=False)) is not None:
        order.append(k)
    assert order == [2, 1, 0]
    stream._closed = True


def test_the_helpers_still_make_this_process_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = _attention_bodies()
    serial = [jit.compile_ir(text, opt=opt) for text, opt in bodies]
    monkeypatch.setenv(llvm_pool.WORKERS_VARIABLE, "1")
    try:
        parallel = llvm_pool.compile_modules(bodies + [(_tiny_module(), 1)] * 3)
    finally:
        llvm_pool._close_all()
    assert parallel[: len(serial)] == serial


def _names(args: list[np.ndarray]) -> set[str]:
    """The root buffers of the optimised attention program for ``args`` (one thread)."""
    exe = stripeml.compile(ATTENTION, target=api.target_for("cpu", 1)).lower(*args)
    return {r.into for r in exe.program.root.refs}


def _check(args: list[np.ndarray]) -> None:
    got = stripeml.compile(ATTENTION, target="cpu")(*args)
    want = attention_reference(*args)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_the_division_moves_when_the_product_is_as_large_as_the_quotient() -> None:
    # 16 keys, 16 values per head: as many divisions after the product as before
    # it, and no pass over the scores to divide them: the quotient P goes
    args = _inputs(2, 8, 16, 4, 16)
    assert "P" not in _names(args)
    _check(args)


def test_the_division_stays_when_the_product_is_larger() -> None:
    # 8 keys, 16 values per head: more divisions after the product than before it
    args = _inputs(2, 8, 8, 4, 16)
    assert "P" in _names(args)
    _check(args)
