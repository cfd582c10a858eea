"""Transposed copies of constant arrays in native code: a model's weights laid out
for the kernels (convolution weights ``(CO, CI, KH, KW)`` as ``(KH, KW, CI, CO)``,
a ``Gemm``'s transposed ``B``) at memory speed.

NumPy copies a transposed view element by element with one side strided, about
1 GB/s here (a 512 x 512 x 3 x 3 float32 weight: 6-8 ms; ResNet-50's 94 MB of
convolution weights: 0.14-0.40 s of every import, most of a warm start).  The
one operation here, :func:`reversed_axes`, reverses the axes of an ``(A, B, C)``
array, optionally multiplying by one factor per ``A`` (a batch normalisation
folded into the weights) on the way: ``out[c, b, a] = src[a, b, c] * scale[a]``.
It walks ``A`` and ``B`` in blocks of 16 with ``C`` innermost, so the source is
read in order and each block's writes stay in L1.

The code is a few lines of LLVM IR, compiled once per machine and kept in the
kernel cache beside the thread pool's (``runtime/``).  Floating-point variants
multiply in the array's own type (one rounding, as NumPy's ``w * scale``);
without a scale, every dtype of 1, 2, 4 or 8 bytes is moved as integers (bit
for bit).  Anything else (a scale with an integer or half dtype, an odd item
size) is NumPy's own copy, with the same result.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from functools import lru_cache
from queue import SimpleQueue
from typing import Any

import numpy as np

from . import jit
from .host import fresh_array

#: Block edge along ``A`` and ``B``.
BLOCK = 16
#: Arrays under this many elements are copied by NumPy (a call's fixed cost wins).
SMALL = 4096
#: Arrays of this many elements or more are split between two threads.
SPLIT = 1 << 18

_INT = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}
_FLOAT = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_FN = ctypes.CFUNCTYPE(
    None,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
)
_LOCK = threading.RLock()


class _Emitter:
    """Straight-line LLVM IR with counted loops (counters in allocas: LLVM's
    ``mem2reg`` makes them registers)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.n = 0

    def fresh(self, stem: str) -> str:
        self.n += 1
        return f"{stem}{self.n}"

    def emit(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def loop(self, lo: str, hi: str, step: int, body) -> None:  # noqa: ANN001
        """``for (i = lo; i < hi; i += step) body(i)``, ``i`` an SSA value."""
        slot, head, inside, after = (self.fresh(x) for x in ("%slot", "head", "body", "exit"))
        self.allocas.append(f"  {slot} = alloca i64")
        self.emit(f"store i64 {lo}, i64* {slot}")
        self.emit(f"br label %{head}")
        self.label(head)
        i, ok = self.fresh("%i"), self.fresh("%ok")
        self.emit(f"{i} = load i64, i64* {slot}")
        self.emit(f"{ok} = icmp slt i64 {i}, {hi}")
        self.emit(f"br i1 {ok}, label %{inside}, label %{after}")
        self.label(inside)
        body(i)
        nxt = self.fresh("%next")
        self.emit(f"{nxt} = add i64 {i}, {step}")
        self.emit(f"store i64 {nxt}, i64* {slot}")
        self.emit(f"br label %{head}")
        self.label(after)

    def op(self, text: str) -> str:
        """Emit ``%new = text``; return ``%new``."""
        v = self.fresh("%v")
        self.emit(f"{v} = {text}")
        return v

    def upper(self, start: str, limit: str) -> str:
        """``min(start + BLOCK, limit)``."""
        e = self.op(f"add i64 {start}, {BLOCK}")
        lt = self.op(f"icmp slt i64 {e}, {limit}")
        return self.op(f"select i1 {lt}, i64 {e}, i64 {limit}")


def _function(name: str, ty: str, scaled: bool) -> str:
    """``void name(ty* src, ty* dst, ty* scale, i64 A, i64 B, i64 C, i64 lo, i64 hi)``,
    over ``lo <= a < hi`` (``lo`` a multiple of ``BLOCK``): per block of
    ``BLOCK`` along each axis, the source is read in order into a local buffer laid
    out as the destination's block (``tmp[c][b][a]``), which is then written out a
    destination row (``BLOCK`` elements along ``A``) at a time.  Writing the
    destination directly would walk it with a stride of ``A`` elements, and at
    power-of-two sizes the lines of a block then fall into one cache set."""
    e = _Emitter()
    tmp_n = BLOCK**3

    def at(ptr: str, index: str) -> str:
        return e.op(f"getelementptr {ty}, {ty}* {ptr}, i64 {index}")

    def tmp_at(cl: str, bl: str, al: str) -> str:
        x = e.op(f"mul i64 {cl}, {BLOCK}")
        x = e.op(f"add i64 {x}, {bl}")
        x = e.op(f"mul i64 {x}, {BLOCK}")
        x = e.op(f"add i64 {x}, {al}")
        return e.op(f"getelementptr [{tmp_n} x {ty}], [{tmp_n} x {ty}]* %tmp, i64 0, i64 {x}")

    def blocks(a0: str) -> None:
        a1 = e.upper(a0, "%A")

        def b_blocks(b0: str) -> None:
            b1 = e.upper(b0, "%B")

            def c_blocks(c0: str) -> None:
                c1 = e.upper(c0, "%C")

                def gather_a(a: str) -> None:
                    s = None
                    if scaled:
                        s = e.op(f"load {ty}, {ty}* {at('%scale', a)}, align 1")
                    al = e.op(f"sub i64 {a}, {a0}")

                    def gather_b(b: str) -> None:
                        row = e.op(f"mul i64 {a}, %B")
                        row = e.op(f"add i64 {row}, {b}")
                        row = e.op(f"mul i64 {row}, %C")
                        bl = e.op(f"sub i64 {b}, {b0}")

                        def gather_c(c: str) -> None:
                            v = e.op(
                                f"load {ty}, {ty}* {at('%src', e.op(f'add i64 {row}, {c}'))}, align 1"
                            )
                            if s is not None:
                                v = e.op(f"fmul {ty} {v}, {s}")
                            cl = e.op(f"sub i64 {c}, {c0}")
                            e.emit(f"store {ty} {v}, {ty}* {tmp_at(cl, bl, al)}, align 1")

                        e.loop(c0, c1, 1, gather_c)

                    e.loop(b0, b1, 1, gather_b)

                e.loop(a0, a1, 1, gather_a)

                def scatter_c(c: str) -> None:
                    cl = e.op(f"sub i64 {c}, {c0}")

                    def scatter_b(b: str) -> None:
                        bl = e.op(f"sub i64 {b}, {b0}")
                        row = e.op(f"mul i64 {c}, %B")
                        row = e.op(f"add i64 {row}, {b}")
                        row = e.op(f"mul i64 {row}, %A")

                        def scatter_a(a: str) -> None:
                            al = e.op(f"sub i64 {a}, {a0}")
                            v = e.op(f"load {ty}, {ty}* {tmp_at(cl, bl, al)}, align 1")
                            dst = at("%dst", e.op(f"add i64 {row}, {a}"))
                            e.emit(f"store {ty} {v}, {ty}* {dst}, align 1")

                        e.loop(a0, a1, 1, scatter_a)

                    e.loop(b0, b1, 1, scatter_b)

                e.loop(c0, c1, 1, scatter_c)

            e.loop("0", "%C", BLOCK, c_blocks)

        e.loop("0", "%B", BLOCK, b_blocks)

    e.loop("%lo", "%hi", BLOCK, blocks)
    e.emit("ret void")
    body = "\n".join(e.lines)
    allocas = "\n".join(e.allocas)
    return f"""
define void @{name}({ty}* noalias nocapture readonly %src, {ty}* noalias nocapture %dst,
    {ty}* nocapture readonly %scale, i64 %A, i64 %B, i64 %C, i64 %lo, i64 %hi) nounwind {{
entry:
  %tmp = alloca [{tmp_n} x {ty}], align 64
{allocas}
  br label %start
start:
{body}
}}
"""


def _symbol(ty: str, scaled: bool) -> str:
    return f"stripeml_reverse3_{ty}{'_scaled' if scaled else ''}"


#: LLVM optimisation level of the helpers: at 1 a helper compiles in 0.04 s
#: (at 3: 0.08-0.11 s, paid by a cold start on a new machine) and copies 5 GB/s
#: instead of 6.5 (ResNet-50's weights: 20 ms instead of 15).
OPT = 1


#: Compile a helper the disk cache lacks on a thread of its own, copying with
#: NumPy (the same bytes) until it is ready, instead of making the caller wait:
#: the compile (35-45 ms a helper) then overlaps the rest of a cold import.
BACKGROUND = True
#: At most this many bytes in all are copied by NumPy while helpers compile
#: (NumPy copies about 1 GB/s, a fifth of a helper's speed: 24 MB take about as
#: long as a compile); a copy past that waits for its helper.  The light
#: ResNet-50's Winograd and classifier weights (22 MB) all go by NumPy; VGG-19's
#: nine 9.4 MB weights and 411 MB classifier would take NumPy longer than the
#: compiles (it copies its first 23 MB so).
NUMPY_BYTES = 24 << 20
_numpy_bytes = 0

#: The helpers a float32 model's import asks for (a convolution's weights with a
#: batch normalisation's factors; one without, or a ``Gemm``'s transposed ``B``):
#: the first asked for starts the other's compile too, so that it is ready when
#: asked for.
_TOGETHER = {("float", True): (("i32", False),), ("i32", False): (("float", True),)}

_ENTRIES: dict[tuple[str, bool], Callable[..., None]] = {}
_COMPILING: dict[tuple[str, bool], threading.Thread] = {}


def _entry(ty: str, scaled: bool, wait: bool = True) -> Callable[..., None] | None:
    """One helper, compiled once per machine (its object kept in the kernel cache's
    ``runtime/`` folder, beside the thread pool's) and loaded once per process.
    With ``wait`` false, a helper the cache does not hold is compiled on a thread
    of its own (:data:`BACKGROUND`) and ``None`` returned until it is loaded."""
    kind = (ty, scaled)
    fn = _ENTRIES.get(kind)
    if fn is not None:
        return fn
    with _LOCK:
        fn = _ENTRIES.get(kind) or _start(kind)
        if fn is not None:
            return fn
        if not (wait and BACKGROUND):
            for other in _TOGETHER.get(kind, ()):
                _start(other)
        thread = _COMPILING.get(kind)
    if not wait and BACKGROUND:
        return None
    if thread is not None:
        thread.join()
    fn = _ENTRIES.get(kind)
    if fn is None:  # the compile failed: again, here, where its error is raised
        fn = _compile(kind, *_source(kind))
    return fn


def _source(kind: tuple[str, bool]) -> tuple[Any, str, str]:
    """``kind``'s kernel cache, key and LLVM IR text."""
    from .kernel_cache import KernelCache, cache_key

    text = f'target triple = "{jit.host().triple}"\n' + _function(_symbol(*kind), *kind)
    key = cache_key(f"native layout\0{OPT}\0{text}", jit.target_description())
    return KernelCache(folder="runtime"), key, text


def _start(kind: tuple[str, bool]) -> Callable[..., None] | None:
    """(With :data:`_LOCK` held.)  ``kind``'s helper loaded from the disk cache,
    else ``None`` and its compile started on a thread of its own, if it was not."""
    if kind in _ENTRIES or kind in _COMPILING:
        return _ENTRIES.get(kind)
    cache, key, text = _source(kind)
    entry = cache.get(key)
    if entry is not None:
        return _load(kind, entry.object_code)
    thread = threading.Thread(
        target=_compile_quietly,
        args=(kind, cache, key, text),
        name="stripeml-layout-compile",
        daemon=False,  # an exit waits for it: no LLVM call cut off mid-way
    )
    _COMPILING[kind] = thread
    thread.start()
    return None


def _compile(kind: tuple[str, bool], cache: Any, key: str, text: str) -> Callable[..., None]:
    """Compile ``kind``'s helper, store it in ``cache`` under ``key`` and load it."""
    from ..codegen.cpu_abi import CpuModule
    from .kernel_cache import Entry

    entry = Entry(jit.compile_ir(text, count=False, opt=OPT), CpuModule(text, (), ()))
    cache.put(key, entry)
    with _LOCK:
        return _load(kind, entry.object_code)


def _compile_quietly(kind: tuple[str, bool], cache: Any, key: str, text: str) -> None:
    """:func:`_compile` on its own thread: a failure is left for the caller that
    waits, which compiles again and so raises it on its own thread."""
    try:
        _compile(kind, cache, key, text)
    except Exception:  # noqa: BLE001, S110 - raised again where it is waited for
        pass
    finally:
        with _LOCK:
            _COMPILING.pop(kind, None)


def _load(kind: tuple[str, bool], object_code: bytes) -> Callable[..., None]:
    code = jit.load_object(object_code, count=False)
    _LOADED.append(code)  # never freed: the function pointer outlives this call
    fn = _ENTRIES[kind] = _FN(code.address(_symbol(*kind)))
    return fn


def _settle_compiles() -> None:
    """Wait for the helpers being compiled (before a fork: no LLVM call, and no
    lock of it, is left half-way in the child)."""
    for thread in list(_COMPILING.values()):
        thread.join()


_LOADED: list[jit.LoadedObject] = []


class _Helper:
    """One daemon thread running the jobs it is given, in order: a thread and a
    queue, not ``concurrent.futures`` (whose import, ``logging`` with it, cost
    8-17 ms of every fresh process's first weight layout: a warm start)."""

    def __init__(self) -> None:
        self._jobs: SimpleQueue[Callable[[], None]] = SimpleQueue()
        threading.Thread(target=self._serve, name="stripeml-layout", daemon=True).start()

    def _serve(self) -> None:
        while True:
            self._jobs.get()()

    def submit(self, job: Callable[[], None]) -> Callable[[], None]:
        """Run ``job`` on the thread; returns the wait for it (which raises what
        ``job`` raised)."""
        done = threading.Lock()
        done.acquire()
        failed: list[BaseException] = []

        def run() -> None:
            try:
                job()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiter
                failed.append(exc)
            finally:
                done.release()

        def wait() -> None:
            with done:
                pass
            if failed:
                raise failed[0]

        self._jobs.put(run)
        return wait


@lru_cache(maxsize=1)
def _helper() -> _Helper:
    """One helper thread, started at the first large copy, for the second half."""
    return _Helper()


# A forked child has no helper thread: it starts its own.
os.register_at_fork(before=_settle_compiles, after_in_child=_helper.cache_clear)


def _numpy(src: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
    a, b, c = src.shape
    out = fresh_array((c, b, a), src.dtype)
    view = src.transpose(2, 1, 0)
    for i in range(0, a, 64):  # blocks of 64 along A: NumPy's strided side stays in cache
        if scale is None:
            out[:, :, i : i + 64] = view[:, :, i : i + 64]
        else:
            np.multiply(view[:, :, i : i + 64], scale[i : i + 64], out=out[:, :, i : i + 64])
    return out


def reversed_axes(src: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
    """A new C-contiguous ``(C, B, A)`` array ``out[c, b, a] = src[a, b, c]``, times
    ``scale[a]`` when a scale (shape ``(A,)``, ``src``'s dtype) is given; ``src``
    has shape ``(A, B, C)``.  The result owns its memory."""
    if src.ndim != 3:
        raise ValueError(f"reversed_axes takes an (A, B, C) array, got shape {src.shape}")
    a, b, c = src.shape
    if scale is not None and (scale.shape != (a,) or scale.dtype != src.dtype):
        raise ValueError(
            f"reversed_axes: a scale of shape ({a},) and dtype {src.dtype}, "
            f"got {scale.shape} {scale.dtype}"
        )
    if scale is None:
        ty = _INT.get(src.dtype.itemsize) if src.dtype.kind in "biuf" else None
    else:
        ty = _FLOAT.get(src.dtype)
    if ty is None or src.size < SMALL:
        return _numpy(src, scale)
    global _numpy_bytes
    fn = _entry(ty, scale is not None, wait=_numpy_bytes + src.nbytes > NUMPY_BYTES)
    if fn is None:  # being compiled (a cold cache): NumPy's copy, the same bytes
        _numpy_bytes += src.nbytes
        return _numpy(src, scale)
    src = np.ascontiguousarray(src)
    out = fresh_array((c, b, a), src.dtype)  # large: no huge pages (host.fresh_array)
    factors = None if scale is None else np.ascontiguousarray(scale)
    if c == 1:  # the same memory as (A, 1, B) -> (B, 1, A): long innermost loops
        b, c = 1, b
    args = (
        src.ctypes.data,
        out.ctypes.data,
        None if factors is None else factors.ctypes.data,
        a,
        b,
        c,
    )
    half = (a // 2 + BLOCK - 1) // BLOCK * BLOCK
    if src.size < SPLIT or half >= a:
        fn(*args, 0, a)
        return out
    # Two threads (a ctypes call releases the GIL), each on its own rows of A.
    other = _helper().submit(lambda: fn(*args, half, a))
    fn(*args, 0, half)
    other()
    return out
