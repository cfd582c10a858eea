"""A compiled graph's calls by address: tensors in, tensors out, no NumPy.

From a program's second call on, :class:`DirectPlan` runs it through
:func:`stripeml.api.direct.direct_call`: each input is passed as its tensor's
``data_ptr()`` (the kernels read the tensor's own memory, as with
``tensors.host_array``'s views), and each result is a tensor allocated here
(``torch.empty``, or ``torch.zeros`` for a result the program does not write
all over) whose address the kernels write to.  What an ordinary call spends
per tensor (a NumPy view, its checks and address, a result array and
``torch.from_numpy`` of it, dictionaries by name) is gone: about 0.3 ms of a
small CNN's training step of ~50 tensors.

A call takes this path only when every input the program reads is a CPU
tensor it holds as is: C-contiguous, or a permutation the program reads
stored permuted (``tensors.dense_layout``), and not bfloat16 (which the
program holds in float32, ``narrow``).  That depends only on the tensors'
sizes, strides, type and device, so ``CompiledGraph`` decides it once per
cheap signature key (:func:`passable`).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..onnx.importer import Specialised
from .tensors import dense_layout, from_numpy, to_numpy


def passable(a: Any) -> bool:
    """Whether a graph input's address can be handed to a program as is (see
    the module docstring); non-tensors (sizes) cannot."""
    import torch

    if not isinstance(a, torch.Tensor) or not a.is_cpu or a.dtype == torch.bfloat16:
        return False
    return a.is_contiguous() or dense_layout(a) is not None


#: result arrays kept per program result for reuse (``DirectPlan.run``)
KEEP = 3


class DirectPlan:
    """One program's direct call and what it allocates: ``call(in_ptrs, out_ptrs)``."""

    __slots__ = ("_pool", "call", "inputs", "outputs", "values")

    def __init__(self, call: Any, inputs: tuple[int, ...], outputs: list[tuple], values: list):
        self.call = call
        #: the graph inputs the program reads, in parameter order
        self.inputs = inputs
        #: per program result: (shape, NumPy dtype, whether zeroed)
        self.outputs = outputs
        #: per ``spec.outputs`` entry: (result index, None) or (-1, a constant)
        self.values = values
        #: per program result: arrays made for it before (see ``run``)
        self._pool: list[list[np.ndarray]] = [[] for _ in outputs]

    @staticmethod
    def make(spec: Specialised, passed: list[np.ndarray], state: list[bool]) -> DirectPlan | None:
        """The plan of ``spec``, which has just run on ``passed`` (its Tile
        arguments), or None: nothing to run, narrow types, a parameter bound per
        version, or a program the runtime cannot call by address."""
        import torch

        from ..api.direct import direct_call

        function = spec.function
        if function is None or spec.narrow is not None or spec.host is not None:
            return None
        if any(state[k] for k in spec.inputs):
            return None
        if any(a.dtype.kind == "V" for a in passed):  # (bfloat16 and the like)
            return None
        call = direct_call(function, passed)
        if call is None:
            return None
        outputs = []
        for shape, dtype, zeroed in call.outputs:
            if dtype.kind not in "biuf":
                return None
            torch.from_numpy(np.empty(0, dtype))  # (a type PyTorch has)
            outputs.append((shape, dtype, zeroed))
        index = {name: i for i, name in enumerate(function.outputs)}
        values = [(index[x], None) if kind == "tile" else (-1, x) for kind, x in spec.outputs]
        return DirectPlan(call, tuple(spec.inputs), outputs, values)

    def run(self, args: list[Any], where: Any, call: Any) -> list[Any]:
        """Run on graph inputs ``args``, through ``call(where, fn, fn_args)``
        (``threads.call``); the values of ``spec.outputs``, as tensors."""
        from torch import from_numpy as tensor

        in_ptrs = [args[k].data_ptr() for k in self.inputs]
        arrays = [self._array(k) for k in range(len(self.outputs))]
        outs = [tensor(a) for a in arrays]
        del arrays
        call(where, self.call, (in_ptrs, [t.data_ptr() for t in outs]))
        return [outs[i] if i >= 0 else from_numpy(np.array(x)) for i, x in self.values]

    def _array(self, k: int) -> np.ndarray:
        """Memory for result ``k``: an array made for it at an earlier call that
        nothing uses any more, else a new one (kept for later calls, up to
        :data:`KEEP`).

        A tensor made by ``torch.from_numpy`` holds its array until its storage
        is freed (whoever held it: a saved activation in the autograd graph, a
        parameter's ``.grad``), so an array whose only references are this
        pool's is free to write: reused memory is memory the process has
        touched, where a new result of a megabyte costs page faults (about 300
        per transformer block step, 0.2 ms).  Taken out of the pool while it is
        checked, so that two threads cannot both take it."""
        shape, dtype, zeroed = self.outputs[k]
        pool = self._pool[k]
        for _ in range(len(pool)):
            try:
                a = pool.pop(0)
            except IndexError:  # (another thread took the last one)
                break
            # references: ``a``, getrefcount's argument, and nothing else
            free = sys.getrefcount(a) == 2
            pool.append(a)
            if free:
                if zeroed:
                    a.fill(0)
                return a
            del a
        nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        raw = (np.zeros if zeroed else np.empty)(nbytes + 64, np.uint8)
        start = -raw.ctypes.data % 64  # (64-byte aligned, like the runtime's own results)
        a = raw[start : start + nbytes].view(dtype).reshape(shape)
        if len(pool) < KEEP:
            pool.append(a)
        return a


def outputs(plan: list[tuple[str, Any]], values: list[Any], args: list[Any]) -> list[Any]:
    """The graph's outputs, by ``plan`` (see ``translate``), from the program's
    values (tensors) and the graph inputs ``args``.  A value's tensor is handed
    out once; where it is needed again (returned twice) it is another tensor
    over the same memory (as two ``from_numpy`` of one array were)."""
    out: list[Any] = []
    bases: dict[int, Any] = {}  # per computed value: the tensor views are made of
    returned: set[int] = set()
    used: set[int] = set()  # ids of the values' tensors handed out

    def fresh(x: int) -> Any:
        t = values[x]
        if id(t) in used:
            return from_numpy(to_numpy(t))
        used.add(id(t))
        return t

    for kind, x in plan:
        if kind == "value":
            t = bases.get(x) if x not in returned else None
            if t is None:
                t = fresh(x)
                bases.setdefault(x, t)
            returned.add(x)
            out.append(t)
        elif kind in ("reshape", "permuted"):
            base = bases.get(x[0])
            if base is None:
                base = bases[x[0]] = fresh(x[0])
            if kind == "reshape":
                out.append(base.view(x[1]))
            else:  # "permuted"
                out.append(base.view(x[1]).permute(x[2]))
        elif kind == "view":
            out.append(args[x[0]].permute(x[1]))
        else:
            out.append(args[x] if kind == "input" else x)
    return out
