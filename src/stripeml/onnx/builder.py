"""Building one Tile program for a whole ONNX graph.

The importer walks the graph in order and calls each node's op function (see
``ops/``) with a :class:`Builder` and a :class:`Node`.  An op function returns
one :class:`Value` per node output.  A value is either

* a **tensor of the Tile program**, produced by a Tile statement the op emitted
  (``b.eltwise``, ``b.contraction``, ``b.statement``), or
* a **constant** (``Value.const`` holds the array): initializers, ``Constant``
  nodes, shapes, and any node whose inputs are all constants (the importer
  folds those by running the op on the interpreter).

Constants that a Tile statement reads (``b.ref(v)``) become parameters of the
generated function; the importer passes their arrays at every call, so weights
are not baked into the source.  Small integer scalars are better inlined by
the op as literals.

Values and nodes are immutable (frozen dataclasses; a change is a new object,
``dataclasses.replace``).  They compare and hash by identity: the builder and
the importer key tables by the value object (the name a constant gets as a
parameter, a graph input's position), so a replaced value is a different one.

Every op states the shape and dtype of each tensor it emits.  After the last
node, :meth:`Builder.finish` binds the generated program with the Tile
frontend and checks that every declared shape and dtype agrees with what Tile
infers, so a wrong shape rule in an op is an internal error, never a silent
wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import InternalError, StripeError
from ..ir import dtypes

if TYPE_CHECKING:
    from ..tile.ast import Function as TileFunction


class OnnxError(StripeError):
    """A model the importer cannot compile (unsupported op, attribute, shape...)."""


#: The most elements a tensor of an imported model may have (graph inputs, and
#: every tensor an operator makes): 2**40 elements is 4 TiB of float32, beyond
#: any machine's memory, so a larger shape is a broken or hostile model.
MAX_ELEMENTS = 2**40


class BadShape(OnnxError):
    """A shape no tensor can have (a negative dimension, too many elements); the
    importer adds the node that asked for it."""


class NeedsHost(OnnxError):
    """An operator whose output's shape depends on the values of inputs known only
    at run time (``NonZero``, ``Unique`` ...): the importer compiles the graph up
    to it, runs it on the host, and compiles the rest for the sizes it gives."""

    def __init__(self, node: Node, host: HostFn, dtypes: Sequence[np.dtype]):
        super().__init__(f"{node.where()}: its output's shape depends on run-time values")
        self.node = node
        self.host = host
        self.dtypes = tuple(dtypes)


def tile_dtype(dtype: Any) -> str:
    """The Tile/Stripe name of a NumPy dtype (``f32``, ``i64`` ...)."""
    name = dtypes.from_numpy(np.dtype(dtype))
    if name is None:
        raise OnnxError(f"element type {np.dtype(dtype)} is not supported")
    return name


#: The ``ml_dtypes`` types held in a wider Tile type (see narrow.py).
NARROW_NAMES = frozenset(
    {"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
     "float4_e2m1fn", "float8_e8m0fnu", "int4", "uint4", "int2", "uint2"}
)  # fmt: skip


_NARROW: dict[object, bool] = {}  # dtype -> its name is in NARROW_NAMES


def _is_narrow_name(dtype: Any) -> bool:
    """Whether ``dtype``'s name is one of :data:`NARROW_NAMES` (remembered per dtype:
    a dtype's ``name`` is computed in Python at each read, and an import makes
    a Value per tensor and per statement)."""
    try:
        found = _NARROW.get(dtype)
    except TypeError:  # an unhashable dtype-like
        return np.dtype(dtype).name in NARROW_NAMES
    if found is None:
        found = _NARROW[dtype] = np.dtype(dtype).name in NARROW_NAMES
    return found


@dataclass(frozen=True, eq=False)
class Value:
    """One ONNX tensor as the importer sees it."""

    name: str  # Tile tensor name; "" for a constant (see Builder.ref)
    shape: tuple[int, ...]
    dtype: np.dtype
    const: np.ndarray | None = None
    # Stored as ``logical.transpose(layout)`` when set (see layout.py); ``shape``
    # is always the logical (ONNX) shape.
    layout: tuple[int, ...] | None = None
    # The ONNX element type when it is a narrow one (bfloat16, float8, int4 ...):
    # ``dtype`` is then the wider type holding its values (see narrow.py).
    narrow: np.dtype | None = None

    def __post_init__(self) -> None:
        if self.narrow is None and _is_narrow_name(self.dtype):
            from .narrow_types import FORMATS

            fmt = FORMATS[np.dtype(self.dtype)]
            object.__setattr__(self, "narrow", fmt.dtype)
            object.__setattr__(self, "dtype", fmt.wide)
            if self.const is not None:
                object.__setattr__(self, "const", np.asarray(self.const).astype(fmt.wide))

    @property
    def phys_shape(self) -> tuple[int, ...]:
        """The shape of the Tile tensor that stores this value."""
        if self.layout is None:
            return self.shape
        return tuple(self.shape[i] for i in self.layout)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def is_const(self) -> bool:
        return self.const is not None


#: An operator run on the host: (the node, its input arrays) -> its output arrays.
HostFn = Callable[["Node", Sequence[np.ndarray]], "list[np.ndarray]"]


class Nested(Protocol):
    """What the importer offers op writers that write other nodes in a node's place;
    ``top``: the node is in the main graph (not in a branch or a function body)."""

    top: bool

    def run(
        self,
        b: Builder,
        proto: Any,
        k: int,
        env: MutableMapping[str, Value],
        opset: int,
        where: str,
    ) -> None:
        """Write ``NodeProto`` ``proto`` (the ``k``-th of its body) into ``b``,
        reading and binding values in ``env``; ``where`` prefixes messages."""

    def tensor(self, proto: Any, where: str) -> np.ndarray:
        """The value of ``TensorProto`` ``proto`` (a subgraph's initializer)."""

    def compile_model(self, model: Any, target: Any) -> Any:
        """``model`` (a ``ModelProto``: a loop's body) compiled for ``target``, as
        ``stripeml.onnx.compile`` does."""


@dataclass(frozen=True, eq=False)
class Node:
    """One ONNX node, with its inputs resolved to values (``None`` for an
    omitted optional input)."""

    op_type: str
    name: str
    inputs: tuple[Value | None, ...]
    attrs: dict[str, Any]
    opset: int
    n_outputs: int
    domain: str = ""
    # The values in scope where the node stands, by ONNX name: what a subgraph
    # (an ``If``'s branches) may read from the graph around it.
    scope: Mapping[str, Value] | None = None
    # How the importer writes nodes of a subgraph or a function body in place of
    # this one (``ops/control.py``, ``ops/functions.py``); ``None`` outside it.
    nested: Nested | None = None

    def where(self) -> str:
        return f"node {self.name!r} ({self.op_type})" if self.name else f"{self.op_type} node"

    def error(self, message: str) -> OnnxError:
        return OnnxError(f"{self.where()}: {message}")

    def input(self, i: int) -> Value:
        """Input ``i``, which must be present."""
        v = self.inputs[i] if i < len(self.inputs) else None
        if v is None:
            raise self.error(f"input {i} is required")
        return v

    def opt(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def const_input(self, i: int, what: str = "") -> np.ndarray | None:
        """The value of optional input ``i`` (``None`` when omitted); it must be
        known at compile time (a constant, or a specialised graph input)."""
        v = self.opt(i)
        if v is None:
            return None
        if v.const is None:
            raise self.error(
                f"input {i}{' (' + what + ')' if what else ''} must be known when compiling "
                "(a constant or initializer); a value computed at run time is not supported"
            )
        return v.const

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)


@dataclass
class Builder:
    """Collects the statements and parameters of the generated Tile function."""

    params: list[Value] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    declared: dict[str, Value] = field(default_factory=dict)
    _counter: int = 0
    _const_names: dict[Value, str] = field(default_factory=dict)  # constant -> parameter
    _logical: dict[Value, Value] = field(default_factory=dict)

    # -- names ---------------------------------------------------------------
    def fresh(self, hint: str = "T") -> str:
        self._counter += 1
        return f"{hint}{self._counter}"

    def ref(self, v: Value) -> str:
        """The Tile name to use for ``v``; a constant becomes a parameter (once)."""
        name = self.tile_name(v)
        if name:
            return name
        if v.const is None:
            raise InternalError("a value with neither a Tile name nor a constant")
        name = self._const_names[v] = self.fresh("C")
        self.params.append(v)
        self.declared[name] = v
        return name

    def tile_name(self, v: Value) -> str:
        """``v``'s name in the Tile program: its own, the parameter name of a
        constant already read (:meth:`ref`), or ``""`` (a constant Tile does not read)."""
        return v.name or self._const_names.get(v, "")

    def input(self, shape: Sequence[int], dtype: Any, hint: str = "X") -> Value:
        """A runtime input of the generated function (an empty tensor is fully
        known from its shape: it becomes a constant)."""
        shape = tuple(int(s) for s in shape)
        if 0 in shape:
            return Value("", shape, np.dtype(dtype), np.zeros(shape, dtype))
        v = Value(self.fresh(hint), shape, np.dtype(dtype))
        self.params.append(v)
        self.declared[v.name] = v
        return v

    def logical(self, v: Value) -> Value:
        """``v`` stored in its logical layout (a transpose, once, if needed)."""
        if v.layout is None:
            return v
        done = self._logical.get(v)
        if done is None:
            idx = [f"i{k}" for k in range(v.rank)]
            sizes = ", ".join(str(s) for s in v.shape)
            stored = ", ".join(idx[p] for p in v.layout)
            done = self.contraction(
                f"{{out}}[{', '.join(idx)} : {sizes}] = =({v.name}[{stored}])", v.shape, v.dtype
            )
            self._logical[v] = done
        return done

    # -- statements ----------------------------------------------------------
    def _new(self, shape: Sequence[int], dtype: Any) -> Value:
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise BadShape(f"negative dimension in shape {shape}")
        count = int(np.prod(shape, dtype=object))
        if count > MAX_ELEMENTS:
            raise BadShape(f"shape {shape} has {count} elements, more than {MAX_ELEMENTS}")
        if 0 in shape:  # no elements: the value is known, no statement is needed
            return Value("", shape, np.dtype(dtype), np.zeros(shape, dtype))
        v = Value(self.fresh(), shape, np.dtype(dtype))
        self.declared[v.name] = v
        return v

    def eltwise(self, expr: str, shape: Sequence[int], dtype: Any) -> Value:
        """``T = expr;`` (NumPy broadcasting); returns ``T``."""
        v = self._new(shape, dtype)
        if v.const is None:
            self.statements.append(f"{v.name} = {expr};")
        return v

    def contraction(self, template: str, shape: Sequence[int], dtype: Any) -> Value:
        """A contraction whose text is ``template`` with ``{out}`` naming the
        output: ``"{out}[i : 4] = +(X[i, k])"``."""
        v = self._new(shape, dtype)
        if v.const is None:
            self.statements.append(template.format(out=v.name) + ";")
        return v

    def statement(self, template: str, shape: Sequence[int], dtype: Any) -> Value:
        """Any statement producing one tensor, ``{out}`` naming it (for
        ``reshape``/``gather`` builtins)."""
        return self.contraction(template, shape, dtype)

    def comment(self, text: str) -> None:
        self.statements.append("// " + text.replace("\n", " "))

    # -- the program ---------------------------------------------------------
    def source(self, outputs: Sequence[str]) -> str:
        def decl(v: Value) -> str:
            return f"{self.tile_name(v)}[{', '.join(str(s) for s in v.shape)}]"

        head = f"function ({', '.join(decl(p) for p in self.params)}) -> ({', '.join(outputs)}) {{"
        body = "\n".join("    " + s for s in self.statements)
        return f"{head}\n{body}\n}}\n"

    def check(self, fn: TileFunction) -> None:
        """Bind the generated program (``fn``: its parsed and checked Tile syntax
        tree, ``Function.ast``) and compare every tensor's shape and dtype with
        what the ops declared."""
        from ..tile.bind import bind

        sig = tuple((p.shape, str(p.dtype)) for p in self.params)
        binding = bind(fn, sig)
        for name, info in binding.tensors.items():
            v = self.declared.get(name)
            if v is None:
                continue
            if tuple(info.shape) != v.phys_shape or info.dtype != tile_dtype(v.dtype):
                raise InternalError(
                    f"op library bug: {name} declared {v.phys_shape} {v.dtype}, "
                    f"Tile infers {tuple(info.shape)} {info.dtype}"
                )


def frozen(value: Any) -> np.ndarray:
    """A constant as a read-only array: the importer's own arrays (initializers,
    folded values, rearranged weights) are marked read-only, so ``compile``
    binds them without a copy (one copy of a model's weights, not one per
    signature)."""
    arr = np.asarray(value)
    if arr.flags.writeable and arr.base is None:
        arr.setflags(write=False)
    return arr
