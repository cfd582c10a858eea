"""ATen graph -> one Tile program, written by the ONNX frontend's op library.

Each ATen operator of an FX graph (traced by AOTAutograd with PyTorch's core
ATen decompositions) is translated to one or a few ONNX-style nodes
(:class:`~stripeml.onnx.graph.NodeInfo`: an ONNX operator name and its
attributes), which :func:`stripeml.onnx.importer.run_node` writes into a single
:class:`~stripeml.onnx.builder.Builder` exactly as it writes an ONNX model's
nodes: convolution, matmul, pooling, reductions and normalisations are the op
library's, written once.  Nodes whose inputs are all constants (the
parameters, transposed or reshaped) fold at import.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..onnx.builder import Builder, OnnxError, Value
from ..onnx.graph import NodeInfo
from ..onnx.importer import Folds, run_node

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


def to_numpy(t: Any) -> np.ndarray:
    """A CPU tensor's NumPy view (no copy; bfloat16 as ``ml_dtypes.bfloat16``)."""
    import torch

    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np_dtype(t.dtype))
    return t.numpy()


def from_numpy(a: np.ndarray) -> Any:
    """A tensor sharing ``a``'s memory (``ml_dtypes.bfloat16`` as ``torch.bfloat16``)."""
    import torch

    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


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


_UNARY = {
    "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log",
    "sqrt": "Sqrt", "abs": "Abs", "neg": "Neg", "erf": "Erf", "sin": "Sin", "cos": "Cos",
    "reciprocal": "Reciprocal", "floor": "Floor", "ceil": "Ceil", "sign": "Sign",
    "logical_not": "Not", "hardswish": "HardSwish", "isnan": "IsNaN",
}  # fmt: skip
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "maximum": "Max",
           "minimum": "Min", "pow": "Pow", "logical_and": "And", "logical_or": "Or"}  # fmt: skip
_COMPARE = {"eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater",
            "ge": "GreaterOrEqual", "ne": "Equal"}  # fmt: skip


def _unary(op: str) -> Rule:
    def write(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
        return L.one(op, L.cast(args[0], _dtype(meta)) if op != "IsNaN" else args[0])

    return write


def _binary(name: str, op: str) -> Rule:
    def write(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
        dtype = _dtype(meta)
        a, c = L.tensor(args[0], dtype), args[1]
        if name == "div" and kw.get("rounding_mode") is not None:
            raise Unsupported("div", f"rounding_mode={kw['rounding_mode']!r}")
        if name == "pow" and not isinstance(c, Value) and float(c) == 2.0:
            return L.one("Mul", a, a)
        alpha = _arg(args, kw, 2, "alpha", 1)
        if alpha != 1 and name in ("add", "sub"):
            c = L.one("Mul", L.tensor(c, dtype), L.const(alpha, dtype))
        return L.one(op, a, L.tensor(c, dtype))

    return write


def promoted(a: Any, c: Any) -> np.dtype:
    """The dtype PyTorch computes ``a`` and ``c`` (Values or Python numbers) in:
    its type promotion, where an integer tensor with a Python float is float32
    and a 0-d tensor does not widen a dimensioned one of its category (NumPy's
    rules differ on both)."""
    import torch

    def probe(x: Any) -> Any:
        if not isinstance(x, Value):
            return x
        return torch.from_numpy(np.zeros((1,) * min(x.rank, 1), x.dtype))

    return np_dtype(torch.result_type(probe(a), probe(c)))


def _compare(name: str, op: str) -> Rule:
    def write(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
        a, c = args[0], args[1]
        common = promoted(a, c)
        out = L.one(op, L.tensor(a, common), L.tensor(c, common))
        return L.one("Not", out) if name == "ne" else out

    return write


for _n, _o in _UNARY.items():
    RULES[_n] = _unary(_o)
for _n, _o in _BINARY.items():
    RULES[_n] = _binary(_n, _o)
for _n, _o in _COMPARE.items():
    RULES[_n] = _compare(_n, _o)


@rule("rsqrt")
def _rsqrt(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("Reciprocal", L.one("Sqrt", L.cast(args[0], _dtype(meta))))


@rule("remainder", "fmod")
def _remainder(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    """``remainder``: the sign of the divisor (Python's ``%``); ``fmod``: of the dividend."""
    dtype = _dtype(meta)
    a, c = L.tensor(args[0], dtype), L.tensor(args[1], dtype)
    if kw["__op__"] == "fmod":
        return L.one("Mod", a, c, fmod=1)
    if dtype.kind in "iu":
        return L.one("Mod", a, c, fmod=0)
    return L.one("Sub", a, L.one("Mul", L.one("Floor", L.one("Div", a, c)), c))


@rule("bitwise_not")
def _bitwise_not(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("Not" if args[0].dtype == np.bool_ else "BitwiseNot", args[0])


@rule("bitwise_and", "bitwise_or", "bitwise_xor", "logical_xor")
def _bitwise(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    """``&``, ``|``, ``^``: the logical operators on booleans, bitwise on integers."""
    name, dtype = kw["__op__"], _dtype(meta)
    kind = name.split("_", 1)[1]
    if name == "logical_xor":
        dtype = np.dtype(np.bool_)
        a, c = L.tensor(args[0], dtype), L.tensor(args[1], dtype)  # nonzero: True
    else:
        a, c = L.tensor(args[0], dtype), L.tensor(args[1], dtype)
    if dtype == np.bool_:
        return L.one(kind.capitalize(), a, c)
    if dtype.kind not in "iu":
        raise Unsupported(name, f"element type {dtype}")
    return L.one("Bitwise" + kind.capitalize(), a, c)


@rule("gelu")
def _gelu(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("Gelu", args[0], approximate=str(_arg(args, kw, 1, "approximate", "none")))


@rule("silu")
def _silu(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("Mul", args[0], L.one("Sigmoid", args[0]))


@rule("leaky_relu")
def _leaky(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("LeakyRelu", args[0], alpha=float(_arg(args, kw, 1, "negative_slope", 0.01)))


@rule("hardsigmoid")
def _hardsigmoid(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("HardSigmoid", args[0], alpha=1.0 / 6.0, beta=0.5)


@rule("clamp", "hardtanh", "clamp_min", "clamp_max")
def _clamp(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x, dtype, name = args[0], _dtype(meta), kw["__op__"]
    lo, hi = _arg(args, kw, 1, "min"), _arg(args, kw, 2, "max")
    if name == "hardtanh":
        lo = -1.0 if lo is None else lo
        hi = 1.0 if hi is None else hi
    elif name == "clamp_max":
        lo, hi = None, args[1]
    if isinstance(lo, Value) or isinstance(hi, Value):
        # tensor bounds (clamp.Tensor): Clip takes scalars only; PyTorch's
        # clamp is min(max(x, lo), hi), which broadcasts
        y = L.cast(x, dtype)
        if lo is not None:
            y = L.one("Max", y, L.tensor(lo, dtype))
        if hi is not None:
            y = L.one("Min", y, L.tensor(hi, dtype))
        return y
    return L.one(
        "Clip",
        L.cast(x, dtype),
        None if lo is None else L.tensor(lo, dtype),
        None if hi is None else L.tensor(hi, dtype),
    )


@rule("where")
def _where(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    dtype = _dtype(meta)
    return L.one("Where", args[0], L.tensor(args[1], dtype), L.tensor(args[2], dtype))


@rule("_to_copy", "convert_element_type", "to")
def _to_copy(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.cast(args[0], _dtype(meta))


@rule("clone", "alias", "detach", "lift_fresh_copy", "contiguous", "dropout", "native_dropout")
def _identity(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    if kw.get("__op__") in ("dropout", "native_dropout") and _arg(args, kw, 2, "train", False):
        raise Unsupported("dropout", "in training mode")
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


@rule("mm", "bmm", "matmul")
def _matmul(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("MatMul", args[0], args[1])


@rule("addmm")
def _addmm(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    beta = float(_arg(args, kw, 3, "beta", 1))
    alpha = float(_arg(args, kw, 4, "alpha", 1))
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
    # the op library's index is flat over the whole tensor, PyTorch's over the
    # spatial plane; both are the first tap (row-major) equal to the maximum
    y, flat = L.onnx("MaxPool", [x], 2, **attrs)
    assert y is not None and flat is not None
    plane = int(np.prod(x.shape[2:]))
    return (y, L.one("Mod", flat, L.const(plane, np.int64)))


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


def _reduce(op: str) -> Rule:
    def write(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
        x = L.cast(args[0], _dtype(meta)) if op != "ReduceMax" else args[0]
        dims = _arg(args, kw, 1, "dim", None)
        if isinstance(dims, int):
            dims = [dims]
        if not dims:
            dims = list(range(x.rank))
        keep = int(bool(_arg(args, kw, 2, "keepdim", False)))
        if x.rank == 0:
            return x
        axes = sorted({_axis(int(d), x.rank) for d in dims})
        return L.one(op, x, L.ints(axes), keepdims=keep)

    return write


@rule("max", "min")
def _max_min(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    """``max()``/``min()`` (everything), ``.dim`` (values; the indices are not
    produced) and ``.other`` (elementwise, as ``maximum``/``minimum``)."""
    name = kw["__op__"]
    other = args[1] if len(args) > 1 else kw.get("other", kw.get("dim"))
    if isinstance(other, Value):
        dtype = _dtype(meta)
        return L.one(
            "Max" if name == "max" else "Min", L.cast(args[0], dtype), L.cast(other, dtype)
        )
    y = _reduce("ReduceMax" if name == "max" else "ReduceMin")(L, args, kw, meta)
    return y if other is None else (y, None)


RULES["mean"] = _reduce("ReduceMean")
RULES["sum"] = _reduce("ReduceSum")
RULES["amax"] = _reduce("ReduceMax")
RULES["amin"] = _reduce("ReduceMin")


@rule("_softmax", "softmax")
def _softmax(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("Softmax", args[0], axis=int(args[1]))


@rule("_log_softmax", "log_softmax")
def _log_softmax(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    return L.one("LogSoftmax", args[0], axis=int(args[1]))


@rule("native_layer_norm")
def _layer_norm(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    x, shape, w, bias, eps = args[:5]
    shape = [int(s) for s in shape]
    if w is None:
        w = L.const(np.ones(shape, x.dtype))
    y = L.one("LayerNormalization", x, w, bias, axis=-len(shape), epsilon=float(eps))
    if not (L.wants(1) or L.wants(2)):
        return (y, None, None)
    # the statistics a backward graph reads (shape: the normalised axes kept as 1)
    axes = L.ints(range(x.rank - len(shape), x.rank))
    mean = L.one("ReduceMean", x, axes, keepdims=1)
    xc = L.one("Sub", x, mean)
    var = L.one("ReduceMean", L.one("Mul", xc, xc), axes, keepdims=1)
    rstd = L.one("Reciprocal", L.one("Sqrt", L.one("Add", var, L.const(float(eps), x.dtype))))
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


def _const_rule(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
    name = kw["__op__"]
    shape, dtype = _shape(meta), _dtype(meta)
    if name in ("zeros", "zeros_like", "new_zeros"):
        return L.const(np.zeros(shape, dtype))
    if name in ("ones", "ones_like", "new_ones"):
        return L.const(np.ones(shape, dtype))
    if name in ("full", "full_like", "new_full", "fill"):
        return L.const(np.full(shape, args[1], dtype))
    if name == "scalar_tensor":
        return L.const(np.asarray(args[0], dtype))
    if name == "arange":
        nums = [a for a in args if isinstance(a, (int, float))]
        start, end, step = (
            (0, nums[0], 1) if len(nums) == 1 else (*nums[:2], nums[2] if len(nums) > 2 else 1)
        )
        return L.const(np.arange(start, end, step).astype(dtype))
    raise Unsupported(name)


for _n in ("zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full",
           "full_like", "new_full", "scalar_tensor", "arange"):  # fmt: skip
    RULES[_n] = _const_rule

#: Operators with no value: checks PyTorch traces in.
IGNORED = frozenset({"_assert_async", "_assert_scalar", "sym_constrain_range_for_size",
                     "_assert_tensor_metadata", "sym_constrain_range"})  # fmt: skip

#: Python operators on sizes (their values come from the concrete trace).
SIZE_OPS = {operator.getitem}


def supported(target: Any) -> bool:
    name = op_name(target)
    return name in RULES or name in IGNORED or target is operator.getitem


def write(L: Lowering, target: Any, args: list[Any], kwargs: dict[str, Any], meta: Meta) -> Any:
    """The values ``target`` applied to ``args`` gives (raises :class:`Unsupported`)."""
    name = op_name(target)
    fn = RULES.get(name)
    if fn is None:
        raise Unsupported(full_name(target), "no translation")
    try:
        return fn(L, args, {**kwargs, "__op__": name}, meta)
    except Unsupported:
        raise
    except OnnxError as exc:
        raise Unsupported(full_name(target), str(exc)) from exc
    except (AttributeError, IndexError, TypeError, ValueError, KeyError) as exc:
        raise Unsupported(full_name(target), f"{type(exc).__name__}: {exc}") from exc


def _any_all(op: str) -> Rule:
    def write(L: Lowering, args: list[Any], kw: dict[str, Any], meta: Meta) -> Any:
        x = L.cast(args[0], np.dtype(np.float32))
        r = _reduce(op)(L, [x, *args[1:]], kw, _F32(meta))
        return L.cast(r, np.dtype(np.bool_))

    return write


class _F32:
    """``meta`` as float32 (the reduction of ``any``/``all`` runs on 0/1 floats)."""

    def __init__(self, meta: Meta):
        import torch

        self.shape, self.dtype = meta.shape, torch.float32


RULES["any"] = _any_all("ReduceMax")
RULES["all"] = _any_all("ReduceMin")
