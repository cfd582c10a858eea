"""Row-major reshapes as index maps.

A reshape between two row-major shapes is an affine index map when one shape
*refines* the other: every dimension of the coarse shape is the product of
consecutive dimensions of the fine one, in order.  The fine element
``(a_0, ..., a_k)`` is then the coarse element whose coordinate ``j`` is
``sum(a_i * w_i)`` over the fine dimensions of group ``j`` (``w_i``: the
product of the group's sizes after ``i``).  ``passes/alias_reshape.py`` turns
such reshapes into views, and the ONNX importer keeps a transposed value's
layout through them.
"""

from __future__ import annotations

from collections.abc import Sequence

Groups = list[list[int]]  # per coarse dimension, the fine dimensions it merges


def refinement_groups(coarse: Sequence[int], fine: Sequence[int]) -> Groups | None:
    """For each dimension of ``coarse``, the consecutive dimensions of ``fine``
    whose product it is (size-1 dimensions join the group before them, or the
    first); ``None`` when ``fine`` does not refine ``coarse``."""
    if 0 in coarse or 0 in fine:
        return None
    groups: Groups = []
    k = 0
    for c in coarse:
        group: list[int] = []
        p = 1
        while p < c:
            if k >= len(fine):
                return None
            p *= fine[k]
            group.append(k)
            k += 1
        if p != c:
            return None
        while k < len(fine) and fine[k] == 1:
            group.append(k)
            k += 1
        groups.append(group)
    if k != len(fine):  # fine dimensions of size 1 with no coarse dimension to join
        if not groups or any(fine[j] != 1 for j in range(k, len(fine))):
            return None
        groups[-1].extend(range(k, len(fine)))
    return groups
