"""``torch.compile(model, backend="stripeml")``: PyTorch models through stripeml.

Importing this package registers the backend (it is also found through the
``torch_dynamo_backends`` entry point).  Inference graphs and AOTAutograd's
forward and backward graphs of training compile; see docs/pytorch.md.
"""

from __future__ import annotations

from typing import Any

from .backend import STATS, GraphReport, backend
from .programs import Program, last_programs

__all__ = ["GraphReport", "Program", "backend", "explain", "last_programs", "stats"]


def _register() -> None:
    import torch._dynamo
    from torch._dynamo.backends.registry import _COMPILER_FNS

    if _COMPILER_FNS.get("stripeml") is backend:
        return
    if "stripeml" not in _COMPILER_FNS:
        torch._dynamo.register_backend(compiler_fn=backend, name="stripeml")


_register()


def stats() -> dict[str, int]:
    """Counts since import: ``graphs`` dynamo handed over, ``compiles`` (stripeml
    programs built; by kind ``inference_compiles``, ``forward_compiles``,
    ``backward_compiles``), ``compiled_ops`` (ATen operators, not counting views
    and sizes, in the programs built), ``fallbacks`` (graphs or signatures run
    eagerly, wholly or in part), ``partitions`` (supported parts of split graphs),
    ``eager_nodes`` (ATen nodes left to PyTorch: of split graphs, and the
    operators of graphs run eagerly as a whole), ``calls``."""
    return dict(STATS)


class Explanation:
    """What ``torch.compile(model, backend="stripeml")`` would do with each graph."""

    def __init__(self, graphs: list[GraphReport]):
        self.graphs = graphs

    @property
    def compiles(self) -> bool:
        """Every graph compiles (none falls back to eager)."""
        return bool(self.graphs) and all(g.compiles for g in self.graphs)

    @property
    def partial(self) -> bool:
        """Some graph is split: its supported partitions compile, the rest runs eagerly."""
        return any(g.partial for g in self.graphs)

    @property
    def unsupported(self) -> dict[str, str]:
        """Every operator that makes a graph (or part of one) fall back, and why."""
        return {op: why for g in self.graphs for op, why in g.unsupported.items()}

    def of(self, kind: str) -> list[GraphReport]:
        """The reports of one kind of graph: "inference", "forward" or "backward"."""
        return [g for g in self.graphs if g.kind == kind]

    def __str__(self) -> str:
        lines = []
        for k, g in enumerate(self.graphs):
            head = f"graph {k} ({g.kind}): {sum(g.ops.values())} ATen ops: "
            if g.compiles:
                lines.append(head + "compiles")
            elif g.reason:
                lines.append(head + f"runs eagerly ({g.reason})")
            elif g.partial:
                sizes = " + ".join(str(sum(p.values())) for p in g.partitions)
                eager = ", ".join(f"{op} x{n}" for op, n in sorted(g.eager.items()))
                bad = ", ".join(f"{op} ({why})" for op, why in sorted(g.unsupported.items()))
                lines.append(
                    head + f"split: {len(g.partitions)} partitions compile ({sizes} ops); "
                    f"runs eagerly: {eager}; unsupported: {bad}"
                )
            else:
                bad = ", ".join(f"{op} ({why})" for op, why in sorted(g.unsupported.items()))
                lines.append(head + f"runs eagerly, unsupported: {bad}")
        return "\n".join(lines)

    __repr__ = __str__


def explain(model: Any, *inputs: Any, **kwargs: Any) -> Explanation:
    """Trace ``model(*inputs, **kwargs)`` as ``torch.compile`` would and say, per
    captured graph, whether it would compile, be split (its supported partitions
    compiled, the other nodes run eagerly) or fall back to eager, and which ATen
    operators are why.  Nothing is compiled.

    A model in training mode with a parameter that requires a gradient (or an
    input that requires one) is traced as a training step: the report has
    AOTAutograd's ``forward`` and ``backward`` graphs (``GraphReport.kind``).
    Anything else is traced under ``torch.no_grad()``: ``inference`` graphs.
    The model's buffers (BatchNorm's running statistics) and the random number
    generator are left as they were."""
    import contextlib

    import torch

    from .backend import _backend

    reports: list[GraphReport] = []

    def record(gm: Any, example_inputs: Any) -> Any:
        return _backend(gm, example_inputs, reports)

    buffers = list(model.buffers()) if isinstance(model, torch.nn.Module) else []
    saved = [b.detach().clone() for b in buffers]
    with contextlib.ExitStack() as scope:
        scope.enter_context(torch.random.fork_rng(devices=[]))
        if _trains(model, inputs, kwargs):
            scope.enter_context(torch.enable_grad())
            # AOTAutograd compiles a backward graph at its first backward() unless told
            # otherwise: compile (here: report) it with the forward
            scope.enter_context(
                torch._functorch.config.patch(force_non_lazy_backward_lowering=True)
            )
        else:
            scope.enter_context(torch.no_grad())
        try:
            torch.compile(model, backend=record, dynamic=False)(*inputs, **kwargs)
        finally:
            with torch.no_grad():
                for b, v in zip(buffers, saved):
                    b.copy_(v)
    return Explanation(reports)


def _trains(model: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``explain`` traces a training step (see there)."""
    import torch

    if isinstance(model, torch.nn.Module) and model.training:
        if any(p.requires_grad for p in model.parameters()):
            return True
    given = [*inputs, *kwargs.values()]
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in given)
