"""A model file read with its weights going straight into arrays.

``onnx.load`` reads the file into one ``bytes`` object, protobuf copies every
initializer's ``raw_data`` out of it into the message, and reading
``raw_data`` from the message copies it again: a 440 MB BERT-base was in
memory three times, and on a machine where fresh memory is slow to touch that
is most of the time to a first result (onnx.load 1.5 s, the importer's read
another 0.2-1.0 s).

:func:`read_split` walks the protobuf wire format of the file itself: the
``ModelProto``'s ``graph`` (field 7), the graph's ``initializer`` entries
(field 5, ``TensorProto``), their ``raw_data`` (field 9).  Every other byte
is kept as it is; each raw_data of a plain numeric type (the types
``graph._array`` reads in place) is read from the file once, into an array of
its own, and left out of the bytes that protobuf then parses (the graph's
structure: nodes, names, shapes, the other tensors, kilobytes).  Tensors of
other element types, and external ones, keep their bytes in the message.

:func:`start_split` reads those bytes in a thread of its own, each array's
pages mapped first (``api.populate_array``), while the caller goes on with
the structure (protobuf's parse, the checks, the target): the importer waits
for it before anything reads a weight's value (``OnnxFunction``, before its
fusions and any import).  The arrays are read-only views from the start; the
arrays under them turn read-only once read, so a view is immutable
(``runtime.host.immutable``) only then.  A light ResNet-50's 100 MB took
0.08-0.12 s of a cold compile's main thread, 0.05-0.07 s with the thread.

Only the file's length is trusted: a truncated varint, a length that runs past
its message or the file, or a wire type protobuf does not use is a
:class:`ValueError`, which the caller reports as a corrupt model.  Repeated
singular fields mean what protobuf makes of them (the last ``raw_data`` wins;
a second ``graph`` merges into the first, its initializers after the first's).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from io import BufferedReader
from typing import Any

import numpy as np

__all__ = ["Reading", "read_split", "start_split"]

_LEN = 2  # length-delimited wire type
_GRAPH = 7  # ModelProto.graph
_INITIALIZER = 5  # GraphProto.initializer
_DATA_TYPE = 2  # TensorProto.data_type
_RAW_DATA = 9  # TensorProto.raw_data
_DATA_LOCATION = 14  # TensorProto.data_location (1: EXTERNAL)

#: TensorProto.DataType values whose raw bytes ``graph._array`` reads in place:
#: float, uint8, int8, uint16, int16, int32, int64, float16, double, uint32, uint64.
PLAIN_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13})


def _varint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise ValueError("a truncated or overlong varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


class _Reader:
    """Ranges of one open file, read exactly (a short read is a ValueError); with
    ``later``, :meth:`into` only makes the arrays, and :meth:`fill` reads them."""

    def __init__(self, f: BufferedReader, size: int, copy: Any = None, later: bool = False) -> None:
        self.f, self.size = f, size
        self.arrays: list[tuple[np.ndarray, int]] = []  # (array read, its offset in the file)
        self.copy = copy  # the disk cache's copy of the file's weights (api.weights_copy)
        # (writable array, offset, length) of each array made but not read yet
        self.unread: list[tuple[np.ndarray, int, int]] | None = [] if later else None

    def read(self, start: int, end: int) -> bytes:
        self.f.seek(start)
        data = self.f.read(end - start)
        if len(data) != end - start:
            raise ValueError("the file ended early (changed while it was read?)")
        return data

    def into(self, start: int, n: int) -> np.ndarray:
        from .. import api  # loaded by the import anyway

        if self.copy is not None:
            arr = self.copy.view(start, n)
            if arr is not None:
                self.arrays.append((arr, start))
                return arr
        # large: no huge pages (runtime.host.fresh_array)
        arr = api.host_array((n,), np.uint8, populate=self.unread is None)
        if self.unread is not None:
            # read by fill(): meanwhile the caller holds a read-only view, whose
            # base turns read-only too once read (host.immutable: then no one
            # can write it; views of it have that base as theirs, and the base
            # is what provenance notes)
            self.unread.append((arr, start, n))
            self.arrays.append((arr, start))
            view = arr.view()
            view.setflags(write=False)
            return view
        self._read_into(arr, start, n)
        arr.setflags(write=False)
        self.arrays.append((arr, start))
        return arr

    def _read_into(self, arr: np.ndarray, start: int, n: int) -> None:
        self.f.seek(start)
        if n and self.f.readinto(arr.data) != n:
            raise ValueError("the file ended early (changed while it was read?)")

    def fill(self) -> None:
        """Read the arrays :meth:`into` made (``later``), in file order."""
        from .. import api

        for arr, start, n in self.unread or ():
            api.populate_array(arr)
            self._read_into(arr, start, n)
            arr.setflags(write=False)
        self.unread = None


def read_split(path: str | os.PathLike[str]) -> tuple[bytes, dict[int, np.ndarray]]:
    """The model file ``path`` as (its protobuf bytes without the main graph's
    plain initializers' raw data, per initializer position its raw bytes as a
    read-only ``uint8`` array)."""
    data, raws, reading = start_split(path, background=False)
    reading.wait()
    return data, raws


class Reading:
    """The raw data of :func:`start_split`, being read in a thread of its own:
    :meth:`wait` until it is all read (raising what the reading raised)."""

    def __init__(self, work: Callable[[], None] | None = None) -> None:
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if work is not None:

            def run() -> None:
                try:
                    work()
                except BaseException as exc:  # noqa: BLE001 - reported by wait()
                    self.error = exc

            self._thread = threading.Thread(target=run, name="stripeml-weights-read", daemon=True)
            self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.error is not None:
            raise self.error


def start_split(
    path: str | os.PathLike[str], background: bool = True
) -> tuple[bytes, dict[int, np.ndarray], Reading]:
    """:func:`read_split`, the raw data read in a thread of its own (``background``)
    while the caller goes on with the structure: until :meth:`Reading.wait`
    returns, the arrays' values are not there yet (nothing may read them), and
    a file that changed while it was read raises there.  The walk over the
    structure is done (its errors raised) when this returns."""
    from .. import api

    raws: dict[int, np.ndarray] = {}
    f = open(path, "rb")  # noqa: SIM115 - closed here, or by the reading thread
    try:
        before = os.fstat(f.fileno())
        size = before.st_size
        copy = api.weights_copy(before)
        r = _Reader(f, size, copy, later=background and copy is None)
        # The ModelProto's own fields are few and small except the graph: read
        # them whole, the graph's structure field by field.
        head = _Headers(r)
        out = bytearray()
        count = [0]
        for field, wire, start, value, end in head.fields(0, size):
            if field == _GRAPH and wire == _LEN:
                body = _graph(r, head, value, end, raws, count)
                out += _encode_varint(_GRAPH << 3 | _LEN) + _encode_varint(len(body)) + body
            else:
                out += r.read(start, end)
    except BaseException:
        f.close()
        raise

    def finish() -> None:
        with f:
            r.fill()
            api.note_file_arrays(f.fileno(), before, r.arrays, r.copy is None)

    if r.unread:
        return bytes(out), raws, Reading(finish)
    finish()
    return bytes(out), raws, Reading()


class _Headers:
    """Field headers read from the file in small windows (no field's value is
    read just to find where the next field begins)."""

    WINDOW = 1 << 16

    def __init__(self, r: _Reader) -> None:
        self.r = r
        self.at = 0
        self.buf = b""

    def _window(self, pos: int, end: int) -> tuple[bytes, int]:
        if not (self.at <= pos and pos + 20 <= self.at + len(self.buf)):
            self.at = pos
            self.buf = self.r.read(pos, min(end, pos + self.WINDOW))
        return self.buf, self.at

    def fields(self, pos: int, end: int):
        while pos < end:
            buf, at = self._window(pos, end)
            limit = at + len(buf)  # a header is at most 20 bytes (two varints)
            view = memoryview(buf)
            start = pos
            tag, p = _varint(view, pos - at, min(limit, end) - at)
            field, wire = tag >> 3, tag & 7
            if field == 0:
                raise ValueError("field number 0")
            if wire == 0:
                value = p + at
                _, p = _varint(view, p, min(limit, end) - at)
                next_pos = p + at
            elif wire == 1:
                value, next_pos = p + at, p + at + 8
            elif wire == _LEN:
                n, p = _varint(view, p, min(limit, end) - at)
                value = p + at
                next_pos = value + n
            elif wire == 5:
                value, next_pos = p + at, p + at + 4
            else:
                raise ValueError(f"wire type {wire} (field {field})")
            if next_pos > end:
                raise ValueError(f"field {field} runs past the end of its message")
            yield field, wire, start, value, next_pos
            pos = next_pos


def _graph(
    r: _Reader,
    head: _Headers,
    pos: int,
    end: int,
    raws: dict[int, np.ndarray],
    count: list[int],
) -> bytes:
    """The GraphProto at ``[pos, end)`` with its plain initializers' raw data taken out."""
    out = bytearray()
    run = pos  # the start of the fields kept as they are, not yet copied
    for field, wire, start, value, stop in head.fields(pos, end):
        if field != _INITIALIZER or wire != _LEN:
            continue
        out += r.read(run, start)
        tensor = r.read(value, stop) if stop - value <= 4096 else None
        body = _tensor(r, value, stop, tensor, raws, count[0])
        count[0] += 1
        out += _encode_varint(_INITIALIZER << 3 | _LEN) + _encode_varint(len(body)) + body
        run = stop
    out += r.read(run, end)
    return bytes(out)


def _tensor(
    r: _Reader,
    pos: int,
    end: int,
    small: bytes | None,
    raws: dict[int, np.ndarray],
    k: int,
) -> bytes:
    """The TensorProto at ``[pos, end)``, its raw data in ``raws[k]`` when plain."""
    if small is not None:  # a small tensor: as it is (what it holds is read in the message)
        return small
    kept: list[tuple[int, int]] = []  # file ranges of the fields other than raw_data
    raw: tuple[int, int] | None = None
    dtype = location = 0
    head = _Headers(r)
    for field, wire, start, value, stop in head.fields(pos, end):
        if field == _RAW_DATA and wire == _LEN:
            raw = (value, stop)
            continue
        if field == _DATA_TYPE and wire == 0:
            dtype = _varint(r.read(value, stop), 0, stop - value)[0]
        elif field == _DATA_LOCATION and wire == 0:
            location = _varint(r.read(value, stop), 0, stop - value)[0]
        kept.append((start, stop))
    if raw is None or dtype not in PLAIN_TYPES or location == 1:
        return r.read(pos, end)
    body = b"".join(r.read(a, b) for a, b in kept)
    raws[k] = r.into(raw[0], raw[1] - raw[0])
    return body
