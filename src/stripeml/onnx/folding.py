"""The values of one ONNX node: folded at import when its inputs are all known,
else its Tile statements written into the program.

:func:`fold` runs a node whose inputs are all constants once, on the
interpreter, so shape arithmetic and weight preprocessing never reach the
generated program; :data:`Folds` remembers, per model, what a node folded to
for the input arrays it had (another input shape folds again only the nodes
whose inputs changed).  Any other node is written in its layout-aware form
(:func:`.layout.dispatch`) when there is one, else as the op library writes it
on logical inputs.  :func:`.importer.run_node` calls :func:`write` for every
node.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any

import numpy as np

from ..phases import phase
from .builder import Builder, Node, Value
from .graph import NodeInfo
from .layout import dispatch
from .registry import OpDef

#: Folded nodes: (id of the node, ids of its input arrays) -> (what keeps those
#: alive, the outputs).
Folds = dict[tuple[object, ...], tuple[tuple[object, ...], tuple["Value | None", ...]]]


def write(
    b: Builder,
    d: OpDef,
    node: Node,
    info: NodeInfo | None = None,
    folds: Folds | None = None,
) -> list[Value | None]:
    """The values of ``node``'s outputs: folded when its inputs are all known,
    else written into ``b``."""
    present = [v for v in node.inputs if v is not None]
    if d.foldable and all(v.const is not None for v in present):
        key = None
        if folds is not None and info is not None:
            key = (id(info), tuple(None if v is None else id(v.const) for v in node.inputs))
            hit = folds.get(key)
            if hit is not None:
                return list(hit[1])
        with phase("onnx fold", whole=True):
            outs = fold(d, node)
        if key is not None and all(v is None or v.const is not None for v in outs):
            # the node and its input arrays are kept with the entry: their ids stay theirs
            assert folds is not None
            folds[key] = ((info, *(v.const for v in present)), tuple(outs))
        return outs
    b.comment(f"{node.op_type} {node.name}".rstrip())
    laid_out = dispatch(b, d, node)
    if laid_out is not None:
        return laid_out
    logical = tuple(None if v is None else b.logical(v) for v in node.inputs)
    return d.fn(b, replace(node, inputs=logical))


def fold(d: OpDef, node: Node) -> list[Value | None]:
    """Evaluate a node whose inputs are all constants, at import time."""
    from .. import api

    sub = Builder()
    local = tuple(None if v is None else Value("", v.shape, v.dtype, v.const) for v in node.inputs)
    node = replace(node, inputs=local)
    outs = d.fn(sub, node)
    pending = [(i, v) for i, v in enumerate(outs) if v is not None and v.const is None]
    if not pending:
        return outs
    names = []
    for _, v in pending:
        if any(v is p for p in sub.params) or v.name in names:
            v = sub.eltwise(v.name, v.shape, v.dtype)
        names.append(v.name)
    source = sub.source(names)
    params = [np.asarray(p.const) for p in sub.params]
    key = _key(api.interpreter_fingerprint(), source, params)
    arrays = _remembered(api, key, [tuple(v.shape) for _, v in pending])
    if arrays is None:
        fn = _program(api, source, f"fold_{node.op_type}")
        sub.check(fn.ast)
        results = fn(*params)
        if not isinstance(results, tuple):
            results = (results,)
        arrays = [np.asarray(arr) for arr in results]
        _remember(api, key, arrays)
    folded = list(outs)
    for (i, v), arr in zip(pending, arrays):
        folded[i] = Value("", v.shape, v.dtype, arr)
    return folded


# -- constant programs kept in the process ----------------------------------------
# Another input shape of a model folds its shape arithmetic again (a Shape's
# values changed) with the same Tile programs on new values: each program is
# compiled once per process (parsed, checked, lowered and verified once per
# signature: :class:`stripeml.api.Function`'s own cache) and run on each new
# input.  A program's results depend only on its source and its inputs, so no
# value changes.

#: The most constant programs kept (least recently used out first).
MAX_PROGRAMS = 128
_programs: OrderedDict[tuple[str, str], Any] = OrderedDict()
_programs_lock = threading.Lock()


def _program(api: Any, source: str, name: str) -> Any:
    """The interpreter's :class:`~stripeml.api.Function` of ``source``, compiled
    once per process (two threads may both compile a new one: either is kept)."""
    key = (source, name)
    with _programs_lock:
        fn = _programs.get(key)
        if fn is not None:
            _programs.move_to_end(key)
            return fn
    fn = api.compile(source, "interp", name=name)
    with _programs_lock:
        _programs[key] = fn
        while len(_programs) > MAX_PROGRAMS:
            _programs.popitem(last=False)
    return fn


# -- folds remembered across processes -----------------------------------------
# What a constant program computes on the interpreter is a function of its source,
# its inputs and the compiler's and interpreter's sources: kept in the disk cache
# (``api.remembered("folds")``, authenticated entries), a warm start takes it from there
# and neither compiles nor runs the program (nor imports the passes and isl,
# which lowering and the interpreter's pipeline need: BERT-base's warm start
# folded 12 nodes that way, 0.08-0.11 s).  Only numeric arrays of at most
# MAX_FOLD_BYTES in and out are remembered (hashing the inputs must cost less
# than folding them).

#: Inputs (and results) over this many bytes in all are folded every time.
MAX_FOLD_BYTES = 8 << 20


def _key(fingerprint: str, source: str, params: list[np.ndarray]) -> bytes | None:
    """The entry key of ``source`` run on ``params`` (a SHA-256 of them, hashed
    from the arrays' own memory: a BERT's 1.5 MB position table is neither
    copied nor joined), or None when not remembered."""
    if sum(p.nbytes for p in params) > MAX_FOLD_BYTES:
        return None
    h = hashlib.sha256(f"fold\0{fingerprint}\0{source}\0{len(params)}\0".encode())
    for p in params:
        if p.dtype.kind not in "biuf" or p.dtype.hasobject:
            return None
        h.update(f"{p.dtype.str}{p.shape}\0".encode())
        h.update(np.ascontiguousarray(p).data)  # the array's own bytes, not a copy
    return h.digest()


def _remembered(api: Any, key: bytes | None, shapes: list[tuple[int, ...]]) -> list | None:
    """The results remembered for ``key`` (one per shape in ``shapes``), or None."""
    if key is None:
        return None
    data = api.remembered("folds").get(key)
    if data is None:
        return None
    out, view = [], memoryview(data)
    try:
        for shape in shapes:
            n = int.from_bytes(view[:8], "little")
            arr = np.lib.format.read_array(io.BytesIO(view[8 : 8 + n]), allow_pickle=False)
            view = view[8 + n :]
            if arr.shape != shape:
                return None
            out.append(arr)
    except (ValueError, OSError):
        return None
    return out if not len(view) else None


def _remember(api: Any, key: bytes | None, arrays: list[np.ndarray]) -> None:
    if key is None or sum(a.nbytes for a in arrays) > MAX_FOLD_BYTES:
        return
    if any(a.dtype.kind not in "biuf" or a.dtype.hasobject for a in arrays):
        return
    parts = []
    for a in arrays:
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.ascontiguousarray(a), allow_pickle=False)
        parts += [len(buf.getvalue()).to_bytes(8, "little"), buf.getvalue()]
    api.remembered("folds").put_later(key, b"".join(parts))  # written once the compile is done
