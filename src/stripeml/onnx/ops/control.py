"""Control flow: ``If``, ``Scan`` and ``Loop``.

An ``If`` whose condition is known when compiling (a constant, or computed
from shapes and constants, as in the bodies of ``AffineGrid`` and many
exported models) is replaced by the branch it takes: its nodes are written
in place, reading the values around the node by name, as ONNX scopes them.

An ``If`` whose condition is computed at run time compiles both branches
into the program and selects each output elementwise (``cond ? then : else``).
Both branches then run; ONNX nodes have no side effects, so the result is
the one the taken branch gives.  This needs each output to have the same
shape and element type in both branches: where they differ, the output's
shape would depend on the data, and the importer says so.

``Scan`` runs its body once per element along the scan axis, a number every
input's shape fixes when compiling, so the loop is unrolled: the body's
nodes are written once per step, each step reading the slice of each scan
input and the previous step's state, and the steps' scan outputs are
stacked.  Identical steps compile to identical kernels, which share one
compiled body.  ``Loop`` is unrolled the same way when its trip count and
its condition are known when compiling (a constant ``M``, a condition the
body computes from constants and the iteration number); a loop whose end
depends on run-time values is refused with a clear message.  Unrolling is
bounded (:data:`MAX_STEPS`).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..builder import Builder, NeedsHost, Node, Value
from ..registry import op
from ._util import axis as norm_axis
from ._util import indices
from .data import concat
from .shape import reshape


def _branch(n: Node, name: str) -> Any:
    """The ``GraphProto`` of attribute ``name``."""
    a: Any = n.attrs.get(name)
    if a is None or not hasattr(a, "HasField") or not a.HasField("g"):
        raise n.error(f"the {name} attribute (a graph) is required")
    return a.g


#: The most steps a ``Scan`` or ``Loop`` is unrolled into.
MAX_STEPS = 4096


def run_subgraph(
    b: Builder, n: Node, g: Any, what: str, inputs: Sequence[Value] = ()
) -> list[Value]:
    """Write the nodes of subgraph ``g`` of ``n`` into ``b``, its inputs bound to
    ``inputs``; its outputs.  Names it does not define are read from the scope
    of ``n``."""
    if n.nested is None:
        raise n.error("subgraphs are written only by the importer")
    local: dict[str, Value] = {}
    env: ChainMap[str, Value] = ChainMap(local, dict(n.scope or {}))
    if len(g.input) != len(inputs):
        raise n.error(f"its {what} takes {len(g.input)} inputs; {len(inputs)} are given")
    for vi, v in zip(g.input, inputs):
        local[vi.name] = v
    for t in g.initializer:
        arr = n.nested.tensor(t, f"{n.where()} {what} initializer {t.name!r}")
        local[t.name] = Value("", arr.shape, arr.dtype, arr)
    for k, node in enumerate(g.node):
        n.nested.run(b, node, k, env, n.opset, f"{n.where()} {what}:")
    outs: list[Value] = []
    for vi in g.output:
        got = env.get(vi.name)
        if got is None:
            raise n.error(f"its {what} does not produce its output {vi.name!r}")
        outs.append(got)
    return outs


@op("If", foldable=False)
def if_op(b: Builder, n: Node) -> list[Value | None]:
    """The branch taken; both, selected elementwise, when the condition is known only at run time."""
    cond = n.input(0)
    then_g, else_g = _branch(n, "then_branch"), _branch(n, "else_branch")
    if cond.size != 1:
        raise n.error(f"the condition must hold one element, got shape {cond.shape}")
    if cond.const is not None:
        taken = bool(np.asarray(cond.const).reshape(-1)[0])
        chosen = run_subgraph(
            b, n, then_g if taken else else_g, f"{'then' if taken else 'else'}_branch"
        )
        return list(chosen[: n.n_outputs])
    then_outs = run_subgraph(b, n, then_g, "then_branch")
    else_outs = run_subgraph(b, n, else_g, "else_branch")
    if len(then_outs) != len(else_outs):
        raise n.error(
            f"its branches produce {len(then_outs)} and {len(else_outs)} outputs; they must agree"
        )
    c = b.logical(cond)
    if c.dtype != np.bool_:
        raise n.error(f"the condition must be bool, got {c.dtype}")
    if c.rank:
        c = reshape(b, c, ())  # a scalar broadcasts against any output
    outs: list[Value | None] = []
    for k, (x, y) in enumerate(zip(then_outs, else_outs)):
        if x.shape != y.shape or x.dtype != y.dtype:
            raise n.error(
                f"output {k} is {x.dtype}{list(x.shape)} in then_branch and "
                f"{y.dtype}{list(y.shape)} in else_branch, and the condition is known only "
                "at run time: the output's shape would depend on the data (not supported)"
            )
        x, y = b.logical(x), b.logical(y)
        outs.append(b.eltwise(f"{b.ref(c)} ? {b.ref(x)} : {b.ref(y)}", x.shape, x.dtype))
    return outs[: n.n_outputs]


def _step(b: Builder, x: Value, ax: int, t: int) -> Value:
    """``x[..., t, ...]`` along ``ax``, that axis dropped."""
    if x.const is not None:
        arr = np.take(x.const, t, axis=ax)
        return Value("", arr.shape, arr.dtype, arr)
    x = b.logical(x)
    idx = indices(x.rank)
    access = list(idx)
    access[ax] = str(t)
    out = [i for k, i in enumerate(idx) if k != ax]
    shape = tuple(s for k, s in enumerate(x.shape) if k != ax)
    sizes = ", ".join(str(s) for s in shape)
    return b.contraction(
        f"{{out}}[{', '.join(out)} : {sizes}] = =({b.ref(x)}[{', '.join(access)}])",
        shape,
        x.dtype,
    )


def _stack(b: Builder, n: Node, values: Sequence[Value], ax: int, what: str) -> Value:
    """``values`` (all one shape) stacked along a new axis ``ax``."""
    first = values[0]
    for v in values:
        if v.shape != first.shape or v.dtype != first.dtype:
            raise n.error(
                f"{what} is {first.dtype}{list(first.shape)} in one step and "
                f"{v.dtype}{list(v.shape)} in another: steps must agree"
            )
    ax = norm_axis(n, ax, first.rank + 1, f"the axis of {what}")
    shape = list(first.shape)
    shape.insert(ax, 1)
    parts = [reshape(b, b.logical(v), shape) for v in values]
    node = replace(n, op_type="Concat", inputs=tuple(parts), attrs={"axis": ax}, n_outputs=1)
    out = concat(b, node)[0]
    assert out is not None
    return out


def _ints(n: Node, key: str, count: int) -> list[int]:
    got = [int(v) for v in (n.attr(key) or [])]
    if len(got) > count:
        raise n.error(f"{key} has {len(got)} entries for {count} values")
    return got + [0] * (count - len(got))


@op("Scan", foldable=False, oldest=8)
def scan(b: Builder, n: Node) -> list[Value | None]:
    """Scan: unrolled over the scan axis (its length is known when compiling); any axes and directions."""
    if n.opset < 9:
        return _scan8(b, n)
    return _scan(b, n, [n.input(i) for i in range(len(n.inputs))])


def _scan8(b: Builder, n: Node) -> list[Value | None]:
    """Scan-8: every input has a batch axis first and scan inputs their sequence
    second; each batch element is scanned on its own, the results stacked."""
    lens = n.opt(0)
    inputs = [n.input(i) for i in range(1, len(n.inputs))]
    if not inputs or any(v.rank < 1 for v in inputs):
        raise n.error("Scan-8 inputs need a batch axis")
    batch = inputs[0].shape[0]
    m = int(n.attr("num_scan_inputs", 0) or 0)
    if lens is not None:
        if lens.const is None:
            raise n.error("sequence_lens must be known when compiling")
        full = inputs[-m].shape[1] if 0 < m <= len(inputs) else None
        if any(int(v) != full for v in np.asarray(lens.const).reshape(-1)):
            raise n.error("sequence_lens shorter than the sequences are not supported")
    if n.attr("directions") is not None:
        n = replace(n, attrs={**n.attrs, "scan_input_directions": n.attr("directions")})
    per_batch = [_scan(b, n, [_step(b, v, 0, i) for v in inputs]) for i in range(batch)]
    outs: list[Value | None] = []
    for j in range(len(per_batch[0])):
        vals = [p[j] for p in per_batch]
        outs.append(_stack(b, n, [v for v in vals if v is not None], 0, f"output {j}"))
    return outs


def _scan(b: Builder, n: Node, inputs: list[Value]) -> list[Value | None]:
    body = _branch(n, "body")
    m = int(n.attr("num_scan_inputs", 0) or 0)
    if not 0 < m <= len(inputs):
        raise n.error(f"num_scan_inputs {m} must be between 1 and the {len(inputs)} inputs")
    states, xs = inputs[: len(inputs) - m], inputs[len(inputs) - m :]
    in_axes = [
        norm_axis(n, a, x.rank, "scan_input_axes")
        for a, x in zip(_ints(n, "scan_input_axes", m), xs)
    ]
    in_dirs = _ints(n, "scan_input_directions", m)
    lengths = {x.shape[a] for x, a in zip(xs, in_axes)}
    if len(lengths) != 1:
        raise n.error(f"the scan inputs have different lengths {sorted(lengths)} along their axes")
    steps = lengths.pop()
    if steps > MAX_STEPS:
        raise n.error(f"scans {steps} steps; at most {MAX_STEPS} are unrolled")
    k = len(body.output) - len(states)
    if k < 0:
        raise n.error(f"its body has {len(body.output)} outputs for {len(states)} states")
    out_axes = _ints(n, "scan_output_axes", k)
    out_dirs = _ints(n, "scan_output_directions", k)
    if steps > UNROLL_STEPS and (n.nested is None or n.nested.top) and n.opset >= 9:
        raise _scan_on_host(n, body, states, k)
    per_step: list[list[Value]] = [[] for _ in range(k)]
    for t in range(steps):
        sliced = [
            _step(b, x, a, steps - 1 - t if d else t) for x, a, d in zip(xs, in_axes, in_dirs)
        ]
        outs = run_subgraph(b, n, body, f"body (step {t})", [*states, *sliced])
        states = outs[: len(states)]
        for j, v in enumerate(outs[len(states) :]):
            per_step[j].append(v)
    if steps == 0:
        raise n.error("scans 0 steps (an empty scan axis) - not supported")
    results: list[Value | None] = list(states)
    for j in range(k):
        vals = per_step[j][::-1] if out_dirs[j] else per_step[j]
        results.append(_stack(b, n, vals, out_axes[j], f"scan output {j}"))
    return results[: n.n_outputs]


#: A loop of more steps than this (when known), or whose steps depend on run-time
#: values, runs on the host around its compiled body instead of being unrolled.
UNROLL_STEPS = 64


@op("Loop", foldable=False, static=(0, 1))
def loop(b: Builder, n: Node) -> list[Value | None]:
    """Loop: unrolled when short with its steps known when compiling; else a run-time loop around its compiled body.

    A trip count or condition given as a graph input is specialised on (each
    value compiles its own program)."""
    body = _branch(n, "body")
    trips, cond = n.opt(0), n.opt(1)
    carried = [n.input(i) for i in range(2, len(n.inputs))]
    k = len(body.output) - 1 - len(carried)
    if k < 0:
        raise n.error(f"its body has {len(body.output)} outputs for {len(carried)} carried values")
    if trips is None and cond is None:
        raise n.error("has neither a trip count nor a condition: it would never end")
    if (trips is not None and trips.const is None) or (cond is not None and cond.const is None):
        raise _on_host(n, body, carried, k)
    limit = MAX_STEPS if trips is None else int(np.asarray(trips.const).reshape(-1)[0])
    # in a branch or a function body, where the model cannot be split, a known
    # loop is unrolled however long (up to MAX_STEPS)
    top = n.nested is None or n.nested.top
    if limit > UNROLL_STEPS and top:
        raise _on_host(n, body, carried, k)
    going = True if cond is None else bool(np.asarray(cond.const).reshape(-1)[0])
    per_step: list[list[Value]] = [[] for _ in range(k)]
    t = 0
    while going and t < limit:
        if t >= (UNROLL_STEPS if top else MAX_STEPS):  # the body keeps saying go on
            raise _on_host(n, body, [n.input(i) for i in range(2, len(n.inputs))], k)
        it = Value("", (), np.dtype(np.int64), np.array(t, np.int64))
        flag = Value("", (), np.dtype(np.bool_), np.array(True))
        outs = run_subgraph(b, n, body, f"body (step {t})", [it, flag, *carried])
        again = outs[0]
        if again.const is None:  # the steps depend on run-time values
            raise _on_host(n, body, [n.input(i) for i in range(2, len(n.inputs))], k)
        going = bool(np.asarray(again.const).reshape(-1)[0])
        carried = outs[1 : 1 + len(carried)]
        for j, v in enumerate(outs[1 + len(carried) :]):
            per_step[j].append(v)
        t += 1
    results: list[Value | None] = list(carried)
    for j in range(k):
        if not per_step[j]:
            raise n.error("runs no step, so its scan outputs would be empty (not supported)")
        results.append(_stack(b, n, per_step[j], 0, f"scan output {j}"))
    return results[: n.n_outputs]


def _scan_on_host(n: Node, body: Any, states: list[Value], k: int) -> NeedsHost:
    """A long ``Scan`` on the host, like a long ``Loop``: :class:`HostScan`."""
    from onnx import helper

    dtypes = [np.dtype(v.narrow or v.dtype) for v in states]
    for vi in list(body.output)[len(states) :]:
        elem = vi.type.tensor_type.elem_type
        if not elem:
            raise n.error(f"its body's scan output {vi.name!r} has no element type")
        dtypes.append(np.dtype(helper.tensor_dtype_to_np_dtype(elem)))
    return NeedsHost(n, HostScan(body, n.opset, len(states), k), dtypes)


def _on_host(n: Node, body: Any, carried: list[Value], k: int) -> NeedsHost:
    """The run-time loop: the importer splits the model at the node (as for any
    operator sized at run time) and runs :class:`HostLoop` there."""
    from onnx import helper

    dtypes = [np.dtype(v.narrow or v.dtype) for v in carried]
    for vi in list(body.output)[1 + len(carried) :]:
        elem = vi.type.tensor_type.elem_type
        if not elem:
            raise n.error(f"its body's scan output {vi.name!r} has no element type")
        dtypes.append(np.dtype(helper.tensor_dtype_to_np_dtype(elem)))
    return NeedsHost(n, HostLoop(body, n.opset, len(carried), k), dtypes)


class HostLoop:
    """A ``Loop`` run on the host: its body compiled once per signature (as a model
    of its own, whose inputs are the iteration number, the condition, the carried
    values and the values it reads from around the node), called step by step
    until the trip count or the condition ends it; the scan outputs stacked."""

    def __init__(self, body: Any, opset: int, carried: int, scans: int) -> None:
        self.body, self.opset = body, opset
        self.carried, self.scans = carried, scans
        self.target: Any = None  # set by the importer (the model's resolved target)
        self._fn: Any = None
        self._free: list[str] = []

    def bind(self, target: Any) -> None:
        self.target = target

    def _compile(self, n: Node, given: list[np.ndarray]) -> Any:
        from onnx import helper

        g = type(self.body)()
        g.CopyFrom(self.body)
        for vi, arr in zip(g.input, given):
            if not vi.type.tensor_type.elem_type:  # inferred from the values in ONNX
                vi.CopyFrom(
                    helper.make_tensor_value_info(
                        vi.name, helper.np_dtype_to_tensor_dtype(arr.dtype), None
                    )
                )
        scope = dict(n.scope or {})
        made = {o for node in g.node for o in node.output} | {i.name for i in g.input}
        made |= {t.name for t in g.initializer}
        free = []
        for node in g.node:
            for name in node.input:
                if name and name not in made and name not in free:
                    free.append(name)
        for name in free:
            v = scope.get(name)
            if v is None or v.const is None:
                raise n.error(f"its body reads {name!r}, which is not known here")
            g.input.append(
                helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(np.asarray(v.const).dtype), None
                )
            )
        self._free = free
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        if n.nested is None:
            raise n.error("a loop's body is compiled only by the importer")
        return n.nested.compile_model(model, self.target)

    def __call__(self, n: Node, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        trips, cond = inputs[0], inputs[1]
        carried = [np.asarray(a) for a in inputs[2 : 2 + self.carried]]
        limit = None if trips is None else int(np.asarray(trips).reshape(-1)[0])
        going = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
        step = np.array(0, np.int64)
        first = [step, np.array(going), *carried]
        if self._fn is None:
            self._fn = self._compile(n, first)
        scope = dict(n.scope or {})
        extra = [np.asarray(scope[name].const) for name in self._free]
        stacks: list[list[np.ndarray]] = [[] for _ in range(self.scans)]
        t = 0
        while going and (limit is None or t < limit):
            outs = self._fn.run([np.array(t, np.int64), np.array(True), *carried, *extra])
            going = bool(np.asarray(outs[0]).reshape(-1)[0])
            carried = list(outs[1 : 1 + self.carried])
            for j, v in enumerate(outs[1 + self.carried :]):
                stacks[j].append(v)
            t += 1
        scans = []
        for got in stacks:
            if not got:
                raise n.error("ran no step, so its scan outputs would be empty (not supported)")
            scans.append(np.stack(got))
        return [*carried, *scans]


class HostScan(HostLoop):
    """A ``Scan`` run on the host around its compiled body: each step is given the
    states and the step's slice of every scan input (along its axis, in its
    direction); the scan outputs are stacked along their axes and directions."""

    def __call__(self, n: Node, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        arrays = [np.asarray(a) for a in inputs if a is not None]
        m = len(arrays) - self.carried
        states, xs = arrays[: self.carried], arrays[self.carried :]
        in_axes = [a % x.ndim for a, x in zip(_ints(n, "scan_input_axes", m), xs)]
        in_dirs = _ints(n, "scan_input_directions", m)
        out_axes = _ints(n, "scan_output_axes", self.scans)
        out_dirs = _ints(n, "scan_output_directions", self.scans)
        steps = xs[0].shape[in_axes[0]]

        def sliced(t: int) -> list[np.ndarray]:
            return [
                np.ascontiguousarray(np.take(x, steps - 1 - t if d else t, axis=a))
                for x, a, d in zip(xs, in_axes, in_dirs)
            ]

        if self._fn is None:
            self._fn = self._compile(n, [*states, *sliced(0)])
        scope = dict(n.scope or {})
        extra = [np.asarray(scope[name].const) for name in self._free]
        stacks: list[list[np.ndarray]] = [[] for _ in range(self.scans)]
        for t in range(steps):
            outs = self._fn.run([*states, *sliced(t), *extra])
            states = list(outs[: self.carried])
            for j, v in enumerate(outs[self.carried :]):
                stacks[j].append(v)
        scans = []
        for j, got in enumerate(stacks):
            ordered = got[::-1] if out_dirs[j] else got
            scans.append(np.stack(ordered, axis=out_axes[j] % (ordered[0].ndim + 1)))
        return [*states, *scans]
