"""``divide_late``: a softmax's division moves after the product that reads it.

Attention, as the importer writes it, normalises the scores before the product
with ``V``: ``P = E / S`` over every score (``S`` the row sums of ``E =
exp(...)``), then ``O = +(P * V)`` over the keys.  ``S`` does not depend on
the key index the product sums over, so ``O = +(E * V) / S``: the product
reads ``E`` and one division per *output* follows it.  For BERT-base at
sequence 512 that is 512 x 64 divisions per head instead of 512 x 512, and
no pass over the scores to divide them.  The new division is an elementwise
kernel on the product's result: ``fuse`` joins it to an elementwise consumer
of that result (the copy merging the heads back, in BERT), or ``epilogue``
runs it on the product's register tiles.

Applies to a root ``#eltwise`` kernel ``D`` (a leaf without constraints)
whose statements are exactly ``$x = load(X)``, ``$s = load(S)``, ``$p =
div($x, $s)``, ``P = store($p)``, with:

* ``X`` and ``P`` walked one to one by ``D``'s indices, in the same order
  (:func:`~._common.pointwise_dims`), all three of one float dtype with
  float32's range (``f32``, ``f64``, ``bf16``: in ``f16`` the sum of the
  undivided products could overflow where the quotients' would not);
* ``S`` read per dimension at ``X``'s index or, where ``S`` has size 1, at 0;
* ``S`` a root buffer with a single writer, a kernel that sums into it
  (``add``) a value computed by ``exp``: a softmax's denominator.  Every term
  is positive and the row's largest is ``exp(0) = 1`` when the maximum was
  subtracted, so the sum is at least 1 and ``+(E * V) / S`` divides what
  ``+(E / S * V)`` would have: the same value up to rounding (a few units in
  the last place), with no new overflow, zero or NaN case;
* ``P`` a root temporary that nothing but ``D`` and one later kernel ``C``
  touches, and neither ``X`` nor ``S`` written between ``D`` and ``C``;
* ``C`` a root ``#contraction`` ``agg_add`` kernel (a leaf without
  constraints or index offsets) whose statements are exactly two loads (``P``
  and another buffer ``V``), their ``mul`` and one ``add`` store to ``O``;
  ``C`` reads ``P`` one index per dimension; where ``S`` is broadcast
  (size 1, ``P`` larger) that index is summed over (not in ``O``'s view),
  elsewhere it walks a dimension of ``O`` (so ``S`` is constant along the
  sum);
* no more elements in ``O`` than in ``P`` (no more divisions after the
  product than before it; as many, a head of 64 at sequence 64, still saves
  the pass over ``P``, and gives attention the same kernels at every
  sequence length from the head's size up);
* ``O`` walked one to one by ``C``'s output indices (its view is one
  distinct index, or 0 for size 1, per dimension, with the dimension's size
  as range), written by no other statement and touched by none before ``C``.

Then ``C`` reads ``X`` where it read ``P`` and sums into a new root temporary
``O'`` of ``O``'s shape; a new ``#eltwise`` kernel right after ``C`` (with
``D``'s name) writes ``O = O' / S``, reading ``S`` at ``O``'s indices; ``D``
and ``P`` go.

Run before ``fuse`` (which joins the new division to the product) and
``nest`` (whose attention chain then ends with it).

Requires: verified IR.  Guarantees: the program's results up to rounding
(the division moves outside a sum whose divisor is at least 1: see above),
verified IR, the same object when nothing applies, a fixed point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

from ..ir.affine import Affine
from ..ir.nodes import (
    Block,
    Index,
    Intrinsic,
    Load,
    Program,
    Refinement,
    Statement,
    Store,
    TensorShape,
)
from ._common import fresh, is_leaf, pointwise_dims, reads, writes
from .registry import register

# float16's range is too narrow: a row's sum of exponentials times V (up to the
# row length times V's largest value) can overflow where V's own values do not
_FLOATS = frozenset({"bf16", "f32", "f64"})


@register
@dataclass(frozen=True)
class DivideLate:
    """Move a softmax's division after the product that reads it (no options)."""

    name: ClassVar[str] = "divide_late"
    layer_local: ClassVar[bool] = True

    def run(self, program: Program) -> Program:
        root = program.root
        while True:
            plans = _plans(root)
            if not plans:
                return program if root is program.root else Program(root)
            root = _apply_all(root, plans)


class _Index:
    """Per root buffer, the statements writing it and those touching it (one scan
    of the root per round: BERT-base has about 1,100 statements and 90
    elementwise divisions to look at)."""

    def __init__(self, root: Block) -> None:
        self.writers: dict[str, list[int]] = {}
        self.users: dict[str, list[int]] = {}
        for k, st in enumerate(root.stmts):
            wr = writes(st)
            for name in wr:
                self.writers.setdefault(name, []).append(k)
            for name in wr | reads(st):
                self.users.setdefault(name, []).append(k)
        self.refs = {r.into: r for r in root.refs}


def _view(refs: tuple[Refinement, ...], stmt: Statement) -> Refinement | None:
    return next((r for r in refs if isinstance(stmt, (Load, Store)) and r.into == stmt.ref), None)


def _binary(
    block: Block, tags: set[str], op: str
) -> tuple[Refinement, Refinement, Refinement, Intrinsic] | None:
    """A leaf root kernel with ``tags`` and no constraints whose statements are
    exactly two loads of distinct buffers, their ``op`` and one store of it: its
    views of the first operand, the second, the result, and the intrinsic."""
    if not (tags <= block.tags) or block.constraints or not is_leaf(block):
        return None
    if len(block.stmts) != 4 or len(block.refs) != 3:
        return None
    *loads, fn, store = block.stmts
    if not (isinstance(fn, Intrinsic) and fn.op == op and len(fn.inputs) == 2):
        return None
    if not (isinstance(store, Store) and store.value == fn.into):
        return None
    by_scalar = {t.into: _view(block.refs, t) for t in loads if isinstance(t, Load)}
    if len(by_scalar) != 2 or set(by_scalar) != set(fn.inputs):
        return None
    a, b, out = by_scalar[fn.inputs[0]], by_scalar[fn.inputs[1]], _view(block.refs, store)
    if a is None or b is None or out is None or a.from_ == b.from_:
        return None
    if a.dir != "in" or b.dir != "in" or out.dir != "out":
        return None
    return a, b, out, fn


def _division(d: Block) -> tuple[Refinement, Refinement, Refinement] | None:
    """``D``'s views of ``X``, ``S`` and ``P`` when it is ``P = X / S`` as above."""
    found = _binary(d, {"kernel", "eltwise"}, "div")
    if found is None:
        return None
    x, s, p, div = found
    if p.agg not in ("", "assign"):
        return None
    if not (x.shape.dtype == s.shape.dtype == p.shape.dtype == div.dtype in _FLOATS):
        return None
    return x, s, p


def _root_sizes(index: _Index, name: str) -> tuple[int, ...] | None:
    ref = index.refs.get(name)
    return None if ref is None else ref.shape.sizes


def _softmax_sum(root: Block, index: _Index, name: str) -> bool:
    """Whether root buffer ``name``'s only writer sums ``exp`` values into it."""
    return _exp_valued(root, index, name, "add", 2)


def _exp_valued(root: Block, index: _Index, name: str, agg: str, depth: int) -> bool:
    """Whether root buffer ``name``'s only writer stores into it, with ``agg``,
    values computed by ``exp``, or loaded from a buffer holding only such
    values (``depth`` more buffers deep)."""
    writers = index.writers.get(name, [])
    if len(writers) != 1:
        return False
    w = root.stmts[writers[0]]
    if not isinstance(w, Block) or not is_leaf(w):
        return False
    views = [r for r in w.refs if r.from_ == name and r.dir == "out"]
    if len(views) != 1 or (views[0].agg or "assign") != agg:
        return False
    made = {s.into: s for s in w.stmts if isinstance(s, (Intrinsic, Load))}
    stored = [s.value for s in w.stmts if isinstance(s, Store) and s.ref == views[0].into]

    def exp_value(value: str) -> bool:
        s = made.get(value)
        if isinstance(s, Intrinsic):
            return s.op == "exp"
        if isinstance(s, Load) and depth > 0:
            view = _view(w.refs, s)
            return view is not None and _exp_valued(root, index, view.from_, "assign", depth - 1)
        return False

    return bool(stored) and all(exp_value(v) for v in stored)


def _product(c: Block, p_name: str) -> tuple[Refinement, Refinement] | None:
    """``C``'s views of ``P`` and ``O`` when it is ``O = +(P * V)`` as above."""
    if any(i.affine is not None for i in c.idxs):
        return None
    found = _binary(c, {"kernel", "contraction", "agg_add"}, "mul")
    if found is None:
        return None
    a, b, o, _ = found
    p = a if a.from_ == p_name else b if b.from_ == p_name else None
    if p is None or o.agg != "add":
        return None
    return p, o


@dataclass(frozen=True)
class _Plan:
    i: int  # the division D
    j: int  # the product C
    x: Refinement
    s: Refinement
    p: Refinement
    cp: Refinement
    co: Refinement
    o_sizes: tuple[int, ...]
    s_at: tuple[int | None, ...]


def _plans(root: Block) -> list[_Plan]:
    """Every rewrite the module docstring allows in ``root``, on distinct statements."""
    stmts = root.stmts
    index: _Index | None = None
    plans: list[_Plan] = []
    used: set[int] = set()
    for i, d in enumerate(stmts):
        if not isinstance(d, Block) or "eltwise" not in d.tags or i in used:
            continue
        views = _division(d)
        if views is None:
            continue
        if index is None:
            index = _Index(root)
        plan = _plan(root, index, i, d, *views)
        if plan is not None and plan.j not in used:
            plans.append(plan)
            used |= {plan.i, plan.j}
    return plans


def _plan(
    root: Block, index: _Index, i: int, d: Block, x: Refinement, s: Refinement, p: Refinement
) -> _Plan | None:
    stmts = root.stmts
    x_sizes, s_sizes, p_sizes = (_root_sizes(index, v.from_) for v in (x, s, p))
    if x_sizes is None or s_sizes is None or p_sizes is None:
        return None
    if index.refs[p.from_].dir != "none" or len(s_sizes) != len(p_sizes):
        return None
    dims = pointwise_dims(d, p.access, p_sizes)
    if dims is None or pointwise_dims(d, x.access, x_sizes) != dims:
        return None
    s_dims = pointwise_dims(d, s.access, s_sizes, every_index=False)
    if s_dims is None:
        return None
    if any(sd is not None and sd != pd for sd, pd in zip(s_dims, dims, strict=True)):
        return None
    if not _softmax_sum(root, index, s.from_) or index.writers[s.from_][0] >= i:
        return None
    users = [k for k in index.users.get(p.from_, []) if k != i]
    if len(users) != 1 or users[0] < i:
        return None
    j = users[0]
    c = stmts[j]
    if not isinstance(c, Block) or any(
        i < k < j for name in (x.from_, s.from_) for k in index.writers.get(name, [])
    ):
        return None
    found = _product(c, p.from_)
    if found is None:
        return None
    cp, co = found
    o_sizes = _root_sizes(index, co.from_)
    if o_sizes is None or co.from_ in (x.from_, s.from_, p.from_):
        return None
    if math.prod(o_sizes) > math.prod(p_sizes):
        return None  # more divisions after the product than before it
    # C alone writes O, and nothing touches O before it
    if index.writers.get(co.from_) != [j] or index.users[co.from_][0] != j:
        return None
    o_dims = pointwise_dims(c, co.access, o_sizes, every_index=False)
    cp_dims = pointwise_dims(c, cp.access, p_sizes, every_index=False)
    if o_dims is None or cp_dims is None:
        return None
    # S along the sum is constant; elsewhere it follows an output dimension.
    s_at: list[int | None] = []
    for sd, cd, size in zip(s_dims, cp_dims, p_sizes, strict=True):
        if sd is None and size > 1:
            if cd is None or cd in o_dims:
                return None
            s_at.append(None)
        elif cd is None:
            s_at.append(None)
        elif cd in o_dims:
            s_at.append(o_dims.index(cd))
        else:
            return None
    return _Plan(i, j, x, s, p, cp, co, o_sizes, tuple(s_at))


def _apply_all(root: Block, plans: list[_Plan]) -> Block:
    """``root`` with every plan applied: each division gone, each product
    reading the exponentials, its division right after it."""
    taken = {r.into for r in root.refs} | {t.name for t in root.stmts if isinstance(t, Block)}
    gone = {pl.i for pl in plans}
    after: dict[int, tuple[Block, Block]] = {}
    new_refs: list[Refinement] = []
    for pl in plans:
        new_c, divide, sum_root = _rewrite(root, pl, taken)
        taken.add(sum_root.into)
        after[pl.j] = (new_c, divide)
        new_refs.append(sum_root)
    stmts: list[Statement] = []
    for k, st in enumerate(root.stmts):
        if k in gone:
            continue
        stmts.extend(after.get(k, (st,)))
    quotients = {pl.p.from_ for pl in plans}
    refs = tuple(r for r in root.refs if r.into not in quotients) + tuple(new_refs)
    return replace(root, refs=refs, stmts=tuple(stmts))


def _rewrite(root: Block, pl: _Plan, taken: set[str]) -> tuple[Block, Block, Refinement]:
    """The product reading the exponentials into a new temporary, the division
    after it, and that temporary's root refinement."""
    d, c = root.stmts[pl.i], root.stmts[pl.j]
    assert isinstance(d, Block) and isinstance(c, Block)
    x, s, cp, co, o_sizes, s_at = pl.x, pl.s, pl.cp, pl.co, pl.o_sizes, pl.s_at
    root_refs = {r.into: r for r in root.refs}
    o_root, x_root, s_root = root_refs[co.from_], root_refs[x.from_], root_refs[s.from_]
    summed = fresh(f"{co.from_}_sum", taken)
    dtype = o_root.shape.dtype
    sum_shape = TensorShape.dense(dtype, o_sizes)
    sum_root = Refinement("none", summed, sum_shape, location=o_root.location)
    one = (1,) * len(o_sizes)
    names = {r.into for r in c.refs}
    local = {
        cp.into: x.from_ if x.from_ not in names else cp.into,
        co.into: summed if summed not in names else co.into,
    }
    new_c = replace(
        c,
        refs=tuple(
            replace(
                r,
                into=local[r.into],
                from_=x.from_ if r is cp else summed,
                shape=TensorShape(
                    dtype, r.shape.sizes, (x_root.shape if r is cp else sum_shape).strides
                ),
            )
            if r is cp or r is co
            else r
            for r in c.refs
        ),
        stmts=tuple(
            replace(t, ref=local.get(t.ref, t.ref)) if isinstance(t, (Load, Store)) else t
            for t in c.stmts
        ),
    )
    idxs = tuple(Index(f"i{k}", n) for k, n in enumerate(o_sizes))
    at = tuple(Affine.index(f"i{k}") if n > 1 else Affine() for k, n in enumerate(o_sizes))
    s_access = tuple(Affine() if k is None else at[k] for k in s_at)
    s_one = (1,) * len(s_root.shape.sizes)
    scalars = ("$sum", "$den", "$out")
    divide = Block(
        idxs=idxs,
        refs=(
            Refinement("in", summed, TensorShape(dtype, one, sum_shape.strides), summed, at),
            Refinement(
                "in", s.from_, TensorShape(dtype, s_one, s_root.shape.strides), s.from_, s_access
            ),
            Refinement(
                "out",
                co.from_,
                TensorShape(dtype, one, o_root.shape.strides),
                co.from_,
                at,
                "assign",
            ),
        ),
        stmts=(
            Load(scalars[0], summed),
            Load(scalars[1], s.from_),
            Intrinsic("div", scalars[:2], scalars[2], dtype),
            Store(co.from_, scalars[2]),
        ),
        tags=frozenset({"kernel", "eltwise"}),
        name=d.name,
        comment=f"{co.from_} = {summed} / {s.from_} (divided after the product)",
    )
    return new_c, divide, sum_root
