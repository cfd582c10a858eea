"""Forward and backward graphs: AOTAutograd with stripeml compiling both.

``trace(gm, example_inputs, state, reports)`` hands a dynamo graph to
``aot_module_simplified`` with PyTorch's core ATen decompositions (plus the
fixes below) and three compilers, each making a :class:`~.backend.CompiledGraph`:

* ``inference``: no gradient is needed (``torch.no_grad()``, or nothing
  requires one): parameters and buffers are constants of the program, bound per
  parameter version;
* ``forward`` and ``backward``: the two halves of the joint graph AOTAutograd
  partitions.  Every input is a runtime input here (parameters that require
  gradients change every optimizer step, batch-norm statistics every forward),
  so a training step compiles nothing after its first call.

Two changes to what PyTorch would trace, both so that a graph computes what eager
PyTorch computes:

* ``_scaled_dot_product_flash_attention_for_cpu`` decomposes to matmuls and a
  softmax that also return the true log-sum-exp (see
  :func:`~.lower_backward.flash_attention_decomposition`);
* oneDNN is switched off while tracing, so ``nn.LSTM``/``nn.GRU`` decompose to
  matmuls and gates instead of ``mkldnn_rnn_layer`` (whose opaque workspace a
  backward graph would need).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from . import lower_backward

_TABLE: dict[Any, Any] | None = None


def decompositions() -> dict[Any, Any]:
    """PyTorch's core ATen decompositions with the flash-attention fix."""
    global _TABLE
    if _TABLE is None:
        import torch
        from torch._decomp import core_aten_decompositions

        table = dict(core_aten_decompositions())
        aten = torch.ops.aten
        table[aten._scaled_dot_product_flash_attention_for_cpu.default] = (
            lower_backward.flash_attention_decomposition
        )
        _TABLE = table
    return _TABLE


@contextlib.contextmanager
def _without_onednn() -> Iterator[None]:
    import torch

    was = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(was)


def _first_saved() -> int | None:
    """Where the forward graph being compiled starts returning the tensors it saves
    for the backward (after the inputs it mutates, the user's outputs and their
    bases), from AOTAutograd's metadata; None when that is not known.  Only the
    backward reads those, so their strides are free (see ``CompiledGraph``)."""
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    first = getattr(meta, "num_forward", None)
    return first if isinstance(first, int) else None


def needs_grad(example_inputs: Sequence[Any]) -> bool:
    """Whether AOTAutograd will trace a joint (forward and backward) graph."""
    import torch

    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs
    )


def trace(gm: Any, example_inputs: Sequence[Any], state: list[bool], reports: Any) -> Any:
    """The callable ``torch.compile`` runs in place of ``gm``."""
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    from .backend import CompiledGraph

    def inference(fx: Any, _inputs: Any) -> Any:
        return make_boxed_func(CompiledGraph(fx, state, reports, kind="inference"))

    def forward(fx: Any, _inputs: Any) -> Any:
        n = sum(1 for node in fx.graph.nodes if node.op == "placeholder")
        saved = _first_saved()
        return make_boxed_func(
            CompiledGraph(fx, [False] * n, reports, kind="forward", free_outputs=saved)
        )

    def backward(fx: Any, _inputs: Any) -> Any:
        n = sum(1 for node in fx.graph.nodes if node.op == "placeholder")
        return make_boxed_func(CompiledGraph(fx, [False] * n, reports, kind="backward"))

    training = needs_grad(example_inputs)
    aot: Any = aot_module_simplified  # its compiler protocols are stricter than a function
    with _without_onednn() if training else contextlib.nullcontext():
        return aot(
            gm,
            example_inputs,
            fw_compiler=forward if training else inference,
            bw_compiler=backward,
            inference_compiler=inference,
            decompositions=decompositions(),
        )
