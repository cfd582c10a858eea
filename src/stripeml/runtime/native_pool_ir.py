"""The native pool's LLVM IR (:mod:`.native_pool`): its tuning constants, the
layout of its state block, and :func:`_ir`, the module text (with the OpenMP
team's body, :func:`.omp_team.team_ir`)."""

from __future__ import annotations

import platform
import sys
import time

from . import jit
from .omp_team import team_ir

#: Idle spins (each a ``pause``) before a worker sleeps: a few tenths of a
#: millisecond, longer than the gaps between the kernels of one run.
SPIN_LIMIT = 1 << 13
#: Spinning threads (an idle worker, the caller waiting for the last chunks)
#: call ``sched_yield`` every this many spins: where the scheduler put two of
#: them on one CPU, the other gets it at once instead of at the end of a time
#: slice (a 3x3 conv 14x14x256 -> 256 with 2 threads on a 2-core VM:
#: median 2.9-4.1 ms before, 2.0-2.5 ms with it; the fastest runs 1.9 ms both).
YIELD_EVERY = 64


#: Naps of an idle worker grow from 20 us to this many microseconds.
MAX_NAP_US = 1000
#: Most chunks of one job (``next`` and ``n`` are 16-bit fields of the job word).
MAX_CHUNKS = (1 << 16) - 1

# Word offsets in the state block (the job word and the done counter on
# separate cache lines).
_JOB, _QUIT, _FN, _PTRS, _BOUNDS, _SLEEPERS, _DONE, _WAKE, _WORKER_CHUNKS = (
    0,
    1,
    2,
    3,
    4,
    5,
    8,
    9,
    10,
)
_STATE_WORDS = 16
#: The clock a timed batch reads (``clock_gettime``'s id for the monotonic clock
#: on this platform: 1 on Linux, 6 on macOS).
_CLOCK = getattr(time, "CLOCK_MONOTONIC", 1)


def spin_wait(relax: str) -> str:
    """The blocks ``wait``, ``relax`` and ``yield`` of an idle thread's loop (the
    pool's workers', an OpenMP team's): after ``SPIN_LIMIT`` spins to ``sleep``,
    else a ``relax`` instruction and back to ``loop``, yielding the CPU every
    ``YIELD_EVERY`` spins; ``%spins`` is the count so far, ``%spins1`` the next."""
    return f"""wait:
  %spins1 = add i64 %spins, 1
  %long = icmp ugt i64 %spins1, {SPIN_LIMIT}
  br i1 %long, label %sleep, label %relax
relax:
  {relax}
  %low = and i64 %spins1, {YIELD_EVERY - 1}
  %turn = icmp eq i64 %low, 0
  br i1 %turn, label %yield, label %loop
yield:
  %y = call i32 @sched_yield()
  br label %loop"""


def _futex_syscall() -> int | None:
    """The futex system call's number on this host, ``None`` off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    return {"x86_64": 202, "aarch64": 98}.get(platform.machine())


def futex_wait(futex: int, then: str) -> str:
    """The blocks ``futex:`` and ``unsleep:`` of an idle thread's sleep: wait on
    the wake word ``%fwp`` while it holds ``%fv`` (FUTEX_WAIT_PRIVATE, 50 ms at
    most), then leave the sleepers' count ``%sp`` and branch to ``%then``.
    Shared by the pool's workers and the OpenMP team's body."""
    return f"""futex:
  %ts = alloca [2 x i64], align 8
  %ts0 = getelementptr [2 x i64], [2 x i64]* %ts, i64 0, i64 0
  store i64 0, i64* %ts0, align 8
  %ts1 = getelementptr [2 x i64], [2 x i64]* %ts, i64 0, i64 1
  store i64 50000000, i64* %ts1, align 8
  %fw32 = bitcast i64* %fwp to i32*
  %fv32 = and i64 %fv, 4294967295
  %r = call i64 (i64, ...) @syscall(i64 {futex}, i32* %fw32, i64 128, i64 %fv32, i64* %ts0)
  br label %unsleep
unsleep:
  %s1 = atomicrmw sub i64* %sp, i64 1 seq_cst
  br label %{then}"""


def _ir(naps: bool = False) -> str:
    """The pool's LLVM IR; ``naps``: idle workers nap (usleep) even where futexes exist."""
    triple = jit.host().triple
    if triple.startswith(("x86_64", "i686", "i386")):
        relax = "call void @llvm.x86.sse2.pause()"
        decl = "declare void @llvm.x86.sse2.pause()"
    else:
        relax, decl = "", ""
    futex = None if naps else _futex_syscall()
    if futex is not None:
        # Sleep until the caller publishes a job: FUTEX_WAIT_PRIVATE on the wake
        # word while it still holds the value read before the last look at the
        # job word (50 ms at most, in case of a bug elsewhere).
        sleep = """
  %fv = load atomic i64, i64* %fwp seq_cst, align 8
  %s0 = atomicrmw add i64* %sp, i64 1 seq_cst
  %w = load atomic i64, i64* %jp seq_cst, align 8
  %has = call i1 @pending(i64 %w)
  br i1 %has, label %unsleep, label %futex
"""
        sleep += futex_wait(futex, "napped")
        wake = f"""
  %f0 = atomicrmw add i64* %fwp, i64 1 seq_cst
  %sl = load atomic i64, i64* %sp seq_cst, align 8
  %any = icmp ne i64 %sl, 0
  br i1 %any, label %wake, label %woken
wake:
  %fw32 = bitcast i64* %fwp to i32*
  %r = call i64 (i64, ...) @syscall(i64 {futex}, i32* %fw32, i64 129, i64 2147483647)
  br label %woken
woken:"""
    else:
        sleep = """
  %nap32 = trunc i64 %nap to i32
  %u = call i32 @usleep(i32 %nap32)
  br label %napped"""
        wake = ""
    words = f"""
  %jp = getelementptr i64, i64* %st, i64 {_JOB}
  %sp = getelementptr i64, i64* %st, i64 {_SLEEPERS}
  %fwp = getelementptr i64, i64* %st, i64 {_WAKE}"""
    pool = f"""
{decl}
declare i32 @usleep(i32)
declare i32 @sched_yield()
declare i64 @syscall(i64, ...)
declare i32 @clock_gettime(i32, i64*)

; The monotonic clock in nanoseconds (a timed batch's stamps).
define private i64 @now_ns() {{
entry:
  %ts = alloca [2 x i64], align 8
  %sp = getelementptr [2 x i64], [2 x i64]* %ts, i64 0, i64 0
  %r = call i32 @clock_gettime(i32 {_CLOCK}, i64* %sp)
  %s = load i64, i64* %sp, align 8
  %np = getelementptr [2 x i64], [2 x i64]* %ts, i64 0, i64 1
  %n = load i64, i64* %np, align 8
  %sn = mul i64 %s, 1000000000
  %t = add i64 %sn, %n
  ret i64 %t
}}

; Whether job word %w has an unclaimed chunk (next < end).
define private i1 @pending(i64 %w) alwaysinline {{
entry:
  %next = and i64 %w, 65535
  %e0 = lshr i64 %w, 16
  %end = and i64 %e0, 65535
  %has = icmp ult i64 %next, %end
  ret i1 %has
}}

; Claim a chunk of the job and run it: the caller (%mine = 0) the first
; unclaimed one (next up), a worker (%mine = 1) the last (end down).
define private i1 @claim_and_run(i64* %st, i64 %mine) {{
entry:
  %jp = getelementptr i64, i64* %st, i64 {_JOB}
  br label %again
again:
  %w = load atomic i64, i64* %jp acquire, align 8
  %has = call i1 @pending(i64 %w)
  br i1 %has, label %try, label %none
try:
  %back = icmp ne i64 %mine, 0
  %wf = add i64 %w, 1
  %wb = sub i64 %w, 65536
  %w1 = select i1 %back, i64 %wb, i64 %wf
  %r = cmpxchg i64* %jp, i64 %w, i64 %w1 acq_rel acquire
  %ok = extractvalue {{ i64, i1 }} %r, 1
  br i1 %ok, label %run, label %again
run:
  %fp = getelementptr i64, i64* %st, i64 {_FN}
  %fi = load i64, i64* %fp, align 8
  %fn = inttoptr i64 %fi to void (i8*, i64, i64)*
  %pp = getelementptr i64, i64* %st, i64 {_PTRS}
  %pi = load i64, i64* %pp, align 8
  %ptrs = inttoptr i64 %pi to i8*
  %bp = getelementptr i64, i64* %st, i64 {_BOUNDS}
  %bi = load i64, i64* %bp, align 8
  %bounds = inttoptr i64 %bi to i64*
  %first = and i64 %w, 65535
  %e0 = lshr i64 %w, 16
  %end = and i64 %e0, 65535
  %last = sub i64 %end, 1
  %next = select i1 %back, i64 %last, i64 %first
  %lop = getelementptr i64, i64* %bounds, i64 %next
  %lo = load i64, i64* %lop, align 8
  %next1 = add i64 %next, 1
  %hip = getelementptr i64, i64* %bounds, i64 %next1
  %hi = load i64, i64* %hip, align 8
  call void %fn(i8* %ptrs, i64 %lo, i64 %hi)
  %dp = getelementptr i64, i64* %st, i64 {_DONE}
  %old = atomicrmw add i64* %dp, i64 1 release
  %cp = getelementptr i64, i64* %st, i64 {_WORKER_CHUNKS}
  %oldc = atomicrmw add i64* %cp, i64 %mine monotonic
  ret i1 true
none:
  ret i1 false
}}

define void @stripeml_pool_worker(i64* %st) {{
entry:{words}
  br label %loop
loop:
  %spins = phi i64 [ 0, %entry ], [ 0, %loop ], [ %spins1, %relax ], [ %spins1, %yield ], [ %spins1, %napped ]
  %nap = phi i64 [ 20, %entry ], [ 20, %loop ], [ %nap, %relax ], [ %nap, %yield ], [ %nap2, %napped ]
  %did = call i1 @claim_and_run(i64* %st, i64 1)
  br i1 %did, label %loop, label %idle
idle:
  %qp = getelementptr i64, i64* %st, i64 {_QUIT}
  %q = load atomic i64, i64* %qp acquire, align 8
  %stop = icmp ne i64 %q, 0
  br i1 %stop, label %done, label %wait
{spin_wait(relax)}
sleep:{sleep}
napped:
  %nap1 = shl i64 %nap, 1
  %big = icmp ugt i64 %nap1, {MAX_NAP_US}
  %nap2 = select i1 %big, i64 {MAX_NAP_US}, i64 %nap1
  br label %loop
done:
  ret void
}}

define void @stripeml_pool_wake(i64* %st) {{
entry:{words}{wake}
  ret void
}}

define void @stripeml_pool_run(i64* %st, i64 %fn, i64 %ptrs, i64 %bounds, i64 %n) {{
entry:{words}
  %fp = getelementptr i64, i64* %st, i64 {_FN}
  store i64 %fn, i64* %fp, align 8
  %pp = getelementptr i64, i64* %st, i64 {_PTRS}
  store i64 %ptrs, i64* %pp, align 8
  %bp = getelementptr i64, i64* %st, i64 {_BOUNDS}
  store i64 %bounds, i64* %bp, align 8
  %dp = getelementptr i64, i64* %st, i64 {_DONE}
  %done0 = load atomic i64, i64* %dp acquire, align 8
  %target = add i64 %done0, %n
  %w = load atomic i64, i64* %jp acquire, align 8
  %gen = lshr i64 %w, 32
  %gen1 = add i64 %gen, 1
  %g = shl i64 %gen1, 32
  %nn = shl i64 %n, 16
  %job = or i64 %g, %nn
  store atomic i64 %job, i64* %jp seq_cst, align 8
  call void @stripeml_pool_wake(i64* %st)
  br label %work
work:
  %did = call i1 @claim_and_run(i64* %st, i64 0)
  br i1 %did, label %work, label %wait
wait:
  %spins = phi i64 [ 0, %work ], [ %spins1, %relax ], [ 0, %yield ]
  %d = load atomic i64, i64* %dp acquire, align 8
  %fin = icmp eq i64 %d, %target
  br i1 %fin, label %out, label %relax
relax:
  {relax}
  %spins1 = add i64 %spins, 1
  %long = icmp ugt i64 %spins1, {YIELD_EVERY}
  br i1 %long, label %yield, label %wait
yield:
  %y = call i32 @sched_yield()
  br label %wait
out:
  ret void
}}

; A run of kernels in order: kernel i is fns[i], split into chunks[i] chunks
; at bounds[i] (an address of split points) on the pool, or with chunks[i] = 0
; called once over [0, extents[i]) on this thread.  Its argument array is the
; buffer table ptrs, or where gathers[i] is not 0, an array of its own filled
; first (gathers[i] is the address of [m, slot, add, ...]: entry j is
; ptrs[slot_j] + add_j, or add_j where slot_j < 0), on this thread's stack
; (room: the largest m of the run, at least 1).  Where times is not 0, it is
; the address of steps + 1 stamps of the monotonic clock (ns): before the
; first kernel, then after each (a profile's per-kernel times, taken as the
; kernels run back to back, the workers spinning between them).
define void @stripeml_pool_batch(i64* %st, i64 %steps, i64 %fns, i64 %ptrs, i64 %extents, i64 %bounds, i64 %chunks, i64 %gathers, i64 %room, i64 %times) {{
entry:
  %fa = inttoptr i64 %fns to i64*
  %ea = inttoptr i64 %extents to i64*
  %ba = inttoptr i64 %bounds to i64*
  %ca = inttoptr i64 %chunks to i64*
  %ga = inttoptr i64 %gathers to i64*
  %table = inttoptr i64 %ptrs to i64*
  %own = alloca i64, i64 %room, align 16
  %owni = ptrtoint i64* %own to i64
  %ta = inttoptr i64 %times to i64*
  %timed = icmp ne i64 %times, 0
  br i1 %timed, label %stamp0, label %loop
stamp0:
  %t0 = call i64 @now_ns()
  store i64 %t0, i64* %ta, align 8
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ 0, %stamp0 ], [ %i1, %next ], [ %i1, %stamp ]
  %more = icmp ult i64 %i, %steps
  br i1 %more, label %args, label %done
args:
  %gip = getelementptr i64, i64* %ga, i64 %i
  %gi = load i64, i64* %gip, align 8
  %plain = icmp eq i64 %gi, 0
  br i1 %plain, label %body, label %gather
gather:
  %gd = inttoptr i64 %gi to i64*
  %m = load i64, i64* %gd, align 8
  br label %fill
fill:
  %j = phi i64 [ 0, %gather ], [ %j1, %put ]
  %left = icmp ult i64 %j, %m
  br i1 %left, label %entryj, label %body
entryj:
  %j2 = shl i64 %j, 1
  %sk = add i64 %j2, 1
  %skp = getelementptr i64, i64* %gd, i64 %sk
  %slot = load i64, i64* %skp, align 8
  %ak = add i64 %j2, 2
  %akp = getelementptr i64, i64* %gd, i64 %ak
  %add = load i64, i64* %akp, align 8
  %isconst = icmp slt i64 %slot, 0
  br i1 %isconst, label %put, label %fetch
fetch:
  %tp = getelementptr i64, i64* %table, i64 %slot
  %tv = load i64, i64* %tp, align 8
  br label %put
put:
  %base = phi i64 [ 0, %entryj ], [ %tv, %fetch ]
  %val = add i64 %base, %add
  %op = getelementptr i64, i64* %own, i64 %j
  store i64 %val, i64* %op, align 8
  %j1 = add i64 %j, 1
  br label %fill
body:
  %argi = phi i64 [ %ptrs, %args ], [ %owni, %fill ]
  %pv = inttoptr i64 %argi to i8*
  %fip = getelementptr i64, i64* %fa, i64 %i
  %fi = load i64, i64* %fip, align 8
  %cip = getelementptr i64, i64* %ca, i64 %i
  %n = load i64, i64* %cip, align 8
  %serial = icmp eq i64 %n, 0
  br i1 %serial, label %one, label %split
one:
  %eip = getelementptr i64, i64* %ea, i64 %i
  %e = load i64, i64* %eip, align 8
  %fn = inttoptr i64 %fi to void (i8*, i64, i64)*
  call void %fn(i8* %pv, i64 0, i64 %e)
  br label %next
split:
  %bip = getelementptr i64, i64* %ba, i64 %i
  %b = load i64, i64* %bip, align 8
  call void @stripeml_pool_run(i64* %st, i64 %fi, i64 %argi, i64 %b, i64 %n)
  br label %next
next:
  %i1 = add i64 %i, 1
  br i1 %timed, label %stamp, label %loop
stamp:
  %tn = call i64 @now_ns()
  %tsp = getelementptr i64, i64* %ta, i64 %i1
  store i64 %tn, i64* %tsp, align 8
  br label %loop
done:
  ret void
}}
"""
    return team_ir(relax, futex) + pool
