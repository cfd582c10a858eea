"""``prefetch`` (passes/prefetch.py) and the prefetches it asks of the CPU code
generator (codegen/llvm_prefetch.py).

A tiled product reads its panels one after another, each once per row block;
when the panels exceed L2, each panel's first pass waits on memory.  The pass
tags such a tile ``#prefetch`` (the panels exceed ``cache_bytes``, two panels
and the other inputs fit it), and the tile's reduction then fetches the next
panel a share per pass.  Tested here: the structure the analysis finds
(``analysis/panels.py``), where the pass tags and where it does not, that the
prefetched addresses cover the whole next panel and nothing of the current
one, and that results still match NumPy.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import stripeml
from stripeml.analysis.panels import streamed_panel
from stripeml.codegen import llvm_prefetch, llvm_tile
from stripeml.ir.affine import Affine
from stripeml.ir.nodes import Block, Program
from stripeml.passes.prefetch import Prefetch
from stripeml.targets.target import PassSpec

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
MIB = 1 << 20


def _target(threads: int, **prefetch: object):
    tg = stripeml.targets.resolve("cpu", threads=threads)
    pipeline = tuple(
        PassSpec(p.name, tuple({**dict(p.options), **prefetch}.items()))
        if p.name == "prefetch"
        else p
        for p in tg.pipeline
    )
    return dataclasses.replace(tg, pipeline=pipeline)


def _arrays(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m + 7 * k + 13 * n)
    return (
        rng.standard_normal((m, k)).astype(np.float32),
        rng.standard_normal((k, n)).astype(np.float32),
    )


def _compiled(m: int, k: int, n: int, threads: int = 1, **prefetch: object):
    a, b = _arrays(m, k, n)
    f = stripeml.compile(MATMUL, _target(threads, **prefetch), constants={"B": b})
    return f, a, b


def _kernel_and_tile(program: Program) -> tuple[Block, Block]:
    for s in program.root.stmts:
        if isinstance(s, Block):
            for t in s.stmts:
                if isinstance(t, Block) and "register_tile" in t.tags:
                    return s, t
    raise AssertionError("no register tile")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))


def test_the_panels_of_a_matmul():
    """128 x 768 by a constant 768 x 3072: panels of 768 rows by the tile's lanes,
    one after another along the kernel's panel index, each read once per row block."""
    f, a, _ = _compiled(128, 768, 3072)
    kernel, tile = _kernel_and_tile(f.lower(a).program)
    panel = streamed_panel(kernel, tile)
    assert panel is not None
    lanes = tile.idxs[-1].range
    rows = next(i.range for i in tile.idxs if i.name.startswith("m"))
    assert panel.stride == 768 * lanes
    assert panel.panel_bytes == 4 * 768 * lanes
    assert kernel.idx(panel.index).range == 3072 // lanes
    assert len(panel.passes) == 1 and panel.count == 128 // rows
    assert kernel.idx(panel.passes[0]).range == 128 // rows
    order = [i.name for i in kernel.idxs]
    assert order.index(panel.index) < order.index(panel.passes[0])


def test_one_row_block_streams_nothing():
    """Rows a single tile holds: each panel is read once, nothing to spread."""
    f, a, _ = _compiled(4, 768, 3072)
    kernel, tile = _kernel_and_tile(f.lower(a).program)
    assert streamed_panel(kernel, tile) is None
    assert "prefetch" not in tile.tags


@pytest.mark.parametrize("threads", [1, 2])
def test_streaming_panels_are_tagged_and_the_results_match_numpy(threads):
    f, a, b = _compiled(128, 768, 3072, threads, cache_bytes=2 * MIB)
    exe = f.lower(a)
    _, tile = _kernel_and_tile(exe.program)
    assert "prefetch" in tile.tags
    assert "llvm.prefetch" in exe.code
    np.testing.assert_allclose(f(a), a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    ("shape", "options", "why"),
    [
        ((128, 768, 3072), {"cache_bytes": 0}, "off"),
        ((128, 768, 3072), {"cache_bytes": 2 * MIB, "enabled": False}, "disabled"),
        ((128, 768, 3072), {"cache_bytes": 64 * MIB}, "all panels fit the cache"),
        ((128, 768, 3072), {"cache_bytes": 2 * MIB, "min_panel_bytes": 1 << 30}, "small panels"),
        # 903 KB of rows and two panels of 590 KB (32 lanes) or 295 KB exceed 1.25 MiB
        ((49, 4608, 512), {"cache_bytes": 5 * MIB // 4}, "two panels and the rows do not fit"),
    ],
)
def test_where_the_pass_tags_nothing(shape, options, why):
    f, a, b = _compiled(*shape, **options)
    exe = f.lower(a)
    _, tile = _kernel_and_tile(exe.program)
    assert "prefetch" not in tile.tags, why
    assert "llvm.prefetch" not in exe.code, why


def test_the_pass_alone_leaves_other_programs_as_they_are():
    """No register tile (an elementwise program): the same object back."""
    f = stripeml.compile("function (A[N]) -> (B) { B = A * 2.0; }", _target(1, cache_bytes=2 * MIB))
    program = f.lower(np.ones(4096, np.float32)).program
    assert Prefetch(cache_bytes=2 * MIB).run(program) is program


RECORD = "stripeml_test_record_prefetch"


@pytest.fixture
def recorded(monkeypatch):
    """Generated code in the test records, through a call into Python, each
    prefetch's address (kind 1) and each tile's start with its panel's origin
    (kind 0), with the recording thread: ``(thread, kind, address)``; the
    callback lives until the test ends."""
    import ctypes
    import threading

    import llvmlite.binding as llvm
    import llvmlite.ir as ir

    records: list[tuple[int, int, int]] = []
    callback = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(
        lambda kind, addr: records.append((threading.get_ident(), kind, addr or 0))
    )
    llvm.add_symbol(RECORD, ctypes.cast(callback, ctypes.c_void_p).value)

    def record(b, kind: int, addr) -> None:
        fn = b.module.globals.get(RECORD)
        if fn is None:
            fn = ir.Function(
                b.module, ir.FunctionType(ir.VoidType(), [ir.IntType(64), ir.PointerType()]), RECORD
            )
        b.call(fn, [ir.Constant(ir.IntType(64), kind), addr])

    def recording_intrinsic(b, base, args, ret=None, overloads=None):
        if base == "llvm.prefetch":
            return record(b, 1, args[0])
        return real_intrinsic(b, base, args, ret, overloads)

    def recording_start(g, plan, env):
        # the current panel's first element: the view's offset at the tile's origin
        # (its own indices 0), from the view itself, not from the plan
        view = plan.bind.offset
        at = Affine.build({n: c for n, c in view.coeffs.items() if n in env}, view.const)
        origin = g.affine(at, env)
        record(g.b, 0, g.b.gep(plan.bind.base, [origin], source_etype=ir.FloatType()))
        return real_start(g, plan, env)

    real_intrinsic, real_start = llvm_prefetch.call_intrinsic, llvm_tile.prefetch_start
    monkeypatch.setattr(llvm_prefetch, "call_intrinsic", recording_intrinsic)
    monkeypatch.setattr(llvm_tile, "prefetch_start", recording_start)
    monkeypatch.setenv("STRIPEML_COMPILE_WORKERS", "0")
    yield records
    del callback


def _fetched_per_panel(
    records: list[tuple[int, int, int]], size: int, share: int
) -> tuple[dict[int, set[int]], dict[int, list[int]]]:
    """From the ``recorded`` fixture's records: per panel origin the lines prefetched
    while its tiles ran, each in a neighbouring panel (the one above or the one
    below) or at most ``share`` past it (the last pass's rounded-up share), and per
    thread the origins of the panels it ran, in order."""
    fetched: dict[int, set[int]] = {}
    order: dict[int, list[int]] = {}
    current: dict[int, int] = {}  # thread -> the origin of the panel it runs
    for thread, kind, addr in records:
        if kind == 0:
            current[thread] = addr
            fetched.setdefault(addr, set())
            seen = order.setdefault(thread, [])
            if not seen or seen[-1] != addr:
                seen.append(addr)
        else:
            origin = current[thread]
            above = origin + size <= addr < origin + 2 * size + share
            below = origin - size <= addr < origin + share  # the same window, a panel down
            assert above or below, "a prefetch outside the neighbouring panels"
            fetched[origin].add(addr // 64)
    return fetched, order


def test_the_prefetches_cover_the_next_panel_and_only_it(recorded):
    """Run the generated code with each prefetch recording its address and each
    tile's start its panel's origin: every line of panel ``p + 1`` is prefetched
    while the tiles of panel ``p`` run, and no prefetch touches panel ``p`` itself
    or goes past ``p + 1``'s last share."""
    records = recorded
    f, a, b = _compiled(96, 512, 2048, cache_bytes=2 * MIB)  # a shape of its own: generated here
    kernel, tile = _kernel_and_tile(f.lower(a).program)
    panel = streamed_panel(kernel, tile)
    assert panel is not None and "prefetch" in tile.tags
    np.testing.assert_allclose(f(a), a @ b, rtol=1e-4, atol=1e-3)

    size = 4 * panel.stride  # bytes from one panel to the next
    share = -(-size // panel.count)
    fetched, _ = _fetched_per_panel(records, size, share)
    panels = kernel.idx(panel.index).range
    assert len(fetched) == panels
    for start, lines in fetched.items():
        assert set(range((start + size) // 64, (start + 2 * size) // 64)) <= lines


def test_chunks_in_the_back_half_run_downwards_and_prefetch_the_panel_below(recorded, monkeypatch):
    """On two threads the pool's caller claims chunks from the front and its
    worker from the back.  A kernel whose panels stream along its split index
    runs a chunk in the back half of that index's range from its last panel down,
    and fetches the panel below the one it runs (the next its thread runs), a
    chunk in the front half upwards, fetching the panel above.  Cut here into
    chunks of two panels (the middle a cut), so panel ``p`` runs downwards when
    ``p`` is in the upper half; results as NumPy's either way."""
    from stripeml.runtime import cpu_steps

    records = recorded
    cuts: list[int] = []

    def two_panels_a_chunk(info, threads, min_work=0, per_thread=1):
        cuts[:] = list(range(0, info.parallel_extent + 1, 2))
        return cuts

    monkeypatch.setattr(cpu_steps, "chunk_bounds", two_panels_a_chunk)
    f, a, b = _compiled(96, 512, 2048, threads=2, cache_bytes=2 * MIB)
    kernel, tile = _kernel_and_tile(f.lower(a).program)
    panel = streamed_panel(kernel, tile)
    assert panel is not None and "prefetch" in tile.tags
    assert kernel.idxs[0].name == panel.index and "thread" in kernel.tags  # split on the panels
    np.testing.assert_allclose(f(a), a @ b, rtol=1e-4, atol=1e-3)

    panels = kernel.idx(panel.index).range
    assert panels % 4 == 0 and cuts == list(range(0, panels + 1, 2))
    size = 4 * panel.stride
    share = -(-size // panel.count)
    fetched, order = _fetched_per_panel(records, size, share)
    assert len(fetched) == panels
    first = min(fetched)
    number = {origin: (origin - first) // size for origin in fetched}
    for origin, lines in fetched.items():
        p = number[origin]
        step = 1 if p < panels // 2 else -1  # the next panel its thread runs
        wanted = origin + step * size
        if 0 <= p + step < panels:
            assert set(range(wanted // 64, (wanted + size) // 64)) <= lines, p
        other = origin - step * size  # the panel it ran before: nothing of it
        assert not lines & set(range(other // 64, (other + size) // 64)), p
    for seen in order.values():  # each chunk of two in the order its half says
        ran = [number[o] for o in seen]
        for p, q in zip(ran, ran[1:]):
            if p // 2 == q // 2:
                assert q == (p + 1 if p < panels // 2 else p - 1), ran
