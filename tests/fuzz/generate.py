"""Random valid Tile programs, from a seed.

A program has 1-4 inputs (float32, float64, int32, int64, bool; ranks 0-3 over
shared dimensions, with size-1 and fixed sizes so statements broadcast) and
1-5 statements, each one of:

* a contraction (``gen_contraction``): every aggregation ``+ * > < =``, every
  combination (one access, ``*``, ``+``, ``==``, the condition), affine
  polynomials with coefficients, offsets and dimensions, constraints, windows,
  constant output positions, rank-0 outputs, ``default``;
* an elementwise expression over earlier tensors that broadcast into one
  shape: ``+ - * / %``, unary ``-``, comparisons, ``&& || !``, ``?:``, weak
  literals and dimensions, every function (``exp log sqrt tanh sigmoid sin cos
  tan erf floor ceil round abs relu pow max min``), every cast
  (``as_float/as_int/as_uint`` at each width, ``as_bool``) and ``index``;
* ``reshape`` or ``gather``.

Outputs are the last statement and a random subset of the others.  Programs
are valid by construction (every index bounded, sizes positive, shapes
broadcast); :func:`generate` retries a statement whose brute-force reference
would enumerate too many index tuples.  ``exclude`` names known-bug classes
(``known.py``) to leave out; the rest are generated on purpose (zero and -1
divisors, ``INT_MIN`` inputs, ``=`` reaching an element twice, ``default``
tensors of another dtype).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from .choose import RandomChooser
from .contraction import index_ranges
from .gen_contraction import ARITY, OUT_INDICES, Knobs, Slot, gen_contraction
from .inputs import random_values
from .program import (
    Binary,
    Call,
    Contract,
    Eltwise,
    Expr,
    Gather,
    Lit,
    Name,
    Param,
    Program,
    Reshape,
    Statement,
    Ternary,
    Unary,
)

DIMS = ("N", "M", "K")
PARAMS = ("A", "B", "C", "D")
IN_DTYPES = ("float32",) * 9 + ("float64",) * 3 + ("int32",) * 4 + ("int64",) * 2 + ("bool",) * 2
UNARY_FUNCS = "exp log sqrt tanh sigmoid sin cos tan erf floor ceil round abs relu".split()
CAST_BITS = {
    "as_float": (16, 32, 64, 32, 64),
    "as_int": (8, 16, 32, 64),
    "as_uint": (8, 16, 32, 64),
}
ARITH = ("+", "-", "*", "/", "%")
CMP = ("<", ">", "<=", ">=", "==", "!=")
INT_LITS = (0, 1, 2, 3, -1, -2, 5, 7)
FLOAT_LITS = (0.5, -1.5, 2.0, 0.25, 1e-3, 3.5, -0.0, 10.0)
# Index tuples one contraction may enumerate (its brute force stays well under a
# second); "big" programs (one in five) have dimensions up to 20, past the CPU's
# vector width and thread split, so the vector, tiled and threaded paths run too.
MAX_TUPLES = {False: 3000, True: 100_000}
WEAK = ("wint", "wfloat")


@dataclass(frozen=True)
class Tensor:
    name: str
    dims: tuple[str, ...]  # size expressions
    shape: tuple[int, ...]
    dtype: str


def join(a: str, b: str) -> str:
    """The dtype of ``a op b`` (NumPy promotion, weak scalars) or a weak kind."""
    if a in WEAK and b in WEAK:
        return "wfloat" if "wfloat" in (a, b) else "wint"

    def np_of(k: str):
        weak = {"wint": 1, "wfloat": 1.0}
        return weak[k] if k in weak else np.dtype(k)

    return str(np.result_type(np_of(a), np_of(b)))


def is_float_kind(k: str) -> bool:
    return k == "wfloat" or k.startswith("float")


def is_int_kind(k: str) -> bool:
    return k == "wint" or k.startswith(("int", "uint"))


class Generator:
    """One program from one seed (see the module docstring)."""

    def __init__(self, seed: int, exclude: frozenset[str] = frozenset()) -> None:
        self.rng = random.Random(seed)
        self.ch = RandomChooser(self.rng)
        self.exclude = exclude
        self.dims: dict[str, int] = {}
        self.params: list[Param] = []
        self.tensors: dict[str, Tensor] = {}
        self.stmts: list[Statement] = []

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    # -- the program --------------------------------------------------------------------

    def program(self) -> Program:
        self.big = self.chance(0.2)
        for d in DIMS[: self.ch.integer(1, 3)]:
            self.dims[d] = self.ch.integer(5, 20) if self.big else self.ch.integer(1, 4)
        for name in PARAMS[: self.ch.integer(1, 4)]:
            self.add_param(name, self.ch.choice(IN_DTYPES), self.random_dims())
        # A dimension exists only where a parameter binds it.
        used = {d for p in self.params for d in p.dims}
        self.dims = {d: v for d, v in self.dims.items() if d in used}
        for n in range(1, self.ch.integer(1, 5) + 1):
            out = f"T{n}"
            kind = self.rng.choices(
                ("eltwise", "contraction", "reshape", "gather"), (40, 45, 7, 8)
            )[0]
            stmt = getattr(self, kind)(out) if kind != "eltwise" else None
            self.add(stmt or self.eltwise(out))
        last = self.stmts[-1].out
        others = [s.out for s in self.stmts[:-1]]
        outputs = [last] + self.ch.subset(others, 0, 2)
        return Program(tuple(self.params), tuple(self.stmts), tuple(outputs), dict(self.dims))

    def add_param(self, name: str, dtype: str, dims: tuple[str, ...], values=None) -> Tensor:
        self.params.append(Param(name, dims, dtype, values))
        shape = tuple(self.dims[d] if d in self.dims else int(d) for d in dims)
        t = Tensor(name, dims, shape, dtype)
        self.tensors[name] = t
        return t

    def random_dims(self) -> tuple[str, ...]:
        rank = self.rng.choices((0, 1, 2, 3), (1, 3, 4, 2))[0]
        names = sorted(self.dims) or ["1"]
        return tuple(
            self.rng.choices((self.ch.choice(names), "1", self.ch.choice(("2", "3"))), (7, 2, 1))[0]
            for _ in range(rank)
        )

    def add(self, stmt: Statement) -> None:
        self.stmts.append(stmt)

    # -- contractions -------------------------------------------------------------------

    def contraction(self, out: str) -> Statement | None:
        for _ in range(6):
            spec = self._try_contraction(out)
            if spec is None:
                continue
            arrays = {n: np.zeros(self.tensors[n].shape) for n in {a.tensor for a in spec.operands}}
            ranges = index_ranges(spec, arrays, margin=0, dims=self.dims)
            if math.prod(len(r) for r in ranges.values()) <= MAX_TUPLES[self.big]:
                shape = tuple(eval(s.replace("/", "//"), {}, dict(self.dims)) for s in spec.sizes)
                dt = self._contraction_dtype(
                    spec.combo, [self.tensors[a.tensor] for a in spec.operands]
                )
                self.tensors[out] = Tensor(out, spec.sizes, shape, dt)
                return Contract(spec)
        return None

    def _contraction_dtype(self, combo: str, ops: list[Tensor]) -> str:
        if combo == "==":
            return "bool"
        if combo == "cond":
            return ops[2].dtype
        return str(np.result_type(*(np.dtype(t.dtype) for t in ops)))

    def _try_contraction(self, out: str):
        combo = self.rng.choices(("none", "*", "+", "==", "cond"), (30, 25, 15, 15, 15))[0]
        agg = self.ch.choice(("+", "*", ">", "<", "="))
        pool = list(self.tensors.values())
        slots = [self.ch.choice(pool) for _ in range(ARITY[combo])]
        if sum(len(t.shape) for t in slots) > (4 if self.big else 5):
            return None
        dt = self._contraction_dtype(combo, slots)
        default = None
        if self.chance(0.2):
            # The output takes the default's shape: at most one output index per dim.
            fits = [t for t in pool if len(t.shape) <= len(OUT_INDICES)]
            same = [t for t in fits if t.dtype == dt]
            choices = fits if "default_dtype" not in self.exclude else same
            if choices:
                d = self.ch.choice(choices)
                default = Slot(d.name, d.dims, d.shape)
        knobs = Knobs(
            min_out=0,
            max_out=3,
            max_red=2,
            constraints=2,
            window=0.2,
            reversed_anchor=0.15,
            const_out=0.1,
            races="assign_race" not in self.exclude,
        )
        spec, _ = gen_contraction(
            self.ch,
            out,
            [Slot(t.name, t.dims, t.shape) for t in slots],
            combo,
            agg,
            self.dims,
            knobs,
            default,
        )
        return spec

    # -- builtins -----------------------------------------------------------------------

    def reshape(self, out: str) -> Statement | None:
        pool = [
            t for t in self.tensors.values() if math.prod(t.shape) <= (4096 if self.big else 64)
        ]
        if not pool:
            return None
        src = self.ch.choice(pool)
        count = math.prod(src.shape)
        factors: list[int] = []
        n = count
        for p in (2, 3, 5, 7, 11, 13):
            while n % p == 0:
                factors.append(p)
                n //= p
        if n > 1:
            factors.append(n)
        rank = self.ch.integer(0 if count == 1 else 1, 3)
        groups = [1] * rank
        for f in factors:
            groups[self.rng.randrange(rank)] *= f
        by_value = {v: d for d, v in self.dims.items()}
        sizes = tuple(by_value.get(g, str(g)) if self.chance(0.6) else str(g) for g in groups)
        self.tensors[out] = Tensor(out, sizes, tuple(groups), src.dtype)
        return Reshape(out, src.name, sizes)

    def gather(self, out: str) -> Statement | None:
        pool = [t for t in self.tensors.values() if t.shape]
        if not pool:
            return None
        src = self.ch.choice(pool)
        axis = self.ch.integer(-len(src.shape), len(src.shape) - 1)
        size = src.shape[axis]
        ints = [t for t in self.tensors.values() if is_int_kind(t.dtype) and len(t.shape) <= 2]
        if ints and self.chance(0.15):
            idx = self.ch.choice(ints)  # any values: out of range must raise ExecutionError
        else:
            dims = tuple(
                self.ch.choice((*sorted(self.dims), "1", "2")) for _ in range(self.ch.integer(0, 2))
            )
            name = f"I{len(self.params)}"
            idx = self.add_param(name, self.ch.choice(("int32", "int64")), dims, (-size, size - 1))
        ax = axis % len(src.shape)
        shape = src.shape[:ax] + idx.shape + src.shape[ax + 1 :]
        sizes = src.dims[:ax] + idx.dims + src.dims[ax + 1 :]
        self.tensors[out] = Tensor(out, sizes, shape, src.dtype)
        return Gather(out, src.name, idx.name, axis)

    # -- elementwise --------------------------------------------------------------------

    def eltwise(self, out: str) -> Statement:
        target = self.ch.choice(list(self.tensors.values())).shape
        self.leaves = [t for t in self.tensors.values() if _broadcasts_into(t.shape, target)]
        expr, kind = self.typed(self.ch.integer(1, 3))
        shape = _broadcast_all([self.tensors[n].shape for n in _tensor_names(expr)])
        dims = tuple(self._dim_expr(shape, i) for i in range(len(shape)))
        self.tensors[out] = Tensor(out, dims, shape, kind)
        return Eltwise(out, expr)

    def _dim_expr(self, shape: tuple[int, ...], axis: int) -> str:
        """A size expression for one dimension of a broadcast result."""
        for t in self.tensors.values():
            off = len(t.shape) - len(shape) + axis
            if 0 <= off < len(t.shape) and t.shape[off] == shape[axis]:
                return t.dims[off]
        return str(shape[axis])

    def leaf(self) -> tuple[Expr, str]:
        if self.chance(0.75):
            t = self.ch.choice(self.leaves)
            return Name(t.name), t.dtype
        r = self.rng.random()
        if r < 0.4:
            return Lit(self.ch.choice(INT_LITS)), "wint"
        if r < 0.8 or not self.dims:
            return Lit(self.ch.choice(FLOAT_LITS)), "wfloat"
        return Name(self.ch.choice(sorted(self.dims))), "wint"

    def typed(self, depth: int) -> tuple[Expr, str]:
        """An expression that reads at least one tensor (so it has a dtype)."""
        for _ in range(20):
            e, k = self.expr(depth)
            if k not in WEAK:
                return e, k
        t = self.ch.choice(self.leaves)
        return Name(t.name), t.dtype

    def expr(self, depth: int) -> tuple[Expr, str]:
        if depth <= 0 or self.chance(0.2):
            return self.leaf()
        kind = self.rng.choices(("arith", "cmp", "logic", "not", "neg", "ternary", "func", "cast", "index"),
                                (30, 8, 4, 2, 4, 7, 30, 10, 3))[0]  # fmt: skip
        return getattr(self, f"_{kind}")(depth - 1)

    def pair(self, depth: int) -> tuple[tuple[Expr, str], tuple[Expr, str]]:
        """Two operands, the first typed, in a random order; a weak integer literal
        meeting an integer dtype fits it (or, for weak_literal_range, sometimes not)."""
        (a, ka), (b, kb) = self.typed(depth), self.expr(depth)
        b = self._fit(b, kb, ka)
        return ((b, kb), (a, ka)) if self.chance(0.5) else ((a, ka), (b, kb))

    def _fit(self, e: Expr, k: str, other: str) -> Expr:
        if not (isinstance(e, Lit) and k == "wint" and other.startswith(("int", "uint"))):
            return e
        info = np.iinfo(other)
        if "weak_literal_range" not in self.exclude and self.chance(0.15):
            v = int(info.max) + 1 if self.chance(0.5) else int(info.min) - 1
            if not -(2**63) <= v < 2**64:  # no 64-bit literal at all (int64's min - 1):
                v = int(info.min) - 1 if v >= 2**64 else int(info.max) + 1  # the other side
            return Lit(v)
        return e if info.min <= e.value <= info.max else Lit(2)

    def _arith(self, depth: int) -> tuple[Expr, str]:
        (a, ka), (b, kb) = self.pair(depth)
        op = self.ch.choice(ARITH)
        kind = join(ka, kb)
        if op == "-" and kind == "bool":
            op = "+"  # bool - bool is a type error
        if op in "/%" and not is_float_kind(kind):
            signed = [t for t in self.leaves if t.dtype in ("int32", "int64")]
            inputs = [t for t in signed if t.name in PARAMS]  # where INT_MIN is
            signed = inputs or signed
            hazards = self.hazards()
            if hazards and signed and self.chance(0.5):
                # The hazard itself: a tensor that may hold INT_MIN, over -1 or 0.
                t = self.ch.choice(signed)
                return Binary(op, Name(t.name), Lit(self.ch.choice(hazards))), t.dtype
            b = self.divisor(b, kb)
            kind = "int64" if kind == "bool" else kind
        return Binary(op, a, b), kind

    def hazards(self) -> tuple[int, ...]:
        """The divisors of the integer-division classes generated (``known.py``)."""
        return tuple(
            d
            for d, name in ((0, "int_div_zero"), (-1, "int_div_overflow"))
            if name not in self.exclude
        )

    def divisor(self, b: Expr, kb: str) -> Expr:
        """An integer divisor: raw (and now and then 0 or -1) when both integer-division
        classes are generated; never 0 without ``int_div_zero``."""
        hazards = self.hazards()
        if hazards and self.chance(0.3):
            return Lit(self.ch.choice(hazards))
        if "int_div_zero" not in self.exclude:
            # A raw tensor divisor may hold -1; INT_MIN / -1 is then caught by the
            # reference's event when int_div_overflow is excluded.
            return b
        if kb == "wint":
            if isinstance(b, Name):
                return b  # a dimension is at least 1
            return Lit(self.ch.choice((2, 3, -2, -3, 4, 5)))
        return Binary("+", Binary("%", b, Lit(7)), Lit(1))  # floor mod: 1..7

    def _cmp(self, depth: int) -> tuple[Expr, str]:
        (a, _), (b, _) = self.pair(depth)
        return Binary(self.ch.choice(CMP), a, b), "bool"

    def _logic(self, depth: int) -> tuple[Expr, str]:
        (a, _), (b, _) = self.typed(depth), self.expr(depth)
        return Binary(self.ch.choice(("&&", "||")), a, b), "bool"

    def _not(self, depth: int) -> tuple[Expr, str]:
        return Unary("!", self.typed(depth)[0]), "bool"

    def _neg(self, depth: int) -> tuple[Expr, str]:
        a, k = self.typed(depth)
        if k == "bool":
            return Call("as_int", (a, Lit(32))), "int32"
        return Unary("-", a), k

    def _ternary(self, depth: int) -> tuple[Expr, str]:
        c, _ = self.typed(depth)
        (t, kt), (o, ko) = self.expr(depth), self.expr(depth)
        t, o = self._fit(t, kt, ko), self._fit(o, ko, kt)
        if kt in WEAK and ko in WEAK:
            return Ternary(c, t, o), "float64" if "wfloat" in (kt, ko) else "int64"
        return Ternary(c, t, o), join(kt, ko)

    def _func(self, depth: int) -> tuple[Expr, str]:
        f = self.ch.choice((*UNARY_FUNCS, "pow", "max", "min", "pow", "max", "min"))
        a, ka = self.typed(depth)
        if f in ("max", "min"):
            b, kb = self.expr(depth)
            b = self._fit(b, kb, ka)
            return Call(f, (a, b) if self.chance(0.5) else (b, a)), join(ka, kb)
        if f == "pow":
            if self.chance(0.7):
                a = Binary("+", Call("abs", (a,)), Lit(0.5))
                ka = join(ka, "wfloat")
            b, kb = (
                self.expr(depth)
                if self.chance(0.5)
                else (Lit(self.ch.choice((2, 3, 0.5, -1, 2.5))), "w")
            )
            kb = (
                kb
                if kb != "w"
                else ("wint" if isinstance(b, Lit) and isinstance(b.value, int) else "wfloat")
            )
            return Call("pow", (a, b)), join(ka, kb)
        if f in ("log", "sqrt") and self.chance(0.6):
            a = Binary("+", Call("abs", (a,)), Lit(0.5))
            ka = join(ka, "wfloat")
        if f in ("abs", "relu"):
            return Call(f, (a,)), ka
        return Call(f, (a,)), ka if is_float_kind(ka) else "float64"

    def _cast(self, depth: int) -> tuple[Expr, str]:
        a, _ = self.typed(depth)
        f = self.ch.choice(("as_float", "as_float", "as_int", "as_int", "as_uint", "as_bool"))
        if f == "as_bool":
            return Call(f, (a,)), "bool"
        bits = self.ch.choice(CAST_BITS[f])
        kind = {"as_float": "float", "as_int": "int", "as_uint": "uint"}[f] + str(bits)
        return Call(f, (a, Lit(bits))), kind

    def _index(self, depth: int) -> tuple[Expr, str]:
        ranked = [t for t in self.leaves if t.shape]
        if not ranked:
            return self.typed(depth)
        t = self.ch.choice(ranked)
        return Call(
            "index", (Name(t.name), Lit(self.ch.integer(-len(t.shape), len(t.shape) - 1)))
        ), "int64"


def _broadcasts_into(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(shape[::-1], target[::-1]))


def _broadcast_all(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    return tuple(int(s) for s in np.broadcast_shapes(*shapes)) if shapes else ()


def _tensor_names(e: Expr) -> list[str]:
    """Tensors an expression reads or takes a shape from (dims are not tensors)."""
    if isinstance(e, Name):
        return [] if e.name in DIMS else [e.name]
    if isinstance(e, Lit):
        return []
    if isinstance(e, Unary):
        return _tensor_names(e.arg)
    if isinstance(e, Binary):
        return _tensor_names(e.lhs) + _tensor_names(e.rhs)
    if isinstance(e, Ternary):
        return _tensor_names(e.cond) + _tensor_names(e.then) + _tensor_names(e.other)
    return [n for a in e.args for n in _tensor_names(a)]


def generate(
    seed: int, exclude: frozenset[str] = frozenset()
) -> tuple[Program, dict[str, np.ndarray]]:
    """The program and inputs of ``seed`` (deterministic)."""
    program = Generator(seed, exclude).program()
    rng = np.random.default_rng(seed)
    hazards = "int_div_overflow" not in exclude
    inputs = {
        p.name: random_values(rng, p.dtype, program.shape_of(p), hazards, p.values)
        for p in program.params
    }
    return program, inputs
