"""What :mod:`.lengths` found of a model's first program, kept in the disk
cache (the ``lengths/`` folder, :func:`stripeml.api.remembered`): a warm
start neither imports the model at a probe length nor parses its program
again (docs/onnx.md, "Shorter lengths through the first length's program").

The key is the SHA-256 of the ONNX frontend's and the compiler's sources
(:func:`stripeml.api.interpreter_fingerprint`), the
first import's Tile source and the call's lengths and their axes: the
analysis is a function of those (its probes are imports of the same model,
which that source and the frontend decide).  A record that another model with
the same source left is still checked: every shorter call compares its own
import with the marked sizes (``Lengths._restricts``).  Entries are
authenticated like every entry of the cache (forging one needs the cache's
key: it holds a program's source, as a program entry does), and hold JSON:
the marked numbers and axes, the masks' program, and the refusals too (a
model that cannot take shorter lengths is not probed again either).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["REFUSED", "Facts", "key", "recall", "remember"]

_VERSION = 1


@dataclass
class Facts:
    """What the analysis found (``refused``: the model keeps a program per length)."""

    refused: bool
    marked: dict[int, int] = field(default_factory=dict)
    marks: dict[str, dict[int, int]] = field(default_factory=dict)
    least: dict[int, int] = field(default_factory=dict)
    gathered: list[tuple[str, int]] = field(default_factory=list)
    source: str = ""
    fills: dict[str, np.ndarray] = field(default_factory=dict)


REFUSED = Facts(True)


def key(
    spec: Any, ns: Sequence[int], input_axes: dict[int, dict[int, int]], arrays: Sequence[Any]
) -> bytes:
    """The record's key for ``spec`` (the first import) at lengths ``ns``."""
    from .. import api
    from .validated import frontend_fingerprint

    h = hashlib.sha256(f"lengths\0{_VERSION}\0".encode())
    h.update(frontend_fingerprint())
    h.update(api.interpreter_fingerprint().encode())  # the compiler's sources among them
    call = [list(ns), sorted((i, sorted(a.items())) for i, a in input_axes.items())]
    call.append([(list(a.shape), a.dtype.str) for a in arrays])
    h.update(json.dumps(call).encode() + b"\0")
    h.update(spec.source.encode())
    return h.digest()


def _store() -> Any:
    from .. import api

    return api.remembered("lengths")


def recall(k: bytes) -> Facts | None:
    """The facts remembered for ``k``, or None (none, or unreadable)."""
    data = _store().get(k)
    if data is None:
        return None
    try:
        return _decode(json.loads(data.decode()))
    except (ValueError, KeyError, TypeError):
        return None


def remember(k: bytes, facts: Facts) -> None:
    """Keep ``facts`` for ``k`` (written once no compile runs)."""
    _store().put_later(k, json.dumps(_encode(facts)).encode())


def _encode(f: Facts) -> dict:
    if f.refused:
        return {"refused": True}
    return {
        "refused": False,
        "marked": sorted(f.marked.items()),
        "marks": {name: sorted(axes.items()) for name, axes in f.marks.items()},
        "least": sorted(f.least.items()),
        "gathered": f.gathered,
        "source": f.source,
        "fills": [(name, v.dtype.str, repr(v.item())) for name, v in f.fills.items()],
    }


def _decode(d: dict) -> Facts:
    if d["refused"]:
        return REFUSED
    fills = {}
    for name, dtype, text in d["fills"]:
        dt = np.dtype(dtype)
        fills[str(name)] = np.array(float(text) if dt.kind == "f" else int(text), dt)
    return Facts(
        False,
        {int(k): int(g) for k, g in d["marked"]},
        {str(n): {int(a): int(g) for a, g in axes} for n, axes in d["marks"].items()},
        {int(g): int(v) for g, v in d["least"]},
        [(str(n), int(g)) for n, g in d["gathered"]],
        str(d["source"]),
        fills,
    )
