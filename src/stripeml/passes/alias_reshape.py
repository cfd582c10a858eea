"""``alias_reshape``: a ``reshape`` between row-major buffers becomes an index remapping.

``T = reshape(D)`` copies ``D``'s elements into ``T`` in row-major order.  When
one shape *refines* the other (every dimension of the coarse shape is the
product of consecutive dimensions of the fine one, in order: ``[128, 768]`` and
``[128, 1, 3, 256]``, or ``[1, 128, 4, 64]`` and ``[128, 256]``), an element
of the fine buffer at ``(a_0, ..., a_k)`` is the element of the coarse one at
the merged position ``(sum a_i * w_i, ...)`` (``w_i``: the product of the fine
sizes after ``i`` in its group), an affine map.  The fine buffer then leaves
the program: every kernel view of it becomes a view of the coarse buffer at
the merged access, and the copy is gone.  Which one is fine decides the
direction: a split (``T`` fine) makes the consumers read ``D``; a merge (``D``
fine) makes ``D``'s producers write ``T`` directly.  Reshapes that are neither
(``[6, 4]`` to ``[4, 6]``) stay.

Applies when, for the root special ``T = reshape(D)`` at statement ``k``:

* both are root buffers of one dtype and location with row-major strides and
  no offset, and the fine one is a temporary (``none``, not constant);
* no statement before ``k`` touches ``T``, and none after ``k`` writes ``D``
  or ``T`` (so the one buffer holds what both would);
* every other statement using the fine buffer is a kernel whose views of it
  are not refined further by nested blocks, each view's extent is contiguous
  in every merged group (sizes ``1, ..., 1, s, full, ..., full``), or a
  ``reshape`` special (which sees only the row-major order, so it may read
  the coarse buffer instead).

Run before ``fuse``: the kernels it rewrites are then plain leaves, and the
consumers of a split read the producer's buffer, so ``fuse`` can join them.

Requires: verified IR.  Guarantees: the same program results, verified IR,
the same object when nothing applies, a fixed point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from ..ir.affine import Affine
from ..ir.nodes import Block, Program, Refinement, Special, Statement, TensorShape
from ..ir.reshape import Groups, refinement_groups
from ._common import reads, refined_below, rewrite_until_fixed, writes
from .registry import register


@register
@dataclass(frozen=True)
class AliasReshape:
    """Replace row-major ``reshape`` copies by merged accesses (no options)."""

    name: ClassVar[str] = "alias_reshape"
    layer_local: ClassVar[bool] = True

    def run(self, program: Program) -> Program:
        flows = _Flows()

        def at(root: Block, k: int) -> Block | None:
            s = root.stmts[k]
            if isinstance(s, Special) and s.op == "reshape":
                return _alias(root, k, s, flows)
            return None

        root = rewrite_until_fixed(program.root, at)
        return program if root is program.root else Program(root)


def _row_major(shape: TensorShape) -> bool:
    stride = 1
    for n, st in zip(reversed(shape.sizes), reversed(shape.strides)):
        if n > 1 and st != stride:
            return False
        stride *= n
    return True


def _merged_access(
    access: Sequence[Affine], fine: Sequence[int], groups: Groups
) -> tuple[Affine, ...]:
    out = []
    for group in groups:
        total = Affine()
        weight = 1
        for d in reversed(group):
            total = total + access[d] * weight
            weight *= fine[d]
        out.append(total)
    return tuple(out)


def _merged_sizes(
    sizes: Sequence[int], fine: Sequence[int], groups: Groups
) -> tuple[int, ...] | None:
    """A view's extent per coarse dimension, ``None`` unless contiguous in each group."""
    out = []
    for group in groups:
        first = next((i for i, d in enumerate(group) if sizes[d] > 1), None)
        if first is None:
            out.append(1)
            continue
        rest = group[first + 1 :]
        if any(sizes[d] != fine[d] for d in rest):
            return None
        n = sizes[group[first]]
        for d in rest:
            n *= fine[d]
        out.append(n)
    return tuple(out)


class _Flows:
    """Each statement's root buffers read and written, by statement identity: the
    scan starts over after every alias, and the statements it did not retarget
    are the same objects (BERT-base: 100 aliases over 1,100 statements asked
    for their buffers 100,000 times)."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Statement, set[str], set[str], frozenset[str]]] = {}
        self._root: Block | None = None
        self._positions: tuple[dict[str, int], dict[str, int], list[int]] = ({}, {}, [])
        self._buffers: dict[str, Refinement] = {}

    def _get(self, s: Statement) -> tuple[Statement, set[str], set[str], frozenset[str]]:
        found = self._seen.get(id(s))
        if found is None or found[0] is not s:
            if isinstance(s, Block):
                named = frozenset(r.from_ for r in s.refs)
            elif isinstance(s, Special):
                named = frozenset((*s.inputs, *s.outputs))
            else:
                named = frozenset()
            found = self._seen[id(s)] = (s, reads(s), writes(s), named)  # holds s: ids unique
        return found

    def __call__(self, s: Statement) -> tuple[set[str], set[str]]:
        found = self._get(s)
        return found[1], found[2]

    def names(self, s: Statement) -> frozenset[str]:
        """Every buffer ``s`` names (a view's source, a special's operand)."""
        return self._get(s)[3]

    def positions(self, root: Block) -> tuple[dict[str, int], dict[str, int], list[int]]:
        """Per buffer, the first statement of ``root`` reading or writing it and the
        last one writing it, as places of a numbering that keeps its order when a
        statement goes, and each statement's place in it (worked out once per
        root: the reshapes that do not alias all ask of the same one, and an
        alias updates them, :meth:`aliased`)."""
        if self._root is not root:
            first: dict[str, int] = {}
            last: dict[str, int] = {}
            for n, st in enumerate(root.stmts):
                rd, wr = self(st)
                for b in rd:
                    first.setdefault(b, n)
                for b in wr:
                    first.setdefault(b, n)
                    last[b] = n
            self._root, self._positions = root, (first, last, list(range(len(root.stmts))))
            self._buffers = {r.into: r for r in root.refs}
        return self._positions

    def buffers(self, root: Block) -> dict[str, Refinement]:
        """``root``'s buffers by name."""
        self.positions(root)
        return self._buffers

    def aliased(
        self, old: Block, new: Block, k: int, gone: str, kept: str, at: tuple[int | None, ...]
    ) -> None:
        """Move what was worked out for ``old`` to ``new``: ``old`` without its
        statement ``k`` (the reshape of ``gone`` and ``kept``) and with ``gone``
        renamed ``kept``, so every other buffer's statements keep their places;
        ``at``: ``kept``'s first and last statement in ``new``, found by the
        caller.  The scan after an alias then does not work every place out
        again (BERT-base: 50 aliases over 570 statements and 800 buffers)."""
        if self._root is not old:
            return
        first, last, place = self._positions
        del place[k]
        for b in (gone, kept):
            first.pop(b, None)
            last.pop(b, None)
        if at[0] is not None:
            first[kept] = place[at[0]]
        if at[1] is not None:
            last[kept] = place[at[1]]
        del self._buffers[gone]
        self._root = new


def _alias(root: Block, k: int, special: Special, flows: _Flows) -> Block | None:
    if len(special.inputs) != 1 or len(special.outputs) != 1:
        return None
    (d,), (t,) = special.inputs, special.outputs
    buffers = flows.buffers(root)
    rd, rt = buffers.get(d), buffers.get(t)
    if rd is None or rt is None or d == t:
        return None
    if rd.shape.dtype != rt.shape.dtype or rd.location != rt.location:
        return None
    if rd.offset is not None or rt.offset is not None:
        return None
    if not (_row_major(rd.shape) and _row_major(rt.shape)):
        return None
    first, last, place = flows.positions(root)
    at = place[k]  # k's place in the numbering of first and last
    if first.get(t, at) < at:  # a statement before k touches T
        return None
    if last.get(d, at) > at or last.get(t, at) > at:  # one after k writes D or T
        return None
    groups = refinement_groups(rd.shape.sizes, rt.shape.sizes)
    if groups is not None and _movable(rt):
        gone, kept = rt, rd  # a split: T's readers read D
    else:
        groups = refinement_groups(rt.shape.sizes, rd.shape.sizes)
        if groups is None or not _movable(rd):
            return None
        gone, kept = rd, rt  # a merge: D's writers (and readers) use T
    stmts: list[Statement] = []
    first_kept = last_kept = None  # the kept buffer's places in the new root
    for i, s in enumerate(root.stmts):
        if i == k:
            continue
        names = flows.names(s)
        if gone.into in names:
            new = _retarget(s, gone, kept, groups)
            if new is None:
                return None
        elif kept.into in names:
            new = s  # what _retarget gives a statement that does not name it
        else:
            stmts.append(s)
            continue
        new_reads, new_writes = flows(new)
        if first_kept is None and (kept.into in new_reads or kept.into in new_writes):
            first_kept = len(stmts)
        if kept.into in new_writes:
            last_kept = len(stmts)
        stmts.append(new)
    refs = tuple(r for r in root.refs if r.into != gone.into)
    out = replace(root, refs=refs, stmts=tuple(stmts))
    flows.aliased(root, out, k, gone.into, kept.into, (first_kept, last_kept))
    return out


def _movable(ref: Refinement) -> bool:
    return ref.dir == "none" and not ref.const


def _retarget(
    stmt: Statement, gone: Refinement, kept: Refinement, groups: Groups
) -> Statement | None:
    """``stmt`` using ``kept`` wherever it used ``gone``; ``None`` when it cannot."""
    name = gone.into
    if isinstance(stmt, Special):
        if name not in (*stmt.inputs, *stmt.outputs):
            return stmt
        if stmt.op != "reshape":
            return None
        return replace(
            stmt,
            inputs=tuple(kept.into if x == name else x for x in stmt.inputs),
            outputs=tuple(kept.into if x == name else x for x in stmt.outputs),
        )
    if not isinstance(stmt, Block) or not any(r.from_ == name for r in stmt.refs):
        return stmt
    fine = gone.shape.sizes
    refs: list[Refinement] = []
    for r in stmt.refs:
        if r.from_ != name:
            refs.append(r)
            continue
        sizes = _merged_sizes(r.shape.sizes, fine, groups)
        if sizes is None or refined_below(stmt, r.into):
            return None
        shape = TensorShape(r.shape.dtype, sizes, kept.shape.strides)
        access = _merged_access(r.access, fine, groups)
        refs.append(replace(r, from_=kept.into, access=access, shape=shape))
    return replace(stmt, refs=tuple(refs))
