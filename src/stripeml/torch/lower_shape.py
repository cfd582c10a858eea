"""ATen views and shape operators -> ONNX-style nodes.

Rules of :data:`~.lower.RULES` for what moves or reinterprets elements without
computing: ``view reshape squeeze unsqueeze expand permute t transpose cat
slice select split unbind``, and the identities (``clone alias detach``,
dropout in eval mode; in training mode it is refused, see docs/pytorch.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .lower import (
    Lowering,
    Meta,
    Unsupported,
    _arg,
    _axis,
    _dtype,
    _shape,
    rule,
)


@rule("clone", "alias", "detach", "lift_fresh_copy", "contiguous", "dropout", "native_dropout")
def _identity(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    if kw.get("__op__") in ("dropout", "native_dropout") and _arg(args, kw, 2, "train", False):
        # the mask must be PyTorch's random draw (its generator, its order of
        # draws) for the gradients to be eager's: the node runs in PyTorch
        raise Unsupported(kw["__op__"], "in training mode: random mask drawn by PyTorch")
    if kw.get("__op__") == "native_dropout":
        return (args[0], None)
    return args[0]


@rule("view", "_unsafe_view", "reshape", "squeeze", "unsqueeze", "flatten", "view_as",
      "_reshape_alias", "unflatten")  # fmt: skip
def _reshape(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x = args[0]
    if x.shape == _shape(meta):
        return x
    return L.one("Reshape", x, L.ints(_shape(meta)), allowzero=1)


@rule("expand")
def _expand(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x = args[0]
    return x if x.shape == _shape(meta) else L.one("Expand", x, L.ints(_shape(meta)))


@rule("permute")
def _permute(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x = args[0]
    return L.one("Transpose", x, perm=[_axis(int(d), x.rank) for d in args[1]])


@rule("t", "numpy_T")
def _t(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x = args[0]
    return x if x.rank < 2 else L.one("Transpose", x, perm=list(range(x.rank))[::-1])


@rule("transpose")
def _transpose(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x = args[0]
    perm = list(range(x.rank))
    a, c = _axis(int(args[1]), x.rank), _axis(int(args[2]), x.rank)
    perm[a], perm[c] = perm[c], perm[a]
    return L.one("Transpose", x, perm=perm)


@rule("cat", "concat")
def _cat(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    dtype = _dtype(meta)
    parts = [L.cast(v, dtype) for v in args[0] if v.size or v.rank > 1]
    axis = _axis(int(_arg(args, kw, 1, "dim", 0)), len(_shape(meta)))
    return parts[0] if len(parts) == 1 else L.onnx("Concat", parts, 1, axis=axis)[0]


@rule("slice")
def _slice(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x = args[0]
    dim = _axis(int(_arg(args, kw, 1, "dim", 0)), x.rank)
    start = _arg(args, kw, 2, "start", None)
    end = _arg(args, kw, 3, "end", None)
    step = int(_arg(args, kw, 4, "step", 1))
    size = x.shape[dim]
    start = 0 if start is None else max(-size, min(int(start), size))
    end = size if end is None else max(-size, min(int(end), size))
    if (start, end, step) == (0, size, 1):
        return x
    return L.one("Slice", x, L.ints([start]), L.ints([end]), L.ints([dim]), L.ints([step]))


@rule("select")
def _select(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x = args[0]
    axis = _axis(int(args[1]), x.rank)
    return L.one("Gather", x, L.const(int(args[2]), np.int64), axis=axis)


@rule("split_with_sizes", "split")
def _split(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x, sizes = args[0], args[1]
    axis = _axis(int(_arg(args, kw, 2, "dim", 0)), x.rank)
    if isinstance(sizes, int):
        n = x.shape[axis]
        sizes = [min(sizes, n - s) for s in range(0, n, sizes)]
    outs = L.onnx("Split", [x, L.ints(sizes)], len(sizes), axis=axis)
    return tuple(outs)


@rule("unbind")
def _unbind(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x = args[0]
    axis = _axis(int(_arg(args, kw, 1, "dim", 0)), x.rank)
    return tuple(L.one("Gather", x, L.const(i, np.int64), axis=axis) for i in range(x.shape[axis]))
