"""The ``torch.compile`` backend: dynamo graph -> AOTAutograd (core ATen) -> one Tile program.

``backend(gm, example_inputs)`` is what ``torch.compile(model, backend="stripeml")``
calls per graph dynamo captures.  It traces the graph to ATen with
``aot_module_simplified`` and PyTorch's core ATen decompositions (functionalised:
no in-place ops, no aliasing left to reason about; ``training.py``), and returns
a callable that, per input signature, translates the ATen graph
(``translate.py``, with the rules of ``lower.py``) and compiles it once with
``stripeml.compile``; parameters and buffers are constants of an inference
program, bound per parameter version.  A graph with operators the translator
lacks is split (``partition.py``) into maximal supported partitions, each
compiled as its own program, with the unsupported nodes run by PyTorch between
them.  Tensors cross into and out of the programs by ``tensors.py``'s rule.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..onnx.importer import Folds, Specialised, finish
from .direct import DirectPlan, outputs, passable
from .lower import Unsupported, full_name
from .partition import known, partition, trivial
from .programs import record
from .report import STATS, GraphReport, note, split_summary, summary
from .tensors import HeldArrays, dense_layout, from_numpy
from .threads import ThreadChoice, call, choice
from .translate import symbolic, translate

__all__ = ["STATS", "CompiledGraph", "GraphReport", "backend"]

_LOCK = threading.Lock()


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
    """One ATen graph: a stripeml program per input signature, else the graph itself.

    With ``reports`` a list (``explain``), the graph is translated for its
    report, appended there, and nothing is compiled or counted."""

    def __init__(
        self,
        fx: Any,
        state: list[bool],
        reports: list[GraphReport] | None,
        kind: str = "inference",
        free_outputs: int | None = None,
    ):
        self.fx = fx
        #: "inference", "forward" or "backward" (AOTAutograd's graphs)
        self.kind = kind
        #: the outputs from this position on (a forward graph's tensors saved for
        #: the backward) may come back in any strides: one the program stores
        #: permuted (channels-last, a transposed head) is returned as PyTorch's
        #: permuted view, not copied into its logical order
        self.free_outputs = free_outputs
        self.n_ops = sum(
            1 for n in fx.graph.nodes if n.op == "call_function" and not trivial(n.target)
        )
        self.placeholders = [n for n in fx.graph.nodes if n.op == "placeholder"]
        self.state = state if len(state) == len(self.placeholders) else None
        self.reports = reports
        self.static = not any(symbolic(n) for n in self.placeholders) and all(
            "val" in n.meta for n in fx.graph.nodes if n.op not in ("output",)
        )
        # signature -> (the parameters' (id, version), the program or None: eager)
        self._cache: dict[tuple[Any, ...], tuple[tuple[Any, ...], Specialised | None]] = {}
        #: per program built: what each graph output is (see ``translate``)
        self._plans: dict[int, list[tuple[str, Any]]] = {}
        #: per program built: the inputs it reads stored permuted (index -> order)
        self._layouts: dict[int, dict[int, tuple[int, ...]]] = {}
        self._layout_of: dict[int, tuple[int, ...]] = {}
        #: the programs whose inputs need no widening (``Specialised.call_args``)
        self._wide: set[int] = set()
        #: cheap per-call key -> the input signature and the inputs that are not
        #: ``direct.passable`` (see ``__call__``)
        self._sigs: dict[tuple[Any, ...], tuple[tuple[Any, ...], frozenset[int]]] = {}
        #: per program built, from its first call: its call by address, or None
        self._direct: dict[int, DirectPlan | None] = {}
        self._has_state = self.state is not None and any(self.state)
        #: per program built: where its split kernels run (see ``threads.py``)
        self._threads: dict[int, ThreadChoice | None] = {}
        #: per program built: its parameters' arrays, kept between calls
        self._held: dict[int, HeldArrays] = {}
        self._plan: list[tuple[str, Any]] = []
        self._folds: Folds = {}
        #: nodes of known operators whose translation failed (left to PyTorch)
        self._bad: set[Any] = set()
        report = GraphReport(kind=kind)
        for n in fx.graph.nodes:
            if n.op == "call_function":
                name = full_name(n.target)
                report.ops[name] += 1
                if not known(n.target):
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
                note(f"stripeml.torch: {self.kind} graph split: {split_summary(report)}")
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
                    self._split_at_failure(exc.node, explain=True)
            reports.append(report)
        elif not report.compiles:
            note(f"stripeml.torch: {self.kind} graph runs eagerly: {summary(report)}")
            STATS["fallbacks"] += 1
            STATS["eager_nodes"] += self.n_ops

    def __call__(self, *given: Any) -> Any:
        import torch

        args = list(given)

        if self.reports is not None:  # explain(): reported already, runs eagerly
            return self.fx(*args)
        STATS["calls"] += 1
        if self.split is not None:
            return self.split(*args)
        if not self.report.compiles or self.state is None:
            return self.fx(*args)
        # The signature through a cheap key (sizes, strides, type, CPU or not:
        # a few attribute reads per tensor): ``dense_layout`` and the device's
        # name cost microseconds per tensor, at every call of a training step.
        key = tuple(
            (a.shape, a.stride(), a.dtype, a.is_cpu) if isinstance(a, torch.Tensor) else a
            for a, s in zip(args, self.state)
            if not s
        )
        found = self._sigs.get(key)
        if found is None:
            sig = tuple(
                (tuple(a.shape), a.dtype, a.device.type, dense_layout(a))
                if isinstance(a, torch.Tensor)
                else a
                for a, s in zip(args, self.state)
                if not s
            )
            # the inputs whose memory cannot be handed to a program as is
            bad = frozenset(k for k, a in enumerate(args) if not self.state[k] and not passable(a))
            found = self._sigs[key] = (sig, bad)
        sig, bad = found
        versions = (
            tuple(
                (id(a), a._version)
                for a, s in zip(args, self.state)
                if s and isinstance(a, torch.Tensor)
            )
            if self._has_state
            else ()
        )
        hit = self._cache.get(sig)
        if hit is None or hit[0] != versions:
            if hit is not None and hit[1] is not None:
                self._direct.pop(id(hit[1]), None)  # (it would keep the old program alive)
            with _LOCK:
                spec = self._build(args)
            self._cache[sig] = hit = (versions, spec)
        spec = hit[1]
        if spec is None:
            return self.split(*args) if self.split is not None else self.fx(*args)
        direct = self._direct.get(id(spec))
        if direct is not None and (not bad or bad.isdisjoint(direct.inputs)):
            # (from the second call on: tensors' addresses in, tensors out)
            tensors = direct.run(args, self._threads.get(id(spec)), call)
            return outputs(self._plans[id(spec)], tensors, args)
        arrays: dict[int, np.ndarray] = {}
        layouts = self._layouts.get(id(spec), {})
        held = self._held[id(spec)]
        for k in spec.inputs:
            arr = held.array(k, args[k], layouts.get(k))
            if arr is None:  # not on the CPU
                return self.fx(*args)
            arrays[k] = arr
        results: dict[str, np.ndarray] = {}
        if spec.function is not None:
            # on PyTorch's OpenMP team or the native pool: whichever is faster here
            if id(spec) in self._wide:  # (no narrow array to widen: the common case)
                passed = [arrays[k] for k in spec.inputs]
            else:
                passed = spec.call_args(arrays)  # type: ignore[arg-type]
                if all(a is arrays[k] for a, k in zip(passed, spec.inputs)):
                    self._wide.add(id(spec))  # (the types are the signature's: fixed)
            outs = call(self._threads.get(id(spec)), spec.function, passed)
            if not isinstance(outs, tuple):
                outs = (outs,)
            results = dict(zip(spec.function.outputs, outs))
            if id(spec) not in self._direct:
                try:
                    direct = DirectPlan.make(spec, passed, self.state)
                except Exception:  # noqa: BLE001 - a faster road only: keep this one
                    direct = None
                self._direct[id(spec)] = direct
        values = [results[x] if kind == "tile" else np.array(x) for kind, x in spec.outputs]
        if spec.narrow is not None:  # exact: the program holds bfloat16 values in float32
            values = [
                v if t is None else np.asarray(v).astype(t) for v, t in zip(values, spec.narrow)
            ]
        return outputs(self._plans[id(spec)], [from_numpy(np.asarray(v)) for v in values], args)

    def _partition(self, explain: bool) -> Any:
        """The graph split around the nodes that do not translate (see
        ``partition.py``), or None when no partition is worth compiling."""
        assert self.state is not None
        return partition(
            self.fx,
            dict(zip(self.placeholders, self.state)),
            self._bad,
            self.report,
            self.kind,
            explain,
            CompiledGraph,
        )

    def _split_at_failure(self, n: Any, explain: bool) -> bool:
        """After a translation failed at operator node ``n``: split the graph
        around that node (it runs eagerly, its neighbours compile); False when
        that is not possible (an input's type, no such node, or a graph already
        split)."""
        import operator

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
            if self._split_at_failure(exc.node, explain=False):
                note(f"stripeml.torch: {self.kind} graph split: {split_summary(self.report)}")
                STATS["partitions"] += len(self.report.partitions)
                STATS["eager_nodes"] += sum(self.report.eager.values())
            else:
                note(f"stripeml.torch: {self.kind} graph runs eagerly: {summary(self.report)}")
                STATS["eager_nodes"] += self.n_ops
            STATS["fallbacks"] += 1
            return None
        if spec is not None:
            self._plans[id(spec)] = self._plan  # (sizes among the outputs differ per signature)
            self._layouts[id(spec)] = dict(self._layout_of)
            # (training graphs: PyTorch's operators run between their calls; an
            # inference program's calls keep the native pool, measured for it)
            self._threads[id(spec)] = choice() if self.kind != "inference" else None
            self._held[id(spec)] = HeldArrays()
            self._direct.pop(id(spec), None)  # (made at its first call; ids are reused)
        STATS["compiles"] += 1
        STATS[f"{self.kind}_compiles"] += 1
        STATS["compiled_ops"] += self.n_ops
        if spec is not None:
            record(self.kind, spec, metas, self._layout_of)
        return spec

    def _lower(
        self, metas: list[Any], args: list[Any] | None = None, dry: bool = False
    ) -> Specialised | None:
        """Translate the graph for these inputs (real tensors in ``args``; fake or
        real in ``metas``) and, unless ``dry``, compile it."""
        import torch

        assert self.state is not None
        layouts = None
        self._layout_of = {}
        if args is not None and not dry:
            layouts = [
                dense_layout(a) if isinstance(a, torch.Tensor) and not s else None
                for a, s in zip(args, self.state)
            ]
            self._layout_of = {k: lay for k, lay in enumerate(layouts) if lay is not None}
        t = translate(
            self.fx, self.state, metas, args, self._folds, self.static, layouts, self.free_outputs
        )
        self._plan = t.plan
        if dry:
            return None
        return finish(t.builder, t.produced, t.input_index, "cpu", "torch_graph")
