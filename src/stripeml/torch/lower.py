"""ATen graph -> one Tile program, written by the ONNX frontend's op library.

Each ATen operator of an FX graph (traced by AOTAutograd with PyTorch's core
ATen decompositions) is translated to one or a few ONNX-style nodes
(:class:`~stripeml.onnx.graph.NodeInfo`: an ONNX operator name and its
attributes), which :func:`stripeml.onnx.importer.run_node` writes into a single
:class:`~stripeml.onnx.builder.Builder` exactly as it writes an ONNX model's
nodes: convolution, matmul, pooling, reductions and normalisations are the op
library's, written once.  Nodes whose inputs are all constants (the
parameters, transposed or reshaped) fold at import.

This module holds the machinery (:class:`Lowering`, the rule table
:data:`RULES`, :func:`write`) and the rules of the network operators (matmul,
convolution, pooling, normalisation, embedding); the elementwise operators,
reductions and constants are in ``lower_elementwise.py``, views and other shape
operators in ``lower_shape.py``, the operators training adds in
``lower_backward.py``.  Importing this module registers them all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..onnx.builder import Builder, OnnxError, Value
from ..onnx.graph import NodeInfo
from ..onnx.importer import Folds, run_node
from ..onnx.ops.conv import Window
from .lower_layout import before_reshape, max_pool_with_indices, per_channel, reduce_channels

#: The ai.onnx opset the translated nodes are written against.
OPSET = 21

#: NumPy dtype -> ONNX TensorProto element type (Cast's ``to``).
_ONNX_TYPES = {
    np.dtype("float32"): 1, np.dtype("uint8"): 2, np.dtype("int8"): 3, np.dtype("int16"): 5,
    np.dtype("int32"): 6, np.dtype("int64"): 7, np.dtype("bool"): 9, np.dtype("float16"): 10,
    np.dtype("float64"): 11,
}  # fmt: skip


class Unsupported(Exception):
    """An operator (or a use of one) this frontend does not translate."""

    def __init__(self, op: str, reason: str = ""):
        super().__init__(f"{op}: {reason}" if reason else op)
        self.op = op
        self.reason = reason
        #: the FX node whose translation failed (set by ``translate``; None: an
        #: input, the output, or not known)
        self.node: Any = None


def np_dtype(dtype: Any) -> np.dtype:
    """The NumPy dtype of a ``torch.dtype`` (``Unsupported`` for bfloat16, complex ...)."""
    import torch

    table = {
        torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
        torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8",
        torch.uint8: "uint8", torch.bool: "bool",
    }  # fmt: skip
    if dtype == torch.bfloat16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    name = table.get(dtype)
    if name is None:
        raise Unsupported("dtype", f"element type {dtype} is not supported")
    return np.dtype(name)


def op_name(target: Any) -> str:
    """``aten.add.Tensor`` -> ``add``; ``operator.getitem`` -> ``getitem``."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return str(schema.name).split("::", 1)[-1]
    return getattr(target, "__name__", str(target))


def full_name(target: Any) -> str:
    return str(target) if hasattr(target, "_schema") else op_name(target)


class Lowering:
    """Writes one FX graph's nodes into a Builder."""

    def __init__(self, b: Builder, folds: Folds):
        self.b = b
        self.env: dict[str, Value] = {}
        self.folds = folds
        self._k = 0
        self.where = ""
        #: which outputs of the node being written are read (None: all of them)
        self.used: set[int] | None = None
        #: plain images copied channels-last, by Tile name (``lower_layout.per_channel``)
        self._nhwc: dict[str, Value] = {}
        #: the plain values row-major reshapes made, by name: what they reshape
        self.reshaped: dict[str, Value] = {}

    def wants(self, i: int) -> bool:
        """Whether output ``i`` of the node being written is read."""
        return self.used is None or i in self.used

    def _key(self, v: Value) -> str:
        self._k += 1
        key = f"v{self._k}"
        self.env[key] = v
        return key

    def onnx(
        self, op: str, inputs: Sequence[Value | None], n_out: int = 1, **attrs: Any
    ) -> list[Value | None]:
        """Write ONNX operator ``op`` on ``inputs`` (``None``: omitted)."""
        if n_out == 1:  # (lower_layout.py: channels-last images, work before reshapes)
            done = reduce_channels(self.b, op, inputs, attrs)
            if done is not None:
                return [done]
            moved = before_reshape(op, inputs, self.reshaped)
            if moved is not None:
                y = self.onnx(op, moved, 1, **attrs)[0]
                x = next(v for v in inputs if v is not None and v.rank > 1)
                if y is not None and y.size == x.size:
                    return [self.reshape(y, x.shape)]
        inputs = per_channel(self.b, op, inputs, self._nhwc)
        names = ["" if v is None else self._key(v) for v in inputs]
        self._k += 1
        outs = [f"o{self._k}_{i}" for i in range(n_out)]
        run_node(
            self.b, NodeInfo(op, "", self.where, names, outs, attrs), self.env, OPSET, self.folds
        )
        return [self.env.get(o) for o in outs]

    def one(self, op: str, *inputs: Value | None, **attrs: Any) -> Value:
        out = self.onnx(op, inputs, 1, **attrs)[0]
        assert out is not None
        return out

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        """``x`` reshaped (row-major) to ``shape``, remembered in :attr:`reshaped`."""
        out = self.one("Reshape", x, self.ints(shape), allowzero=1)
        if out.name and out.name != x.name and out.layout is None and x.layout is None:
            self.reshaped[out.name] = x
        return out

    @staticmethod
    def const(value: Any, dtype: Any = None) -> Value:
        arr = np.asarray(value, dtype=dtype)
        return Value("", arr.shape, arr.dtype, arr)

    def ints(self, values: Sequence[int]) -> Value:
        return self.const(np.asarray([int(v) for v in values], dtype=np.int64))

    def cast(self, v: Value, dtype: np.dtype) -> Value:
        if (v.narrow or v.dtype) == dtype:
            return v
        to = 16 if np.dtype(dtype).name == "bfloat16" else _ONNX_TYPES.get(np.dtype(dtype))
        if to is None:
            raise Unsupported("cast", f"element type {dtype}")
        return self.one("Cast", v, to=to)

    def tensor(self, x: Any, dtype: np.dtype) -> Value:
        """``x`` (a Value or a Python number) as a value of ``dtype``."""
        if isinstance(x, Value):
            return self.cast(x, dtype)
        if isinstance(x, (bool, int, float)):
            return self.const(x, dtype)
        raise Unsupported("operand", f"an operand of type {type(x).__name__}")


# -- the translations --------------------------------------------------------
#: ATen name -> (lowering, the node's resolved args, kwargs, its output meta) -> result.
Meta = Any
Rule = Callable[[Lowering, list[Any], dict[str, Any], Meta], Any]
RULES: dict[str, Rule] = {}


def rule(*names: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn

    return register


def _arg(args: list[Any], kwargs: dict[str, Any], i: int, name: str, default: Any = None) -> Any:
    if i < len(args):
        return args[i]
    return kwargs.get(name, default)


def _shape(meta: Meta) -> tuple[int, ...]:
    return tuple(int(s) for s in meta.shape)


def _dtype(meta: Meta) -> np.dtype:
    return np_dtype(meta.dtype)


def _axis(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


# -- linear algebra, convolution, pooling ---------------------------------
@rule("mm", "bmm", "matmul")
def _matmul(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("MatMul", args[0], args[1])


@rule("addmm")
def _addmm(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    beta = float(_arg(args, kw, 3, "beta", 1))
    alpha = float(_arg(args, kw, 4, "alpha", 1))
    a, b = args[1], args[2]
    wide = all(v.dtype == np.float32 and v.narrow is None for v in (a, b, args[0]))
    if alpha == beta == 1.0 and a.rank == b.rank == 2 and wide:
        # MatMul reads a transposed operand (``t(W)`` of a linear layer's
        # parameter, an input of a training graph) through a view; Gemm would
        # copy it into the logical order first.  The bias add is its epilogue.
        return L.one("Add", L.one("MatMul", args[1], args[2]), args[0])
    return L.one("Gemm", args[1], args[2], args[0], alpha=alpha, beta=beta)


@rule("convolution")
def _convolution(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x, w, bias, stride, padding, dilation, transposed, _, groups = args[:9]
    if transposed:
        raise Unsupported("convolution", "transposed convolution")
    n = w.rank - 2
    pads = [int(p) for p in padding] * (2 if len(padding) == n else 1)
    return L.one(
        "Conv", x, w, bias, strides=[int(s) for s in stride], pads=pads,
        dilations=[int(d) for d in dilation], group=int(groups),
        kernel_shape=list(w.shape[2:]),
    )  # fmt: skip


def _pool_attrs(args: list[Any], kw: dict[str, Any], n: int) -> dict[str, Any]:
    def pair(v: Any, default: list[int]) -> list[int]:
        if v is None or (isinstance(v, (list, tuple)) and not v):
            return default
        v = [int(a) for a in v] if isinstance(v, (list, tuple)) else [int(v)]
        return v * n if len(v) == 1 else v

    kernel = pair(args[1], [1] * n)
    stride = pair(_arg(args, kw, 2, "stride"), kernel)
    padding = pair(_arg(args, kw, 3, "padding", 0), [0] * n)
    return {"kernel_shape": kernel, "strides": stride, "pads": padding * 2}


@rule("max_pool2d_with_indices", "max_pool2d", "max_pool1d", "max_pool3d",
      "max_pool3d_with_indices")  # fmt: skip
def _max_pool(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x = args[0]
    n = x.rank - 2
    attrs = _pool_attrs(args, kw, n)
    dil = _arg(args, kw, 4, "dilation", 1)
    dil = [int(d) for d in dil] if isinstance(dil, (list, tuple)) else [int(dil)]
    attrs["dilations"] = dil * n if len(dil) == 1 else dil
    attrs["ceil_mode"] = int(bool(_arg(args, kw, 5, "ceil_mode", False)))
    if not kw.get("__op__", "").endswith("with_indices"):
        return L.one("MaxPool", x, **attrs)
    if not L.wants(1):
        return (L.one("MaxPool", x, **attrs), None)
    if n == 2 and not attrs["ceil_mode"]:  # channels-last (stored NHWC): both laid out
        win = _window(x.shape[2:], attrs)
        done = max_pool_with_indices(L.b, x, win)
        if done is not None:
            return done
    # the op library's index is flat over the whole tensor, PyTorch's over the
    # spatial plane; both are the first tap (row-major) equal to the maximum
    y, flat = L.onnx("MaxPool", [x], 2, **attrs)
    assert y is not None and flat is not None
    plane = int(np.prod(x.shape[2:]))
    return (y, L.one("Mod", flat, L.const(plane, np.int64)))


def _window(spatial: Sequence[int], attrs: dict[str, Any]) -> Window:
    """The window of a pooling node's attributes (symmetric padding, floor mode)."""
    k, s, d = attrs["kernel_shape"], attrs["strides"], attrs["dilations"]
    r = len(spatial)
    p = attrs["pads"][:r]
    out = [(spatial[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(r)]
    return Window(list(k), list(s), list(d), list(p), list(p), out)


@rule("avg_pool2d", "avg_pool1d", "avg_pool3d")
def _avg_pool(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x = args[0]
    attrs = _pool_attrs(args, kw, x.rank - 2)
    attrs["ceil_mode"] = int(bool(_arg(args, kw, 4, "ceil_mode", False)))
    attrs["count_include_pad"] = int(bool(_arg(args, kw, 5, "count_include_pad", True)))
    if _arg(args, kw, 6, "divisor_override") is not None:
        raise Unsupported("avg_pool2d", "divisor_override")
    return L.one("AveragePool", x, **attrs)


@rule("_adaptive_avg_pool2d", "adaptive_avg_pool2d")
def _adaptive(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x, size = args[0], [int(s) for s in args[1]]
    if size == [1, 1]:
        return L.one("GlobalAveragePool", x)
    if tuple(size) == x.shape[2:]:
        return x
    spatial = x.shape[2:]
    if len(size) == len(spatial) and all(o > 0 and n % o == 0 for n, o in zip(spatial, size)):
        # evenly divided: PyTorch's windows are then the same size and do not overlap
        kernel = [n // o for n, o in zip(spatial, size)]
        return L.one(
            "AveragePool", x, kernel_shape=kernel, strides=kernel, pads=[0] * 2 * len(size)
        )
    raise Unsupported(
        "adaptive_avg_pool2d", f"output size {size} does not divide the input's {list(spatial)}"
    )


@rule("native_layer_norm")
def _layer_norm(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x, shape, w, bias, eps = args[:5]
    shape = [int(s) for s in shape]
    if w is None:
        w = L.const(np.ones(shape, x.dtype))
    if not (L.wants(1) or L.wants(2)):
        y = L.one("LayerNormalization", x, w, bias, axis=-len(shape), epsilon=float(eps))
        return (y, None, None)
    # the statistics a backward graph reads (shape: the normalised axes kept as 1),
    # and the result from them (not computed twice)
    axes = L.ints(range(x.rank - len(shape), x.rank))
    mean = L.one("ReduceMean", x, axes, keepdims=1)
    xc = L.one("Sub", x, mean)
    var = L.one("ReduceMean", L.one("Mul", xc, xc), axes, keepdims=1)
    rstd = L.one("Reciprocal", L.one("Sqrt", L.one("Add", var, L.const(float(eps), x.dtype))))
    y = L.one("Mul", L.one("Mul", xc, rstd), w)
    if bias is not None:
        y = L.one("Add", y, bias)
    return (y, mean, rstd)


@rule("_native_batch_norm_legit_no_training")
def _batch_norm(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x, w, bias, mean, var, _, eps = args[:7]
    c = x.shape[1]
    w = w if w is not None else L.const(np.ones(c, x.dtype))
    bias = bias if bias is not None else L.const(np.zeros(c, x.dtype))
    y = L.one("BatchNormalization", x, w, bias, mean, var, epsilon=float(eps))
    return (y, None, None)


@rule("embedding")
def _embedding(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("Gather", args[0], args[1], axis=0)


#: Operators with no value: checks PyTorch traces in.
IGNORED = frozenset({"_assert_async", "_assert_scalar", "sym_constrain_range_for_size",
                     "_assert_tensor_metadata", "sym_constrain_range"})  # fmt: skip


def write(L: Lowering, target: Any, args: list[Any], kwargs: dict[str, Any], meta: Meta) -> Any:
    """The values ``target`` applied to ``args`` gives (raises :class:`Unsupported`)."""
    name = op_name(target)
    fn = RULES.get(name)
    if fn is None:
        raise Unsupported(full_name(target), "no translation")
    try:
        return fn(L, args, {**kwargs, "__op__": name}, meta)
    except Unsupported as exc:
        if exc.op == name:  # a rule naming its own operator: report it by its ATen name
            exc.op = full_name(target)
        raise
    except OnnxError as exc:
        raise Unsupported(full_name(target), str(exc)) from exc
    except (AttributeError, IndexError, TypeError, ValueError, KeyError) as exc:
        raise Unsupported(full_name(target), f"{type(exc).__name__}: {exc}") from exc


# the other rule modules (they import this one, so they come last)
from . import lower_backward, lower_elementwise, lower_shape  # noqa: E402, F401
