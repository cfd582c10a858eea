"""How the CPU runtime cuts a kernel into chunks for the thread pool:
:func:`chunk_bounds` and the thresholds it uses (re-exported by :mod:`.cpu`)."""

from __future__ import annotations

from ..codegen.cpu_abi import KernelInfo

#: Scalar operations a thread must get before a kernel is split.  The native
#: pool hands a chunk over in about 5 us, and kernels under 2M operations (pools,
#: copies, layer norms, softmaxes, small convolutions) run 10-100 us on one
#: core.  On the 2-core EPYC VM, paired interleaved runs (docs/performance.md,
#: "Splitting small kernels") put 64k against the 1M it was before at 0.87x
#: for ShuffleNet and ViT-tiny, 0.96-0.98x for DenseNet-121, MobileNetV2,
#: ConvNeXt-T, BERT-base, ResNet-50 and SqueezeNet, and within 1% for the rest.
#: ``CpuOptions(min_chunk_work=...)`` overrides it (tests force splits).
MIN_WORK_PER_CHUNK = 1 << 16

#: Chunks per thread of a split kernel (at most: each chunk gets at least
#: ``min_work`` operations).  Threads claim chunks one at a time, so a thread
#: that starts late (a worker waking from sleep, or descheduled on a busy
#: machine) takes fewer of them instead of delaying the kernel by a whole share,
#: and the last chunks, the ones a thread waits for at the end, are short.  On
#: a quiet 2-core VM, 1 and 4 measured the same (ResNet-50 and SqueezeNet, 60
#: paired runs each: median ratio 1.003 and 0.996); 16 against 4, after a
#: call's Python cost had come down to ~14 us: matmul 256 0.27 against 0.30 ms
#: (NumPy 0.25), and over two sittings of 12 paired rounds each ResNet-50
#: 0.95x/0.99x the time, BERT-base 0.94x, ResNet-18 0.96x, GPT-2 0.98x,
#: MobileNetV2 0.96x/1.02x, ViT-tiny 1.02x, SqueezeNet and EfficientNet 1.01x.
CHUNKS_PER_THREAD = 16
#: Chunks per thread a split kernel always may have; more (up to
#: ``CHUNKS_PER_THREAD``) only when each gets ``LONG_CHUNK_WORK`` operations:
#: ShuffleNet's small kernels took 1.17x the time cut into 16 chunks per thread.
FEW_CHUNKS = 4
LONG_CHUNK_WORK = 1 << 20


def chunk_bounds(
    info: KernelInfo,
    threads: int,
    min_work: int = MIN_WORK_PER_CHUNK,
    per_thread: int = 1,
) -> list[int]:
    """Split points of ``[0, parallel_extent)``: one chunk unless splitting pays.

    A kernel is split when at least two threads would each get ``min_work``
    operations; it is then cut into up to ``per_thread`` chunks per thread
    (never more than its iterations, and more than ``FEW_CHUNKS`` per thread
    only when each gets ``LONG_CHUNK_WORK`` operations), which threads claim one
    at a time.  Every
    cut is a multiple of ``info.grain`` (a vectorised split index: whole vectors
    per chunk, so no chunk runs a scalar tail the whole kernel would not).
    """
    extent = info.parallel_extent
    if not info.splittable or threads < 2:
        return [0, extent]
    grain = max(1, info.grain)
    steps = -(-extent // grain)  # whole grains (the last may be short)
    parts = min(threads, steps, info.work // max(1, min_work))
    if parts < 2:
        return [0, extent]
    # Beyond FEW_CHUNKS per thread only chunks of LONG_CHUNK_WORK operations or more.
    most = max(parts * FEW_CHUNKS, info.work // LONG_CHUNK_WORK)
    chunks = min(steps, parts * max(1, per_thread), most)
    return [min(extent, grain * (steps * i // chunks)) for i in range(chunks + 1)]
