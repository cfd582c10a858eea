"""Values stored in a layout: what the layout-aware operator forms share.

A :class:`~.builder.Value` with ``layout`` set has the logical shape of the ONNX
tensor but is stored as ``logical.transpose(layout)`` (:mod:`.layout` says which
operators keep images channels-last, :data:`NHWC`).  Here: the physical view of
such a value, marking a result's layout, the NHWC view of an image input, and
:class:`Fallback`, which a layout-aware form raises when it does not apply
(:func:`.layout.dispatch` then writes the operator on logical inputs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

import numpy as np

from .builder import Builder, Node, Value

NHWC = (0, 2, 3, 1)


def physical(v: Value) -> Value:
    """A view of ``v`` as the Tile tensor it is stored as (no layout)."""
    if v.layout is None:
        return v
    return Value(v.name, v.phys_shape, v.dtype)


def with_layout(v: Value | None, layout: tuple[int, ...]) -> Value | None:
    """Mark a value computed on physical views as stored in ``layout``."""
    if v is None or v.const is not None:
        return v
    inv = tuple(int(i) for i in np.argsort(layout))
    return replace(v, shape=tuple(v.shape[i] for i in inv), layout=layout)


class Fallback(Exception):
    """The layout-aware form does not apply: use the op on logical inputs."""


def need(cond: bool) -> None:
    """Raise :class:`Fallback` unless ``cond``: a condition of the layout-aware form."""
    if not cond:
        raise Fallback


_T = TypeVar("_T")


def needed(value: _T | None) -> _T:
    """``value``, which the layout-aware form cannot do without."""
    if value is None:
        raise Fallback
    return value


def layout_of(node: Node) -> tuple[int, ...] | None:
    """The one layout of ``node``'s laid-out inputs (``None``: none is laid out)."""
    layouts = {v.layout for v in node.inputs if v is not None and v.layout is not None}
    need(len(layouts) <= 1)
    return layouts.pop() if layouts else None


def nhwc_input(b: Builder, x: Value) -> Value:
    """``x`` (logical NCHW) stored as NHWC: its physical view, transposing first
    when it is stored as NCHW."""
    if x.layout == NHWC:
        return physical(x)
    need(x.layout is None and x.const is None)
    n, c, h, w = x.shape
    t = b.contraction(
        f"{{out}}[n, h, w, c : {n}, {h}, {w}, {c}] = =({b.ref(x)}[n, c, h, w])",
        (n, h, w, c),
        x.dtype,
    )
    return t


def const_input(node: Node, i: int) -> np.ndarray | None:
    """``node``'s input ``i`` known when compiling (``None``: the input is absent)."""
    v = node.opt(i)
    if v is None:
        return None
    need(v.const is not None)
    return np.asarray(v.const)
