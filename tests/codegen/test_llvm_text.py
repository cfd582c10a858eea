"""``codegen/llvm_text.py``: the text it writes for an llvmlite module is
llvmlite's own ``str(module)``, byte for byte, for every body the code
generator makes of the program suite, and for hand-made modules with what
the generator rarely or never emits (quoted names, flags, alignments,
metadata, calls, declarations)."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir

import stripeml
from stripeml.codegen import llvm as llvm_codegen
from stripeml.codegen.llvm_text import module_text
from stripeml.passes.manager import run_pipeline

try:
    from pipelines import cpu_passes
    from programs import CASES
except ImportError:  # pragma: no cover - run from the repository root
    from tests.pipelines import cpu_passes
    from tests.programs import CASES


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every body the code generator writes is also printed by llvmlite and
    compared; the list holds each body's length."""
    seen: list[int] = []

    def both(module: ir.Module) -> str:
        mine = module_text(module)
        assert mine == str(module)
        seen.append(len(mine))
        return mine

    monkeypatch.setattr(llvm_codegen, "module_text", both)
    return seen


def test_every_body_of_the_program_suite(compared: list[int]) -> None:
    for case in CASES:
        inputs = case.make_inputs()
        f = stripeml.compile(case.source, target="interp")
        program = f.lower(*(inputs[p] for p in f.params)).program
        for width in (8, 16):
            optimised = run_pipeline(program, cpu_passes(vector_width=width)).program
            llvm_codegen.generate(optimised, vector_width=width, fma=width == 16, int8_dot=True)
    assert len(compared) > 2 * len(CASES)  # (a program may have several kernels)
    assert sum(compared) > 1_000_000


def _module() -> tuple[ir.Module, ir.IRBuilder]:
    module = ir.Module(name='a "quoted" module')
    module.triple = "x86_64-unknown-linux-gnu"
    f32, i64 = ir.FloatType(), ir.IntType(64)
    fn_type = ir.FunctionType(ir.VoidType(), [ir.PointerType(), i64, f32])
    fn = ir.Function(module, fn_type, name="body")
    fn.args[0].name = 'p"tr'
    fn.args[1].name = "n\\x"
    fn.attributes.add("nounwind")
    entry = fn.append_basic_block("entry")
    fn.append_basic_block("loop body")
    fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    return module, b


def test_hand_made_modules_cover_every_writer() -> None:
    module, b = _module()
    fn = b.function
    ptr, n, x = fn.args
    f32, i64, i32 = ir.FloatType(), ir.IntType(64), ir.IntType(32)
    vec = ir.VectorType(f32, 8)
    slot = b.alloca(f32, name="slot")
    slot.align = 32
    many = b.alloca(vec, size=ir.Constant(i64, 4), name="many")
    b.store(x, slot, align=4)
    b.store(ir.Constant(vec, [float(k) for k in range(8)]), many)
    entry = b.block
    loop, done = fn.blocks[1], fn.blocks[2]
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64, name="i")
    acc = b.phi(f32, name="acc", flags=("fast",))
    at = b.gep(ptr, [i], inbounds=True, name="at", source_etype=f32)
    loose = b.gep(many, [ir.Constant(i64, 1), ir.Constant(i32, 2)], name="loose", source_etype=vec)
    v = b.load(at, typ=f32, align=4, name="v")
    w = b.load(loose, typ=f32, name="w")
    s = b.fadd(acc, v, name="s", flags=("fast", "contract"))
    t = b.fmul(s, w, name="t")
    d = b.fdiv(t, ir.Constant(f32, 3.0), name="d")
    big = b.fcmp_ordered(">", d, x, name="big", flags=("nnan",))
    pick = b.select(big, d, x, name="pick", flags=("fast",))
    lanes = b.insert_element(
        ir.Constant(vec, ir.Undefined), pick, ir.Constant(i32, 0), name="lanes"
    )
    spread = b.shuffle_vector(
        lanes, ir.Constant(vec, ir.Undefined), ir.Constant(ir.VectorType(i32, 8), [0] * 8)
    )
    first = b.extract_element(spread, ir.Constant(i32, 3), name="first")
    wide = b.fpext(first, ir.DoubleType(), name="wide")
    back = b.fptrunc(wide, f32, name="back")
    k = b.add(i, ir.Constant(i64, 1), name="k", flags=("nsw",))
    tagged = b.mul(k, ir.Constant(i64, 2), name="tagged")
    tagged.set_metadata("tag", module.add_metadata([ir.MetaDataString(module, "x")]))
    more = b.icmp_signed("<", k, n, name="more")
    exp = ir.Function(module, ir.FunctionType(f32, [f32]), name="llvm.exp.f32")
    called = b.call(exp, [back], name="called")
    i.add_incoming(ir.Constant(i64, 0), entry)
    i.add_incoming(k, loop)
    acc.add_incoming(x, entry)
    acc.add_incoming(called, loop)
    branch = b.cbranch(more, loop, done)
    branch.set_weights([90, 10])
    b.position_at_end(done)
    b.ret_void()
    module.add_named_metadata("names", [ir.MetaDataString(module, "y")])
    # an identified type and a global, printed by llvmlite itself
    pair = module.context.get_identified_type("pair")
    pair.set_body(f32, i64)
    ir.GlobalVariable(module, pair, name="g")
    text = module_text(module)
    assert text == str(module)
    for piece in ('%"p\\22tr"', '"loop body":', "phi  i64", "phi fast float", "select fast i1",
                  "fcmp nnan ogt", "add nsw i64", "!tag", "getelementptr inbounds float",
                  "getelementptr <8 x float>", "align 32", "shufflevector", "!prof"):  # fmt: skip
        assert piece in text, piece


def test_an_instruction_without_a_writer_is_printed_by_llvmlite() -> None:
    module, b = _module()
    _, n, _ = b.function.args
    b.comment("a comment: an instruction class with no writer here")
    b.unreachable()
    for blk in b.function.blocks[1:]:
        ir.IRBuilder(blk).ret_void()
    text = module_text(module)
    assert text == str(module) and "; a comment" in text


def test_the_text_compiles_as_llvmlites_does() -> None:
    """The bodies' text is what LLVM parses: a kernel compiled through it runs."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((9, 13)).astype(np.float32)
    b = rng.standard_normal((13, 7)).astype(np.float32)
    f = stripeml.compile(
        "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }",
        target="cpu",
    )
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-5)
