"""Operators whose output's shape depends on input values: NonZero, Unique,
NonMaxSuppression, Compress.

A Tile program has static shapes.  When such an operator's inputs are known
when compiling, it is folded like any other node (its result is a constant).
When they are computed at run time, the writer raises
:class:`~..builder.NeedsHost`, and the importer splits the model there (see
``importer.py``, "Run-time sizes"): the graph up to the node is compiled and
run, the node runs on the host with the function given here, and the rest of
the graph is compiled for the sizes the node produced, once per distinct set
of sizes (cached like any signature).  That is the protocol: compute the
values that decide the size, then the size, then the rest.

``NonZero`` and ``Compress`` run in NumPy; ``Unique`` and
``NonMaxSuppression`` run through onnx's reference evaluator (the ONNX
definition itself, in Python: correct, and slow on large inputs).  A
``Compress`` whose condition is known when compiling has a static shape and
is a gather with constant indices, compiled with the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..builder import Builder, NeedsHost, Node, Value
from ..registry import op
from ._util import axis as norm_axis
from .data import gather
from .shape import reshape


def _known(n: Node) -> list[np.ndarray] | None:
    """Every present input's value, if all are known when compiling."""
    if any(v is not None and v.const is None for v in n.inputs):
        return None
    return [np.asarray(v.const) if v is not None else None for v in n.inputs]  # type: ignore[misc]


def _consts(arrays: Sequence[np.ndarray]) -> list[Value | None]:
    return [Value("", a.shape, a.dtype, a) for a in arrays]


def _nonzero(n: Node, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x = xs[0]
    if x.ndim == 0:
        return [np.empty((0, int(np.count_nonzero(x))), dtype=np.int64)]
    return [np.vstack(np.nonzero(x)).astype(np.int64)]


@op("NonZero")
def non_zero(b: Builder, n: Node) -> list[Value | None]:
    """NonZero: the indices of the non-zero elements; sized at run time (see the module doc)."""
    known = _known(n)
    if known is not None:
        return _consts(_nonzero(n, known))
    raise NeedsHost(n, _nonzero, [np.dtype(np.int64)])


def _reference(n: Node, xs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """``n`` run by onnx's reference evaluator on ``xs`` (a one-node model)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    from .functions import _node_proto

    proto = _node_proto(n)
    inputs = []
    for k, (name, x) in enumerate(zip(proto.input, xs)):
        if name and x is not None:
            elem = helper.np_dtype_to_tensor_dtype(x.dtype)
            inputs.append(helper.make_tensor_value_info(name, elem, list(x.shape)))
        elif name:
            proto.input[k] = ""
    outputs = [helper.make_tensor_value_info(o, 0, None) for o in proto.output]
    graph = helper.make_graph([proto], "host", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", n.opset)])
    feeds = {name: x for name, x in zip(proto.input, xs) if name and x is not None}
    try:
        got = ReferenceEvaluator(model).run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - the reference's own checks of bad inputs
        from ..builder import OnnxError

        raise OnnxError(f"{n.where()}: {exc}") from None
    return [np.asarray(g) for g in got]


def _unique_types(n: Node) -> list[np.dtype]:
    x = n.input(0)
    return [x.dtype] + [np.dtype(np.int64)] * 3


@op("Unique")
def unique(b: Builder, n: Node) -> list[Value | None]:
    """Unique: sorted or first-seen order, any axis, the three index outputs; sized at run time."""
    known = _known(n)
    if known is not None:
        return _consts(_reference(n, known))
    raise NeedsHost(n, _reference, _unique_types(n))


@op("NonMaxSuppression")
def non_max_suppression(b: Builder, n: Node) -> list[Value | None]:
    """NonMaxSuppression: as the ONNX reference evaluates it, on the host; sized at run time."""
    known = _known(n)
    if known is not None:
        return _consts(_reference(n, known))
    raise NeedsHost(n, _reference, [np.dtype(np.int64)])


def _compress(n: Node, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    ax = n.attr("axis")
    return [np.compress(np.asarray(xs[1]).astype(bool), xs[0], axis=ax)]


@op("Compress")
def compress(b: Builder, n: Node) -> list[Value | None]:
    """Compress: a gather with constant indices when the condition is known; else sized at run time."""
    x, cond = n.input(0), n.input(1)
    if cond.rank != 1:
        raise n.error(f"the condition must be a vector, got shape {list(cond.shape)}")
    ax: Any = n.attr("axis")
    length = x.size if ax is None else x.shape[norm_axis(n, int(ax), x.rank)]
    if cond.shape[0] > length:
        raise n.error(f"the condition has {cond.shape[0]} entries for {length} slices")
    if cond.const is None:
        raise NeedsHost(n, _compress, [x.dtype])
    if x.const is not None:
        return _consts(_compress(n, [np.asarray(x.const), np.asarray(cond.const)]))
    picked = np.nonzero(np.asarray(cond.const).astype(bool))[0].astype(np.int64)
    if ax is None:
        x, ax = reshape(b, x, (x.size,)), 0
    idx = Value("", picked.shape, picked.dtype, picked)
    return gather(b, replace(n, op_type="Gather", inputs=(x, idx), attrs={"axis": int(ax)}))


# -- run on the host through the reference ---------------------------------------
# These are not data-dependent in size, but they are not tensor algebra either:
# n-gram counting over token sequences, and random draws whose values are those
# of NumPy's generator that the ONNX definition (and its seeded tests) use.  They
# run on the host like the operators above (the model is split at them), through
# onnx's reference evaluator.


def _attr_dtype(n: Node, default: np.dtype) -> np.dtype:
    from onnx import helper

    code = n.attr("dtype")
    if code is None:
        return default
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(int(code)))
    except Exception:  # noqa: BLE001 - unknown enum values
        raise n.error(f"dtype {code} is not supported") from None


@op("TfIdfVectorizer")
def tfidf_vectorizer(b: Builder, n: Node) -> list[Value | None]:
    """TfIdfVectorizer: n-gram counts (TF, IDF, TFIDF) of integer token sequences, on the host."""
    known = _known(n)
    if known is not None:
        return _consts(_reference(n, known))
    if n.input(0).dtype.kind not in "iu":
        raise n.error("only integer token sequences are supported (strings are not tensors here)")
    raise NeedsHost(n, _reference, [np.dtype(np.float32)])


@op("Bernoulli", foldable=False)
def bernoulli(b: Builder, n: Node) -> list[Value | None]:
    """Bernoulli: random draws with the input's probabilities, NumPy's generator (seeded by ``seed``), on the host."""
    x = n.input(0)
    raise NeedsHost(n, _reference, [_attr_dtype(n, x.narrow or x.dtype)])


@op("RandomUniformLike", foldable=False)
def random_uniform_like(b: Builder, n: Node) -> list[Value | None]:
    """RandomUniformLike: uniform draws of the input's shape, NumPy's generator (seeded by ``seed``), on the host."""
    x = n.input(0)
    raise NeedsHost(n, _reference, [_attr_dtype(n, x.narrow or x.dtype)])
