"""Models that validated before are not checked again (warm starts).

:func:`~.validate.check_model` and the opset conversion check
(:func:`~.validate.upgraded`) read every node against ``onnx``'s operator
schemas, and the first schema lookup of a process builds ``onnx``'s whole
schema registry: 10-20 ms of every fresh process's import of a model, checking
a model that the same sources checked before.

So a model that passed both (and needed no conversion) is remembered in the
disk cache's ``models/`` folder (``stripeml.api.remembered("models")``, an
authenticated entry like every other), keyed by the SHA-256 of what the checks
read: the model's message as parsed (for a model read by path, its structure:
the weights read into arrays are not in it, and their sizes are checked where
they are read, ``graph._array``), the installed ``onnx`` and the ONNX
frontend's own sources (:func:`frontend_fingerprint`); the entry holds the
model's ``ai.onnx`` opset.  A later import of the same bytes takes the opset
from there and skips the checks.  Models whose message is over
:data:`MAX_BYTES` (weights held in the message) are not remembered: hashing
them would cost what the checks cost.  A model that fails a check is never
remembered, and a forged entry (which needs the cache's key) only defers an
error to the op writers, which report a malformed node as an ``OnnxError``.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any

#: Larger messages (weights inside) are checked every time.
MAX_BYTES = 16 << 20


@lru_cache(maxsize=1)
def frontend_fingerprint() -> bytes:
    """SHA-256 of the ONNX frontend's sources (the checks and the op table they
    consult), read once per process (1-2 ms)."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.digest()


def model_key(model: Any, read_apart: bool = False) -> bytes | None:
    """What a check of ``model`` (a ``ModelProto``) depends on, or ``None`` when it
    is not remembered (too large).  ``read_apart``: the message was read from a
    file with its weights read into arrays beside it (``load.read_model``), so
    it holds only the structure and ``ByteSize`` is cheap."""
    import onnx

    if not read_apart and _weights_bytes(model) > MAX_BYTES:
        return None
    if model.ByteSize() > MAX_BYTES:
        return None
    head = f"onnx model\0onnx {onnx.__version__}\0".encode()
    return head + frontend_fingerprint() + b"\0" + model.SerializeToString()


#: ``TensorProto``'s repeated fields of numbers (``string_data`` aside).
_TYPED = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data")


def _weights_bytes(model: Any) -> int:
    """The bytes the initializers' values in the message take, from their shapes
    and types (what ``raw_data`` holds; other encodings differ by a few bytes a
    value), stopping once over :data:`MAX_BYTES`.  A tensor with no values in the
    message (a model read by path keeps them apart) counts nothing.  ``ByteSize`` serialises the whole message to
    count it (0.18 s for the light ResNet-50's 100 MB), which this skips for a
    model whose weights are clearly over the bound."""
    from onnx import TensorProto, helper

    total = 0
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL or t.data_type == TensorProto.STRING:
            continue
        if not (t.HasField("raw_data") or any(len(getattr(t, f)) for f in _TYPED)):
            continue  # no values in the message (a model read by path: read apart)
        count = 1
        for d in t.dims:
            count *= max(int(d), 0)
        try:
            size = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        except (KeyError, TypeError, ValueError):
            continue
        total += count * size
        if total > MAX_BYTES:
            break
    return total


def opset_of(key: bytes | None) -> int | None:
    """The ``ai.onnx`` opset remembered for a model that validated, or ``None``."""
    if key is None:
        return None
    from .. import api

    fact = api.remembered("models").get(key)
    if fact is None:
        return None
    try:
        return int(fact.decode("ascii"))
    except ValueError:
        return None


def remember(key: bytes | None, opset: int) -> None:
    """Record that the model of ``key`` validated, with its opset."""
    if key is None:
        return
    from .. import api

    api.remembered("models").put(key, str(int(opset)).encode("ascii"))
