"""The ``torch.compile`` backend: dynamo graph -> AOTAutograd (core ATen) -> one Tile program.

``backend(gm, example_inputs)`` is what ``torch.compile(model, backend="stripeml")``
calls per graph dynamo captures.  It traces the graph to ATen with
``aot_module_simplified`` and PyTorch's core ATen decompositions (functionalised:
no in-place ops, no aliasing left to reason about), and returns a callable that,
per input signature, translates the ATen graph (``lower.py``) and compiles it
once with ``stripeml.compile``; parameters and buffers are constants of the
program, bound per parameter version.  A graph with operators the translator
lacks is split (``CapabilityBasedPartitioner``) into maximal supported
partitions, each compiled as its own program, with the unsupported nodes run by
PyTorch between them.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..onnx.builder import Builder, Value
from ..onnx.importer import Folds, Specialised, finish
from ..onnx.narrow_types import is_narrow, wide_dtype
from . import lower_backward  # noqa: F401  (registers the training operators' rules)
from .lower import (
    IGNORED,
    Lowering,
    Unsupported,
    from_numpy,
    full_name,
    np_dtype,
    op_name,
    to_numpy,
    write,
)  # fmt: skip
from .programs import record

log = logging.getLogger("stripeml.torch")

#: Counts, for tests and curiosity: graphs dynamo handed over, programs compiled,
#: graphs run eagerly instead, wholly or in part (fallbacks), calls of compiled
#: graphs; for split graphs, ``partitions`` (supported parts, each compiled on
#: its own) and ``eager_nodes`` (ATen nodes left to PyTorch between them).
STATS: Counter[str] = Counter()
_LOCK = threading.Lock()


def _verbose() -> bool:
    return os.environ.get("STRIPEML_TORCH_VERBOSE", "") not in ("", "0")


def _note(text: str) -> None:
    if _verbose():
        log.warning(text)
    else:
        log.info(text)


@dataclass
class GraphReport:
    """What happened (or would happen) to one captured graph."""

    ops: Counter[str] = field(default_factory=Counter)  # ATen operator -> count
    unsupported: dict[str, str] = field(default_factory=dict)  # operator -> why
    reason: str = ""  # why the whole graph runs eagerly, when it does
    #: when the graph is split: the ATen operators of each supported partition
    #: (each compiles as its own program) ...
    partitions: list[Counter[str]] = field(default_factory=list)
    #: ... and the ATen operators of the nodes PyTorch runs between them -> count
    eager: Counter[str] = field(default_factory=Counter)

    @property
    def compiles(self) -> bool:
        """The whole graph compiles as one program."""
        return not self.unsupported and not self.reason

    @property
    def partial(self) -> bool:
        """The graph is split: its partitions compile, the rest runs eagerly."""
        return bool(self.partitions) and not self.reason


# -- which inputs are parameters ----------------------------------------------
def _is_state(node: Any, example: Any) -> bool:
    """A dynamo graph input that is a parameter or buffer of a module."""
    import torch

    if isinstance(example, torch.nn.Parameter):
        return True
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    name = source.name if source is not None else ""
    name = name() if callable(name) else str(name)
    return "._parameters[" in name or "._buffers[" in name


def backend(gm: Any, example_inputs: Sequence[Any]) -> Any:
    """The ``torch.compile`` backend (``backend="stripeml"``)."""
    return _backend(gm, example_inputs, None)


def _backend(gm: Any, example_inputs: Sequence[Any], reports: list[GraphReport] | None) -> Any:
    from .training import trace

    STATS["graphs"] += 1
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    state = [_is_state(n, x) for n, x in zip(placeholders, example_inputs)]
    lifted = len(list(gm.parameters())) + len(list(gm.buffers()))
    state = [True] * lifted + state
    return trace(gm, example_inputs, state, reports)


class CompiledGraph:
    """One ATen graph: a stripeml program per input signature, else the graph itself."""

    def __init__(
        self,
        fx: Any,
        state: list[bool],
        reports: list[GraphReport] | None,
        kind: str = "inference",
    ):
        self.fx = fx
        #: "inference", "forward" or "backward" (AOTAutograd's graphs)
        self.kind = kind
        self.n_ops = sum(
            1 for n in fx.graph.nodes if n.op == "call_function" and not _trivial(n.target)
        )
        self.placeholders = [n for n in fx.graph.nodes if n.op == "placeholder"]
        self.state = state if len(state) == len(self.placeholders) else None
        self.reports = reports
        self.static = not any(_symbolic(n) for n in self.placeholders) and all(
            "val" in n.meta for n in fx.graph.nodes if n.op not in ("output",)
        )
        # signature -> (the parameters' (id, version), the program or None: eager)
        self._cache: dict[tuple[Any, ...], tuple[tuple[Any, ...], Specialised | None]] = {}
        #: per program built: what each graph output is (see ``_lower``)
        self._plans: dict[int, list[tuple[str, Any]]] = {}
        self._plan: list[tuple[str, Any]] = []
        self._folds: Folds = {}
        #: nodes of known operators whose translation failed (left to PyTorch)
        self._bad: set[Any] = set()
        self._at: Any = None  # the node being translated
        report = GraphReport()
        for n in fx.graph.nodes:
            if n.op == "call_function":
                name = full_name(n.target)
                report.ops[name] += 1
                if not _known(n.target):
                    report.unsupported[name] = "no translation"
        if self.state is None:
            report.reason = "its inputs could not be matched to the module's"
        self.report = report
        #: the graph with its supported partitions as compiled graphs, when split
        self.split: Any = None
        if report.unsupported and not report.reason:
            self.split = self._partition(explain=reports is not None)
        if self.split is not None:
            if reports is not None:
                reports.append(report)
            else:
                _note(f"stripeml.torch: {self.kind} graph split: {_split_summary(report)}")
                STATS["fallbacks"] += 1
                STATS["partitions"] += len(report.partitions)
                STATS["eager_nodes"] += sum(report.eager.values())
        elif reports is not None:
            # explain(): translate now (for the precise reasons), compile nothing
            if report.compiles and self.static:
                try:
                    self._lower([n.meta["val"] for n in self.placeholders], dry=True)
                except Unsupported as exc:
                    report.unsupported[exc.op] = exc.reason
                    self._split_at_failure(explain=True)
            reports.append(report)
        elif not report.compiles:
            _note(f"stripeml.torch: {self.kind} graph runs eagerly: {_summary(report)}")
            STATS["fallbacks"] += 1
            STATS["eager_nodes"] += self.n_ops

    def __call__(self, *given: Any) -> Any:
        import torch

        args = list(given)

        STATS["calls"] += 1
        if self.split is not None:
            return self.split(*args)
        if not self.report.compiles or self.state is None:
            return self.fx(*args)
        sig = tuple(
            (tuple(a.shape), a.dtype, a.device.type) if isinstance(a, torch.Tensor) else a
            for a, s in zip(args, self.state)
            if not s
        )
        versions = tuple(
            (id(a), a._version)
            for a, s in zip(args, self.state)
            if s and isinstance(a, torch.Tensor)
        )
        hit = self._cache.get(sig)
        if hit is None or hit[0] != versions:
            with _LOCK:
                spec = self._build(args)
            self._cache[sig] = hit = (versions, spec)
        spec = hit[1]
        if spec is None:
            return self.split(*args) if self.split is not None else self.fx(*args)
        arrays: dict[int, np.ndarray] = {}
        for k in spec.inputs:
            a = args[k]
            if a.device.type != "cpu":
                return self.fx(*args)
            arrays[k] = to_numpy(a.detach())
        results: dict[str, np.ndarray] = {}
        if spec.function is not None:
            outs = spec.function(*spec.call_args(arrays))  # type: ignore[arg-type]
            if not isinstance(outs, tuple):
                outs = (outs,)
            results = dict(zip(spec.function.outputs, outs))
        values = [results[x] if kind == "tile" else np.array(x) for kind, x in spec.outputs]
        if spec.narrow is not None:  # exact: the program holds bfloat16 values in float32
            values = [
                v if t is None else np.asarray(v).astype(t) for v, t in zip(values, spec.narrow)
            ]
        plan = self._plans[id(spec)]
        out: list[Any] = []
        for kind, x in plan:
            if kind == "value":
                out.append(from_numpy(np.asarray(values[x])))
            else:
                out.append(args[x] if kind == "input" else x)
        return out

    def _partition(self, explain: bool) -> Any:
        """Split the graph into maximal partitions of translatable nodes; each that
        computes something becomes a :class:`CompiledGraph` of its own (under
        ``explain``: is translated, not compiled, for the report).  The graph
        module that calls them (and runs the other nodes), or None when no
        partition is worth compiling."""
        from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
        from torch.fx.passes.operator_support import OperatorSupportBase
        from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

        bad = self._bad

        class Translatable(OperatorSupportBase):
            def is_node_supported(self, submodules: Any, node: Any) -> bool:
                return node.op == "call_function" and _known(node.target) and node not in bad

        assert self.state is not None
        state_of = dict(zip(self.placeholders, self.state))
        partitioner = CapabilityBasedPartitioner(
            self.fx, Translatable(), allows_single_node_partition=True
        )
        proposed = [p.nodes for p in partitioner.propose_partitions()]
        _constants_to_consumers(self.fx, proposed, state_of)
        kept = [
            nodes
            for nodes in proposed
            if any(n.op == "call_function" and not _trivial(n.target) for n in nodes)
        ]
        if not kept:
            return None
        inside = {n for nodes in kept for n in nodes}
        report = self.report
        for n in self.fx.graph.nodes:
            if n.op == "call_function" and n not in inside:
                report.eager[full_name(n.target)] += 1
        report.partitions = [
            Counter(full_name(n.target) for n in nodes if n.op == "call_function") for nodes in kept
        ]
        prefix = "stripeml_partition_"
        split = fuse_by_partitions(self.fx, kept, prefix=prefix, always_return_tuple=True)
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
                CompiledGraph(sub, state, scratch, kind=self.kind)
                report.unsupported.update(scratch[0].unsupported if scratch else {})
                continue
            split.delete_submodule(name)
            setattr(split, name, CompiledGraph(sub, state, None, kind=self.kind))
        return split

    def _split_at_failure(self, explain: bool) -> bool:
        """After a translation failed at an operator node (``self._at``): split
        the graph around that node (it runs eagerly, its neighbours compile);
        False when that is not possible (an input's type, no such node, or a
        graph already split)."""
        import operator

        n = self._at
        if n is None or n.op != "call_function" or self.split is not None or self.state is None:
            return False
        if n.target is operator.getitem and isinstance(n.args[0], type(n)):
            n = n.args[0]  # an output of a multi-output operator: that operator
        self._bad.add(n)
        self._bad.update(u for u in n.users if u.target is operator.getitem)
        self.split = self._partition(explain)
        return self.split is not None

    def _build(self, args: list[Any]) -> Specialised | None:
        import torch

        metas: list[Any] = [
            a if isinstance(a, torch.Tensor) or not isinstance(a, torch.SymInt) else int(a)
            for a in args
        ]
        try:
            spec = self._lower(metas, args=args)
        except Unsupported as exc:
            self.report.unsupported[exc.op] = exc.reason
            if self._split_at_failure(explain=False):
                _note(f"stripeml.torch: {self.kind} graph split: {_split_summary(self.report)}")
                STATS["partitions"] += len(self.report.partitions)
                STATS["eager_nodes"] += sum(self.report.eager.values())
            else:
                _note(f"stripeml.torch: {self.kind} graph runs eagerly: {_summary(self.report)}")
                STATS["eager_nodes"] += self.n_ops
            STATS["fallbacks"] += 1
            return None
        if spec is not None:
            self._plans[id(spec)] = self._plan  # (sizes among the outputs differ per signature)
        STATS["compiles"] += 1
        STATS[f"{self.kind}_compiles"] += 1
        STATS["compiled_ops"] += self.n_ops
        if spec is not None:
            record(self.kind, spec, metas)
        return spec

    def _lower(
        self, metas: list[Any], args: list[Any] | None = None, dry: bool = False
    ) -> Specialised | None:
        """Translate the graph for these inputs (real tensors in ``args``; fake or
        real in ``metas``) and, unless ``dry``, compile it."""
        import torch

        concrete = None if self.static or args is None else _concrete(self.fx, args)
        b = Builder()
        L = Lowering(b, self._folds)
        vals: dict[Any, Any] = {}
        input_index: dict[Value, int] = {}
        assert self.state is not None
        for k, (n, m, s) in enumerate(zip(self.placeholders, metas, self.state)):
            if not isinstance(m, torch.Tensor):
                vals[n] = m
                continue
            dtype = np_dtype(m.dtype)
            if s and args is not None:
                t = args[k].detach()
                if t.device.type != "cpu":
                    raise Unsupported("input", "a parameter not on the CPU")
                vals[n] = L.const(to_numpy(t))
            elif s:
                vals[n] = L.const(np.zeros(tuple(m.shape), dtype))
            else:
                v = b.input(tuple(int(d) for d in m.shape), wide_dtype(dtype))
                if v.const is None:
                    input_index[v] = k
                # bfloat16 is held in float32 (onnx/narrow.py), rounded after each operator
                vals[n] = replace(v, narrow=dtype) if is_narrow(dtype) else v
        output = None
        self._at = None
        for n in self.fx.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                output = n
                self._at = None
                break
            self._at = n
            if n.op == "get_attr":
                t = getattr(self.fx, str(n.target))
                vals[n] = (
                    L.const(to_numpy(t.detach().cpu()).copy()) if isinstance(t, torch.Tensor) else t
                )
                continue
            if n.op != "call_function":
                raise Unsupported(n.op, "only ATen operator calls are translated")
            meta = concrete[n] if concrete is not None else n.meta.get("val")
            if not isinstance(meta, (torch.Tensor, tuple, list)) or op_name(n.target) == "getitem":
                if op_name(n.target) == "getitem" and not isinstance(meta, (int, float)):
                    vals[n] = _resolve(n.args[0], vals)[n.args[1]]
                    if vals[n] is None:
                        raise Unsupported("getitem", "an output the translation does not produce")
                    continue
                if op_name(n.target) in IGNORED:
                    continue
                if meta is not None and not isinstance(meta, torch.Tensor):
                    vals[n] = _number(meta)  # a size, computed by PyTorch's trace
                    continue
            a = _resolve(list(n.args), vals)
            kw = _resolve(dict(n.kwargs), vals)
            L.where = n.name
            L.used = {u.args[1] for u in n.users if op_name(u.target) == "getitem"}
            if any(op_name(u.target) != "getitem" for u in n.users):
                L.used = None
            first = meta[0] if isinstance(meta, (tuple, list)) else meta
            out: Any = write(L, n.target, a, kw, first)
            if isinstance(out, Value) and isinstance(meta, torch.Tensor):
                out = _checked(L, out, meta, n)
            elif isinstance(out, tuple) and isinstance(meta, (tuple, list)):
                out = tuple(
                    _checked(L, x, m, n) if isinstance(x, Value) and isinstance(m, torch.Tensor)
                    else x
                    for x, m in zip(out, meta)
                )  # fmt: skip
            vals[n] = out
        assert output is not None
        produced: list[Value] = []
        plan: list[tuple[str, Any]] = []
        given = {v.name: k for v, k in input_index.items()}
        for r in _resolve(list(output.args[0]), vals):
            if isinstance(r, Value) and r.const is None and r.layout is None and r.name in given:
                plan.append(("input", given[r.name]))  # (a saved input: no copy)
            elif isinstance(r, Value):
                plan.append(("value", len(produced)))
                produced.append(r)
            elif isinstance(r, (tuple, list)):
                raise Unsupported("output", "a tuple-valued output")
            else:
                plan.append(("literal", r))
        self._plan = plan
        if dry:
            return None
        return finish(b, produced, input_index, "cpu", "torch_graph")


def _summary(report: GraphReport) -> str:
    if report.reason:
        return report.reason
    return "unsupported: " + ", ".join(
        f"{op} ({why})" if why else op for op, why in sorted(report.unsupported.items())
    )


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


def _split_summary(report: GraphReport) -> str:
    sizes = " + ".join(str(sum(p.values())) for p in report.partitions)
    n = sum(report.eager.values())
    eager = ", ".join(f"{op} x{k}" for op, k in sorted(report.eager.items()))
    return (
        f"{len(report.partitions)} partition(s) compile ({sizes} ATen ops), "
        f"{n} node(s) fall back to eager: {eager}; {_summary(report)}"
    )


#: Operators that compute nothing (views, sizes): a partition of only these is
#: left to PyTorch rather than compiled.
_TRIVIAL = frozenset({
    "view", "_unsafe_view", "reshape", "squeeze", "unsqueeze", "flatten", "expand",
    "permute", "t", "transpose", "alias", "detach", "clone", "slice", "select",
    "getitem", "sym_size", "sym_numel", "sym_stride", "sym_storage_offset",
})  # fmt: skip


def _trivial(target: Any) -> bool:
    return op_name(target) in _TRIVIAL or op_name(target) in IGNORED or _is_size_op(target)


def _known(target: Any) -> bool:
    import operator

    from .lower import RULES

    name = op_name(target)
    return name in RULES or name in IGNORED or target is operator.getitem or _is_size_op(target)


def _is_size_op(target: Any) -> bool:
    name = op_name(target)
    return name.startswith("sym_") or getattr(target, "__module__", "") in ("_operator", "operator")


def _symbolic(n: Any) -> bool:
    import torch

    val = n.meta.get("val")
    if isinstance(val, torch.Tensor):
        return any(isinstance(d, torch.SymInt) for d in val.shape)
    return val is not None


def _number(x: Any) -> Any:
    import torch

    if isinstance(x, torch.SymInt):
        return int(x)
    if isinstance(x, torch.SymFloat):
        return float(x)
    if isinstance(x, torch.SymBool):
        return bool(x)
    return x


def _resolve(x: Any, vals: dict[Any, Any]) -> Any:
    import torch

    if isinstance(x, torch.fx.Node):
        return vals[x]
    if isinstance(x, (list, tuple)):
        return type(x)(_resolve(a, vals) for a in x)
    if isinstance(x, dict):
        return {k: _resolve(a, vals) for k, a in x.items()}
    return _number(x)


def _checked(L: Lowering, v: Value, meta: Any, n: Any) -> Value:
    """``v`` with the shape PyTorch says the node has, in its dtype."""
    shape = tuple(int(d) for d in meta.shape)
    if v.shape != shape:
        raise Unsupported(full_name(n.target), f"made shape {v.shape}, PyTorch says {shape}")
    return L.cast(v, np_dtype(meta.dtype))


def _concrete(fx: Any, args: list[Any]) -> dict[Any, Any]:
    """Every node's value for these real inputs (tensors as their metadata only):
    the graph run once, eagerly, where dynamo left sizes symbolic."""
    import torch

    seen: dict[Any, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            out = super().run_node(n)
            seen[n] = (
                torch.empty(out.shape, dtype=out.dtype, device="meta")
                if isinstance(out, torch.Tensor)
                else tuple(
                    torch.empty(o.shape, dtype=o.dtype, device="meta")
                    if isinstance(o, torch.Tensor) else o for o in out
                )
                if isinstance(out, (tuple, list))
                else out
            )  # fmt: skip
            return out

    with torch.no_grad():
        Recorder(fx).run(*args)
    return seen
