"""The fuzzer's oracle: a program evaluated from the language's definition,
with an error bound on every element.

Independent of stripeml's interpreter: contractions go through the brute-force
enumeration of ``contraction.py``; elementwise statements through NumPy, with
the dtype rules of docs/tile-language.md §5 written out here (NumPy promotion
with weak Python scalars, integer ``/`` as floor division, functions of
integers in float64, integer ``pow`` through float64 and back).

**Values.** Each float operation is computed in float64 from operands first
converted to the operation's dtype, then rounded to that dtype: the correctly
rounded result an ideal machine would give.  Integer operations run in their
own dtype with NumPy (two's complement wrap-around, ``x // 0 == 0``).

**Error bounds** (first-order forward error analysis).  Every value carries a
bound ``err`` on how far an admissible evaluation may be from it:
``+ - *``: the operands' bounds propagated, plus one rounding ``u * |r|`` (``u``
the dtype's unit roundoff); functions: the value's change over the input
interval widened by ``C_IN`` roundings (argument reduction), plus ``C_OUT``
roundings of the result (the backends' math is documented "a few ulp");
reductions: the operands' bounds plus ``(L - 1) * u * sum |v|`` for a sum of
``L`` terms in any order.  Comparisons, casts to integers, floor and friends
are discontinuous: where the input interval straddles the jump the result is
marked unsure (bool error 1, or an infinite bound), and such elements are not
compared.  Inputs are exact (bound 0), so most elements of most programs
are checked to a few ulps, and integers and bools exactly.

:func:`evaluate` returns each output's value and bound plus the *events* it
saw (integer division by zero, ``INT_MIN / -1``, a zero result of float
``%``): the known-bug switches key on them.  A program the language says must
fail (``=`` storing an element twice, a ``gather`` index out of range) raises
:class:`MustFail`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .contraction import AssignConflict, brute_force_bounded, index_ranges, result_dtype
from .numerics import SIGN_UNSURE, is_float, unit
from .program import Binary, Call, Contract, Eltwise, Expr, Gather, Lit, Name, Program, Ternary
from .values import (
    C_IN,
    C_IN_DEFAULT,
    C_OUT,
    C_OUT_DEFAULT,
    CASTS,
    FUNCS,
    MustFail,
    Val,
    as_dtype,
    collecting_static_errors,
    deviation,
    finite_abs,
    fold,
    join,
    rounded,
    sanitize,
    scale,
    static_error,
)


def fold_function(f: str, v: int | float | bool) -> int | float | bool:
    """A function of a weak constant, as the language folds it: ``abs`` and
    ``relu`` keep bools and integers, the rest compute on a float64."""
    if f in ("abs", "relu") and not isinstance(v, float):
        return v if isinstance(v, bool) else (abs(v) if f == "abs" else max(v, 0))
    if f == "abs":
        return abs(v)
    if f == "relu":
        return max(v, 0.0) if v == v else v
    with np.errstate(all="ignore"):
        return float(FUNCS[f](np.float64(v)))


def _past(v: Val, dt: np.dtype) -> bool:
    """A weak integer outside integer dtype ``dt``'s range."""
    if v.arr is not None or isinstance(v.weak, (bool, float)):
        return False
    info = np.iinfo(dt)
    return not info.min <= int(v.weak) <= info.max


def float_to_int(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """docs/tile-language.md's float -> integer cast, one element at a time in
    Python integers: truncation in range; else the minimum of the conversion's
    width (32 bits, or 64 for int64 and uint32), wrapped to the target's bits;
    uint64 exact up to 2**64, saturated above."""
    bits, signed = 8 * dt.itemsize, dt.kind == "i"
    wide = 64 if bits == 64 or (not signed and bits == 32) else 32

    def one(v: float) -> int:
        if not signed and bits == 64 and v >= 2.0**63:
            return math.trunc(v) if v < 2.0**64 else 2**64 - 1
        ok = not math.isnan(v) and -(2.0 ** (wide - 1)) <= v < 2.0 ** (wide - 1)
        t = (math.trunc(v) if ok else -(2 ** (wide - 1))) % 2**bits
        return t - 2**bits if signed and t >= 2 ** (bits - 1) else t

    flat = [one(float(v)) for v in np.asarray(x, np.float64).ravel()]
    return np.array(flat, dtype=object).astype(dt).reshape(np.shape(x))


def c_pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C's ``pow`` (what the language's ``pow`` is) on float64 arrays.  NumPy's
    ``power`` with a one-valued exponent of 0.5 takes ``sqrt`` instead, whose
    ``sqrt(-0.0)`` is -0.0 and ``sqrt(-inf)`` nan; C's ``pow`` gives +0.0 and
    +inf there (C99 F.9.4.4), as Python's ``math.pow`` does."""
    r = np.asarray(np.power(x, y))
    half = np.broadcast_to(np.asarray(y) == 0.5, r.shape)
    zero = np.broadcast_to(np.asarray(x) == 0, r.shape)
    neg_inf = np.broadcast_to(np.isneginf(x), r.shape)
    return np.where(half & zero, 0.0, np.where(half & neg_inf, math.inf, r))


class Evaluator:
    """Evaluates one program's statements in order (``env``: tensor name -> Val)."""

    def __init__(
        self, program: Program, inputs: dict[str, np.ndarray], fill: int | None = None
    ) -> None:
        self.program = program
        self.fill = fill  # None: an out-of-range gather fails; else it reads this value
        self.dims = dict(program.dims)
        self.env: dict[str, Val] = {
            k: Val(np.asarray(v), np.zeros(np.shape(v))) for k, v in inputs.items()
        }
        self.events: set[str] = set()

    # -- statements ---------------------------------------------------------------------

    def run(self) -> dict[str, Val]:
        """The outputs; raises the first compile-time error (a type or '=' error,
        found in any statement), else the first run-time error (a gather index
        out of range).  A statement that fails at run time gets a stand-in
        value of its shape and dtype so later statements are still checked."""
        failed: MustFail | None = None
        with collecting_static_errors() as static:
            for stmt in self.program.stmts:
                try:
                    self.env[stmt.out] = self.statement(stmt)
                except MustFail as e:
                    failed = failed or e
                    self.env[stmt.out] = self.stand_in(stmt)
                if self.env[stmt.out].dtype == np.float16:
                    self.events.add("float16")
        if static:
            raise static[0]
        if failed is not None:
            raise failed
        return {o: self.env[o] for o in self.program.outputs}

    def stand_in(self, stmt) -> Val:
        """A failed gather's value with out-of-range elements read as 0."""
        assert isinstance(stmt, Gather), stmt
        fill, self.fill = self.fill, 0
        try:
            return self.gather(stmt, self.env[stmt.src])
        finally:
            self.fill = fill

    def statement(self, stmt) -> Val:
        if isinstance(stmt, Eltwise):
            v = self.expr(stmt.expr)
            if v.arr is None:  # a weak result takes the default dtype of its kind
                dt = np.result_type(v.weak)
                return Val(np.asarray(v.weak, dt), np.zeros(()))
            return v
        if isinstance(stmt, Contract):
            return self.contraction(stmt)
        src = self.env[stmt.src]
        if isinstance(stmt, Gather):
            return self.gather(stmt, src)
        sizes = tuple(int(eval(s.replace("/", "//"), {}, dict(self.dims))) for s in stmt.sizes)
        return Val(src.arr.reshape(sizes), np.broadcast_to(src.err, src.arr.shape).reshape(sizes))

    def contraction(self, stmt: Contract) -> Val:
        spec = stmt.spec
        names = {a.tensor for a in spec.operands} | ({spec.default} if spec.default else set())
        arrays = {n: self.env[n].arr for n in names}
        errs = {n: np.broadcast_to(self.env[n].err, self.env[n].arr.shape) for n in names}
        ranges = index_ranges(spec, arrays, margin=0, dims=self.dims)
        if spec.default is not None:
            dt = result_dtype(spec, arrays)
            if arrays[spec.default].dtype != dt:
                # The language does not convert a default: a TileTypeError at compile time.
                self.events.add("default_dtype")
                static_error(
                    MustFail(
                        "TileTypeError", f"default of another dtype than {dt}", "default_dtype"
                    )
                )
        try:
            out, err = brute_force_bounded(spec, arrays, errs, ranges, dims=self.dims)
        except AssignConflict as e:
            # Decided when the program is compiled (isl finds the two index tuples).
            self.events.add("assign_conflict")
            static_error(MustFail("TileTypeError", f"'=' in {spec.statement()} {e}"))
            stand_in = replace(spec, agg=">")  # the shape and dtype, for later statements
            out, err = brute_force_bounded(stand_in, arrays, errs, ranges, dims=self.dims)
        return Val(out, sanitize(err))

    def gather(self, stmt: Gather, src: Val) -> Val:
        idx = self.env[stmt.idx]
        size = src.arr.shape[stmt.axis]
        if np.any((idx.arr < -size) | (idx.arr >= size)):
            if self.fill is None:
                raise MustFail("ExecutionError", f"gather index out of range in {stmt.tile()}")
            outside = (idx.arr < -size) | (idx.arr >= size)
            arr = np.array(np.take(src.arr, np.where(outside, 0, idx.arr), axis=stmt.axis))
            at = (slice(None),) * (stmt.axis % src.arr.ndim) + (outside,)
            arr[at] = self.fill
            return Val(arr, np.zeros(arr.shape))
        err = np.take(np.broadcast_to(src.err, src.arr.shape), idx.arr, axis=stmt.axis)
        if np.any(idx.err):
            shape = [1] * src.arr.ndim
            unsure = np.broadcast_to(idx.err > 0, idx.arr.shape)
            sl = src.arr.shape[: stmt.axis] + idx.arr.shape + src.arr.shape[stmt.axis + 1 :]
            mask = unsure.reshape(*shape[: stmt.axis], *idx.arr.shape, *shape[stmt.axis + 1 :])
            err = np.where(np.broadcast_to(mask, sl), math.inf, err)
        return Val(np.asarray(np.take(src.arr, idx.arr, axis=stmt.axis)), err)

    # -- expressions --------------------------------------------------------------------

    def expr(self, e: Expr) -> Val:
        if isinstance(e, Lit):
            return Val(None, np.zeros(()), e.value)
        if isinstance(e, Name):
            if e.name in self.env:
                return self.env[e.name]
            return Val(None, np.zeros(()), self.dims[e.name])
        if isinstance(e, Binary):
            return self.binary(e.op, self.expr(e.lhs), self.expr(e.rhs))
        if isinstance(e, Ternary):
            return self.ternary(self.expr(e.cond), self.expr(e.then), self.expr(e.other))
        if isinstance(e, Call):
            return self.call(e)
        v = self.expr(e.arg)  # Unary
        if e.op == "!":
            b = self.truth(v)
            return (
                Val(np.logical_not(b.arr), b.err)
                if v.arr is not None
                else Val(None, b.err, not v.weak)
            )
        if v.arr is None:
            return Val(None, v.err, -v.weak)
        assert v.dtype != np.bool_, "the generator never negates a bool"
        with np.errstate(all="ignore"):
            return Val(np.negative(v.arr), v.err)

    def truth(self, v: Val) -> Val:
        """``v != 0`` as bool (``as_bool``, conditions, logic operands); unsure near 0."""
        if v.arr is None:
            return Val(None, np.zeros(()), bool(v.weak))
        if v.dtype == np.bool_:
            return v
        x = v.f64()
        unsure = (v.err > 0) & (np.abs(x) <= v.err)
        return Val(v.arr != 0, unsure.astype(np.float64))

    def binary(self, op: str, a: Val, b: Val) -> Val:
        if a.arr is None and b.arr is None:
            return Val(None, np.zeros(()), fold(op, a.weak, b.weak))
        if op in ("&&", "||"):
            return self.logic(op, self.truth(a), self.truth(b))
        if op in ("<", ">", "<=", ">=", "==", "!="):
            return self.compare(op, a, b)
        dt = join(a, b)
        if op in ("/", "%") and dt == np.bool_:
            dt = np.dtype(np.int64)  # bool / bool is an integer division
        if is_float(dt):
            return self.float_arith(
                op, as_dtype(a, dt).astype(np.float64), as_dtype(b, dt).astype(np.float64), a, b, dt
            )
        return self.int_arith(op, as_dtype(a, dt), as_dtype(b, dt), a, b, dt)

    def float_arith(self, op, x, y, a: Val, b: Val, dt) -> Val:
        ea, eb = a.err, b.err
        with np.errstate(all="ignore"):
            if op == "+":
                return rounded(x + y, dt, ea + eb)
            if op == "-":
                return rounded(x - y, dt, ea + eb)
            if op == "*":
                r = x * y
                err = scale(x, eb) + scale(y, ea) + ea * eb
                # 0 * 0 takes its sign from both: an operand of unsure value leaves it unsure.
                err = np.where((r == 0) & ((ea > 0) | (eb > 0)), np.maximum(err, SIGN_UNSURE), err)
                return rounded(r, dt, err)
            r = x / y if op == "/" else np.mod(as_dtype(a, dt), as_dtype(b, dt)).astype(np.float64)
            if op == "/":
                exact = (ea == 0) & (eb == 0)
                room = np.abs(y) - eb
                prop = np.where(
                    room > 0, (ea + np.abs(r) * eb) / np.where(room > 0, room, 1), math.inf
                )
                prop = np.where((r == 0) & ~exact, np.maximum(prop, SIGN_UNSURE), prop)
                return rounded(r, dt, np.where(exact, 0.0, prop))
            # Float %: NumPy's fmod plus a divisor when the signs differ (one rounding).
            if np.any((r == 0) & (ea == 0) & (eb == 0)):
                self.events.add("float_mod_zero")
            err = np.where((ea == 0) & (eb == 0), unit(dt) * np.abs(y), math.inf)
            return rounded(r, dt, err)

    def int_arith(self, op, x, y, a: Val, b: Val, dt) -> Val:
        unsure = (a.err > 0) | (b.err > 0)
        with np.errstate(all="ignore"):
            if op in ("/", "%"):
                yb = np.broadcast_to(y, np.broadcast_shapes(np.shape(x), np.shape(y)))
                xb = np.broadcast_to(x, yb.shape)
                if np.any(yb == 0):
                    self.events.add("int_div_zero")
                if dt.kind == "i" and np.any((xb == np.iinfo(dt).min) & (yb == -1)):
                    self.events.add("int_div_overflow")
                r = np.floor_divide(x, y) if op == "/" else np.mod(x, y)
                return Val(np.asarray(r, dt), np.where(unsure, math.inf, 0.0))
            fn = {"+": np.add, "-": np.subtract, "*": np.multiply}[op]
            r = np.asarray(fn(x, y), dt)
            xf, yf = np.abs(x.astype(np.float64)), np.abs(y.astype(np.float64))
            err = (
                a.err + b.err if op != "*" else scale(xf, b.err) + scale(yf, a.err) + a.err * b.err
            )
            return Val(r, sanitize(np.where(unsure, err, 0.0)))

    def compare(self, op: str, a: Val, b: Val) -> Val:
        dt = join(a, b)
        fn = {"<": np.less, ">": np.greater, "<=": np.less_equal, ">=": np.greater_equal,
              "==": np.equal, "!=": np.not_equal}[op]  # fmt: skip
        if dt.kind in "iu" and any(_past(v, dt) for v in (a, b)):
            # NumPy 2 compares a Python int past the dtype's range exactly (no error),
            # and so does the language: in Python integers.
            x = a.arr.astype(object) if a.arr is not None else a.weak
            y = b.arr.astype(object) if b.arr is not None else b.weak
            r = np.asarray(fn(x, y), dtype=bool)
            return Val(r, (np.broadcast_to(a.err + b.err, r.shape) > 0).astype(np.float64))
        r = fn(as_dtype(a, dt), as_dtype(b, dt))
        slack = a.err + b.err
        with np.errstate(all="ignore"):
            gap = np.abs(as_dtype(a, dt).astype(np.float64) - as_dtype(b, dt).astype(np.float64))
        return Val(np.asarray(r), ((slack > 0) & (gap <= slack)).astype(np.float64))

    def logic(self, op: str, a: Val, b: Val) -> Val:
        x, y = np.asarray(a.operand(), bool), np.asarray(b.operand(), bool)
        ua, ub = a.err > 0, b.err > 0
        if op == "&&":
            r = x & y
            # A sure False on one side decides it.
            unsure = (ua | ub) & ~((~x & ~ua) | (~y & ~ub))
        else:
            r = x | y
            unsure = (ua | ub) & ~((x & ~ua) | (y & ~ub))
        return Val(np.asarray(r), unsure.astype(np.float64))

    def ternary(self, c: Val, t: Val, o: Val) -> Val:
        cond = self.truth(c)
        if t.arr is None and o.arr is None:
            floats = isinstance(t.weak, float) or isinstance(o.weak, float)
            dt = np.dtype(np.float64) if floats else np.result_type(o.weak)
        else:
            dt = join(t, o)
        tv, ov = as_dtype(t, dt), as_dtype(o, dt)
        r = np.where(cond.operand(), tv, ov)
        with np.errstate(all="ignore"):
            jump = np.abs(tv.astype(np.float64) - ov.astype(np.float64))
        err = np.where(
            cond.err > 0, np.maximum(t.err, o.err) + jump, np.where(cond.operand(), t.err, o.err)
        )
        return Val(np.asarray(r, dt), sanitize(err))

    def call(self, e: Call) -> Val:
        f = e.func
        if f == "index":
            x = self.env[e.args[0].name]
            axis = e.args[1].value
            pos = np.indices(x.arr.shape)[axis] if x.arr.ndim else np.zeros((), np.int64)
            return Val(pos.astype(np.int64), np.zeros(()))
        args = [self.expr(a) for a in e.args]
        if f == "as_bool":
            return (
                self.truth(args[0])
                if args[0].arr is not None
                else Val(None, np.zeros(()), bool(args[0].weak))
            )
        if f in CASTS:
            bits = e.args[1].value
            return self.cast(args[0], np.dtype(f"{CASTS[f]}{bits}"))
        if f in ("max", "min"):
            return self.minmax(f, *args)
        if f == "pow":
            return self.power(*args)
        x = args[0]
        if x.arr is None:  # a constant expression (tanh(1 / 0)): folded in float64
            return Val(None, np.zeros(()), fold_function(f, x.weak))
        if f in ("abs", "relu"):
            return self.abs_relu(f, x)
        dt = x.dtype if is_float(x.dtype) else np.dtype(np.float64)
        return self.function(f, as_dtype(x, dt).astype(np.float64), x.err, dt)

    def cast(self, x: Val, dt: np.dtype) -> Val:
        if dt == np.float16:
            self.events.add("float16")
        if x.arr is None:
            v = x.weak
            if isinstance(v, float) and dt.kind in "iu":
                return Val(float_to_int(np.asarray(v), dt), np.zeros(()))
            value = int(v) if dt.kind in "iu" else float(v)
            return Val(np.asarray(value).astype(dt), np.zeros(()))
        with np.errstate(all="ignore"):
            r = x.arr.astype(dt)
        if x.dtype.kind == "f" and dt.kind in "iu":
            r = float_to_int(x.arr, dt)  # out of range: the language's values, not NumPy's
        if dt.kind == "f":
            return (
                rounded(x.f64(), dt, x.err)
                if x.dtype.kind != "f" or dt.itemsize < x.dtype.itemsize
                else Val(r, x.err)
            )
        if x.dtype.kind == "f":
            # Truncation jumps at every integer, and out of range it is the x86 value.
            v = x.f64()
            with np.errstate(all="ignore"):
                lo, hi = np.trunc(v - x.err), np.trunc(v + x.err)
            return Val(r, np.where((x.err > 0) & (lo != hi), math.inf, 0.0))
        return Val(r, np.where(x.err > 0, math.inf, 0.0))

    def minmax(self, f: str, a: Val, b: Val) -> Val:
        if a.arr is None and b.arr is None:
            return Val(None, np.zeros(()), fold(f, a.weak, b.weak))
        dt = join(a, b)
        x, y = as_dtype(a, dt), as_dtype(b, dt)
        r = (np.maximum if f == "max" else np.minimum)(x, y)
        err = np.maximum(a.err, b.err)
        if is_float(dt):  # max(-0.0, +0.0) may be either zero
            both = (x == 0) & (y == 0) & (np.signbit(x) != np.signbit(y))
            err = np.where(both, np.maximum(err, SIGN_UNSURE), err)
        return Val(np.asarray(r, dt), sanitize(err))

    def abs_relu(self, f: str, x: Val) -> Val:
        if f == "abs":
            with np.errstate(all="ignore"):
                return Val(np.abs(x.arr), x.err)
        r = np.maximum(x.arr, np.zeros((), x.dtype))
        err = x.err
        if is_float(x.dtype):
            err = np.where(x.arr == 0, np.maximum(err, SIGN_UNSURE), err)
        return Val(r, err)

    def power(self, a: Val, b: Val) -> Val:
        if a.arr is None and b.arr is None:
            return Val(None, np.zeros(()), fold("pow", a.weak, b.weak))
        dt = join(a, b)
        if not is_float(dt):
            # Integer pow goes through float64 and back: exact while results fit.
            x, y = as_dtype(a, dt).astype(np.float64), as_dtype(b, dt).astype(np.float64)
            with np.errstate(all="ignore"):
                r = np.power(x, y).astype(dt)
            unsure = (a.err > 0) | (b.err > 0)
            return Val(np.asarray(r, dt), np.where(unsure, math.inf, 0.0))
        x, y = as_dtype(a, dt).astype(np.float64), as_dtype(b, dt).astype(np.float64)
        u = unit(dt)
        with np.errstate(all="ignore"):
            r = c_pow(x, y)
            ex = np.broadcast_to(a.err + C_IN_DEFAULT * u * np.abs(x), r.shape)
            ey = np.where(x > 0, b.err + C_IN_DEFAULT * u * np.abs(y), b.err)
            dev = np.zeros(r.shape)
            for sx in (-1, 0, 1):
                for sy in (-1, 0, 1):
                    dev = np.maximum(dev, deviation(c_pow(x + sx * ex, y + sy * ey), r))
        return rounded(r, dt, dev + C_OUT_DEFAULT * u * finite_abs(r))

    def function(self, f: str, x: np.ndarray, err: np.ndarray, dt: np.dtype) -> Val:
        fn = FUNCS[f]
        u = unit(dt)
        with np.errstate(all="ignore"):
            r = fn(x)
            e = err + C_IN.get(f, C_IN_DEFAULT) * u * np.abs(x)
            dev = np.maximum(deviation(fn(x - e), r), deviation(fn(x + e), r))
            dev = np.where(e > 0, dev, 0.0)
        return rounded(r, dt, dev + C_OUT.get(f, C_OUT_DEFAULT) * u * finite_abs(r), c=0.0)


@dataclass
class Reference:
    """What a program must compute: per output a value and an error bound."""

    values: dict[str, np.ndarray]
    errs: dict[str, np.ndarray]
    events: set[str]


def evaluate(program: Program, inputs: dict[str, np.ndarray]) -> Reference:
    """Evaluate ``program`` on ``inputs``; raises :class:`MustFail` for programs the
    language defines as errors (``events`` of the failed run are on the exception)."""
    ev = Evaluator(program, inputs)
    try:
        return _reference(ev)
    except MustFail as e:
        e.events |= ev.events
        if e.kind == "ExecutionError":  # a gather index out of range
            e.dead_ok = _if_dead(program, inputs)
        raise


def _reference(ev: Evaluator) -> Reference:
    outs = ev.run()
    return Reference(
        {k: np.asarray(v.arr) for k, v in outs.items()},
        {k: np.broadcast_to(v.err, np.shape(v.arr)).astype(np.float64) for k, v in outs.items()},
        ev.events,
    )


def _if_dead(program: Program, inputs: dict[str, np.ndarray]) -> Reference | None:
    """The outputs if out-of-range gathers read 0 (and 1): when both give the same
    outputs, no output depends on those elements."""
    try:
        a, b = (_reference(Evaluator(program, inputs, fill)) for fill in (0, 1))
    except MustFail:
        return None
    for k in a.values:
        same = np.array_equal(a.values[k], b.values[k], equal_nan=True)
        if not same or not np.array_equal(a.errs[k], b.errs[k]):
            return None
    return a
