"""The machine code of a scalar float ``exp`` loop once LLVM has widened it.

A softmax's ``exp`` (and its row sum) is a scalar kernel that LLVM's loop
vectoriser widens.  On a host with AVX-512F and VL, ``codegen/llvm_math.py``
rounds ``n`` with the 1.5 * 2^23 addition and reads its integer from the sum's
bits, so the widened loop has one ``vscalef`` per vector and neither a
float-to-int conversion nor the NaN compare and select of the other hosts'
form.  The results themselves are checked in ``test_llvm_math.py``.
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from stripeml.codegen.llvm_math import emit_math
from stripeml.runtime import jit
from stripeml.runtime.llvm_worker import machine, optimise, parse


def _avx512() -> bool:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features()
    return bool(features.get("avx512f", False) and features.get("avx512vl", False))


def _scalar_loop_assembly(name: str) -> str:
    """``out[i] = name(a[i])`` over float scalars, optimised as the CPU backend's
    kernels are (O3, loop vectoriser on), as host assembly."""
    f32, i64, ptr = ir.FloatType(), ir.IntType(64), ir.PointerType()
    mod = ir.Module(name="shape")
    mod.triple = llvm.get_process_triple()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr, ptr, i64]), "kernel")
    for p in fn.args[:2]:
        p.add_attribute("noalias")
    src, dst, n = fn.args
    entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    x = b.load(b.gep(src, [i], source_etype=f32), typ=f32)
    b.store(emit_math(b, name, [x]), b.gep(dst, [i], source_etype=f32))
    nxt = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    triple, cpu, features, reloc, codemodel = jit.machine_settings()
    tm = machine(triple, cpu, features, 3, reloc, codemodel)
    module = parse(str(mod), tm)
    optimise(module, tm, 3)
    return str(tm.emit_assembly(module))


@pytest.mark.skipif(not _avx512(), reason="the host has no AVX-512F/VL (no vscalef)")
def test_widened_scalar_exp_has_no_conversion_or_nan_select() -> None:
    asm = _scalar_loop_assembly("exp")
    ops = {line.split()[0] for line in asm.splitlines() if line.startswith("\tv")}
    assert "vscalefps" in ops  # widened: one vscalef per vector
    assert not ops & {"vcvttps2dq", "vcvtps2dq", "vrndscaleps"}, sorted(ops)
    assert not any(op.startswith("vcmp") for op in ops), sorted(ops)


def test_scalar_exp_keeps_nan_and_limits() -> None:
    """The integer read from a NaN's bits is some value: NaN still comes out, and
    the clamped limits still give 0 and inf (also in test_llvm_math.py)."""
    from test_llvm_math import jit as jit_loop

    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 89.0, -104.0, 0.0, 1.0], np.float32)
    got = jit_loop("exp", np.float32, 0)(x)
    assert np.isnan(got[:2]).all()
    assert got[2] == np.inf and got[3] == 0.0 and got[4] == np.inf and got[5] == 0.0
    assert got[6] == 1.0 and abs(got[7] - np.e) <= 2.5e-7 * np.e
