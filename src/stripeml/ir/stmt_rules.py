"""Statement rules of the Stripe IR verifier (see :mod:`stripeml.ir.verifier`).

:data:`STMT_RULES` maps each statement class to its rules.  A rule gets the
statement and an :class:`Env` (the block's scope and the scalars defined so
far, with their dtypes) and yields a message per violation; its docstring
states the rule.  :data:`SPECIALS` is the vocabulary of special operations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .dtypes import DTYPES, bits, is_float, is_int
from .intrinsics import INTRINSICS, SHIFTS
from .nodes import Constant, Intrinsic, Load, LoadIndex, Refinement, Special, Store, TensorShape

if TYPE_CHECKING:
    from .verifier import Scope

READS = ("in", "inout", "none")
WRITES = ("out", "inout", "none")

Rule = Callable[..., Iterator[str]]
STMT_RULES: dict[type, list[Rule]] = {}


@dataclass(frozen=True, slots=True)
class SpecialInfo:
    """Arity of a special op, the names of the integer params it requires, and
    its optional word params: ``(name, allowed values)``, the first value the
    default when the param is absent."""

    n_inputs: int
    n_outputs: int
    int_params: tuple[str, ...] = ()
    word_params: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def word(self, stmt: Special, key: str) -> str:
        """Word param ``key`` of ``stmt`` (its default when absent)."""
        allowed = dict(self.word_params)[key]
        value = dict(stmt.params).get(key, allowed[0])
        return value if isinstance(value, str) else allowed[0]


#: How ``scatter``/``scatter_nd`` combine an update with the element it lands
#: on: ``none`` replaces it (the last update in row-major order wins), the
#: others reduce (``add`` ``mul`` ``max`` ``min``, in that order too).
REDUCTIONS = ("none", "add", "mul", "max", "min")
#: Which elements ``topk`` picks.
TOPK_ORDERS = ("largest", "smallest")

SPECIALS: dict[str, SpecialInfo] = {
    "copy": SpecialInfo(1, 1),
    "reshape": SpecialInfo(1, 1),
    "bitview": SpecialInfo(1, 1),
    "gather": SpecialInfo(2, 1, ("axis",)),
    "scatter": SpecialInfo(3, 1, ("axis",), (("reduce", REDUCTIONS),)),
    "scatter_nd": SpecialInfo(3, 1, (), (("reduce", REDUCTIONS),)),
    "topk": SpecialInfo(1, 1, ("axis", "k"), (("order", TOPK_ORDERS),)),
}


@dataclass
class Env:
    """The statement rules' view: the scope and the scalars defined so far (name -> dtype)."""

    scope: Scope
    scalars: dict[str, str] = field(default_factory=dict)

    def ref(self, name: str) -> Refinement | None:
        return self.scope.ref(name)


def stmt_rule(*kinds: type) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for kind in kinds:
            STMT_RULES.setdefault(kind, []).append(fn)
        return fn

    return register


def _unknown(names, known) -> list[str]:
    bad = [n for n in names if n not in known]
    return sorted(set(bad)) if bad else bad


def _fresh(name: str, env: Env) -> Iterator[str]:
    if not name.startswith("$"):
        yield f"scalar names start with '$', not {name!r}"
    elif name in env.scalars:
        yield f"scalar '{name}' is assigned twice (scalars are SSA)"


def _defined(names: tuple[str, ...], env: Env) -> Iterator[str]:
    for name in names:
        if name not in env.scalars:
            yield f"scalar '{name}' is used before it is defined in this block"


def _dtype(dtype: str) -> Iterator[str]:
    if dtype not in DTYPES:
        yield f"unknown dtype {dtype!r}"


@stmt_rule(Load)
def load(stmt: Load, env: Env) -> Iterator[str]:
    """``$x = load(R)``: R is a readable (in/inout/none) ref of this block; $x is fresh."""
    yield from _fresh(stmt.into, env)
    ref = env.ref(stmt.ref)
    if ref is None:
        yield f"loads from '{stmt.ref}', which this block does not declare"
    elif ref.dir not in READS:
        yield f"loads from '{stmt.ref}', an {ref.dir} ref"


@stmt_rule(Store)
def store(stmt: Store, env: Env) -> Iterator[str]:
    """``R = store($x)``: R is a writable (out/inout/none) ref; $x is defined, of R's dtype."""
    yield from _defined((stmt.value,), env)
    ref = env.ref(stmt.ref)
    if ref is None:
        yield f"stores to '{stmt.ref}', which this block does not declare"
        return
    if ref.dir not in WRITES:
        yield f"stores to '{stmt.ref}', an {ref.dir} ref"
    dtype = env.scalars.get(stmt.value)
    if dtype is not None and dtype != ref.shape.dtype:
        yield f"stores a {dtype} value to '{stmt.ref}' of dtype {ref.shape.dtype}"


@stmt_rule(LoadIndex)
def load_index(stmt: LoadIndex, env: Env) -> Iterator[str]:
    """``$i = index(aff)``: aff uses visible indices; $i is fresh."""
    yield from _fresh(stmt.into, env)
    bad = _unknown(stmt.expr.names, env.scope.visible_idxs)
    if bad:
        yield f"index expression uses unknown indices {bad}"


@stmt_rule(Constant)
def constant(stmt: Constant, env: Env) -> Iterator[str]:
    """``$c = const(v): T``: v is a bool/int/float, T a dtype; inf/nan only for
    floats; an integer v is a 64-bit value (in ``[-2**63, 2**64)``)."""
    yield from _fresh(stmt.into, env)
    yield from _dtype(stmt.dtype)
    value = stmt.value
    if not isinstance(value, (bool, int, float)):
        yield f"constant value {value!r} is not a bool, int or float"
    elif isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        yield f"constant {value} is past the 64-bit range"
    elif isinstance(value, float) and not math.isfinite(value):
        if stmt.dtype in DTYPES and not is_float(stmt.dtype):
            yield f"non-finite constant {value!r} needs a float dtype, not {stmt.dtype}"


@stmt_rule(Intrinsic)
def intrinsic(stmt: Intrinsic, env: Env) -> Iterator[str]:
    """A known op with its arity; typing rules of :mod:`stripeml.ir.intrinsics`."""
    yield from _fresh(stmt.into, env)
    yield from _dtype(stmt.dtype)
    info = INTRINSICS.get(stmt.op)
    if info is None:
        yield f"unknown intrinsic {stmt.op!r}"
        return
    if len(stmt.inputs) != info.arity:
        yield f"{stmt.op} takes {info.arity} inputs, got {len(stmt.inputs)}"
        return
    undefined = list(_defined(stmt.inputs, env))
    yield from undefined
    if undefined:
        return
    types = [env.scalars[n] for n in stmt.inputs]
    out = stmt.dtype
    if info.kind in ("arith", "math", "minmax") and any(t != out for t in types):
        yield f"{stmt.op} inputs {types} must all be the result dtype {out}"
    elif info.kind == "cmp":
        if len(set(types)) != 1:
            yield f"{stmt.op} inputs {types} must share a dtype"
        if out != "bool":
            yield f"{stmt.op} yields bool, not {out}"
    elif info.kind == "logic" and (any(t != "bool" for t in types) or out != "bool"):
        yield f"{stmt.op} takes and yields bool (inputs {types}, result {out})"
    elif info.kind == "select":
        if types[0] != "bool":
            yield f"select condition is {types[0]}, not bool"
        if types[1] != out or types[2] != out:
            yield f"select branches {types[1:]} must be the result dtype {out}"
    elif info.kind == "bitwise":
        yield from _bitwise(stmt.op, types, out)
    elif info.kind == "bitcast":
        yield from _bitcast(types[0], out)
    elif info.kind == "dot4" and (any(t != "i32" for t in types) or out != "i32"):
        yield f"{stmt.op} takes and yields i32 (inputs {types}, result {out})"
    if info.float_only and out in DTYPES and not is_float(out):
        yield f"{stmt.op} is defined on floats only, not {out}"


def _bitwise(op: str, types: list[str], out: str) -> Iterator[str]:
    """``bit_and bit_or bit_xor bit_not``: one integer or bool dtype in and out;
    ``shl shr``: one integer dtype."""
    if any(t != out for t in types):
        yield f"{op} inputs {types} must all be the result dtype {out}"
    elif out in DTYPES and is_float(out):
        yield (
            f"{op} is defined on integers only, not {out}: a float has no bitwise "
            f"operations (bitcast it to the integer of its width first)"
        )
    elif out == "bool" and op in SHIFTS:
        yield f"{op} is defined on integers only, not bool (cast the bool to an integer first)"


def _bitcast(src: str, out: str) -> Iterator[str]:
    """``bitcast``: the result has the input's width; ``bool`` only as the source."""
    if out == "bool":
        yield (
            f"bitcast to bool is not defined: a bool holds only 0 or 1, not any {src} bit "
            "pattern (use cast, which gives x != 0)"
        )
    elif src in DTYPES and out in DTYPES and bits(src) != bits(out):
        yield (
            f"bitcast from {src} ({bits(src)} bits) to {out} ({bits(out)} bits) changes the "
            "width; a bitcast keeps every bit, so both dtypes must have the same width"
        )


@stmt_rule(Special)
def special(stmt: Special, env: Env) -> Iterator[str]:
    """A known special op (copy, reshape, gather, scatter, scatter_nd, topk) with its
    arity, on refs of this block; its integer params present, its word params
    (``reduce``, ``order``) absent or one of their words."""
    info = SPECIALS.get(stmt.op)
    if info is None:
        yield f"unknown special {stmt.op!r} (known: {', '.join(SPECIALS)})"
        return
    if (len(stmt.inputs), len(stmt.outputs)) != (info.n_inputs, info.n_outputs):
        yield f"{stmt.op} takes {info.n_inputs} inputs and {info.n_outputs} outputs"
        return
    readable = READS + ("out",) if env.scope.is_root else READS
    for names, allowed, verb in (
        (stmt.inputs, readable, "reads"),
        (stmt.outputs, WRITES, "writes"),
    ):
        for name in names:
            ref = env.ref(name)
            if ref is None:
                yield f"{verb} '{name}', which this block does not declare"
            elif ref.dir not in allowed:
                yield f"{verb} '{name}', an {ref.dir} ref"
    params = dict(stmt.params)
    for key in info.int_params:
        if not isinstance(params.get(key), int) or isinstance(params.get(key), bool):
            yield f"{stmt.op} needs an integer param '{key}'"
    for key, words in info.word_params:
        if key in params and params[key] not in words:
            choices = ", ".join(repr(w) for w in words)
            yield f"{stmt.op} param '{key}' must be one of {choices}, not {params[key]!r}"


@stmt_rule(Special)
def special_shapes(stmt: Special, env: Env) -> Iterator[str]:
    """copy: same sizes; reshape: same element count; gather: NumPy ``take``
    shapes; scatter: ``I`` and ``U`` of one shape and ``X``'s rank, within
    ``X`` off the axis; scatter_nd: ``U`` is ``I.sizes[:-1] + X.sizes[k:]``
    for tuples of ``k = I.sizes[-1] <= rank`` indices; topk: ``X``'s sizes
    with ``k <= X.sizes[axis]`` on the axis, ``i64``.  Indices are integers;
    results and updates have the source's dtype (topk: ``i64``)."""
    info = SPECIALS.get(stmt.op)
    found = [env.ref(n) for n in stmt.inputs + stmt.outputs]
    refs = [r.shape for r in found if r is not None]
    if info is None or len(refs) < len(found) or len(refs) != info.n_inputs + info.n_outputs:
        return
    src, dst = refs[0], refs[-1]
    params = dict(stmt.params)
    axis = params.get("axis")
    if stmt.op == "copy" and src.sizes != dst.sizes:
        yield f"copy between sizes {src.sizes} and {dst.sizes}"
    elif stmt.op == "reshape" and src.elem_count != dst.elem_count:
        yield f"reshape from {src.elem_count} to {dst.elem_count} elements"
    elif stmt.op == "bitview":
        yield from _bitview_shapes(src, dst)
    elif stmt.op == "gather":
        index = refs[1]
        if not is_int(index.dtype):
            yield f"gather indices have dtype {index.dtype}, not an integer"
        if isinstance(axis, int) and -src.rank <= axis < src.rank:
            axis %= src.rank
            want = src.sizes[:axis] + index.sizes + src.sizes[axis + 1 :]
            if dst.sizes != want:
                yield f"gather result has sizes {dst.sizes}, expected {want}"
        elif isinstance(axis, int):
            yield f"gather axis {axis} out of range for rank {src.rank}"
        if dst.dtype != src.dtype:
            yield f"gather result dtype {dst.dtype} differs from the source's {src.dtype}"
    elif stmt.op == "scatter":
        yield from _scatter_shapes(src, refs[1], refs[2], dst, axis)
    elif stmt.op == "scatter_nd":
        yield from _scatter_nd_shapes(src, refs[1], refs[2], dst)
    elif stmt.op == "topk":
        yield from _topk_shapes(src, dst, axis, params.get("k"))


def _bitview_shapes(src: TensorShape, dst: TensorShape) -> Iterator[str]:
    """bitview: the source's bytes in row-major order read as the result's dtype
    (NumPy's ``view``): the same number of bytes, no ``bool``."""
    if "bool" in (src.dtype, dst.dtype):
        yield "bitview of bool is not defined: a bool holds only 0 or 1"
    elif src.dtype in DTYPES and dst.dtype in DTYPES:
        have = src.elem_count * bits(src.dtype)
        want = dst.elem_count * bits(dst.dtype)
        if have != want:
            yield f"bitview from {have // 8} to {want // 8} bytes"


def _scatter_common(
    op: str, src: TensorShape, index: TensorShape, upd: TensorShape, dst: TensorShape
) -> Iterator[str]:
    if not is_int(index.dtype):
        yield f"{op} indices have dtype {index.dtype}, not an integer"
    if upd.dtype != src.dtype:
        yield f"{op} updates have dtype {upd.dtype}, not the source's {src.dtype}"
    if dst.dtype != src.dtype:
        yield f"{op} result dtype {dst.dtype} differs from the source's {src.dtype}"
    if dst.sizes != src.sizes:
        yield f"{op} result has sizes {dst.sizes}, not the source's {src.sizes}"


def _scatter_shapes(
    src: TensorShape, index: TensorShape, upd: TensorShape, dst: TensorShape, axis: object
) -> Iterator[str]:
    yield from _scatter_common("scatter", src, index, upd, dst)
    if not isinstance(axis, int) or isinstance(axis, bool):
        return
    if not -src.rank <= axis < src.rank:
        yield f"scatter axis {axis} out of range for rank {src.rank}"
        return
    axis %= src.rank
    if index.rank != src.rank:
        yield f"scatter indices have rank {index.rank}, not the source's {src.rank}"
    elif any(d != axis and i > x for d, (i, x) in enumerate(zip(index.sizes, src.sizes))):
        yield (
            f"scatter indices of sizes {index.sizes} exceed the source's {src.sizes} "
            f"off axis {axis}"
        )
    if upd.sizes != index.sizes:
        yield f"scatter updates have sizes {upd.sizes}, not the indices' {index.sizes}"


def _scatter_nd_shapes(
    src: TensorShape, index: TensorShape, upd: TensorShape, dst: TensorShape
) -> Iterator[str]:
    yield from _scatter_common("scatter_nd", src, index, upd, dst)
    if index.rank < 1:
        yield "scatter_nd indices have rank 0; the last dimension holds the index tuples"
        return
    k = index.sizes[-1]
    if k > src.rank:
        yield f"scatter_nd index tuples of length {k} exceed the source's rank {src.rank}"
        return
    want = index.sizes[:-1] + src.sizes[k:]
    if upd.sizes != want:
        yield f"scatter_nd updates have sizes {upd.sizes}, expected {want}"


def _topk_shapes(src: TensorShape, dst: TensorShape, axis: object, k: object) -> Iterator[str]:
    if dst.dtype != "i64":
        yield f"topk result dtype {dst.dtype} is not i64 (it holds indices)"
    if not isinstance(axis, int) or not isinstance(k, int) or isinstance(k, bool):
        return
    if not -src.rank <= axis < src.rank:
        yield f"topk axis {axis} out of range for rank {src.rank}"
        return
    axis %= src.rank
    if not 0 <= k <= src.sizes[axis]:
        yield f"topk k={k} is not in [0, {src.sizes[axis]}] (the size of axis {axis})"
        return
    want = src.sizes[:axis] + (k,) + src.sizes[axis + 1 :]
    if dst.sizes != want:
        yield f"topk result has sizes {dst.sizes}, expected {want}"


def scalar_def(stmt: object, env: Env) -> tuple[str, str] | None:
    """The scalar ``stmt`` defines and its dtype, or ``None`` if it defines none."""
    if isinstance(stmt, Load):
        ref = env.ref(stmt.ref)
        return (stmt.into, ref.shape.dtype) if ref is not None else None
    if isinstance(stmt, LoadIndex):
        return stmt.into, "i64"
    if isinstance(stmt, (Constant, Intrinsic)):
        return stmt.into, stmt.dtype
    return None
