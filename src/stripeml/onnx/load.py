"""Reading a model a user hands the importer: a path or a ``ModelProto``.

A path is read with ``onnx`` but *without* its external-data loader: the
tensors whose bytes live in other files are read here, and only from files
inside the model's own folder.  A ``location`` that is absolute, climbs out
with ``..``, or resolves (through symbolic links) to a file outside that
folder is refused, as is anything that is not a regular file (a FIFO would
block the import forever) and an ``offset``/``length`` that does not fit the
file.  The bytes read must be exactly what the tensor's shape and type need.

A ``ModelProto`` built in memory has no folder: a tensor that still says its
data is external is refused (``onnx.numpy_helper`` would otherwise look for
the file relative to the current directory).

Every problem is an :class:`~.builder.OnnxError` naming the file and the
tensor; no exception of ``onnx`` or ``protobuf`` reaches the caller.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import PurePosixPath
from typing import Any

import numpy as np

from ..errors import StripeError
from .builder import OnnxError
from .wire import Reading, start_split

# Element types whose size in bytes numpy knows (onnx maps them to these
# numpy types); the others (4-bit and 2-bit packed types, strings) have no
# fixed byte size and are left to numpy_helper's own checks.
_PACKED = {"int4", "uint4", "float4e2m1", "int2", "uint2"}


def require_onnx() -> Any:
    """The ``onnx`` package (a StripeError saying how to install it when missing)."""
    try:
        import onnx
    except ImportError:  # pragma: no cover - onnx is a dependency of the extra
        raise StripeError(
            "the ONNX frontend needs the 'onnx' package: pip install 'stripeml[onnx]'"
        ) from None
    return onnx


def read_model(model: Any) -> tuple[Any, str | None, dict[int, np.ndarray]]:
    """``model`` as a ``ModelProto`` with every tensor's data in memory (or in the
    arrays beside it), the path it was read from (``None`` for a ``ModelProto``),
    and per position of a main-graph initializer whose raw bytes were read from
    the file straight into an array (:mod:`.wire`), that array; those
    initializers have no ``raw_data`` in the ``ModelProto``."""
    read, path, raws, wait = start_reading(model)
    wait()
    return read, path, raws


def start_reading(
    model: Any,
) -> tuple[Any, str | None, dict[int, np.ndarray], Callable[[], None]]:
    """:func:`read_model`, and a function to call before anything reads the values
    of those arrays: a file's weights are read in a thread of their own
    (:func:`.wire.start_split`) while the caller goes on with the structure.
    The function returns once they are read, and raises the :class:`OnnxError`
    of a file that changed meanwhile."""
    onnx = require_onnx()
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        # (a big-endian host converts the bytes as the Graph reads them: read first)
        read, raws, wait = _read_file(onnx, path, split=True, background=sys.byteorder == "little")
        return read, path, raws, wait
    if not isinstance(model, onnx.ModelProto):
        raise OnnxError(f"expected an onnx.ModelProto or a path, got {type(model).__name__}")
    for tensor, where in model_tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = _entries(tensor).get("location", "")
            raise OnnxError(
                f"{where} keeps its data in an external file ({location!r}), and a "
                "ModelProto in memory has no folder to look for it in: load the model "
                "by path (stripeml.onnx.compile('model.onnx')) so its folder is known"
            )
    return model, None, {}, _nothing


def _nothing() -> None:
    pass


def _read_file(
    onnx: Any, path: str, split: bool = False, background: bool = False
) -> tuple[Any, dict[int, np.ndarray], Callable[[], None]]:
    """The model in the file ``path``, its external tensors read (from its folder);
    with ``split``, its plain initializers' raw bytes read into arrays of their
    own (:func:`.wire.read_split`: one copy of the weights, not three), else
    every tensor's data in the message; with ``background`` as well, those
    bytes are read in a thread of their own (:func:`.wire.start_split`) until
    the function returned third returns (raising what read_split would have)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise OnnxError(f"no such ONNX model: {path}") from None
    except OSError as exc:
        raise OnnxError(f"cannot read ONNX model {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise OnnxError(f"{path}: not a regular file, so not an ONNX model")
    if info.st_size == 0:
        raise OnnxError(f"{path}: the file is empty (0 bytes), not an ONNX model")
    raws: dict[int, np.ndarray] = {}
    reading = Reading()

    def wait() -> None:
        with _read_errors(path):
            reading.wait()

    with _read_errors(path):
        if split:
            data, raws, reading = start_split(path, background=background)
            model = onnx.ModelProto()
            model.ParseFromString(data)
        else:
            model = onnx.load(path, load_external_data=False)
    base = os.path.dirname(os.path.abspath(path))
    for tensor, where in model_tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            tensor.raw_data = _external_bytes(onnx, tensor, base, f"{path}: {where}")
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]
    return model, raws, wait


@contextmanager
def _read_errors(path: str) -> Iterator[None]:
    """A model file's read and decode errors as :class:`OnnxError`."""
    try:
        yield
    except MemoryError:
        raise OnnxError(f"{path}: the model does not fit in memory") from None
    except OnnxError:
        raise
    except Exception as exc:  # noqa: BLE001 - protobuf decode errors and I/O errors
        raise OnnxError(f"{path}: not a valid ONNX model (truncated or corrupt?): {exc}") from None


def full_model(path: str) -> Any:
    """The model in the file ``path`` with every tensor's data in the message (what
    onnxruntime is given to compare with)."""
    model, _, wait = _read_file(require_onnx(), path)
    wait()
    return model


def model_tensors(model: Any) -> Iterator[tuple[Any, str]]:
    """Every ``TensorProto`` of ``model`` that holds data, with a description
    for messages: initializers, sparse initializers and tensor attributes, in
    the main graph, its subgraphs and the model's functions."""
    yield from _graph_tensors(model.graph, "")
    for fn in model.functions:
        yield from _node_tensors(fn.node, f"function {fn.name!r}: ")


def _graph_tensors(graph: Any, prefix: str) -> Iterator[tuple[Any, str]]:
    for t in graph.initializer:
        yield t, f"{prefix}initializer {t.name!r}"
    for s in graph.sparse_initializer:
        yield s.values, f"{prefix}sparse initializer {s.values.name!r} (values)"
        yield s.indices, f"{prefix}sparse initializer {s.values.name!r} (indices)"
    yield from _node_tensors(graph.node, prefix)


def _node_tensors(nodes: Any, prefix: str) -> Iterator[tuple[Any, str]]:
    for n in nodes:
        node = f"{prefix}node {n.name!r} ({n.op_type}) attribute"
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t, f"{node} {a.name!r}"
            for k, t in enumerate(a.tensors):
                yield t, f"{node} {a.name!r}[{k}]"
            if a.HasField("sparse_tensor"):
                yield a.sparse_tensor.values, f"{node} {a.name!r} (values)"
                yield a.sparse_tensor.indices, f"{node} {a.name!r} (indices)"
            if a.HasField("g"):
                yield from _graph_tensors(a.g, f"{node} {a.name!r}: ")
            for k, g in enumerate(a.graphs):
                yield from _graph_tensors(g, f"{node} {a.name!r}[{k}]: ")


def _entries(tensor: Any) -> dict[str, str]:
    """A tensor's ``external_data`` entries (``location``, ``offset`` ...)."""
    return {e.key: e.value for e in tensor.external_data}


def _external_bytes(onnx: Any, tensor: Any, base: str, where: str) -> bytes:
    """The bytes of an external tensor, read from a regular file inside ``base``."""
    bad = bad_dims(tensor)
    if bad is not None:
        raise OnnxError(f"{where}: {bad}")
    entries = _entries(tensor)
    location = entries.get("location", "")
    if not location or "\0" in location:
        raise OnnxError(f"{where}: external data without a usable 'location'")
    parts = PurePosixPath(location.replace("\\", "/"))
    if parts.is_absolute() or os.path.isabs(location) or os.path.splitdrive(location)[0]:
        raise OnnxError(
            f"{where}: external data location {location!r} is an absolute path; "
            "it must be relative to the model's folder"
        )
    if ".." in parts.parts:
        raise OnnxError(
            f"{where}: external data location {location!r} points outside the model's folder"
        )
    root = os.path.realpath(base)
    real = os.path.realpath(os.path.join(root, *parts.parts))
    if os.path.commonpath([root, real]) != root or real == root:
        raise OnnxError(
            f"{where}: external data location {location!r} resolves to {real}, "
            f"outside the model's folder {root}"
        )
    offset = _entry_int(entries, "offset", where)
    length = _entry_int(entries, "length", where)
    try:
        # O_NOFOLLOW: the file checked above is the file opened; O_NONBLOCK: a FIFO
        # planted under the name does not block the open (it is refused below).
        fd = os.open(
            real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        )
    except OSError as exc:
        raise OnnxError(
            f"{where}: cannot open external data file {location!r}: {exc.strerror or exc}"
        ) from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OnnxError(f"{where}: external data {location!r} is not a regular file")
        start = offset or 0
        if start > info.st_size:
            raise OnnxError(
                f"{where}: external data offset {start} is past the end of "
                f"{location!r} ({info.st_size} bytes)"
            )
        count = info.st_size - start if length is None else length
        if start + count > info.st_size:
            raise OnnxError(
                f"{where}: external data wants {count} bytes at offset {start}, but "
                f"{location!r} has {info.st_size} bytes"
            )
        want = expected_bytes(onnx, tensor)
        if want is not None and count != want:
            raise OnnxError(
                f"{where}: external data holds {count} bytes, but shape "
                f"{tuple(tensor.dims)} of {_type_name(onnx, tensor)} needs {want}"
            )
        f.seek(start)
        data = f.read(count)
    if len(data) != count:
        raise OnnxError(f"{where}: external data {location!r} changed while it was read")
    return data


def _entry_int(entries: dict[str, str], key: str, where: str) -> int | None:
    """An ``offset``/``length`` entry as a byte count (``None`` when absent)."""
    if key not in entries:
        return None
    try:
        value = int(entries[key])
    except ValueError:
        value = -1
    if value < 0:
        raise OnnxError(f"{where}: external data {key} {entries[key]!r} is not a byte count")
    return value


def _type_name(onnx: Any, tensor: Any) -> str:
    """A tensor's element type as messages name it (``float``, ``int64`` ...)."""
    try:
        return str(onnx.TensorProto.DataType.Name(tensor.data_type)).lower()
    except ValueError:
        return f"element type {tensor.data_type}"


def bad_dims(tensor: Any) -> str | None:
    """What is wrong with ``tensor``'s declared dims (a negative one), or ``None``."""
    for k, d in enumerate(tensor.dims):
        if d < 0:
            return f"dimension {k} of shape {tuple(tensor.dims)} is negative"
    return None


def element_count(tensor: Any) -> int:
    """The number of elements ``tensor``'s dims declare (checked by :func:`bad_dims`)."""
    count = 1
    for d in tensor.dims:
        count *= int(d)
    return count


def expected_bytes(onnx: Any, tensor: Any) -> int | None:
    """The raw byte size of ``tensor``'s declared shape and type, or ``None`` when
    the type has no fixed element size (strings, packed 4-bit and 2-bit types)
    or is unknown."""
    if _type_name(onnx, tensor) in _PACKED or tensor.data_type == onnx.TensorProto.STRING:
        return None
    try:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except Exception:  # noqa: BLE001 - unknown or undefined element types
        return None
    return element_count(tensor) * itemsize
