"""``alias_view``: a copy that its readers can read through a view of its source goes.

A transformer's fused ``q, k, v`` projection is one product ``P[t, 3 * 256]``
followed by copies: a transpose to ``[3, t, 1, 256]`` and three slices of it
(``Split``, ``Gather``).  Each copy kernel ``T[i...] = S[f(i)]`` writes all of a
temporary ``T`` at its own point (``f`` affine: a permutation of dimensions, an
offset, a fixed index); every element a later kernel reads from ``T`` at
``T[a]`` is ``S[f(a)]``.  This pass rewrites those views as views of ``S`` at
``f(a)`` and removes the copy and ``T``; a chain of copies folds one copy at a
time, so the slices of a transpose read the product's buffer.

Applies to a root copy kernel (``_common.copy_views``: one ``in`` view, one
``assign`` ``out`` view, ``$x = load``, ``store``, no constraints) when:

* ``T`` is a root temporary (``none``, not constant, no offset) of ``S``'s
  dtype and location, and the copy writes it pointwise
  (``_common.pointwise_dims``: each point one element, every element once);
* no statement before the copy touches ``T`` and none after it writes ``S``
  or ``T`` (so ``S`` still holds what ``T`` would);
* every other statement naming ``T`` is a kernel reading it through ``in``
  views of one element that no nested block refines;
* ``T``'s innermost dimension of size > 1 is read from ``S``'s innermost
  dimension of size > 1 with coefficient 1, and from no other: the readers'
  unit-stride (vector) index stays unit-stride.  A transpose that moves the
  channels (ShuffleNet's channel shuffle, an NCHW input to NHWC) stays a copy,
  since its readers would lose their vector loads.

Run before ``fuse``, as ``alias_reshape``: the readers are plain leaves then.

Requires: verified IR.  Guarantees: the same program results, verified IR,
the same object when nothing applies, a fixed point.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..ir.affine import Affine
from ..ir.nodes import Block, Program, Refinement, Special, Statement, TensorShape
from ._common import (
    copy_views,
    is_element,
    pointwise_dims,
    reads,
    refined_below,
    rewrite_until_fixed,
    writes,
)
from .registry import register


@register
@dataclass(frozen=True)
class AliasView:
    """Replace copies whose readers can read the source through views (no options)."""

    name: ClassVar[str] = "alias_view"
    layer_local: ClassVar[bool] = True

    def run(self, program: Program) -> Program:
        root = rewrite_until_fixed(program.root, _alias, resume=True)
        return program if root is program.root else Program(root)


#: The root asked about last, the buffers each of its statements reads, writes
#: and names, and its refinements by name: ``rewrite_until_fixed`` asks about
#: every statement of one root in turn, and each fold updates them for the new
#: root (an unrolled LSTM folds 320 slices, one at a time, among ~1,000
#: statements).
_LAST: tuple[Block, _Flows] | None = None


@dataclass
class _Flows:
    read: list[set[str]]
    written: list[set[str]]
    named: list[set[str]]
    buffers: dict[str, Refinement]


def _flows(root: Block) -> _Flows:
    """What each of ``root``'s statements reads, writes and names, and its buffers."""
    global _LAST
    last = _LAST
    if last is not None and last[0] is root:
        return last[1]
    named = [
        {r.from_ for r in st.refs if r.from_}
        if isinstance(st, Block)
        else {*st.inputs, *st.outputs}
        if isinstance(st, Special)
        else set()
        for st in root.stmts
    ]
    flows = _Flows(
        [reads(st) for st in root.stmts],
        [writes(st) for st in root.stmts],
        named,
        {r.into: r for r in root.refs},
    )
    _LAST = (root, flows)
    return flows


def _innermost(sizes: tuple[int, ...]) -> int | None:
    """The last dimension of size > 1 (``None`` when there is none)."""
    return next((d for d in reversed(range(len(sizes))) if sizes[d] > 1), None)


def _alias(root: Block, k: int) -> Block | None:
    copy = root.stmts[k]
    views = copy_views(copy)
    if views is None:
        return None
    assert isinstance(copy, Block)
    src, dst = views
    flows = _flows(root)
    buffers = flows.buffers
    rs, rt = buffers.get(src.from_), buffers.get(dst.from_)
    if rs is None or rt is None or rs is rt:
        return None
    if rt.dir != "none" or rt.const or rt.offset is not None:
        return None
    if rs.shape.dtype != rt.shape.dtype or rs.location != rt.location:
        return None
    if not (is_element(src) and is_element(dst)) or any(i.affine is not None for i in copy.idxs):
        return None
    dims = pointwise_dims(copy, dst.access, rt.shape.sizes)
    if dims is None:
        return None
    # The readers' vector index: T's innermost dimension, from S's, coefficient 1.
    t_in, s_in = _innermost(rt.shape.sizes), _innermost(rs.shape.sizes)
    if t_in is not None:
        n = dims[t_in]
        uses = [d for d, a in enumerate(src.access) if n is not None and a.coeff(n)]
        if s_in is None or uses != [s_in] or src.access[s_in].coeff(n or "") != 1:
            return None
    t, s = rt.into, rs.into
    named, written = flows.named, flows.written
    if any(t in named[i] for i in range(k)):
        return None
    if any(s in written[i] or t in written[i] for i in range(k + 1, len(written))):
        return None
    stmts = list(root.stmts)
    read = list(flows.read)
    named = list(named)
    for i in range(k + 1, len(stmts)):
        if t not in named[i]:
            continue
        new = _retarget(stmts[i], t, rs, dims, src, copy)
        if new is None:
            return None
        stmts[i] = new
        read[i] = (read[i] - {t}) | {s}
        named[i] = (named[i] - {t}) | {s}
    for column in (stmts, read, named):
        del column[k]
    written = written[:k] + written[k + 1 :]
    refs = tuple(r for r in root.refs if r.into != t)
    out = replace(root, refs=refs, stmts=tuple(stmts))
    global _LAST
    _LAST = (out, _Flows(read, written, named, {r.into: r for r in refs}))
    return out


def _retarget(
    st: Statement,
    t: str,
    rs: Refinement,
    dims: tuple[str | None, ...],
    src: Refinement,
    copy: Block,
) -> Statement | None:
    """``st`` reading ``S`` wherever it read ``T``; ``None`` when it cannot."""
    if isinstance(st, Special):
        return None if t in (*st.inputs, *st.outputs) else st
    if not isinstance(st, Block) or not any(r.from_ == t for r in st.refs):
        return st
    refs: list[Refinement] = []
    for r in st.refs:
        if r.from_ != t:
            refs.append(r)
            continue
        if r.dir != "in" or not is_element(r) or refined_below(st, r.into):
            return None
        theta = {i.name: Affine() for i in copy.idxs}  # those not in dims: one point
        theta.update((n, a) for n, a in zip(dims, r.access) if n is not None)
        access = tuple(a.substitute(theta) for a in src.access)
        if any(name not in _names(st) for a in access for name in a.names):
            return None  # a copy index not pinned by the reader (cannot happen: pointwise)
        ones = (1,) * len(rs.shape.sizes)
        shape = TensorShape(r.shape.dtype, ones, rs.shape.strides)
        refs.append(replace(r, from_=rs.into, access=access, shape=shape))
    return replace(st, refs=tuple(refs))


def _names(block: Block) -> set[str]:
    return {i.name for i in block.idxs}
