"""ONNX graph -> one Tile program -> a compiled callable.

:func:`compile` returns an :class:`OnnxFunction`.  Like ``stripeml.compile``
it specialises on each call signature: the input shapes and dtypes, plus the
*values* of graph inputs that some op needs at compile time (a ``Reshape``
shape fed as an input, say).  For each signature the importer

1. walks the nodes in order (:func:`run_node`), calling each op's Tile writer
   (``ops/``, or its layout-aware form, ``layout.py``); nodes whose inputs are
   all constants are folded (run on the interpreter once, at import:
   ``folding.py``), so shape computations and weight preprocessing never
   reach the generated program;
2. checks the generated program's shapes against the ops' own shape rules
   (:meth:`Builder.check`);
3. compiles it with ``stripeml.compile`` for the target, so fusion and memory
   planning see the whole graph.

Initializers and folded constants that the program reads become constant
parameters of the Tile function (``stripeml.compile(..., constants=...)``):
bound when compiling, marked ``const`` in the program, so what the program
computes from them alone (a weight laid out for the register tiles) the CPU
backend computes once.  Weights are not copied into the source.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import gc_pause
from ..errors import StripeError
from ..exact_args import exact_arrays
from ..phases import phase
from . import lengths, validated
from .builder import BadShape, Builder, HostFn, NeedsHost, Node, OnnxError, Value, frozen
from .folding import Folds, write
from .graph import Graph, GraphInput, NodeInfo, call_arrays, live_values, node_info, tensor_value
from .layout_conv import fuse_conv_bn
from .load import full_model, start_reading
from .narrow import MOVES_DATA, NARROW_AWARE, narrowed
from .narrow_types import is_narrow, wide_dtype
from .ops import lookup
from .qdq import fuse_qdq

if TYPE_CHECKING:
    from ..api import Executable, Function

Progress = Callable[[str], None]


# What a call is specialised on: per graph input its shape and dtype (and, for
# inputs some op needs at compile time, its bytes).
_Key = tuple[tuple[object, ...], ...]
# Per graph input its shape and dtype.
_Signature = tuple[tuple[tuple[int, ...], np.dtype], ...]


@dataclass
class Specialised:
    """The program for one call signature."""

    source: str
    function: Function | None  # None when every output is known
    inputs: list[int]  # per Tile parameter a call passes: the graph input's index
    outputs: list[tuple[str, Any]]  # ("tile", name) or ("const", array) per graph output
    # A model split at an operator sized at run time (see "Run-time sizes" below):
    # ``outputs`` then lists the values the rest needs, ``host`` the operator,
    # and ``rest`` the rest of the graph, compiled per the sizes it is given.
    host: Split | None = None
    # per entry of ``outputs``: its narrow ONNX type (bfloat16 ...), else None;
    # None when no output is narrow (see narrow.py)
    narrow: list[np.dtype | None] | None = None
    # every Tile tensor's shape and dtype (lengths.py compares two imports')
    shapes: dict[str, tuple[int, ...]] | None = None
    dtypes: dict[str, np.dtype] | None = None
    view: lengths.View | None = None  # a length run through a longer one's program

    def call_args(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The Tile function's arguments for these graph inputs (the weights and
        other constants are bound in the function; a narrow type's array is
        given in the wider type that holds it)."""
        if self.view is not None:
            return self.view.call_args(arrays)
        out = [arrays[k] for k in self.inputs]
        return [a.astype(wide_dtype(a.dtype)) if is_narrow(a.dtype) else a for a in out]


@dataclass
class Split:
    """Where a model is split: the node run on the host, what feeds it and the
    rest of the graph (each ``feeds`` entry: ``("out", k)``, the k-th output of
    the compiled part, or ``("host", k)``, the node's k-th output)."""

    node: Node
    run: HostFn
    node_inputs: list[int | None]  # per input of the node: its position in ``outputs``
    rest: OnnxFunction
    feeds: list[tuple[str, int]]  # per input of ``rest``
    names: list[str]  # per entry of ``outputs``: its ONNX name (the node's scope at run time)


class OnnxFunction:
    """A compiled ONNX model: call it with NumPy arrays, positional in graph
    input order or by input name.  One output gives an array, several a tuple."""

    # The last call's signature, for the next call's fast path (``__call__``):
    # per graph input its (shape, dtype), and the program, held weakly so that
    # the signature cache's byte bound still decides what stays.
    _last: tuple[_Signature, weakref.ref[Specialised]] | None = None

    def __init__(
        self,
        model: Any,
        target: str = "cpu",
        progress: Progress | None = None,
        threads: int | None = None,
    ):
        from .. import api
        from .validate import upgraded

        with phase("onnx read"), gc_pause.paused():
            # a file's weights are read on a thread (load.start_reading) until weights_read()
            model, source, raws, weights_read = start_reading(model)
            # a model that validated before is not checked again (validated.py)
            key = validated.model_key(model, read_apart=source is not None)
            opset = validated.opset_of(key)
            given, failed = model, None
            if opset is None:
                model, raws, failed = upgraded(model, source, raws)
            self._model = model
            self._whole = not raws  # else the weights are in self.graph, not the message
            self._source = source
            try:
                self.graph = Graph(model, source, raws, opset=opset)
            except OnnxError as exc:
                if failed is None:
                    raise
                raise OnnxError(f"{exc} ({failed})") from None
        bad = self.graph.unsupported()
        if bad:
            first = bad[0]
            ops = sorted({f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in bad})
            raise OnnxError(
                f"unsupported operator(s) {', '.join(ops)} "
                f"(first: node {first.name!r} of type {first.op_type})"
            )
        self.target = target
        with gc_pause.paused():  # (the compile's: background work waits)
            # Resolved once, here at the API boundary (``threads``, else the variable
            # STRIPEML_NUM_THREADS): every signature's program compiles for this Target.
            self.resolved_target = api.target_for(target, threads)
            with phase("onnx read"):
                weights_read()
                if opset is None and model is given:  # checked, and not converted
                    validated.remember(key, self.graph.opset)
                self.graph.nodes = fuse_conv_bn(self.graph.nodes, self.graph.outputs)
                nodes, inits = self.graph.nodes, self.graph.initializers
                self.graph.nodes = fuse_qdq(nodes, inits, self.graph.outputs)
        self.progress = progress
        self.input_names = [i.name for i in self.graph.inputs]
        self.output_names = list(self.graph.outputs)
        self._static = self.graph.static_inputs()
        # one program per input shape, most recently used last, bounded in bytes
        self._cache: api.SignatureCache[Specialised] = api.SignatureCache(_spec_footprint)
        # folded nodes by (node, its input arrays' identities): another input shape
        # folds the weights' preprocessing again only where its inputs changed
        self._folds: Folds = {}
        self._lengths: lengths.Lengths | None = None  # shorter lengths' program (lengths.py)
        self._lengths_tried = False

    @property
    def model(self) -> Any:
        """The ``ModelProto`` (a model read from a file is read again, whole, the
        first time this is asked: the import reads its weights into arrays and
        keeps only its structure as a message)."""
        if not self._whole:
            assert self._source is not None
            self._model, self._whole = full_model(self._source), True
        return self._model

    def __repr__(self) -> str:
        return (
            f"<stripeml.onnx.OnnxFunction {self.graph.name}({', '.join(self.input_names)}) "
            f"-> ({', '.join(self.output_names)}) target={self.target!r}>"
        )

    # -- arguments ---------------------------------------------------------
    def _arrays(self, args: Sequence[Any], kwargs: dict[str, Any]) -> list[np.ndarray]:
        return call_arrays(self.graph.inputs, args, kwargs)

    def _key(self, arrays: Sequence[np.ndarray]) -> _Key:
        # the dtype itself, not its name: ``str(dtype)`` costs microseconds a call
        key: list[tuple[object, ...]] = []
        for gi, a in zip(self.graph.inputs, arrays):
            if gi.name in self._static:
                key.append((a.shape, a.dtype, a.tobytes()))
            else:
                key.append((a.shape, a.dtype))
        return tuple(key)

    # -- compiling ---------------------------------------------------------
    def specialise(self, arrays: Sequence[np.ndarray], key: _Key | None = None) -> Specialised:
        key = self._key(arrays) if key is None else key
        spec = self._cache.get(key)
        if spec is None:
            with phase("onnx import"), gc_pause.paused():
                spec = lengths.import_for(self, arrays)  # or a longer length's program
            self._cache.put(key, spec)
        return spec

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def _build(self, arrays: Sequence[np.ndarray]) -> Specialised:
        g = self.graph
        b = Builder()
        env: dict[str, Value] = {}
        input_index: dict[Value, int] = {}  # the graph position of each runtime input
        for i, (gi, a) in enumerate(zip(g.inputs, arrays)):
            if gi.name in self._static:
                env[gi.name] = Value("", a.shape, a.dtype, np.array(a))
            else:
                v = b.input(a.shape, wide_dtype(a.dtype))
                input_index[v] = i
                # a narrow type is held in a wider Tile type (narrow.py)
                env[gi.name] = replace(v, narrow=a.dtype) if is_narrow(a.dtype) else v
        for name, arr in g.initializers.items():
            if name not in env:
                env[name] = Value("", arr.shape, arr.dtype, arr)
        total = len(g.nodes)
        split: tuple[int, NeedsHost] | None = None
        for k, info in enumerate(g.nodes):
            if total >= 50 and k % 25 == 0:
                self._say(f"importing node {k + 1}/{total} ({info.op_type})")
            try:
                run_node(b, info, env, g.opset, self._folds)
            except NeedsHost as exc:
                if exc.node.name != info.name or exc.node.op_type != info.op_type:
                    raise OnnxError(
                        f"{exc} (inside node {info.name!r} ({info.op_type}): an operator sized "
                        "at run time is supported in the main graph only)"
                    ) from None
                split = (k, exc)
                break
        wanted = list(g.outputs)
        if split is not None:
            wanted = live_values(g, split[0], env)
        produced: list[Value] = []
        for name in wanted:
            made = env.get(name)
            if made is None:
                raise OnnxError(f"graph output {name!r} is not produced by any node")
            produced.append(made)
        spec = finish(
            b, produced, input_index, self.resolved_target, g.name,
            lambda text: self._say(f"{text} for {self.target}"),
        )  # fmt: skip
        if split is not None:
            spec.host = self._split(split[0], split[1], wanted, env)
        return spec

    # -- run-time sizes ------------------------------------------------------
    # An operator whose output's shape depends on run-time values (ops/dynamic.py)
    # splits the model: the graph before it compiles as usual, its outputs being
    # the values the rest reads; the operator runs on the host; the rest is a
    # model of its own (an OnnxFunction over the remaining nodes, whose inputs are
    # those values and the operator's outputs), compiled on its first call for
    # the sizes it is given and cached per signature like any model.  The rest
    # may split again.
    def _split(self, k: int, exc: NeedsHost, wanted: list[str], env: dict[str, Value]) -> Split:
        g = self.graph
        node = g.nodes[k]
        position = {name: i for i, name in enumerate(wanted)}
        node_inputs = [position.get(name) if name else None for name in node.inputs]
        rest_inputs: list[GraphInput] = []
        known: dict[str, np.ndarray] = {}  # weights and folded values: constants of the rest
        feeds: list[tuple[str, int]] = []
        for i, name in enumerate(wanted):
            v = env[name]
            if v.const is not None:
                known[name] = np.asarray(v.const if v.narrow is None else v.const.astype(v.narrow))
                continue
            rest_inputs.append(GraphInput(name, np.dtype(v.narrow or v.dtype), None))
            feeds.append(("out", i))
        for j, name in enumerate(node.outputs):
            if name and j < len(exc.dtypes):
                rest_inputs.append(GraphInput(name, exc.dtypes[j], None))
                feeds.append(("host", j))
        rest_graph = g.remainder(k + 1, rest_inputs, known)
        rest = OnnxFunction._over(rest_graph, self)
        bind = getattr(exc.host, "bind", None)
        if bind is not None:  # a loop's body compiles for this model's target
            bind(self.resolved_target)
        return Split(exc.node, exc.host, node_inputs, rest, feeds, list(wanted))

    @classmethod
    def _over(cls, graph: Graph, parent: OnnxFunction) -> OnnxFunction:
        """A model over ``graph`` (``parent``'s rest after a split), for its target."""
        from .. import api

        fn = cls.__new__(cls)
        fn._model, fn._whole, fn._source = None, True, None
        fn.graph = graph
        fn.target, fn.resolved_target, fn.progress = (
            parent.target,
            parent.resolved_target,
            parent.progress,
        )
        fn.input_names = [i.name for i in graph.inputs]
        fn.output_names = list(graph.outputs)
        fn._static = graph.static_inputs()
        fn._cache = api.SignatureCache(_spec_footprint)
        fn._folds = {}
        fn._lengths, fn._lengths_tried = None, False
        return fn

    # -- running -----------------------------------------------------------
    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run on ``arrays`` (graph input order); a list with every output."""
        arrays = self._arrays(list(arrays), {})
        return self._run(arrays)

    def _run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        key = self._key(arrays)  # a new signature: its import, compile and first call one compile
        with gc_pause.paused(self._cache.get(key) is None):
            spec = self.specialise(arrays, key)
            if not self._static:
                self._last = (tuple((a.shape, a.dtype) for a in arrays), weakref.ref(spec))
            return self._run_spec(spec, arrays)

    def _run_spec(self, spec: Specialised, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        if spec.view is not None:  # a length through a longer one's program (lengths.py)
            spec = lengths.due(self, spec, arrays)  # or its own program, when due
        results: dict[str, np.ndarray] = {}
        if spec.function is not None:
            outs = spec.function(*spec.call_args(arrays))
            if not isinstance(outs, tuple):
                outs = (outs,)
            results = dict(zip(spec.function.outputs, outs))
        values = [results[x] if kind == "tile" else np.array(x) for kind, x in spec.outputs]
        if spec.view is not None:
            values = spec.view.trim(values)  # cut to the call's lengths
        if spec.narrow is not None:  # exact: the program holds narrow values in a wider type
            values = [v if t is None else v.astype(t) for v, t in zip(values, spec.narrow)]
        split = spec.host
        if split is None:
            return values
        given = [values[i] if i is not None else None for i in split.node_inputs]
        # the values around the node, as a subgraph of it (a loop's body) reads them
        scope = {name: Value("", v.shape, v.dtype, v) for name, v in zip(split.names, values)}
        with phase("host operators"):
            made = split.run(replace(split.node, scope=scope), given)  # type: ignore[arg-type]
        rest = [values[i] if kind == "out" else made[i] for kind, i in split.feeds]
        return split.rest._run(rest)

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        # the last call's program when these are positional arrays of exactly its
        # input shapes and dtypes (its checks held then); else the full path
        last = None if kwargs else self._last
        spec = last[1]() if last is not None and exact_arrays(args, last[0]) else None
        if spec is not None:
            outs = self._run_spec(spec, args)
        else:
            outs = self._run(self._arrays(args, kwargs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def lower(self, *args: Any, **kwargs: Any) -> Executable | None:
        """The ``stripeml`` executable for these inputs (``.ir``, ``.stages``, ``.code``,
        ``.peak_bytes``), without running; ``None`` when the whole model folded to constants."""
        arrays = self._arrays(args, kwargs)
        spec = self.specialise(arrays)
        if spec.function is None:
            return None
        return spec.function.lower(*spec.call_args(arrays))

    def source(self, *args: Any, **kwargs: Any) -> str:
        """The generated Tile program for these inputs."""
        return self.specialise(self._arrays(args, kwargs)).source


def _spec_footprint(spec: Specialised) -> int:
    """A specialised model counts what its compiled signatures count."""
    fn = spec.function
    return 0 if fn is None else fn._cache.nbytes


def finish(
    b: Builder,
    produced: Sequence[Value],
    input_index: Mapping[Value, int],
    target: Any,
    name: str,
    say: Progress | None = None,
) -> Specialised:
    """The program ``b`` holds, with ``produced`` as its outputs, compiled for
    ``target`` (a resolved ``Target`` or a name): the end of an import, for any
    frontend that wrote its nodes with :func:`run_node`.  ``input_index``: per
    runtime input ``b.input`` made, its position in the caller's arguments
    (:attr:`Specialised.inputs`); the other parameters are constants, bound when
    compiling."""
    from .. import api

    outputs: list[tuple[str, Any]] = []
    out_names: list[str] = []
    narrow: list[np.dtype | None] = []
    input_names = {v.name for v in input_index}  # a transpose's result may be one, relabelled
    for value in produced:
        v = b.logical(value)
        narrow.append(value.narrow)
        if v.const is not None and not b.tile_name(v):
            outputs.append(("const", v.const))
            continue
        if v.name in out_names or v.name in input_names or v.const is not None:
            # Tile outputs are distinct tensors that are not parameters.
            v = b.eltwise(b.ref(v), v.shape, v.dtype)
        out_names.append(v.name)
        outputs.append(("tile", v.name))
    inputs: list[int] = []
    constants: dict[str, np.ndarray] = {}
    for p in b.params:
        if p in input_index:
            inputs.append(input_index[p])
        else:
            constants[b.tile_name(p)] = frozen(p.const)
    source = b.source(out_names) if out_names else ""
    function = None
    if out_names:
        count = sum(1 for s in b.statements if not s.startswith("//"))
        if say is not None:
            say(f"compiling {count} Tile statements")
        # parsed only where the disk cache lacks the program (a warm start never
        # parses it); the builder's shapes are checked against Tile's then
        every = [b.tile_name(p) for p in b.params]
        function = api.Function(
            source, target, name, constants, names=(every, out_names), on_parse=b.check
        )
    spec = Specialised(source, function, inputs, outputs)
    spec.shapes = {n: v.shape for n, v in b.declared.items()}
    spec.dtypes = {n: v.dtype for n, v in b.declared.items()}
    if any(t is not None for t in narrow):
        spec.narrow = narrow
    return spec


def run_node(
    b: Builder,
    info: NodeInfo,
    env: MutableMapping[str, Value],
    opset: int,
    folds: Folds | None = None,
    nested: _Nested | None = None,
) -> None:
    """Write one node into ``b`` (or fold it), binding its outputs in ``env``;
    ``folds`` remembers what folding ``info`` gave for the input arrays it had;
    ``nested``: the node stands in a branch or a function body (default: the
    main graph)."""
    d = lookup(info.op_type, info.domain)
    if d is None:
        raise OnnxError(f"node {info.name!r}: unsupported operator {info.op_type}")
    inputs: list[Value | None] = []
    for name in info.inputs:
        if not name:
            inputs.append(None)
        elif name not in env:
            raise OnnxError(f"node {info.name!r} ({info.op_type}): unknown input {name!r}")
        else:
            inputs.append(env[name])
    node = Node(
        info.op_type,
        info.name,
        tuple(inputs),
        info.attrs,
        opset,
        len(info.outputs),
        info.domain,
        env,
        nested or NESTED,
    )
    try:
        outs = write(b, d, node, info, folds)
    except BadShape as exc:
        raise node.error(str(exc)) from None
    except MemoryError as exc:  # a constant folded at import larger than memory
        raise node.error(f"its result does not fit in memory ({exc})") from None
    except StripeError:
        raise
    except (ArithmeticError, LookupError, TypeError, ValueError) as exc:
        # An attribute or constant value no op writer check anticipated (the model
        # passed the schema checks): the node is named, the cause chained.
        raise node.error(f"cannot be imported ({type(exc).__name__}: {exc})") from exc
    if len(outs) < len([o for o in info.outputs if o]):
        raise node.error(f"produces {len(outs)} output(s), the model uses {len(info.outputs)}")
    narrow = next((v.narrow for v in node.inputs if v is not None and v.narrow is not None), None)
    if narrow is not None and info.op_type not in NARROW_AWARE:
        outs = [narrowed(b, v, narrow, info.op_type in MOVES_DATA) for v in outs]
    for name, v in zip(info.outputs, outs):
        if name:
            if v is None:
                raise node.error(f"output {name!r} is not supported")
            env[name] = v


class _Nested:
    """:class:`~.builder.Nested`: how op writers write the nodes of an ``If``'s
    branch or of a function's body (``ops/control.py``, ``ops/functions.py``).
    ``top``: the node is in the main graph (where the model can be split)."""

    def __init__(self, top: bool) -> None:
        self.top = top

    def run(
        self,
        b: Builder,
        proto: Any,
        k: int,
        env: MutableMapping[str, Value],
        opset: int,
        where: str,
    ) -> None:
        run_node(b, node_info(proto, k, where=where), env, opset, nested=INNER)

    def tensor(self, proto: Any, where: str) -> np.ndarray:
        return tensor_value(proto, where)

    def compile_model(self, model: Any, target: Any) -> OnnxFunction:
        return OnnxFunction(model, target if target is not None else "cpu")


NESTED = _Nested(top=True)
INNER = _Nested(top=False)


def compile(  # noqa: A001
    model: Any,
    target: str = "cpu",
    *,
    progress: Progress | None = None,
    threads: int | None = None,
) -> OnnxFunction:
    """Import an ONNX model (a ``ModelProto`` or a path) for ``target``; ``threads``
    as for :func:`stripeml.compile` (``None``: ``STRIPEML_NUM_THREADS``, else the
    target's own)."""
    return OnnxFunction(model, target, progress, threads)
