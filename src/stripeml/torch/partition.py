"""Splitting an ATen graph around the operators that do not translate.

:func:`partition` finds the maximal partitions of translatable nodes
(``CapabilityBasedPartitioner``; the support query is :func:`known`), fuses
each that computes something into a submodule and hands it to ``make`` (the
backend's ``CompiledGraph``), so the split graph runs the partitions as
stripeml programs and the other nodes in PyTorch between them.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable
from typing import Any

from .lower import IGNORED, RULES, full_name, op_name
from .report import GraphReport

#: Operators that compute nothing (views, sizes): a partition of only these is
#: left to PyTorch rather than compiled.
_TRIVIAL = frozenset({
    "view", "_unsafe_view", "reshape", "squeeze", "unsqueeze", "flatten", "expand",
    "permute", "t", "transpose", "alias", "detach", "clone", "slice", "select",
    "getitem", "sym_size", "sym_numel", "sym_stride", "sym_storage_offset",
})  # fmt: skip

#: ``make(submodule, state, reports, kind)``: the callable a partition becomes
#: (with ``reports`` a list: translated for a report, not compiled).
Make = Callable[[Any, list[bool], "list[GraphReport] | None", str], Any]


def trivial(target: Any) -> bool:
    return op_name(target) in _TRIVIAL or op_name(target) in IGNORED or is_size_op(target)


def known(target: Any) -> bool:
    """The operator has a translation (a rule, or a size/assert operator)."""
    name = op_name(target)
    return name in RULES or name in IGNORED or target is operator.getitem or is_size_op(target)


def is_size_op(target: Any) -> bool:
    name = op_name(target)
    return name.startswith("sym_") or getattr(target, "__module__", "") in ("_operator", "operator")


def partition(
    fx: Any,
    state_of: dict[Any, bool],
    bad: set[Any],
    report: GraphReport,
    kind: str,
    explain: bool,
    make: Make,
) -> Any:
    """Split ``fx`` into maximal partitions of translatable nodes (not in
    ``bad``); each that computes something becomes ``make(...)`` (under
    ``explain``: is translated, not compiled, for the report).  Fills
    ``report``'s partitions and eager nodes; returns the graph module that calls
    the partitions (and runs the other nodes), or None when no partition is
    worth compiling.  ``state_of``: per placeholder, whether it is a parameter
    or buffer."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase
    from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

    class Translatable(OperatorSupportBase):
        def is_node_supported(self, submodules: Any, node: Any) -> bool:
            return node.op == "call_function" and known(node.target) and node not in bad

    partitioner = CapabilityBasedPartitioner(fx, Translatable(), allows_single_node_partition=True)
    proposed = [p.nodes for p in partitioner.propose_partitions()]
    _constants_to_consumers(fx, proposed, state_of)
    kept = [
        nodes
        for nodes in proposed
        if any(n.op == "call_function" and not trivial(n.target) for n in nodes)
    ]
    if not kept:
        return None
    inside = {n for nodes in kept for n in nodes}
    for n in fx.graph.nodes:
        if n.op == "call_function" and n not in inside:
            report.eager[full_name(n.target)] += 1
    report.partitions = [
        Counter(full_name(n.target) for n in nodes if n.op == "call_function") for nodes in kept
    ]
    prefix = "stripeml_partition_"
    split = fuse_by_partitions(fx, kept, prefix=prefix, always_return_tuple=True)
    split.recompile()
    # (the fused graph's placeholders are new nodes, with the same names)
    by_name = {n.name: s for n, s in state_of.items()}
    for node in list(split.graph.nodes):
        if node.op != "call_module" or not str(node.target).startswith(prefix):
            continue
        name = str(node.target)
        sub = getattr(split, name)
        state = [
            by_name.get(a.name, False) if a.op == "placeholder" else a.op == "get_attr"
            for a in node.args
        ]
        if explain:  # translate (for the reasons); the partition runs eagerly
            scratch: list[GraphReport] = []
            make(sub, state, scratch, kind)
            report.unsupported.update(scratch[0].unsupported if scratch else {})
            continue
        split.delete_submodule(name)
        setattr(split, name, make(sub, state, None, kind))
    return split


def _constants_to_consumers(
    fx: Any, partitions: list[dict[Any, Any]], state_of: dict[Any, bool]
) -> None:
    """Move each node computed from parameters alone (a transposed weight) into
    the partition that uses it, when one does: the partitioner's horizontal
    merging may put it in an earlier partition, which would make it a runtime
    input of its consumer's program instead of a constant folded into it."""
    where: dict[Any, int] = {n: k for k, nodes in enumerate(partitions) for n in nodes}
    constant: set[Any] = set()
    for n in fx.graph.nodes:
        if n.op == "get_attr" or (n.op == "placeholder" and state_of.get(n, False)):
            constant.add(n)
        elif n.op == "call_function" and all(a in constant for a in n.all_input_nodes):
            constant.add(n)
    for n in reversed(list(fx.graph.nodes)):
        if n.op != "call_function" or n not in constant or n not in where or not n.users:
            continue
        homes = {where.get(u) for u in n.users}
        if len(homes) == 1 and None not in homes and homes != {where[n]}:
            (home,) = homes
            assert home is not None
            partitions[where[n]].pop(n)
            partitions[home][n] = None
            where[n] = home
