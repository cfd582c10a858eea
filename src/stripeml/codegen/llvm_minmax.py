"""Float ``max`` and ``min`` in vector lanes for the code generator
(:mod:`.llvm_ops`): NaN-propagating as NumPy's ``maximum`` and ``minimum``, in
three instructions a vector on x86 where LLVM's ``llvm.maximum`` takes about
seven (attention's row maximum, a layer norm's, every ``>`` / ``<``
reduction in vector lanes)."""

from __future__ import annotations

import functools

import llvmlite.ir as ir

from .llvm_types import call_intrinsic

__all__ = ["hreduce_minmax", "vector_minmax"]


def vector_minmax(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
    """NaN-propagating ``max``/``min`` of float vectors (NumPy's ``maximum`` and
    ``minimum``): ``x > y ? x : y`` (``<`` for ``min``: x86's ``vmaxps x, y``,
    which gives ``y`` when either is NaN), then ``x`` where ``x`` is NaN: three
    instructions.  LLVM lowers ``llvm.maximum`` to about seven on AVX-512 (it also
    orders -0 below +0), all on a reduction's dependency chain; a reduction
    passes its accumulator as ``y`` (:func:`.llvm_ops.combine`), so its chain is the
    ``vmaxps`` and a masked move, and a NaN accumulator stays NaN.  Of two
    zeros of different signs this gives ``y``, as NumPy's vectorised ``maximum``
    does (the interpreter's oracle: no order of zeros is promised).

    The ``vmaxps`` is its x86 intrinsic (:func:`_x86_minmax`): written as a
    compare and a select, LLVM merged the two selects into a compare, a NaN test
    and an ``or`` of masks on the chain.  Where the host lacks the instruction
    of that width (or the module is not for the host), ``llvm.maximum`` stays.
    Only for vectors: a scalar loop keeps ``llvm.maximum``, whose reductions
    LLVM's loop vectoriser recognises."""
    pick = _x86_minmax(b, op, x, y)
    if pick is None:
        return call_intrinsic(b, "llvm.maximum" if op == "max" else "llvm.minimum", [x, y])
    return b.select(b.fcmp_unordered("uno", x, x), x, pick)


#: x86's max/min instructions by (op, element bits, vector bits): the intrinsic and
#: the host feature it needs (the 512-bit ones take a rounding operand, 4: current).
_X86_MINMAX = {
    (op, el, bits): (name.format(op=op), feature)
    for op in ("max", "min")
    for el, bits, name, feature in (
        (32, 128, "llvm.x86.sse.{op}.ps", "sse"),
        (64, 128, "llvm.x86.sse2.{op}.pd", "sse2"),
        (32, 256, "llvm.x86.avx.{op}.ps.256", "avx"),
        (64, 256, "llvm.x86.avx.{op}.pd.256", "avx"),
        (32, 512, "llvm.x86.avx512.{op}.ps.512", "avx512f"),
        (64, 512, "llvm.x86.avx512.{op}.pd.512", "avx512f"),
    )
}


@functools.cache
def _host_features(triple: str) -> frozenset[str]:
    """The host's CPU features when modules of ``triple`` run on it (the JIT emits
    for the host), else none."""
    import llvmlite.binding as llvm

    if triple != llvm.get_process_triple() or not triple.startswith("x86_64"):
        return frozenset()
    try:
        features = llvm.get_host_cpu_features()
    except RuntimeError:
        return frozenset()
    return frozenset(k for k, on in features.items() if on)


def _x86_minmax(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value) -> ir.Value | None:
    """x86's ``maxps x, y`` (``x > y ? x : y``; ``min``: ``<``) on float vectors of
    128, 256 or 512 bits, when the host has it; else None."""
    t = x.type
    el = t.element
    el_bits = 32 if isinstance(el, ir.FloatType) else 64 if isinstance(el, ir.DoubleType) else 0
    found = _X86_MINMAX.get((op, el_bits, el_bits * t.count))
    if found is None or found[1] not in _host_features(b.module.triple):
        return None
    name, _ = found
    args = [x, y]
    if el_bits * t.count == 512:
        args.append(ir.Constant(ir.IntType(32), 4))
    fn = b.module.globals.get(name)
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(t, [a.type for a in args]), name)
    return b.call(fn, args)


def hreduce_minmax(b: ir.IRBuilder, agg: str, v: ir.Value) -> ir.Value:
    """The NaN-propagating ``max``/``min`` of a float vector's lanes: halves
    combined by :func:`_vector_minmax` down to two lanes, then ``llvm.maximum``
    (``llvm.vector.reduce.fmaximum`` expands every step to seven instructions)."""
    t = v.type
    n = t.count
    i32 = ir.IntType(32)
    while n > 2 and n % 2 == 0:
        half = n // 2
        lo = b.shuffle_vector(
            v, ir.Constant(t, None), ir.Constant(ir.VectorType(i32, half), list(range(half)))
        )
        hi = b.shuffle_vector(
            v, ir.Constant(t, None), ir.Constant(ir.VectorType(i32, half), list(range(half, n)))
        )
        v = vector_minmax(b, agg, hi, lo)
        t = v.type
        n = half
    name = "llvm.maximum" if agg == "max" else "llvm.minimum"
    out = b.extract_element(v, ir.Constant(i32, 0))
    for k in range(1, n):
        out = call_intrinsic(b, name, [out, b.extract_element(v, ir.Constant(i32, k))])
    return out
