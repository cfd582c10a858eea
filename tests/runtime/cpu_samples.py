"""Hand-written LLVM IR kernels that follow the CPU ABI, and programs to pair them with.

Until the code generator lands, the CPU runtime is tested by replacing
``stripeml.runtime.cpu.generate_module`` with :class:`FakeGenerator`, which
returns a fixed :class:`~stripeml.codegen.cpu_abi.CpuModule` (buffers taken
from the program's root refs).  This module imports only ``stripeml`` so that
child processes can import it by path (see :func:`child_main`).
"""

from __future__ import annotations

import json
import sys
import time

from stripeml.codegen.cpu_abi import BufferInfo, CpuModule, KernelInfo, Step
from stripeml.ir.affine import Affine
from stripeml.ir.nodes import (
    Block,
    Index,
    Intrinsic,
    Load,
    Program,
    Refinement,
    Special,
    Store,
    TensorShape,
)
from stripeml.runtime.kernel_cache import Entry

_HEAD = "define void @{name}(ptr noalias %bufs, i64 %start, i64 %end) {{\nentry:\n"


def _buf(i: int) -> str:
    return f"  %pp{i} = getelementptr ptr, ptr %bufs, i64 {i}\n  %p{i} = load ptr, ptr %pp{i}\n"


def _loop(body: str) -> str:
    return (
        "  %go = icmp slt i64 %start, %end\n"
        "  br i1 %go, label %loop, label %exit\n"
        "loop:\n"
        "  %i = phi i64 [ %start, %entry ], [ %next, %loop ]\n"
        f"{body}"
        "  %next = add i64 %i, 1\n"
        "  %more = icmp slt i64 %next, %end\n"
        "  br i1 %more, label %loop, label %exit\n"
        "exit:\n"
        "  ret void\n"
        "}\n"
    )


def add_kernel(name: str, a: int, b: int, c: int) -> str:
    """``buf[c][i] = buf[a][i] + buf[b][i]`` on f32 for i in [start, end)."""
    body = (
        f"  %xa = getelementptr float, ptr %p{a}, i64 %i\n"
        f"  %xb = getelementptr float, ptr %p{b}, i64 %i\n"
        f"  %xc = getelementptr float, ptr %p{c}, i64 %i\n"
        "  %va = load float, ptr %xa\n"
        "  %vb = load float, ptr %xb\n"
        "  %s = fadd float %va, %vb\n"
        "  store float %s, ptr %xc\n"
    )
    return _HEAD.format(name=name) + "".join(_buf(k) for k in sorted({a, b, c})) + _loop(body)


def incr_kernel(name: str) -> str:
    """``buf0[i] += 1.0f`` and ``buf1[i] = start`` (i64): each element touched once per call."""
    body = (
        "  %x = getelementptr float, ptr %p0, i64 %i\n"
        "  %v = load float, ptr %x\n"
        "  %w = fadd float %v, 1.0\n"
        "  store float %w, ptr %x\n"
        "  %y = getelementptr i64, ptr %p1, i64 %i\n"
        "  store i64 %start, ptr %y\n"
    )
    return _HEAD.format(name=name) + _buf(0) + _buf(1) + _loop(body)


SPIN_LIMIT = 1 << 32


def spin_kernel(name: str) -> str:
    """On i64 flags F: F[0] = 1; spin until F[1] != 0 (or SPIN_LIMIT turns); F[2] = turns."""
    return (
        _HEAD.format(name=name) + _buf(0) + "  store volatile i64 1, ptr %p0\n"
        "  %f1 = getelementptr i64, ptr %p0, i64 1\n"
        "  %f2 = getelementptr i64, ptr %p0, i64 2\n"
        "  br label %loop\n"
        "loop:\n"
        "  %n = phi i64 [ 0, %entry ], [ %n1, %loop ]\n"
        "  %v = load volatile i64, ptr %f1\n"
        "  %n1 = add i64 %n, 1\n"
        "  %released = icmp ne i64 %v, 0\n"
        f"  %timeout = icmp sge i64 %n1, {SPIN_LIMIT}\n"
        "  %stop = or i1 %released, %timeout\n"
        "  br i1 %stop, label %exit, label %loop\n"
        "exit:\n"
        "  store volatile i64 %n1, ptr %f2\n"
        "  ret void\n"
        "}\n"
    )


# -- programs ------------------------------------------------------------------


def _ref(dir: str, name: str, dtype: str, sizes: tuple[int, ...], strides=None) -> Refinement:
    shape = TensorShape.dense(dtype, sizes)
    if strides is not None:
        shape = TensorShape(dtype, sizes, tuple(strides))
    return Refinement(dir, name, shape)


def _eltwise_block(n: int, a: str, b: str, c: str) -> Block:
    i = Affine.build({"i": 1}, 0)
    one = TensorShape("f32", (1,), (1,))
    return Block(
        idxs=(Index("i", n),),
        refs=(
            Refinement("in", a, one, from_=a, access=(i,)),
            Refinement("in", b, one, from_=b, access=(i,)),
            Refinement("out", c, one, from_=c, access=(i,), agg="assign"),
        ),
        stmts=(
            Load("$a", a),
            Load("$b", b),
            Intrinsic("add", ("$a", "$b"), "$c", "f32"),
            Store(c, "$c"),
        ),
        tags=frozenset({"kernel", "eltwise"}),
    )


def add_program(n: int, tag: str = "") -> Program:
    """``C = A + B`` on f32[n] (``tag`` names the kernel block to vary the program text)."""
    refs = (
        _ref("in", "A", "f32", (n,)),
        _ref("in", "B", "f32", (n,)),
        _ref("out", "C", "f32", (n,)),
    )
    kern = _eltwise_block(n, "A", "B", "C")
    if tag:
        kern = Block(kern.idxs, kern.refs, kern.stmts, tags=kern.tags, name=tag)
    return Program(Block(refs=refs, stmts=(kern,), tags=frozenset({"program"})))


def add_copy_program(n: int) -> Program:
    """``T = A + B`` into a program temporary, then ``special copy(T) -> (D)``."""
    refs = (
        _ref("in", "A", "f32", (n,)),
        _ref("in", "B", "f32", (n,)),
        _ref("out", "D", "f32", (n,)),
        _ref("none", "T", "f32", (n,)),
    )
    stmts = (_eltwise_block(n, "A", "B", "T"), Special("copy", ("T",), ("D",)))
    return Program(Block(refs=refs, stmts=stmts, tags=frozenset({"program"})))


def strided_add_program(rows: int, cols: int) -> Program:
    """``C = A + B`` on f32[rows, cols] stored column-major (strides (1, rows))."""
    st = (1, rows)
    refs = tuple(
        _ref(d, nm, "f32", (rows, cols), st) for d, nm in (("in", "A"), ("in", "B"), ("out", "C"))
    )
    return Program(Block(refs=refs, stmts=(), tags=frozenset({"program"})))


def flags_program(tag: str = "spin") -> Program:
    """One i64[3] output ``F`` (the spin kernel's flags)."""
    refs = (_ref("out", "F", "i64", (3,)),)
    return Program(Block(refs=refs, tags=frozenset({"program"}), name=tag))


def incr_program(n: int) -> Program:
    """Outputs ``C`` f32[n] and ``D`` i64[n] (the increment kernel's buffers)."""
    refs = (_ref("out", "C", "f32", (n,)), _ref("out", "D", "i64", (n,)))
    return Program(Block(refs=refs, tags=frozenset({"program"})))


# -- the fake generator ------------------------------------------------------------


def kernel_step(symbol: str, extent: int, splittable: bool = True, work: int | None = None) -> Step:
    return Step(
        kernel=KernelInfo(symbol, symbol, extent, splittable, extent if work is None else work)
    )


class FakeGenerator:
    """Stands in for ``codegen.llvm.generate``: fixed IR and steps; counts its calls."""

    def __init__(self, ir: str, steps: tuple[Step, ...]) -> None:
        self.ir = ir
        self.steps = steps
        self.calls = 0

    def __call__(
        self, program: Program, vector_width: int, fma: bool = False, **_: object
    ) -> CpuModule:
        self.calls += 1
        buffers = tuple(
            BufferInfo(r.into, r.shape.dtype, r.shape.sizes, r.shape.strides, r.dir)
            for r in program.root.refs
        )
        return CpuModule(self.ir, buffers, self.steps)


def add_generator(n: int) -> FakeGenerator:
    return FakeGenerator(add_kernel("add_f32", 0, 1, 2), (kernel_step("add_f32", n),))


def sample_entry(obj: bytes = b"\x7fELF-object-bytes") -> Entry:
    """A cache entry exercising every metadata field (the object code is fake)."""
    module = CpuModule(
        llvm_ir="; some IR\n",
        buffers=(
            BufferInfo("X", "f32", (3, 4), (4, 1), "in"),
            BufferInfo("I", "i64", (2,), (1,), "in"),
            BufferInfo("Y", "f32", (), (), "out"),
            BufferInfo("T", "f32", (3, 4), (1, 3), "none"),
        ),
        steps=(
            kernel_step("k0", 3, splittable=False, work=12),
            Step(special=Special("gather", ("X", "I"), ("T",), (("axis", -1),))),
            Step(
                special=Special(
                    "weird", ("T",), ("Y",), (("s", 'a "q"\n'), ("t", (1, -2)), ("f", 0.1))
                )
            ),
        ),
    )
    return Entry(obj, module)


# -- child process entry ---------------------------------------------------------


def child_main(n: int) -> None:
    """Compile and run ``add_program(n)`` with a counting fake generator; print a JSON report."""
    import numpy as np

    t0 = time.perf_counter()
    from stripeml.runtime import cpu, jit

    gen = add_generator(n)
    cpu.generate_module = gen  # the backend looks the generator up at compile time
    t1 = time.perf_counter()
    compiled = cpu.CpuBackend(cpu.CpuOptions(threads=2)).compile(add_program(n))
    t2 = time.perf_counter()
    a = np.arange(n, dtype=np.float32)
    out = compiled.run({"A": a, "B": a})["C"]
    report = {
        "generate_calls": gen.calls,
        "stats": dict(jit.STATS),
        "correct": bool(np.array_equal(out, a + a)),
        "code_ok": compiled.code == gen.ir,
        "import_s": t1 - t0,
        "compile_s": t2 - t1,
    }
    print(json.dumps(report))


if __name__ == "__main__":  # pragma: no cover - run by the cache tests
    child_main(int(sys.argv[1]))


# fn(args, lo, hi) with a gathered argument array (codegen/cpu_abi.py):
# args[0][i] += args[1][i] * args[2] (i64) for i in [lo, hi).
GATHER_IR = """
define void @scaled_add(i8* %p, i64 %lo, i64 %hi) {
entry:
  %args = bitcast i8* %p to i64*
  %d0 = load i64, i64* %args
  %s1 = getelementptr i64, i64* %args, i64 1
  %s0 = load i64, i64* %s1
  %k1 = getelementptr i64, i64* %args, i64 2
  %k = load i64, i64* %k1
  %dst = inttoptr i64 %d0 to i64*
  %src = inttoptr i64 %s0 to i64*
  %empty = icmp uge i64 %lo, %hi
  br i1 %empty, label %e, label %l
l:
  %i = phi i64 [%lo, %entry], [%i1, %l]
  %q = getelementptr i64, i64* %dst, i64 %i
  %r = getelementptr i64, i64* %src, i64 %i
  %v = load i64, i64* %q
  %w = load i64, i64* %r
  %m = mul i64 %w, %k
  %v1 = add i64 %v, %m
  store i64 %v1, i64* %q
  %i1 = add i64 %i, 1
  %c = icmp ult i64 %i1, %hi
  br i1 %c, label %l, label %e
e:
  ret void
}
"""


def gather_batch_case(scaled_add: int, add_index: int):
    """A batch of gathered and plain steps over a buffer table, and the function
    that checks the arrays after ``runs`` runs against NumPy: ``(batch, table,
    arrays, check)``.  ``add_index`` is the plain kernel of the native pool's
    tests (``p[i] += i + 1`` over the table itself, plus one count per call in
    ``p[4096]``); the table's slots 4100-4102 hold the three arrays' addresses."""
    import numpy as np

    from stripeml.runtime.native_pool import Batch

    n = 1000
    a = np.zeros(n + 16, np.int64)
    b = np.arange(n + 16, dtype=np.int64)
    c = np.arange(n + 16, dtype=np.int64) * 3
    table = np.zeros(4104, np.int64)
    table[4100], table[4101], table[4102] = (x.ctypes.data for x in (a, b, c))
    # a[i + 4] += b[i + 2] * 5, split in 3 chunks; a[i] += c[i] * 7, whole
    first = np.array([3, 4100, 4 * 8, 4101, 2 * 8, -1, 5], np.int64)
    second = np.array([3, 4100, 0, 4102, 0, -1, 7], np.int64)
    three = np.array([n * i // 3 for i in range(4)], np.int64)
    batch = Batch(
        [
            (scaled_add, n, three.ctypes.data, 3, first.ctypes.data),
            (add_index, 100, 0, 0),
            (scaled_add, n, 0, 0, second.ctypes.data),
        ],
        room=3,
    )
    keep = (a, b, c, first, second, three)

    def check(runs: int) -> None:
        want = np.zeros(n + 16, np.int64)
        want[4 : n + 4] += b[2 : n + 2] * 5 * runs
        want[:n] += c[:n] * 7 * runs
        np.testing.assert_array_equal(a, want)
        np.testing.assert_array_equal(table[:100], np.arange(1, 101) * runs)
        assert not table[100:4096].any() and table[4096] == runs

    return batch, table, keep, check
