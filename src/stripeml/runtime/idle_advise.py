"""``madvise`` on a native thread of the scheduler's idle class, for background
work on memory that should take no CPU from the calls' threads.

The huge-page collapse of a program's kept layouts (:mod:`.kept_pages`)
copies every 2 MiB piece into a fresh huge page (``MADV_COLLAPSE``: 2-3 ms a
MB here).  Calls made back to back leave it no gap, so each piece ran beside
them, on one of the CPUs their threads use: BERT-base at sequence 512 took
about 500 ms a call for the 25 s the collapse of its 340 MB of layouts lasted,
and 484 ms after it (2 CPUs).  Here the piece's ``madvise`` runs on a thread
of its own in the ``SCHED_IDLE`` class (Linux's lowest: it gets a CPU only
when no other thread of the machine wants it), created and joined for each
call.  It is a native thread, made by a few lines of LLVM IR (no C compiler
needed): a Python thread at that class would also hold the interpreter's lock
at that class, and a call waiting for the lock would wait for a CPU to fall
idle.  The Python thread that asks waits in ``pthread_join`` without the lock.

:func:`idle_madvise` is Linux only; elsewhere, or where the code cannot be
made, it returns ``None`` and callers advise on their own thread.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable

import numpy as np

from . import jit

#: Linux's ``SCHED_IDLE`` (``sched.h``; the same on every architecture).
SCHED_IDLE = 5

# The job block's words: address, length, advice; then what the thread wrote:
# madvise's result, its scheduling policy, its thread id.
_ADDR, _LEN, _ADVICE, _RESULT, _POLICY, _TID = range(6)
_WORDS = 8

_IR = f"""
declare i32 @pthread_create(i64*, i8*, i8* (i8*)*, i8*)
declare i32 @pthread_join(i64, i8**)
declare i32 @sched_setscheduler(i32, i32, i32*)
declare i32 @sched_getscheduler(i32)
declare i32 @madvise(i8*, i64, i32)
declare i64 @syscall(i64, ...)

; The thread: into the idle class, then madvise(job[0], job[1], job[2]).
define private i8* @idle_advise(i8* %arg) {{
entry:
  %job = bitcast i8* %arg to i64*
  %param = alloca i32, align 4
  store i32 0, i32* %param, align 4
  %set = call i32 @sched_setscheduler(i32 0, i32 {SCHED_IDLE}, i32* %param)
  %pol = call i32 @sched_getscheduler(i32 0)
  %polw = sext i32 %pol to i64
  %pp = getelementptr i64, i64* %job, i64 {_POLICY}
  store i64 %polw, i64* %pp, align 8
  %tid = call i64 (i64, ...) @syscall(i64 TID_SYSCALL)
  %tp = getelementptr i64, i64* %job, i64 {_TID}
  store i64 %tid, i64* %tp, align 8
  %a = load i64, i64* %job, align 8
  %lp = getelementptr i64, i64* %job, i64 {_LEN}
  %len = load i64, i64* %lp, align 8
  %vp = getelementptr i64, i64* %job, i64 {_ADVICE}
  %adv = load i64, i64* %vp, align 8
  %adv32 = trunc i64 %adv to i32
  %ptr = inttoptr i64 %a to i8*
  %r = call i32 @madvise(i8* %ptr, i64 %len, i32 %adv32)
  %rw = sext i32 %r to i64
  %rp = getelementptr i64, i64* %job, i64 {_RESULT}
  store i64 %rw, i64* %rp, align 8
  ret i8* null
}}

; The job on a thread of its own, joined: 0, or pthread_create's error
; (then nothing ran).
define i64 @stripeml_idle_madvise(i64* %job) {{
entry:
  %th = alloca i64, align 8
  %arg = bitcast i64* %job to i8*
  %rc = call i32 @pthread_create(i64* %th, i8* null, i8* (i8*)* @idle_advise, i8* %arg)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %join, label %fail
join:
  %t = load i64, i64* %th, align 8
  %j = call i32 @pthread_join(i64 %t, i8** null)
  ret i64 0
fail:
  %rcw = sext i32 %rc to i64
  ret i64 %rcw
}}
"""

#: ``gettid``'s system call number by machine (``syscall(2)``; glibc's own
#: ``gettid`` is newer than some hosts' libc).
_GETTID = {"x86_64": 186, "aarch64": 178, "ppc64le": 207, "s390x": 236}

_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)
_LOCK = threading.Lock()
#: The loaded object and its function, once made (never freed: a joined thread
#: ran in its code); why it could not be made, where it could not.
_MADE: list[tuple[jit.LoadedObject, Callable[[int], int]]] = []
_FAILED: list[str] = []


def _ir() -> str | None:
    import platform

    number = _GETTID.get(platform.machine())
    return None if number is None else _IR.replace("TID_SYSCALL", str(number))


def _function() -> Callable[[int], int] | None:
    """The compiled ``stripeml_idle_madvise``, made once per process (its object
    kept in the kernel cache beside the thread pool's), or ``None``."""
    if _MADE:
        return _MADE[0][1]
    if _FAILED or not sys.platform.startswith("linux"):
        return None
    text = _ir()
    if text is None:
        return None
    from .native_pool import runtime_object

    with _LOCK:
        if _MADE:
            return _MADE[0][1]
        try:
            loaded = runtime_object("idle madvise", text)
            fn = _FN(loaded.address("stripeml_idle_madvise"))
        except Exception as exc:  # noqa: BLE001 - no code: callers advise on their own thread
            _FAILED.append(str(exc))
            return None
        _MADE.append((loaded, fn))
        return fn


class Advised:
    """What the idle thread did: ``result`` (madvise's: 0, or -1), ``policy``
    (its scheduling class when it ran: :data:`SCHED_IDLE` where the host
    allows it) and ``thread`` (its thread id)."""

    def __init__(self, words: np.ndarray) -> None:
        self.result = int(words[_RESULT])
        self.policy = int(words[_POLICY])
        self.thread = int(words[_TID])


def idle_madvise() -> Callable[[int, int, int], Advised | None] | None:
    """A function ``(address, length, advice)`` that runs ``madvise`` on a fresh
    native thread in the idle scheduling class and returns once it has run
    (:class:`Advised`; ``None`` when no thread could be made, and nothing
    ran); ``None`` where there is no such code (not Linux, or it could not be
    compiled)."""
    fn = _function()
    if fn is None:
        return None

    def advise(address: int, length: int, advice: int) -> Advised | None:
        words = np.zeros(_WORDS, np.int64)
        words[_ADDR], words[_LEN], words[_ADVICE] = address, length, advice
        words[_RESULT] = -1
        if fn(words.ctypes.data) != 0:
            return None
        return Advised(words)

    return advise
