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

The vector index may run along any one dimension ``d`` of the constant, not
only its last: ``Wb[cb, (the other dimensions, in order)..., c] = W[..., vt *
cb + c (at d), ...]``.  A convolution's weights as an ONNX file stores them,
``W[co, ci, ky, kx]``, become ``Wb[cb, ci, ky, kx, c]`` in one copy, run once:
the frontend binds the array it read, with no channels-last copy of its own
(``stripeml/onnx/layout_conv.py``), so a warm start lays each weight out once,
not twice (docs/cpu-backend.md, "Warm starts").

Applies when the input is viewed at a constant root parameter (or a root
temporary computed from constants alone: a Winograd convolution's transformed
weights, :mod:`.winograd`), the vector index
appears in exactly one of its dimensions, as exactly ``v``, that dimension spans
the whole range of ``v``, and there is more than one panel.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..analysis.constness import constness
from ..ir.affine import Affine
from ..ir.nodes import Block, Index, Load, Program, Refinement, Store, TensorShape
from ._common import fresh


@dataclass
class PanelLayouts:
    """The blocked layouts made during one ``unroll`` run, and the root they grow.

    ``root``: the program's root with the blocked temporaries added;
    ``pending``: layout kernels not yet placed (the caller puts them before the
    kernel that reads them).
    """

    root: Block
    # per (constant, width, dimension): the layout's name and the constant's other
    # dimensions in the order the layout stores them
    made: dict[tuple[str, int, int], tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    pending: list[Block] = field(default_factory=list)
    # the root's constant parameters, and the temporaries computed from them alone
    # (a Winograd convolution's transformed weights, :mod:`.winograd`): the
    # runtime computes those once, so their panels too (the layouts added are
    # not in it)
    params: dict[str, Refinement] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        kept: frozenset[str] = frozenset()
        if any(r.dir == "none" for r in self.root.refs):
            kept = constness(Program(self.root)).temporaries
        self.params = {r.into: r for r in self.root.refs if r.const or r.into in kept}

    def snapshot(self) -> tuple[Block, dict[tuple[str, int, int], tuple], list[Block]]:
        return self.root, dict(self.made), list(self.pending)

    def restore(self, state: tuple[Block, dict[tuple[str, int, int], tuple], list[Block]]) -> None:
        self.root, self.made, self.pending = state[0], dict(state[1]), list(state[2])

    def block(self, k: Block, v: str, vt: int, new: bool = True) -> tuple[Block, str] | None:
        """``k`` reading its constant panel inputs in blocks of ``vt``, and its new
        vector index; ``None`` when no input qualifies (``new``: whether a layout not
        made yet may be made, else only existing ones are used)."""
        ranges = {i.name: i.range for i in k.idxs}
        n = ranges[v]
        if n % vt:
            return None
        params = self.params
        chosen = [r for r in k.refs if self._fits(r, v, n, params)]
        if n // vt < 2:  # one panel: worth a copy only where the constant is read across v
            chosen = [r for r in chosen if self._dim(r, v) != len(r.access) - 1]
        chosen = [r for r in chosen if new or (r.from_, vt, self._dim(r, v)) in self.made]
        if not chosen:
            return None
        cb = fresh(f"{v}_b", set(ranges))
        c = fresh(f"{v}_c", set(ranges) | {cb})
        split = {v: Affine.index(cb, vt) + Affine.index(c)}
        refs = []
        for r in k.refs:
            if r in chosen:
                d = self._dim(r, v)
                order = loop_order(r, d, k)
                blocked, order = self._layout(params[r.from_], vt, k.name, d, order)
                shape = self.root.ref(blocked).shape
                access = (Affine.index(cb), *(r.access[j] for j in order), Affine.index(c))
                one = TensorShape(shape.dtype, (1,) * shape.rank, shape.strides)
                refs.append(replace(r, from_=blocked, access=access, shape=one))
            else:
                refs.append(replace(r, access=tuple(a.substitute(split) for a in r.access)))
        idxs: list[Index] = []
        for i in k.idxs:
            idxs += [Index(cb, n // vt), Index(c, vt)] if i.name == v else [i]
        cons = tuple(replace(x, expr=x.expr.substitute(split)) for x in k.constraints)
        return replace(k, idxs=tuple(idxs), refs=tuple(refs), constraints=cons), c

    def across(self, r: Refinement, v: str, n: int) -> bool:
        """Whether ``r`` reads a constant across ``v`` (``v`` in a dimension other
        than its last) that :meth:`block` can lay out in panels with ``v``
        innermost: ``unroll`` tiles the kernel as if ``r`` read ``v`` at unit
        stride (a convolution's weights as the file stores them)."""
        params = self.params
        return self._fits(r, v, n, params) and self._dim(r, v) != len(r.access) - 1

    def widths(self, k: Block) -> list[int]:
        """The panel widths already laid out for an input ``k`` reads along one of its
        indices (a ragged split's remainder reading the head's panels, in cache)."""
        params = self.params
        found = set()
        for i in k.idxs:
            names = {r.from_ for r in k.refs if self._fits(r, i.name, i.range, params)}
            found |= {vt for name, vt, _ in self.made if name in names and i.range % vt == 0}
        return sorted(found)

    @staticmethod
    def _dim(r: Refinement, v: str) -> int:
        """The dimension of ``r`` that ``v`` moves (one only: :meth:`_fits`)."""
        return next(d for d, a in enumerate(r.access) if a.coeff(v))

    @staticmethod
    def _fits(r: Refinement, v: str, n: int, params: dict[str, Refinement]) -> bool:
        if r.dir != "in" or r.from_ not in params or not r.access:
            return False
        parent = params[r.from_]
        moved = [d for d, a in enumerate(r.access) if a.coeff(v)]
        if len(moved) != 1 or r.access[moved[0]] != Affine.index(v):
            return False
        d = moved[0]
        # ``n`` may be a whole-vector prefix of the dimension (the first 992 of
        # 1000 classes, a ragged split's head): the layout's panels cover it.
        return parent.shape.sizes[d] >= n

    def _layout(
        self, w: Refinement, vt: int, user: str, d: int, order: tuple[int, ...]
    ) -> tuple[str, tuple[int, ...]]:
        """The blocked copy of constant ``w`` in panels of ``vt`` along its dimension
        ``d`` (made once): ``Wb[cb, (the other dimensions, in ``order``)..., c]``;
        its name and the order it was made with (the first reader's)."""
        key = (w.into, vt, d)
        if key in self.made:
            return self.made[key]
        sizes = w.shape.sizes
        n = sizes[d]
        lead = tuple(sizes[j] for j in order)
        taken = {r.into for r in self.root.refs} | {
            s.name for s in self.root.stmts if isinstance(s, Block)
        }
        name = fresh(f"{w.into}_panels", taken)
        shape = TensorShape.dense(w.shape.dtype, (n // vt, *lead, vt))
        self.root = replace(self.root, refs=(*self.root.refs, Refinement("none", name, shape)))
        self.made[key] = (name, order)
        dims = [f"i{j}" for j in range(len(lead))]
        one_w = TensorShape(w.shape.dtype, (1,) * w.shape.rank, w.shape.strides)
        one_b = TensorShape(w.shape.dtype, (1,) * shape.rank, shape.strides)
        at = [Affine.index(x) for x in dims]
        src_at = dict(zip(order, at))
        src_at[d] = Affine.index("cb", vt) + Affine.index("c")
        src = tuple(src_at[j] for j in range(w.shape.rank))
        dst = (Affine.index("cb"), *at, Affine.index("c"))
        position = dict(zip(dims, order))

        def source_order(i: Index) -> int:
            return position[i.name]

        self.pending.append(
            Block(
                idxs=(
                    Index("cb", n // vt),
                    # walked in the constant's own order (its rows read once, in
                    # cache), whatever order the panels store them in
                    *sorted((Index(x, s) for x, s in zip(dims, lead)), key=source_order),
                    Index("c", vt),
                ),
                refs=(
                    Refinement("in", w.into, one_w, w.into, src),
                    Refinement("out", name, one_b, name, dst, agg="assign"),
                ),
                stmts=(Load("$x", w.into), Store(name, "$x")),
                tags=frozenset({"kernel", "eltwise", "copy"}),
                name=fresh(f"{user}_panels", taken | {name}),
                comment=f"{name}[cb, ..., c] = {w.into}[{_where(w.shape.rank, d, vt)}]",
            )
        )
        return name, order


def loop_order(r: Refinement, d: int, k: Block) -> tuple[int, ...]:
    """The dimensions of ``r`` but ``d``, in the order its panels store them: as
    the constant has them when ``d`` is its last (the layouts made before any
    other dimension could be one), else in the order of the kernel's indices
    that walk them (a convolution's ``W[co, ci, ky, kx]`` read by loops over
    ``ky, kx, ci``: panels ``[cb, ky, kx, ci, c]``, read in order, as those of
    the channels-last ``W[ky, kx, ci, co]`` were), dimensions not walked by one
    index last, in their own order."""
    rest = [j for j in range(len(r.access)) if j != d]
    if d == len(r.access) - 1:
        return tuple(rest)
    at = {i.name: p for p, i in enumerate(k.idxs)}

    def key(j: int) -> tuple[int, int]:
        names = r.access[j].names
        plain = len(names) == 1 and r.access[j] == Affine.index(names[0])
        return (at.get(names[0], len(at)) if plain else len(at), j)

    return tuple(sorted(rest, key=key))


def _where(rank: int, d: int, vt: int) -> str:
    """The source index in a panel copy's comment: ``..., 32 * cb + c`` (``d`` the
    last dimension), else with ``...`` for the dimensions around ``d``."""
    moved = f"{vt} * cb + c"
    if d == rank - 1:
        return f"..., {moved}"
    return f"{moved}, ..." if d == 0 else f"..., {moved}, ..."
