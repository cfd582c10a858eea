"""Constant panels: the weights of a register-tiled kernel laid out once, in tile order.

``unroll`` reads the input that runs along a kernel's vector index (the weights
of a convolution or a dense layer) one panel of ``vt`` columns at a time.  In
its plain layout a panel is ``vt`` elements every row stride, so ``unroll``
copies strided panels into dense buffers on every run (packing).  When that
input is a **constant parameter** (``in W ... const``), :class:`PanelLayouts`
lays it out once, in blocks of the tile's width::

    Wb[cb, i..., c] = W[i..., vt * cb + c]      (a root kernel reading only W)

and the kernel reads ``Wb[cb, i..., c]`` with its vector index ``v`` split as
``v = vt * cb + c``: each panel is then one dense stretch, read in order, and
``cb`` selects panels (``unroll`` puts it outermost).  The layout kernel reads
a constant alone, so it is constant (:mod:`stripeml.analysis.constness`): a
backend runs it once, and ``place`` keeps ``Wb`` out of the arena.  The block
width is the tile's, which the target's facts decide (``$vector_width``).

Applies when the input is viewed at a constant root parameter, the vector index
appears in its last (unit-stride) dimension only, as exactly ``v``, that
dimension spans the whole range of ``v``, and there is more than one panel.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..ir.affine import Affine
from ..ir.nodes import Block, Index, Load, Refinement, Store, TensorShape
from ._common import fresh, index_stride


@dataclass
class PanelLayouts:
    """The blocked layouts made during one ``unroll`` run, and the root they grow.

    ``root``: the program's root with the blocked temporaries added;
    ``pending``: layout kernels not yet placed (the caller puts them before the
    kernel that reads them).
    """

    root: Block
    made: dict[tuple[str, int], str] = field(default_factory=dict)
    pending: list[Block] = field(default_factory=list)

    def snapshot(self) -> tuple[Block, dict[tuple[str, int], str], list[Block]]:
        return self.root, dict(self.made), list(self.pending)

    def restore(self, state: tuple[Block, dict[tuple[str, int], str], list[Block]]) -> None:
        self.root, self.made, self.pending = state[0], dict(state[1]), list(state[2])

    def block(self, k: Block, v: str, vt: int, new: bool = True) -> tuple[Block, str] | None:
        """``k`` reading its constant panel inputs in blocks of ``vt``, and its new
        vector index; ``None`` when no input qualifies (``new``: whether a layout not
        made yet may be made, else only existing ones are used)."""
        ranges = {i.name: i.range for i in k.idxs}
        n = ranges[v]
        if n % vt or n // vt < 2:
            return None
        params = {r.into: r for r in self.root.refs if r.const}
        chosen = [r for r in k.refs if self._fits(r, v, n, params)]
        chosen = [r for r in chosen if new or (r.from_, vt) in self.made]
        if not chosen:
            return None
        cb = fresh(f"{v}_b", set(ranges))
        c = fresh(f"{v}_c", set(ranges) | {cb})
        split = {v: Affine.index(cb, vt) + Affine.index(c)}
        refs = []
        for r in k.refs:
            if r in chosen:
                blocked = self._layout(params[r.from_], vt, k.name)
                shape = self.root.ref(blocked).shape
                access = (Affine.index(cb), *r.access[:-1], Affine.index(c))
                one = TensorShape(shape.dtype, (1,) * shape.rank, shape.strides)
                refs.append(replace(r, from_=blocked, access=access, shape=one))
            else:
                refs.append(replace(r, access=tuple(a.substitute(split) for a in r.access)))
        idxs: list[Index] = []
        for i in k.idxs:
            idxs += [Index(cb, n // vt), Index(c, vt)] if i.name == v else [i]
        cons = tuple(replace(x, expr=x.expr.substitute(split)) for x in k.constraints)
        return replace(k, idxs=tuple(idxs), refs=tuple(refs), constraints=cons), c

    def widths(self, k: Block) -> list[int]:
        """The panel widths already laid out for an input ``k`` reads along one of its
        indices (a ragged split's remainder reading the head's panels, in cache)."""
        params = {r.into: r for r in self.root.refs if r.const}
        found = set()
        for i in k.idxs:
            names = {r.from_ for r in k.refs if self._fits(r, i.name, i.range, params)}
            found |= {vt for name, vt in self.made if name in names and i.range % vt == 0}
        return sorted(found)

    @staticmethod
    def _fits(r: Refinement, v: str, n: int, params: dict[str, Refinement]) -> bool:
        if r.dir != "in" or r.from_ not in params or not r.access:
            return False
        parent = params[r.from_]
        if index_stride(r, v) != 1 or r.access[-1] != Affine.index(v):
            return False
        # ``n`` may be a whole-vector prefix of the last dimension (the first 992 of
        # 1000 classes, a ragged split's head): the layout's panels cover it.
        if any(a.coeff(v) for a in r.access[:-1]) or parent.shape.sizes[-1] < n:
            return False
        return parent.shape.strides[-1] == 1

    def _layout(self, w: Refinement, vt: int, user: str) -> str:
        """The blocked copy of constant ``w`` in panels of ``vt`` (made once)."""
        key = (w.into, vt)
        if key in self.made:
            return self.made[key]
        *lead, n = w.shape.sizes
        taken = {r.into for r in self.root.refs} | {
            s.name for s in self.root.stmts if isinstance(s, Block)
        }
        name = fresh(f"{w.into}_panels", taken)
        shape = TensorShape.dense(w.shape.dtype, (n // vt, *lead, vt))
        self.root = replace(self.root, refs=(*self.root.refs, Refinement("none", name, shape)))
        self.made[key] = name
        dims = [f"i{d}" for d in range(len(lead))]
        one_w = TensorShape(w.shape.dtype, (1,) * w.shape.rank, w.shape.strides)
        one_b = TensorShape(w.shape.dtype, (1,) * shape.rank, shape.strides)
        src = (*(Affine.index(d) for d in dims), Affine.index("cb", vt) + Affine.index("c"))
        dst = (Affine.index("cb"), *(Affine.index(d) for d in dims), Affine.index("c"))
        self.pending.append(
            Block(
                idxs=(
                    Index("cb", n // vt),
                    *(Index(d, s) for d, s in zip(dims, lead)),
                    Index("c", vt),
                ),
                refs=(
                    Refinement("in", w.into, one_w, w.into, src),
                    Refinement("out", name, one_b, name, dst, agg="assign"),
                ),
                stmts=(Load("$x", w.into), Store(name, "$x")),
                tags=frozenset({"kernel", "eltwise", "copy"}),
                name=fresh(f"{user}_panels", taken | {name}),
                comment=f"{name}[cb, ..., c] = {w.into}[..., {vt} * cb + c]",
            )
        )
        return name
