"""Lowering: a bound Tile function -> a Stripe program.

The program block declares the parameters (``in``), results (``out``) and
intermediates (``none``); each statement becomes one kernel block (a
contraction may be preceded by a fill block when isl shows that some output
elements are reached by no valid index tuple).  The source statement is kept
as each block's comment.  The statement builtins (``reshape``, ``gather``,
``scatter``, ``scatter_nd``, ``topk``, and the byte views ``view_int/uint/float``
as ``bitview``) become root-level ``special`` statements between the kernels.
"""

from __future__ import annotations

from dataclasses import replace

from ..analysis.injectivity import collision
from ..analysis.ranges import Bound, covers, implied_by_box, infer_ranges
from ..errors import TileTypeError
from ..ir.affine import Affine
from ..ir.nodes import (
    Block,
    Constant,
    Constraint,
    Index,
    Load,
    Program,
    Refinement,
    Special,
    Statement,
    Store,
    TensorShape,
)
from . import ast
from .bind import Binding, where
from .eltwise import ScalarEmitter, lower_eltwise
from .exprs import VIEW_BITS, eval_size, indices_of, literal_int, poly_to_affine
from .types import TensorInfo


def lower(
    fn: ast.Function,
    binding: Binding,
    name: str = "main",
    constants: frozenset[str] = frozenset(),
) -> Program:
    """Lower ``fn`` for the shapes/dtypes in ``binding``; the parameters named in
    ``constants`` are marked ``const`` (bound when the function was compiled)."""
    params = {p.name for p in fn.params}
    outputs = [o.name for o in fn.outputs]
    refs = []
    for p in fn.params:
        ref = _root_ref("in", p.name, binding.tensors[p.name])
        refs.append(replace(ref, const=True) if p.name in constants else ref)
    for o in outputs:
        refs.append(_root_ref("out", o, binding.tensors[o]))
    for s in fn.stmts:
        if s.output not in params and s.output not in outputs:
            refs.append(_root_ref("none", s.output, binding.tensors[s.output]))
    kernels: list[Statement] = []
    for k, stmt in enumerate(fn.stmts):
        if 0 in binding.tensors[stmt.output].shape:
            continue  # an empty result (NumPy's): no element to compute, no kernel
        if isinstance(stmt, ast.Contraction):
            kernels.extend(lower_contraction(stmt, k, binding))
        elif isinstance(stmt, ast.Builtin):
            kernels.append(lower_builtin(stmt, binding))
        else:
            kernels.append(lower_eltwise(stmt, k, binding))
    root = Block(refs=tuple(refs), stmts=tuple(kernels), tags=frozenset({"program"}), name=name)
    return Program(root)


def lower_builtin(stmt: ast.Builtin, binding: Binding) -> Special:
    """A statement builtin: a root-level ``special`` between the kernels, its axis
    made non-negative and its optional word written out (``reduce``, ``order``)."""
    names = tuple(a.name for a in stmt.args if isinstance(a, ast.Name))
    if stmt.func == "reshape":
        return Special("reshape", names[:1], (stmt.output,))
    if stmt.func in VIEW_BITS:
        return Special("bitview", names[:1], (stmt.output,))
    x = binding.tensors[names[0]]
    rank = len(x.shape)
    if stmt.func == "topk":
        axis = literal_int(stmt.args[2])
        assert axis is not None
        k = eval_size(stmt.args[1], binding.dims)
        order = _word(stmt, 3, "largest")
        params = (("axis", axis % rank), ("k", k), ("order", order))
        return Special("topk", names[:1], (stmt.output,), params)
    if stmt.func == "scatter":
        axis = literal_int(stmt.args[3])
        assert axis is not None
        reduce = (("reduce", _word(stmt, 4, "none")),)
        return Special("scatter", names[:3], (stmt.output,), (("axis", axis % rank), *reduce))
    if stmt.func == "scatter_nd":
        return Special(
            "scatter_nd", names[:3], (stmt.output,), (("reduce", _word(stmt, 3, "none")),)
        )
    axis = literal_int(stmt.args[2])
    assert axis is not None
    return Special("gather", names[:2], (stmt.output,), (("axis", axis % rank),))


def _word(stmt: ast.Builtin, k: int, default: str) -> str:
    """The word argument ``k`` of a builtin (checked), ``default`` when left out."""
    if len(stmt.args) <= k:
        return default
    arg = stmt.args[k]
    assert isinstance(arg, ast.Name)
    return arg.name


def _root_ref(direction: str, name: str, info: TensorInfo) -> Refinement:
    return Refinement(direction, name, TensorShape.dense(info.dtype, info.shape))


def _ordered_indices(stmt: ast.Contraction) -> list[str]:
    seen: list[str] = []
    exprs = list(stmt.out_indices)
    for acc in stmt.operands:
        exprs.extend(acc.indices)
    exprs.extend(c.poly for c in stmt.constraints)
    for e in exprs:
        for n in sorted(indices_of(e), key=lambda n: _first_pos(e, n)):
            if n not in seen:
                seen.append(n)
    return seen


def _first_pos(expr: ast.Expr, name: str) -> tuple[int, int]:
    # Order indices by where they first appear in the source text.
    stack = [expr]
    best = (1 << 30, 0)
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Name) and e.name == name:
            best = min(best, (e.pos.line, e.pos.column))
        for child in ("operand", "lhs", "rhs", "cond", "then", "other"):
            if hasattr(e, child):
                stack.append(getattr(e, child))
        if isinstance(e, ast.Call):
            stack.extend(e.args)
    return best


def _affine(expr: ast.Expr, dims: dict[str, int]) -> Affine:
    coeffs, const = poly_to_affine(expr, dims)
    return Affine.build(coeffs, const)


def lower_contraction(stmt: ast.Contraction, k: int, binding: Binding) -> list[Block]:
    dims = binding.dims
    out = binding.tensors[stmt.output]
    out_aff = [_affine(e, dims) for e in stmt.out_indices]
    acc_aff = [[_affine(e, dims) for e in acc.indices] for acc in stmt.operands]
    bounds = [
        Bound(a, s - 1, f"{stmt.output} dim {d}")
        for d, (a, s) in enumerate(zip(out_aff, out.shape))
    ]
    for acc, affs in zip(stmt.operands, acc_aff):
        shape = binding.tensors[acc.tensor].shape
        bounds += [
            Bound(a, s - 1, f"{acc.tensor} dim {d}") for d, (a, s) in enumerate(zip(affs, shape))
        ]
    for c in stmt.constraints:
        bounds.append(Bound(_affine(c.poly, dims), eval_size(c.bound, dims) - 1, "constraint"))
    indices = _ordered_indices(stmt)
    result = infer_ranges(indices, bounds)
    if result.unbounded:
        names = ", ".join(f"'{n}'" for n in result.unbounded)
        raise TileTypeError(
            f"{where(stmt.pos, stmt.text)}index {names} has no finite range: it must appear in an "
            "access or constraint that bounds it"
        )
    blocks: list[Block] = []
    if result.empty or stmt.default is not None or not covers(indices, bounds, out_aff, out.shape):
        blocks.append(_fill_block(stmt, k, out))
    if result.empty:
        return blocks

    ranges = result.ranges
    shift = {n: Affine.index(n) + lo for n, (lo, _) in ranges.items() if lo != 0}
    box = {n: (0, hi - lo) for n, (lo, hi) in ranges.items()}
    idxs = tuple(Index(n, hi - lo + 1) for n, (lo, hi) in ((n, ranges[n]) for n in indices))
    constraints: list[Constraint] = []
    for b in bounds:
        e = b.expr.substitute(shift)
        for side in (e, Affine.constant(b.hi) - e):
            if not implied_by_box(side, 1 << 62, box) and Constraint(side) not in constraints:
                constraints.append(Constraint(side))

    refs: list[Refinement] = []
    em = ScalarEmitter()
    counts: dict[str, int] = {}
    for acc in stmt.operands:
        counts[acc.tensor] = counts.get(acc.tensor, 0) + 1
    values = []
    for j, (acc, affs) in enumerate(zip(stmt.operands, acc_aff)):
        info = binding.tensors[acc.tensor]
        into = acc.tensor if counts[acc.tensor] == 1 else f"{acc.tensor}_{j}"
        root = TensorShape.dense(info.dtype, info.shape)
        access = tuple(a.substitute(shift) for a in affs)
        refs.append(
            Refinement(
                "in",
                into,
                TensorShape(info.dtype, (1,) * len(affs), root.strides),
                acc.tensor,
                access,
            )
        )
        values.append(em.load(into, info.dtype))
    root_out = TensorShape.dense(out.dtype, out.shape)
    refs.append(
        Refinement(
            "out",
            stmt.output,
            TensorShape(out.dtype, (1,) * len(out_aff), root_out.strides),
            stmt.output,
            tuple(a.substitute(shift) for a in out_aff),
            stmt.agg,
        )
    )
    value = _combine(stmt, values, out.dtype, em)
    em.stmts.append(Store(stmt.output, value))
    block = Block(
        idxs=idxs,
        refs=tuple(refs),
        stmts=tuple(em.stmts),
        constraints=tuple(constraints),
        tags=frozenset({"kernel", "contraction", f"agg_{stmt.agg}"}),
        name=f"k{k}_{stmt.output}",
        comment=stmt.text,
    )
    if stmt.agg == "assign":
        _check_stores_once(stmt, block, ranges)
    blocks.append(block)
    return blocks


def _check_stores_once(
    stmt: ast.Contraction, block: Block, ranges: dict[str, tuple[int, int]]
) -> None:
    """Reject an ``=`` contraction whose valid tuples store one element twice.

    Decided here, for the bound shapes, so that every backend refuses the
    program before it runs (a parallel backend would otherwise keep whichever
    store came last).  The witness is in source coordinates: the block's
    indices start at 0, the source's at each range's low end.
    """
    hit = collision(block, stmt.output)
    if hit is None:
        return

    def at(point: tuple[tuple[str, int], ...]) -> str:
        return ", ".join(f"{n} = {v + ranges[n][0]}" for n, v in point)

    element = f"{stmt.output}[{', '.join(map(str, hit.element))}]"
    err = TileTypeError(
        f"{where(stmt.pos, stmt.text)}stores {element} twice, from {at(hit.first)} and from "
        f"{at(hit.second)}; '=' stores each element at most once (to combine values, use an "
        "aggregation such as '+' or '>')"
    )
    err.line, err.column = stmt.pos.line, stmt.pos.column
    raise err


def _combine(
    stmt: ast.Contraction, values: list[tuple[str, str]], out_dtype: str, em: ScalarEmitter
) -> str:
    if stmt.combo == "none":
        return em.cast(values[0], out_dtype)
    if stmt.combo in ("mul", "add"):
        a, b = (em.cast(v, out_dtype) for v in values)
        return em.op(stmt.combo, (a, b), out_dtype)
    if stmt.combo == "dot4":  # both operands are int32 (checked when shapes bind)
        return em.op("dot4", (values[0][0], values[1][0]), "i32")
    from .bind import promote

    cmp_dt = promote(values[0][1], values[1][1])
    eq = em.op("cmp_eq", (em.cast(values[0], cmp_dt), em.cast(values[1], cmp_dt)), "bool")
    if stmt.combo == "eq":
        return eq
    c = em.cast(values[2], out_dtype)
    zero = em.const(0, out_dtype)
    return em.op("select", (eq, c, zero), out_dtype)


def _fill_block(stmt: ast.Contraction, k: int, out: TensorInfo) -> Block:
    """Write 0 (or the default tensor) to every output element before aggregation."""
    names = tuple(f"i{d}" for d in range(len(out.shape)))
    access = tuple(Affine.index(n) for n in names)
    root = TensorShape.dense(out.dtype, out.shape)
    view = TensorShape(out.dtype, (1,) * len(names), root.strides)
    refs = [Refinement("out", stmt.output, view, stmt.output, access, "assign")]
    if stmt.default is not None:
        refs.insert(0, Refinement("in", stmt.default.name, view, stmt.default.name, access))
        stmts: tuple[Statement, ...] = (Load("$d", stmt.default.name), Store(stmt.output, "$d"))
    else:
        zero = 0.0 if out.dtype.startswith("f") else (False if out.dtype == "bool" else 0)
        stmts = (Constant("$z", zero, out.dtype), Store(stmt.output, "$z"))
    return Block(
        idxs=tuple(Index(n, s) for n, s in zip(names, out.shape)),
        refs=tuple(refs),
        stmts=stmts,
        tags=frozenset({"kernel", "eltwise", "fill"}),
        name=f"k{k}_{stmt.output}_fill",
        comment=f"fill {stmt.output} before: {stmt.text}",
    )
