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
    shape = _shape(meta)
    if x.shape == shape:
        return x
    if x.const is None and x.name:
        fine = _common_refinement(x.shape, shape)
        if fine is not None:
            # neither shape refines the other (attention's heads: [64, 4, 256] to
            # [64, 16, 64] and back): a Tile reshape would be a copy on the host
            # (after one materialising a permuted value); instead one copy kernel
            # into the shape refining both, whose merge into ``shape``
            # ``alias_reshape`` turns into the kernel writing it directly
            x = _split_copy(L, x, fine)
    return L.reshape(x, shape)


def _common_refinement(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The coarsest shape that refines both ``a`` and ``b`` (row-major), when
    neither refines the other and there is one; else None."""
    if 0 in a or 0 in b:
        return None

    def cuts(shape: tuple[int, ...]) -> set[int]:
        out, p = set(), 1
        for d in shape:
            p *= d
            out.add(p)
        return out

    ca, cb = cuts(a), cuts(b)
    if ca <= cb or cb <= ca:  # one refines the other already
        return None
    sizes, prev = [], 1
    for c in sorted(ca | cb):
        if c % prev:
            return None
        sizes.append(c // prev)
        prev = c
    return tuple(sizes)


def _split_copy(L: Lowering, x: Any, fine: tuple[int, ...]) -> Any:
    """``x`` copied into shape ``fine`` (which refines it): one contraction, each
    of ``x``'s dimensions an affine merge of consecutive dimensions of ``fine``
    (read where it is stored, when it is stored permuted)."""
    idx = [f"i{j}" for j in range(len(fine))]
    access, j = [], 0
    for d in x.shape:
        terms: list[int] = []
        size = 1
        while size < d or (not terms and j < len(fine)):
            terms.append(j)
            size *= fine[j]
            j += 1
        parts, w = [], 1
        for t in reversed(terms):
            parts.append(idx[t] if w == 1 else f"{w} * {idx[t]}")
            w *= fine[t]
        access.append(" + ".join(reversed(parts)))
    if x.layout is not None:  # (stored permuted: its storage's dimensions in that order)
        access = [access[d] for d in x.layout]
    sizes = ", ".join(str(n) for n in fine)
    return L.b.contraction(
        f"{{out}}[{', '.join(idx)} : {sizes}] = =({L.b.ref(x)}[{', '.join(access)}])",
        fine,
        x.dtype,
    )


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
