"""Builders of hand-written Stripe programs for runtime tests and benchmarks.

Programs are built directly with the node constructors (no text parser).
``aff("x + 2*kx - 1")`` builds an affine; :func:`contraction` builds a one-kernel
program in the shape the Tile lowering produces.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from stripeml.ir.affine import Affine
from stripeml.ir.nodes import (
    Block,
    Constant,
    Constraint,
    Index,
    Intrinsic,
    Load,
    Program,
    Refinement,
    Special,
    Statement,
    Store,
    TensorShape,
)

_TERM = re.compile(r"\s*([+-]?)\s*(?:(\d+)\s*\*\s*)?([A-Za-z_]\w*|\d+)")


def aff(text: str | int | Affine) -> Affine:
    """Parse ``"2*x + y - 3"`` (terms ``k``, ``name``, ``k*name``) into an Affine."""
    if isinstance(text, Affine):
        return text
    if isinstance(text, int):
        return Affine.constant(text)
    coeffs: dict[str, int] = {}
    const = 0
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TERM.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"bad affine {text!r} at {pos}")
        sign = -1 if m.group(1) == "-" else 1
        k = int(m.group(2)) if m.group(2) else 1
        atom = m.group(3)
        if atom.isdigit():
            const += sign * k * int(atom)
        else:
            coeffs[atom] = coeffs.get(atom, 0) + sign * k
        pos = m.end()
    return Affine.build(coeffs, const)


def dense(dtype: str, sizes: Sequence[int]) -> TensorShape:
    return TensorShape.dense(dtype, tuple(sizes))


def root_ref(dir: str, name: str, dtype: str, sizes: Sequence[int], strides=None) -> Refinement:
    """A program parameter/result/temporary (dense unless ``strides`` given)."""
    shape = dense(dtype, sizes)
    if strides is not None:
        shape = TensorShape(dtype, tuple(sizes), tuple(strides))
    return Refinement(dir, name, shape)


def view(
    dir: str,
    name: str,
    parent: TensorShape,
    access: Sequence[str | int | Affine] | str,
    sizes: Sequence[int] | None = None,
    agg: str = "",
    from_: str | None = None,
) -> Refinement:
    """A view of ``parent`` (shape of the refined ref) at ``access``; sizes default to 1s."""
    if isinstance(access, str):
        access = [a for a in access.split(",")]
    accs = tuple(aff(a) for a in access)
    sizes = tuple(sizes) if sizes is not None else (1,) * parent.rank
    shape = TensorShape(parent.dtype, sizes, parent.strides)
    if dir in ("out", "inout") and not agg:
        agg = "assign"
    return Refinement(dir, name, shape, from_=from_ or name, access=accs, agg=agg)


def alloc(name: str, dtype: str, sizes: Sequence[int], location: str = "DRAM") -> Refinement:
    return Refinement("none", name, dense(dtype, sizes), location=location)


def idxs(spec: Mapping[str, int | tuple[int, str]]) -> tuple[Index, ...]:
    """``{"i": 4, "j": (2, "2*t")}`` -> indices (the tuple form has an affine offset)."""
    out = []
    for name, r in spec.items():
        if isinstance(r, tuple):
            out.append(Index(name, r[0], aff(r[1])))
        else:
            out.append(Index(name, r))
    return tuple(out)


def block(
    indices: Mapping[str, int | tuple[int, str]],
    refs: Sequence[Refinement],
    stmts: Sequence[Statement],
    constraints: Sequence[str | Affine] = (),
    tags: Sequence[str] = ("kernel",),
    name: str = "",
) -> Block:
    return Block(
        idxs=idxs(indices),
        refs=tuple(refs),
        stmts=tuple(stmts),
        constraints=tuple(Constraint(aff(c)) for c in constraints),
        tags=frozenset(tags),
        name=name,
    )


def program(refs: Sequence[Refinement], stmts: Sequence[Statement]) -> Program:
    return Program(Block(refs=tuple(refs), stmts=tuple(stmts), tags=frozenset({"program"})))


def contraction(
    inputs: Mapping[str, tuple[str, Sequence[int]]],
    output: tuple[str, str, Sequence[int]],
    indices: Mapping[str, int],
    access: Mapping[str, str],
    agg: str = "add",
    combo: str | None = "mul",
    constraints: Sequence[str] = (),
    out_dir: str = "out",
) -> Program:
    """One kernel: load every input, combine with ``combo`` (None: single input), store.

    ``access`` maps each tensor (inputs and the output) to its comma-separated
    index polynomials.
    """
    out_name, out_dtype, out_sizes = output
    roots = [root_ref("in", n, dt, s) for n, (dt, s) in inputs.items()]
    out_root = root_ref("out", out_name, out_dtype, out_sizes)
    refs = [view("in", r.into, r.shape, access[r.into]) for r in roots]
    refs.append(view(out_dir, out_name, out_root.shape, access[out_name], agg=agg))
    stmts: list[Statement] = [Load(f"${n}", n) for n in inputs]
    value = f"${next(iter(inputs))}"
    if combo is not None:
        stmts.append(Intrinsic(combo, tuple(f"${n}" for n in inputs), "$r", out_dtype))
        value = "$r"
    stmts.append(Store(out_name, value))
    kern = block(indices, refs, stmts, constraints, tags=("kernel", "contraction"))
    return program([*roots, out_root], [kern])


# -- the standard cases -------------------------------------------------------


def matmul(m: int, n: int, k: int, dtype: str = "f32") -> Program:
    """``C[m, n] = +(A[m, k] * B[k, n])``."""
    return contraction(
        {"A": (dtype, (m, k)), "B": (dtype, (k, n))},
        ("C", dtype, (m, n)),
        {"m": m, "n": n, "k": k},
        {"A": "m, k", "B": "k, n", "C": "m, n"},
    )


def conv2d(
    n: int, x: int, y: int, ci: int, co: int, kx: int = 3, ky: int = 3, pad: int = 1,
    stride: int = 1, dilation: int = 1, dtype: str = "f32",
) -> Program:  # fmt: skip
    """NHWC conv with zero padding expressed by constraints (output size from stride)."""
    ox = (x + 2 * pad - dilation * (kx - 1) - 1) // stride + 1
    oy = (y + 2 * pad - dilation * (ky - 1) - 1) // stride + 1
    ix = f"{stride}*x + {dilation}*kx - {pad}"
    iy = f"{stride}*y + {dilation}*ky - {pad}"
    return contraction(
        {"I": (dtype, (n, x, y, ci)), "K": (dtype, (kx, ky, ci, co))},
        ("O", dtype, (n, ox, oy, co)),
        {"n": n, "x": ox, "y": oy, "kx": kx, "ky": ky, "ci": ci, "co": co},
        {"I": f"n, {ix}, {iy}, ci", "K": "kx, ky, ci, co", "O": "n, x, y, co"},
        constraints=[ix, _neg_bound(x - 1, ix), iy, _neg_bound(y - 1, iy)],
    )


def _neg_bound(limit: int, expr: str) -> Affine:
    """``limit - expr >= 0``."""
    return aff(limit) - aff(expr)


def tiled_matmul(m: int, n: int, k: int, tile: int, dtype: str = "f32") -> Program:
    """Matmul tiled over (m, n) with a per-tile ``none`` cache of A and a copy-in block."""
    a = root_ref("in", "A", dtype, (m, k))
    b = root_ref("in", "B", dtype, (k, n))
    c = root_ref("out", "C", dtype, (m, n))
    at = view("in", "A", a.shape, f"{tile}*i, 0", (tile, k))
    bt = view("in", "B", b.shape, f"0, {tile}*j", (k, tile))
    ct = view("out", "C", c.shape, f"{tile}*i, {tile}*j", (tile, tile), agg="add")
    cache = alloc("Ac", dtype, (tile, k), location="L1")
    copy_in = block(
        {"a": tile, "b": k},
        [view("in", "A", at.shape, "a, b"), view("out", "Ac", cache.shape, "a, b")],
        [Load("$x", "A"), Store("Ac", "$x")],
        tags=("copy",),
    )
    inner = block(
        {"mm": tile, "nn": tile, "kk": k},
        [
            view("in", "Ac", cache.shape, "mm, kk"),
            view("in", "B", bt.shape, "kk, nn"),
            view("out", "C", ct.shape, "mm, nn", agg="add"),
        ],
        [Load("$a", "Ac"), Load("$b", "B"), Intrinsic("mul", ("$a", "$b"), "$c", dtype),
         Store("C", "$c")],
    )  # fmt: skip
    outer = block(
        {"i": m // tile, "j": n // tile}, [at, bt, ct, cache], [copy_in, inner], tags=("tiled",)
    )
    return program([a, b, c], [outer])


def special_program(op: str, x, y, params=(), extra=None) -> Program:
    """Root-level special ``op(X[, I]) -> Y``; ``x``/``y``/``extra`` are (dtype, sizes)."""
    refs = [root_ref("in", "X", *x)]
    ins = ["X"]
    if extra is not None:
        refs.append(root_ref("in", "I", *extra))
        ins.append("I")
    refs.append(root_ref("out", "Y", *y))
    return program(refs, [Special(op, tuple(ins), ("Y",), tuple(params))])


def const(into: str, value, dtype: str) -> Constant:
    return Constant(into, value, dtype)
