"""The ``nest`` pass's chains analysed once per structure, and what it asks of
the root's statements (:class:`Seen`).

A model's layers repeat: BERT-base's 12 layers are the same kernels over other
buffers, so the chains ``nest`` tries from the first statement of one layer are
the chains it tries from the same statement of every other layer, and their
analysis (rows unified, blocks tried: most of the pass's time) gives the same
answer up to the buffers' names.  :class:`ChainMemo` keys each start's window of
statements by everything that answer reads, with the root buffers numbered in
order of first use instead of named, and keeps the answer in those numbers: the
best chain's length and its :class:`._nest_blocks.Plan`, or none.

What the key holds, per window (the start ``i``, the leaf kernels after it up to
``last``, and the statement after ``last``, which ``_splits_epilogue`` reads):

* per kernel: whether it is a leaf kernel, and every field of the block but its
  refinements, statements, name and comment (indices, constraints, tags); per
  refinement, every field but its own name and its buffer's (direction, shape,
  access, aggregation, location, offset, ``const``), its buffer as a number.
  The plan reads no kernel's statements (only whether it is a leaf kernel) and
  no view's own name;
* per buffer number: the root buffer's direction and shape (whether it is one),
  and where the buffer is first and last touched relative to ``i``, clamped to
  the window (what ``Seen.outside`` answers for every chain of the window);
* the statement after ``last``: whether it is a block, an ``eltwise`` one, and
  which numbered buffers it reads.

A hit is therefore the answer the analysis would give: the final program is
byte-for-byte the one the pass wrote without the memo.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace

from ..ir.affine import Affine
from ..ir.nodes import Block, Refinement, Special, Statement
from ._common import reads, writes
from ._nest_blocks import Plan

_REF_FIELDS = tuple(f.name for f in fields(Refinement) if f.name not in ("into", "from_"))
_BLOCK_FIELDS = tuple(
    f.name for f in fields(Block) if f.name not in ("refs", "stmts", "name", "comment")
)

#: A start's answer in buffer numbers: None (no chain nests), or the chain's
#: last statement after the start and the plan with its intermediates numbered.
Answer = tuple[int, tuple[int, ...], tuple[int, ...], tuple[tuple[str, ...], ...], tuple] | None


class ChainMemo:
    """One ``nest`` run's answers per window structure (see the module docstring)."""

    def __init__(self, stmts: Sequence[Statement], seen: Seen) -> None:
        self.stmts = stmts
        self.seen = seen
        self.ids: dict[object, int] = {}  # structures interned: a key is small ints
        self.kernel_ids: dict[int, int] = {}  # statement position -> its structure's id
        self.buffer_ids: dict[str, int] = {}
        self.answers: dict[tuple, Answer] = {}

    def _intern(self, value: object) -> int:
        return self.ids.setdefault(value, len(self.ids))

    def _kernel(self, n: int) -> int:
        found = self.kernel_ids.get(n)
        if found is None:
            k = self.stmts[n]
            assert isinstance(k, Block)
            refs = tuple(tuple(getattr(r, f) for f in _REF_FIELDS) for r in k.refs)
            own = tuple(getattr(k, f) for f in _BLOCK_FIELDS)
            found = self.kernel_ids[n] = self._intern((self.seen.leaf[n], own, refs))
        return found

    def _buffer(self, b: str) -> int:
        found = self.buffer_ids.get(b)
        if found is None:
            r = self.seen.bufs.get(b)
            found = self.buffer_ids[b] = self._intern(None if r is None else (r.dir, r.shape))
        return found

    def key(self, i: int, last: int) -> tuple[tuple, list[str]]:
        """The window ``i..last`` (and the statement after it) as a key, and its
        buffers in the key's numbering."""
        number: dict[str, int] = {}
        kernels: list[object] = []
        for n in range(i, last + 1):
            k = self.stmts[n]
            assert isinstance(k, Block)
            kernels.append(self._kernel(n))
            kernels.append(tuple(number.setdefault(r.from_, len(number)) for r in k.refs))
        tail: tuple = ()
        if last + 1 < len(self.stmts):
            nxt = self.stmts[last + 1]
            if isinstance(nxt, Block):
                read = sorted(number[b] for b in reads(nxt) if b in number)
                tail = ("eltwise" in nxt.tags, *read)
            else:
                tail = (None,)
        span = last - i + 1
        first, lastuse = self.seen.first, self.seen.last
        places = []
        for b in number:
            f = first.get(b)
            where = None if f is None else (max(f - i, -1), min(lastuse[b] - i, span))
            places.append((self._buffer(b), where))
        return (tuple(kernels), tail, tuple(places)), list(number)

    def get(self, key: tuple, names: list[str], i: int) -> tuple[bool, tuple[int, Plan] | None]:
        """(whether ``key`` was answered, the answer for the start ``i`` in ``names``)."""
        if key not in self.answers:
            return False, None
        found = self.answers[key]
        if found is None:
            return True, None
        j, rows, tile, kidx, inter = found
        return True, (i + j, Plan(rows, tile, kidx, {names[b]: dims for b, dims in inter}))

    def put(self, key: tuple, names: list[str], i: int, best: tuple[int, Plan] | None) -> None:
        if best is None:
            self.answers[key] = None
            return
        j, plan = best
        number = {b: n for n, b in enumerate(names)}
        inter = tuple((number[b], dims) for b, dims in plan.inter.items())
        self.answers[key] = (j - i, plan.rows, plan.tile, plan.kidx, inter)


class Seen:
    """What ``nest``'s ``_plan`` asks of the root's statements, worked out once per run: the
    first and last statement touching each buffer, what each reads and writes,
    whether it is a leaf kernel, and each kernel as the row analysis sees it
    (one-point indices read as 0 with ``unit_taps``).  A run tries up to
    ``MAX_CHAIN`` chains from every statement: BERT-base's 1,100 statements
    asked for their buffers 100,000 times."""

    def __init__(
        self, root: Block, stmts: Sequence[Statement], unit_taps: bool, select: str
    ) -> None:
        self.bufs = {r.into: r for r in root.refs}
        self.first: dict[str, int] = {}
        self.last: dict[str, int] = {}
        self.rd = [reads(st) for st in stmts]
        self.wr = [writes(st) for st in stmts]
        self.leaf = [_leaf_kernel(st, select) for st in stmts]
        for n in range(len(stmts)):
            for b in self.rd[n] | self.wr[n]:
                self.first.setdefault(b, n)
                self.last[b] = n
        self.views: dict = {}  # _nest_blocks.tiling's memo (the kernels below stay alive)
        self.stmts = stmts
        self.unit_taps = unit_taps
        self._kernels: dict[int, Statement] = {}

    def kernel(self, n: int) -> Statement:
        """Statement ``n`` as the row analysis sees it (squeezed when first asked:
        the chains :class:`._nest_memo.ChainMemo` answers never are)."""
        found = self._kernels.get(n)
        if found is None:
            st = self.stmts[n]
            found = _squeezed(st) if self.unit_taps and isinstance(st, Block) else st
            self._kernels[n] = found
        return found

    def outside(self, b: str, i: int, j: int) -> bool:
        """Whether a statement before ``i`` or after ``j`` touches ``b``."""
        return self.first.get(b, i) < i or self.last.get(b, j) > j


def _leaf_kernel(s: Statement, select: str) -> bool:
    from ..analysis.select import parse_selector

    return (
        isinstance(s, Block)
        and parse_selector(select)(s.tags)
        and not s.sub_blocks
        and not any(isinstance(x, Special) for x in s.stmts)
        and all(i.affine is None for i in s.idxs)
    )


def _squeezed(k: Block) -> Block:
    """``k`` with its one-point indices (a 1x1 convolution's ``ky``, ``kx``) read as 0
    in its views, for the row analysis only: ``y + ky`` is then the row ``y``."""
    one = {x.name: Affine.constant(0) for x in k.idxs if x.range == 1}
    if not one:
        return k
    refs = tuple(replace(r, access=tuple(a.substitute(one) for a in r.access)) for r in k.refs)
    return replace(k, refs=refs)
