"""The verifier's view of one block in its nest (:class:`Scope`): its
refinements by name, the indices it sees, its box, index magnitudes and isl
domain, each built once and shared by the rules of :mod:`.verifier`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .affine import Affine
from .nodes import Block, Refinement

__all__ = ["Scope", "magnitude"]


def magnitude(expr: Affine, mags: dict[str, int]) -> int:
    """A bound on ``|expr|`` and on every partial sum of its terms, whatever the order."""
    total = abs(expr.const)
    for n, c in expr.terms:
        total += abs(c) * mags.get(n, 0)
    return total


@dataclass(eq=False)
class Scope:
    """One block in its nest: what its rules may look at."""

    block: Block
    parent: Scope | None
    label: str
    outer_idxs: frozenset[str] = frozenset()
    _domain: Any = field(default=None, repr=False)
    _box: Any = field(default=False, repr=False)  # False: not computed yet
    _refs: dict[str, Refinement] | None = field(default=None, repr=False)
    _magnitudes: dict[str, int] | None = field(default=None, repr=False)
    _visible: frozenset[str] | None = field(default=None, repr=False)
    # the incremental mode's facts of this block's refinements (verify_memo._root_facts)
    _facts: dict[str, tuple] | None = field(default=None, repr=False)

    @property
    def is_root(self) -> bool:
        return self.parent is None

    @property
    def visible_idxs(self) -> frozenset[str]:
        """The names of this block's and the enclosing blocks' indices (built once:
        every access of the block asks)."""
        if self._visible is None:
            self._visible = self.outer_idxs | {i.name for i in self.block.idxs}
        return self._visible

    @property
    def path(self) -> str:
        return self.label if self.parent is None else f"{self.parent.path}/{self.label}"

    @property
    def where(self) -> str:
        text = f"block '{self.path}'"
        return text + (f" (// {self.block.comment})" if self.block.comment else "")

    def ref(self, name: str) -> Refinement | None:
        """This block's first refinement named ``name`` (a table built once: a
        root with thousands of buffers is asked once per view of every kernel)."""
        if self._refs is None:
            self._refs = {}
            for r in self.block.refs:
                self._refs.setdefault(r.into, r)
        return self._refs.get(name)

    def parent_ref(self, name: str) -> Refinement | None:
        if self.parent is None:
            return None
        return self.parent.ref(name)

    def box(self) -> dict[str, int] | None:
        """The index ranges of the nest down to this block when its points are a
        box (no constraints, no index offsets, every range at least 1), else None."""
        if self._box is False:
            outer = self.parent.box() if self.parent is not None else {}
            box = None
            if outer is not None and not self.block.constraints:
                idxs = self.block.idxs
                if all(i.affine is None and i.range >= 1 for i in idxs):
                    box = {**outer, **{i.name: i.range for i in idxs}}
            self._box = box
        return self._box

    def magnitudes(self) -> dict[str, int]:
        """For each index of the nest, a bound on its absolute value (``i:R = aff``
        reaches ``|aff| + R - 1``); an offset naming an unknown index counts 0."""
        if self._magnitudes is None:
            outer = self.parent.magnitudes() if self.parent is not None else {}
            mags = dict(outer)
            for idx in self.block.idxs:
                base = magnitude(idx.affine, outer) if idx.affine is not None else 0
                mags[idx.name] = base + max(int(idx.range) - 1, 0)
            self._magnitudes = mags
        return self._magnitudes

    def domain(self):
        """The isl domain of this block over the whole nest (built once, lazily)."""
        if self._domain is None:
            # Imported here so that parsing and printing IR never load islpy.
            from .isl import block_domain

            outer = self.parent.domain() if self.parent is not None else None
            self._domain = block_domain(self.block, outer)
        return self._domain
