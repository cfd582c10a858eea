"""Lowering of elementwise statements (and the scalar code of contractions).

An elementwise statement becomes one block over the output's shape; each
tensor operand is a view whose broadcast dimensions are pinned to 0.  The
expression becomes scalar statements with explicit casts, so every intrinsic
sees operands of one dtype (the rule the verifier checks).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..ir import dtypes
from ..ir.affine import Affine
from ..ir.nodes import (
    Block,
    Constant,
    Index,
    Intrinsic,
    Load,
    LoadIndex,
    Refinement,
    Statement,
    Store,
    TensorShape,
)
from . import ast
from .bind import Binding
from .types import (
    ARITH_OPS,
    BINARY_FUNCS,
    BITCASTS,
    BITWISE_OPS,
    CASTS,
    CMP_OPS,
    FLOAT_FUNCS,
    LOGIC_OPS,
    SAME_FUNCS,
    EType,
    TensorInfo,
    Typed,
    Weak,
    WeakConst,
    bitcast_types,
    cast_target,
    default_dtype,
    index_axis,
    join,
    type_of,
)

Value = tuple[str, str]  # (scalar name, dtype)


class ScalarEmitter:
    """Accumulates scalar statements with fresh SSA names."""

    def __init__(self) -> None:
        self.stmts: list[Statement] = []
        self._n = 0
        self._loaded: dict[str, Value] = {}

    def fresh(self) -> str:
        self._n += 1
        return f"${self._n}"

    def load(self, ref: str, dtype: str) -> Value:
        if ref not in self._loaded:
            name = f"${ref}"
            self.stmts.append(Load(name, ref))
            self._loaded[ref] = (name, dtype)
        return self._loaded[ref]

    def index(self, name: str) -> str:
        """The value of index ``name`` at the point (i64), loaded once."""
        key = f"index {name}"
        if key not in self._loaded:
            into = self.fresh()
            self.stmts.append(LoadIndex(into, Affine.index(name)))
            self._loaded[key] = (into, "i64")
        return self._loaded[key][0]

    def const(self, value: Weak, dtype: str) -> str:
        name = self.fresh()
        self.stmts.append(Constant(name, _convert(value, dtype), dtype))
        return name

    def cast(self, v: Value, dtype: str) -> str:
        if v[1] == dtype:
            return v[0]
        return self.op("cast", (v[0],), dtype)

    def op(self, op: str, inputs: tuple[str, ...], dtype: str) -> str:
        name = self.fresh()
        self.stmts.append(Intrinsic(op, tuple(inputs), name, dtype))
        return name


def _convert(value: Weak, dtype: str) -> int | float | bool:
    """A weak constant as a value of ``dtype``, converted as NumPy's ``astype``
    converts it: floats round (past the dtype's range: inf), integers wrap
    modulo 2**bits (only casts reach here with an integer outside the dtype:
    the typing rejects it elsewhere), floats to integers as the IR's cast
    (:func:`~stripeml.ir.dtypes.float_to_int`)."""
    if dtype == "bool":
        return bool(value)
    npdt = dtypes.to_numpy(dtype)
    if isinstance(value, int) and dtypes.is_int(dtype):
        bits = 8 * npdt.itemsize
        wrapped = int(value) % (1 << bits)
        signed = npdt.kind == "i" and wrapped >= 1 << (bits - 1)
        return wrapped - (1 << bits) if signed else wrapped
    if isinstance(value, float) and dtypes.is_int(dtype):
        return int(dtypes.float_to_int(value, dtype))  # as the cast computes it at run time
    with np.errstate(all="ignore"):
        converted = np.asarray(float(value) if isinstance(value, float) else value).astype(npdt)
    return float(converted) if dtypes.is_float(dtype) else int(converted)


class _ExprLowering:
    def __init__(
        self,
        stmt: ast.Assignment,
        binding: Binding,
        em: ScalarEmitter,
        views: dict[str, str],
        idx_names: tuple[str, ...] = (),
    ):
        self.stmt = stmt
        self.binding = binding
        self.em = em
        self.views = views
        self.idx_names = idx_names  # the block's index per output dimension

    def type(self, e: ast.Expr) -> EType:
        return type_of(e, self.binding.dims, self.binding.tensors, self.stmt)

    def value(self, e: ast.Expr, dtype: str) -> str:
        """Emit ``e`` converted to ``dtype``; return the scalar name."""
        t = self.type(e)
        if isinstance(t, WeakConst):
            return self.em.const(t.const, dtype)
        return self.em.cast((self.emit(e, t), t.dtype), dtype)

    def emit(self, e: ast.Expr, t: Typed) -> str:
        """Emit a non-weak expression in its own dtype ``t.dtype``."""
        dt = t.dtype
        if isinstance(e, ast.Name):
            return self.em.load(self.views[e.name], dt)[0]
        if isinstance(e, ast.Unary):
            if e.op == "!":
                return self.em.op("not", (self.value(e.operand, "bool"),), "bool")
            op = "bit_not" if e.op == "~" else "neg"
            return self.em.op(op, (self.value(e.operand, dt),), dt)
        if isinstance(e, ast.Binary):
            if e.op in CMP_OPS:
                cdt = join(self.type(e.lhs), self.type(e.rhs))
                args = (self.value(e.lhs, cdt), self.value(e.rhs, cdt))
                return self.em.op(CMP_OPS[e.op], args, "bool")
            if e.op in LOGIC_OPS:
                args = (self.value(e.lhs, "bool"), self.value(e.rhs, "bool"))
                return self.em.op(LOGIC_OPS[e.op], args, "bool")
            args = (self.value(e.lhs, dt), self.value(e.rhs, dt))
            return self.em.op(ARITH_OPS.get(e.op) or BITWISE_OPS[e.op], args, dt)
        if isinstance(e, ast.Ternary):
            choice = (self.value(e.cond, "bool"), self.value(e.then, dt), self.value(e.other, dt))
            return self.em.op("select", choice, dt)
        if isinstance(e, ast.Call):
            return self.call(e, dt)
        raise AssertionError(e)  # pragma: no cover - literals are weak

    def call(self, e: ast.Call, dt: str) -> str:
        f = e.func
        if f == "index":
            # index(X, axis): the point's position along X's axis, broadcast like X.
            x, axis = index_axis(e, self.binding.dims, self.binding.tensors, self.stmt)
            if x.shape[axis] == 1:
                return self.em.const(0, "i64")
            d = len(self.idx_names) - len(x.shape) + axis
            return self.em.index(self.idx_names[d])
        if f in CASTS:
            target = cast_target(e, self.stmt)
            arg = self.type(e.args[0])
            if isinstance(arg, WeakConst):
                return self.em.const(arg.const, target)
            return self.em.cast((self.emit(e.args[0], arg), arg.dtype), target)
        if f in BITCASTS:
            _, src, target = bitcast_types(e, self.binding.dims, self.binding.tensors, self.stmt)
            return self.em.op("bitcast", (self.value(e.args[0], src),), target)
        if f == "dot4":
            return self.em.op(
                "dot4", (self.value(e.args[0], "i32"), self.value(e.args[1], "i32")), "i32"
            )
        if f in FLOAT_FUNCS or f in SAME_FUNCS:
            return self.em.op(f, (self.value(e.args[0], dt),), dt)
        assert f in BINARY_FUNCS
        if f == "pow" and not dtypes.is_float(dt):
            # Integer powers go through float64 and back (exact for the ranges ints hold).
            args = (self.value(e.args[0], "f64"), self.value(e.args[1], "f64"))
            r = self.em.op("pow", args, "f64")
            return self.em.cast((r, "f64"), dt)
        args = (self.value(e.args[0], dt), self.value(e.args[1], dt))
        return self.em.op(f, args, dt)


def _tensor_names(e: ast.Expr, tensors: Mapping[str, TensorInfo], out: list[str]) -> list[str]:
    if isinstance(e, ast.Name):
        if e.name in tensors and e.name not in out:
            out.append(e.name)
    elif isinstance(e, ast.Unary):
        _tensor_names(e.operand, tensors, out)
    elif isinstance(e, ast.Binary):
        _tensor_names(e.lhs, tensors, out)
        _tensor_names(e.rhs, tensors, out)
    elif isinstance(e, ast.Ternary):
        for c in (e.cond, e.then, e.other):
            _tensor_names(c, tensors, out)
    elif isinstance(e, ast.Call) and e.func != "index":  # index(X, a) does not read X
        for a in e.args:
            _tensor_names(a, tensors, out)
    return out


def lower_eltwise(stmt: ast.Assignment, k: int, binding: Binding) -> Block:
    out = binding.tensors[stmt.output]
    rank = len(out.shape)
    names = tuple(f"i{d}" for d in range(rank))
    refs: list[Refinement] = []
    views: dict[str, str] = {}
    for name in _tensor_names(stmt.expr, binding.tensors, []):
        info = binding.tensors[name]
        q = len(info.shape)
        access = []
        for j, size in enumerate(info.shape):
            d = rank - q + j
            access.append(
                Affine.constant(0) if size == 1 and out.shape[d] != 1 else Affine.index(names[d])
            )
        root = TensorShape.dense(info.dtype, info.shape)
        refs.append(
            Refinement(
                "in", name, TensorShape(info.dtype, (1,) * q, root.strides), name, tuple(access)
            )
        )
        views[name] = name
    em = ScalarEmitter()
    lowering = _ExprLowering(stmt, binding, em, views, names)
    t = lowering.type(stmt.expr)
    dtype = out.dtype if isinstance(t, Typed) else default_dtype(t.const)
    value = lowering.value(stmt.expr, dtype)
    em.stmts.append(Store(stmt.output, value))
    root_out = TensorShape.dense(out.dtype, out.shape)
    refs.append(
        Refinement(
            "out",
            stmt.output,
            TensorShape(out.dtype, (1,) * rank, root_out.strides),
            stmt.output,
            tuple(Affine.index(n) for n in names),
            "assign",
        )
    )
    return Block(
        idxs=tuple(Index(n, s) for n, s in zip(names, out.shape)),
        refs=tuple(refs),
        stmts=tuple(em.stmts),
        tags=frozenset({"kernel", "eltwise"}),
        name=f"k{k}_{stmt.output}",
        comment=stmt.text,
    )
