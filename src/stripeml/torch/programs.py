"""The programs the backend built most recently, for reading: ``last_programs()``.

Each time a graph (or a partition of one) is compiled for an input signature,
its :class:`Program` is kept here, newest last, up to :data:`KEEP` of them: the
Tile source the ATen graph was written into, and on demand the Stripe IR that
source lowers to (``stripe``) and the IR after the target's passes
(``optimised``).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..onnx.importer import Specialised

#: How many programs are kept.
KEEP = 32

_LOCK = threading.Lock()
_PROGRAMS: deque[Program] = deque(maxlen=KEEP)


@dataclass
class Program:
    """One compiled ATen graph (``kind``: "inference", "forward" or "backward")."""

    kind: str
    source: str  # the Tile program
    spec: Specialised = field(repr=False)
    #: per Tile parameter the call passes: (shape, NumPy dtype)
    signature: list[tuple[tuple[int, ...], np.dtype]] = field(repr=False)

    def _executable(self) -> Any:
        if self.spec.function is None:
            return None
        arrays = {
            k: np.zeros(shape, dtype) for k, (shape, dtype) in zip(self.spec.inputs, self.signature)
        }
        return self.spec.function.lower(*self.spec.call_args(arrays))  # type: ignore[arg-type]

    @property
    def stripe(self) -> str:
        """The Stripe IR the Tile source lowers to, before any pass ("" when
        every output was known when compiling)."""
        exe = self._executable()
        return "" if exe is None else exe.stages[0][1]

    @property
    def optimised(self) -> str:
        """The Stripe IR after the target's passes (what the CPU code is made from)."""
        exe = self._executable()
        return "" if exe is None else exe.stages[-1][1]

    def __str__(self) -> str:
        return f"// stripeml.torch {self.kind} graph\n{self.source}"


def record(
    kind: str,
    spec: Specialised,
    metas: list[Any],
    layouts: dict[int, tuple[int, ...]] | None = None,
) -> None:
    """Keep ``spec``; ``layouts``: the inputs it reads stored permuted (index ->
    order: the program's parameter has the permuted shape)."""
    from .lower import np_dtype

    def stored(k: int) -> tuple[int, ...]:
        shape = tuple(int(d) for d in metas[k].shape)
        order = (layouts or {}).get(k)
        return shape if order is None else tuple(shape[d] for d in order)

    signature = [(stored(k), np_dtype(metas[k].dtype)) for k in spec.inputs]
    with _LOCK:
        _PROGRAMS.append(Program(kind, spec.source, spec, signature))


def last_programs(n: int | None = None) -> list[Program]:
    """The ``n`` programs built most recently (all kept ones: ``None``), oldest first."""
    with _LOCK:
        kept = list(_PROGRAMS)
    return kept if n is None else kept[len(kept) - n :] if n > 0 else []


def clear() -> None:
    with _LOCK:
        _PROGRAMS.clear()
