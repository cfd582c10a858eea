"""The ``torch.compile`` backend: dynamo graph -> AOTAutograd (core ATen) -> one Tile program.

``backend(gm, example_inputs)`` is what ``torch.compile(model, backend="stripeml")``
calls per graph dynamo captures.  It traces the graph to ATen with
``aot_module_simplified`` and PyTorch's core ATen decompositions (functionalised:
no in-place ops, no aliasing left to reason about), and returns a callable that,
per input signature, translates the ATen graph (``lower.py``) and compiles it
once with ``stripeml.compile``; parameters and buffers are constants of the
program, bound per parameter version.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..onnx.builder import Builder, Value
from ..onnx.importer import Folds, Specialised, finish
from .lower import IGNORED, Lowering, Unsupported, full_name, np_dtype, op_name, write

log = logging.getLogger("stripeml.torch")

#: Counts, for tests and curiosity: graphs dynamo handed over, programs compiled,
#: graphs run eagerly instead (fallbacks), calls of compiled graphs.
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

    @property
    def compiles(self) -> bool:
        return not self.unsupported and not self.reason


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
    import torch
    from torch._decomp import core_aten_decompositions
    from torch._functorch.aot_autograd import aot_module_simplified

    STATS["graphs"] += 1
    if torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs
    ):
        why = "gradients are required (training and backward are not compiled yet)"
        _note(f"stripeml.torch: graph runs eagerly: {why}")
        STATS["fallbacks"] += 1
        if reports is not None:
            reports.append(GraphReport(reason=why))
        return gm.forward
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    state = [_is_state(n, x) for n, x in zip(placeholders, example_inputs)]
    lifted = len(list(gm.parameters())) + len(list(gm.buffers()))
    state = [True] * lifted + state

    def inference(fx: Any, _inputs: Any) -> Any:
        from torch._functorch.aot_autograd import make_boxed_func

        compiled = CompiledGraph(fx, state, reports)
        return make_boxed_func(compiled)

    aot: Any = aot_module_simplified  # its compiler protocols are stricter than a function
    return aot(
        gm,
        example_inputs,
        fw_compiler=inference,
        inference_compiler=inference,
        decompositions=core_aten_decompositions(),
    )


class CompiledGraph:
    """One ATen graph: a stripeml program per input signature, else the graph itself."""

    def __init__(self, fx: Any, state: list[bool], reports: list[GraphReport] | None):
        self.fx = fx
        self.placeholders = [n for n in fx.graph.nodes if n.op == "placeholder"]
        self.state = state if len(state) == len(self.placeholders) else None
        self.reports = reports
        self.static = not any(_symbolic(n) for n in self.placeholders) and all(
            "val" in n.meta for n in fx.graph.nodes if n.op not in ("output",)
        )
        # signature -> (the parameters' (id, version), the program or None: eager)
        self._cache: dict[tuple[Any, ...], tuple[tuple[Any, ...], Specialised | None]] = {}
        self._folds: Folds = {}
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
        if reports is not None:
            # explain(): translate now (for the precise reasons), compile nothing
            if report.compiles and self.static:
                try:
                    self._lower([n.meta["val"] for n in self.placeholders], dry=True)
                except Unsupported as exc:
                    report.unsupported[exc.op] = exc.reason
            reports.append(report)
        elif not report.compiles:
            _note(f"stripeml.torch: graph runs eagerly: {_summary(report)}")
            STATS["fallbacks"] += 1

    def __call__(self, *given: Any) -> Any:
        import torch

        args = list(given)

        STATS["calls"] += 1
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
            return self.fx(*args)
        arrays: dict[int, np.ndarray] = {}
        for k in spec.inputs:
            a = args[k]
            if a.device.type != "cpu":
                return self.fx(*args)
            arrays[k] = a.detach().numpy()
        results: dict[str, np.ndarray] = {}
        if spec.function is not None:
            outs = spec.function(*spec.call_args(arrays))  # type: ignore[arg-type]
            if not isinstance(outs, tuple):
                outs = (outs,)
            results = dict(zip(spec.function.outputs, outs))
        values = [results[x] if kind == "tile" else np.array(x) for kind, x in spec.outputs]
        plan = self._plan
        out: list[Any] = []
        for kind, x in plan:
            out.append(torch.from_numpy(np.asarray(values[x])) if kind == "value" else x)
        return out

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
            _note(f"stripeml.torch: graph runs eagerly: {_summary(self.report)}")
            STATS["fallbacks"] += 1
            return None
        STATS["compiles"] += 1
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
                vals[n] = L.const(t.numpy())
            elif s:
                vals[n] = L.const(np.zeros(tuple(m.shape), dtype))
            else:
                v = b.input(tuple(int(d) for d in m.shape), dtype)
                if v.const is None:
                    input_index[v] = k
                vals[n] = v
        output = None
        for n in self.fx.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                output = n
                break
            if n.op == "get_attr":
                t = getattr(self.fx, str(n.target))
                vals[n] = (
                    L.const(t.detach().cpu().numpy().copy()) if isinstance(t, torch.Tensor) else t
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
            first = meta[0] if isinstance(meta, (tuple, list)) else meta
            v = write(L, n.target, a, kw, first)
            if isinstance(v, Value) and isinstance(meta, torch.Tensor):
                v = _checked(L, v, meta, n)
            vals[n] = v
        assert output is not None
        produced: list[Value] = []
        plan: list[tuple[str, Any]] = []
        for r in _resolve(list(output.args[0]), vals):
            if isinstance(r, Value):
                plan.append(("value", len(produced)))
                produced.append(r)
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
