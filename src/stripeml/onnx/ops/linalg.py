"""Linear algebra: MatMul, Gemm, Einsum, MatMulInteger.

Each product is one Tile contraction; NumPy's batch broadcasting is written
in the index lists (a batch axis of size 1 that broadcasts is accessed at 0),
so no operand is copied or expanded first.
"""

from __future__ import annotations

import numpy as np

from ..builder import Builder, Node, Value
from ..registry import op
from ._util import broadcast_shape, literal
from .conv import channel_vector


def _sizes(shape: tuple[int, ...]) -> str:
    return ", ".join(str(s) for s in shape)


def _out(idx: list[str], shape: tuple[int, ...]) -> str:
    """``{out}[i, j : 2, 3]`` (``{out}[]`` for a scalar)."""
    if not idx:
        return "{out}[]"
    return f"{{out}}[{', '.join(idx)} : {_sizes(shape)}]"


def matmul_contraction(
    b: Builder,
    n: Node,
    aref: str,
    a_shape: tuple[int, ...],
    bref: str,
    b_shape: tuple[int, ...],
    dtype: np.dtype,
    a_layout: tuple[int, ...] | None = None,
    b_layout: tuple[int, ...] | None = None,
) -> Value:
    """NumPy ``matmul`` of the tensors named ``aref``/``bref`` as one contraction
    (``a_shape``, ``b_shape``: logical shapes; an operand with a layout is stored
    as ``logical.transpose(layout)`` and read through permuted indices)."""
    if not a_shape or not b_shape:
        raise n.error("MatMul operands must have rank 1 or more")
    ka = a_shape[-1]
    kb = b_shape[0] if len(b_shape) == 1 else b_shape[-2]
    if ka != kb:
        raise n.error(f"shapes {a_shape} and {b_shape} do not match for a matrix product")
    a_batch = a_shape[:-2]
    b_batch = b_shape[:-2]
    batch = broadcast_shape(n, a_batch, b_batch)
    names = [f"b{i}" for i in range(len(batch))]

    def batch_idx(shape: tuple[int, ...]) -> list[str]:
        off = len(batch) - len(shape)
        return [
            "0" if s == 1 and batch[off + j] != 1 else names[off + j] for j, s in enumerate(shape)
        ]

    a_idx = batch_idx(a_batch) + (["m", "k"] if len(a_shape) >= 2 else ["k"])
    b_idx = batch_idx(b_batch) + (["k", "j"] if len(b_shape) >= 2 else ["k"])
    o_idx = list(names)
    o_shape = list(batch)
    if len(a_shape) >= 2:
        o_idx.append("m")
        o_shape.append(a_shape[-2])
    if len(b_shape) >= 2:
        o_idx.append("j")
        o_shape.append(b_shape[-1])
    if a_layout is not None:
        a_idx = [a_idx[p] for p in a_layout]
    if b_layout is not None:
        b_idx = [b_idx[p] for p in b_layout]
    text = (
        f"{_out(o_idx, tuple(o_shape))} = "
        f"+({aref}[{', '.join(a_idx)}] * {bref}[{', '.join(b_idx)}])"
    )
    return b.contraction(text, o_shape, dtype)


def _same_type(n: Node, *vs: Value) -> np.dtype:
    dt = vs[0].dtype
    for v in vs[1:]:
        if v.dtype != dt:
            raise n.error(f"operands differ in type ({dt} and {v.dtype})")
    if dt.kind not in "fiu":
        raise n.error(f"element type {dt} is not supported")
    return dt


@op("MatMul")
def matmul(b: Builder, n: Node) -> list[Value | None]:
    """MatMul: NumPy matmul, with batch broadcasting and 1-D operands."""
    x, y = n.input(0), n.input(1)
    dt = _same_type(n, x, y)
    return [matmul_contraction(b, n, b.ref(x), x.shape, b.ref(y), y.shape, dt)]


def _int_operand(b: Builder, n: Node, i: int, v: Value, zp_index: int) -> str:
    """``v - zero_point`` as an int32 tensor (per-row zero points for A)."""
    zp = n.opt(zp_index)
    base = f"as_int({b.ref(v)}, 32)"
    if zp is None or (zp.is_const and not np.any(zp.const)):
        return b.ref(b.eltwise(base, v.shape, np.int32))
    if zp.dtype != v.dtype:
        raise n.error(f"zero point ({zp.dtype}) differs in type from its input ({v.dtype})")
    if zp.size == 1:
        if zp.is_const:
            text = f"{base} - {int(np.asarray(zp.const).reshape(()))}"
        else:
            text = f"{base} - as_int({b.ref(zp)}, 32)"
    elif i == 0 and v.rank >= 2 and zp.shape == (v.shape[-2],):
        text = f"{base} - {channel_vector(b, zp, 3, np.dtype(np.int32), 'zero point')}"
    elif i == 1 and v.rank >= 2 and zp.shape == (v.shape[-1],):
        text = f"{base} - as_int({b.ref(zp)}, 32)"
    else:
        raise n.error(f"a zero point of shape {zp.shape} is not supported")
    return b.ref(b.eltwise(text, v.shape, np.int32))


@op("MatMulInteger")
def matmul_integer(b: Builder, n: Node) -> list[Value | None]:
    """MatMulInteger: int8/uint8 MatMul with zero points (scalar, per row of A, per column of B), int32 result."""
    x, y = n.input(0), n.input(1)
    for v in (x, y):
        if v.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
            raise n.error(f"element type {v.dtype} is not supported (int8/uint8)")
    from .integer import matmul_integer_dot4

    fast = matmul_integer_dot4(b, n)  # constant weights: integer dot products
    if fast is not None:
        return [fast]
    xa = _int_operand(b, n, 0, x, 2)
    ya = _int_operand(b, n, 1, y, 3)
    return [matmul_contraction(b, n, xa, x.shape, ya, y.shape, np.dtype(np.int32))]


def _coef(n: Node, value: float, dtype: np.dtype, what: str) -> str:
    if dtype.kind == "f":
        return literal(value, dtype)
    if float(value).is_integer():
        return literal(int(value), dtype)
    raise n.error(f"{what}={value} is not an integer, for {dtype} operands")


@op("Gemm")
def gemm(b: Builder, n: Node) -> list[Value | None]:
    """Gemm: alpha, beta, transA, transB, optional C (broadcast to the result)."""
    a, bb, c = n.input(0), n.input(1), n.opt(2)
    dt = _same_type(n, a, bb)
    if a.rank != 2 or bb.rank != 2:
        raise n.error(f"A and B must be matrices, got shapes {a.shape} and {bb.shape}")
    alpha = float(n.attr("alpha", 1.0))
    beta = float(n.attr("beta", 1.0))
    ta, tb = int(n.attr("transA", 0)), int(n.attr("transB", 0))
    m, k = (a.shape[1], a.shape[0]) if ta else a.shape
    k2, j = (bb.shape[1], bb.shape[0]) if tb else bb.shape
    if k != k2:
        raise n.error(f"A {a.shape} and B {bb.shape} do not match (transA={ta}, transB={tb})")
    if tb and bb.is_const:
        # constant weights (a classifier head): store them K x N, so the
        # product's contiguous axis is the output's (about 2.5x faster on cpu)
        from ... import api

        const = np.asarray(bb.const)
        arr = api.reversed_axes(const.reshape(*const.shape, 1)).reshape(const.shape[::-1])
        bb, tb = Value("", arr.shape, arr.dtype, arr), 0
    a_idx = "k, m" if ta else "m, k"
    b_idx = "j, k" if tb else "k, j"
    # Constant weights are bound as constants: the target's pipeline lays them out
    # for its register tiles (the cpu target's `unroll`), once.
    text = f"{{out}}[m, j : {m}, {j}] = +({b.ref(a)}[{a_idx}] * {b.ref(bb)}[{b_idx}])"
    p = b.contraction(text, (m, j), dt)
    expr = b.ref(p)
    if alpha != 1.0:
        expr = f"{_coef(n, alpha, dt, 'alpha')} * {expr}"
    if c is not None and beta != 0.0:
        if c.dtype != dt:
            raise n.error(f"C ({c.dtype}) differs in type from A ({dt})")
        if broadcast_shape(n, c.shape, (m, j)) != (m, j):
            raise n.error(f"C of shape {c.shape} does not broadcast to {(m, j)}")
        cterm = b.ref(c)
        if beta != 1.0:
            cterm = f"{_coef(n, beta, dt, 'beta')} * {cterm}"
        expr = f"{expr} + {cterm}"
    if expr == b.ref(p):
        return [p]
    return [b.eltwise(expr, (m, j), dt)]


# -- Einsum -------------------------------------------------------------------


def _parse_term(n: Node, term: str) -> list[str]:
    """The labels of one einsum term; ``...`` becomes one ``"..."`` label."""
    labels: list[str] = []
    i = 0
    while i < len(term):
        if term.startswith("...", i):
            if "..." in labels:
                raise n.error(f"term {term!r} has two ellipses")
            labels.append("...")
            i += 3
        elif term[i].isalpha():
            labels.append(term[i])
            i += 1
        else:
            raise n.error(f"unexpected {term[i]!r} in the equation")
    return labels


@op("Einsum")
def einsum(b: Builder, n: Node) -> list[Value | None]:
    """Einsum: explicit and implicit equations, repeated labels (diagonals), ellipsis with broadcasting."""
    eq = str(n.attr("equation", "")).replace(" ", "")
    if not eq:
        raise n.error("the equation attribute is required")
    operands = [n.input(i) for i in range(len(n.inputs))]
    dt = _same_type(n, *operands)
    lhs, arrow, rhs = eq.partition("->")
    terms = [_parse_term(n, t) for t in lhs.split(",")]
    if len(terms) != len(operands):
        raise n.error(f"the equation has {len(terms)} operand(s), the node {len(operands)}")
    # expand ellipses into per-dimension labels e0, e1 ... (aligned at the right)
    n_ell = 0
    for t, v in zip(terms, operands):
        named = len([x for x in t if x != "..."])
        if "..." in t:
            n_ell = max(n_ell, v.rank - named)
        elif named != v.rank:
            raise n.error(f"term {''.join(t)!r} does not match an operand of rank {v.rank}")
    ell = [f"e{i}" for i in range(n_ell)]
    size: dict[str, int] = {}
    expanded: list[list[str]] = []
    for t, v in zip(terms, operands):
        labels: list[str] = []
        for x in t:
            if x == "...":
                k = v.rank - (len(t) - 1)
                if k < 0:
                    raise n.error(f"term {''.join(t)!r} has more labels than rank {v.rank}")
                labels += ell[n_ell - k :]
            else:
                labels.append("x" + x)
        expanded.append(labels)
        for lab, s in zip(labels, v.shape):
            old = size.get(lab)
            if lab.startswith("e"):
                if old is None or old == 1:
                    size[lab] = s
                elif s not in (1, old):
                    raise n.error(f"ellipsis dimensions {old} and {s} do not broadcast")
            elif old is None:
                size[lab] = s
            elif old != s:
                raise n.error(f"label {lab[1:]!r} has sizes {old} and {s}")
    if arrow:
        out_terms = _parse_term(n, rhs)
        out: list[str] = []
        for x in out_terms:
            if x == "...":
                out += ell
            elif "x" + x not in size:
                raise n.error(f"output label {x!r} is not in any input")
            elif "x" + x in out:
                raise n.error(f"output label {x!r} is repeated")
            else:
                out.append("x" + x)
    else:
        counts: dict[str, int] = {}
        for labels in expanded:
            for lab in labels:
                counts[lab] = counts.get(lab, 0) + 1
        out = ell + sorted(
            (lab for lab, c in counts.items() if c == 1 and lab.startswith("x")),
            key=lambda lab: lab[1:],
        )

    def access(ref: str, labels: list[str], shape: tuple[int, ...]) -> str:
        idx = ["0" if s == 1 and size[lab] != 1 else lab for lab, s in zip(labels, shape)]
        return f"{ref}[{', '.join(idx)}]"

    # operands left to right, pairwise: keep the labels still needed later
    cur_ref, cur_labels, cur_shape = b.ref(operands[0]), expanded[0], operands[0].shape
    rest = list(zip(operands[1:], expanded[1:]))
    if not rest:
        shape = tuple(size[lab] for lab in out)
        text = f"{_out(out, shape)} = +({access(cur_ref, cur_labels, cur_shape)})"
        return [b.contraction(text, shape, dt)]
    for pos, (v, labels) in enumerate(rest):
        later = set(out)
        for _, lab2 in rest[pos + 1 :]:
            later |= set(lab2)
        if pos == len(rest) - 1:
            keep = out
        else:
            keep = []
            for lab in cur_labels + labels:
                if lab in later and lab not in keep:
                    keep.append(lab)
        shape = tuple(size[lab] for lab in keep)
        text = (
            f"{_out(keep, shape)} = +({access(cur_ref, cur_labels, cur_shape)} * "
            f"{access(b.ref(v), labels, v.shape)})"
        )
        res = b.contraction(text, shape, dt)
        cur_ref, cur_labels, cur_shape = b.ref(res), keep, shape
    return [res]
