"""``thread``'s ``line``: an index that moves what a kernel writes by whole cache
lines is preferred, so no line is written by two threads (passes/thread.py,
``_whole_lines``).  ShuffleNet's grouped 1 x 1 convolutions were split on their
4 groups, 28 or 34 channels of each pixel a thread: the line between two groups
held both threads' channels.

Choices are checked on the lowered kernel; results against NumPy on the CPU
backend at two threads and on the interpreter after the pass.
"""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.ir import Block
from stripeml.passes.manager import run_pipeline
from stripeml.passes.thread import Thread, choose_thread_index
from stripeml.runtime.interp import run

from .helpers import checker

# ShuffleNet's grouped 1 x 1 convolution: 4 groups of 34 input and 34 output
# channels per pixel, 136 output channels (544 bytes: group g writes bytes
# 136 g to 136 g + 135, so two groups share a 64-byte line)
GROUPED = """function (I[N, H, W, CI], K[C, G, CO]) -> (O) {
    O[n, y, x, 34 * g + co : N, H, W, 136] = +(I[n, y, x, 34 * g + c] * K[c, g, co]);
}"""


def _inputs(side: int = 8) -> list[np.ndarray]:
    rng = np.random.default_rng(side)
    return [
        rng.standard_normal((1, side, side, 136)).astype(np.float32),
        rng.standard_normal((34, 4, 34)).astype(np.float32),
    ]


def _expected(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    x64, k64 = x.astype(np.float64), k.astype(np.float64)
    parts = [
        np.einsum("nyxc,co->nyxo", x64[..., 34 * g : 34 * g + 34], k64[:, g]) for g in range(4)
    ]
    return np.concatenate(parts, axis=-1)


def _lowered(side: int = 8):
    f = stripeml.compile(GROUPED, target="interp")
    return f.lowered(stripeml.api.signature_of(_inputs(side)))


def _kernel(program) -> Block:
    (kernel,) = [s for s in program.root.stmts if isinstance(s, Block)]
    return kernel


def test_without_lines_the_groups_are_split() -> None:
    """The control: by bytes read alone the groups win (each thread reads half
    the weights and half of every pixel's input channels)."""
    assert choose_thread_index(_kernel(_lowered()), 2) == "g"


def test_with_lines_a_pixel_index_is_split() -> None:
    kernel = _kernel(_lowered())
    chosen = choose_thread_index(kernel, 2, 64)
    assert chosen == "y"  # rows of 8 * 136 * 4 bytes: whole lines (a pixel, 544 bytes, is not)
    out = Thread(threads=2, line=64).run(_lowered())
    assert _kernel(out).idxs[0].name == chosen and "thread" in _kernel(out).tags


def test_a_line_the_groups_fill_keeps_the_groups() -> None:
    """With 8-byte lines each group's 136 bytes are whole lines: the groups stay."""
    assert choose_thread_index(_kernel(_lowered()), 2, 8) == "g"


def test_results_after_the_pass_match_the_interpreter() -> None:
    program = _lowered()
    x, k = _inputs()
    expected = run(program, {"I": x, "K": k})
    np.testing.assert_allclose(expected["O"], _expected(x, k), rtol=1e-5, atol=1e-5)
    run_pipeline(program, [Thread(threads=2, line=64)], check=checker({"I": x, "K": k}, expected))


@pytest.mark.parametrize("side", [8, 28])
def test_two_threads_compute_what_numpy_does(side: int) -> None:
    x, k = _inputs(side)
    got = stripeml.compile(GROUPED, target="cpu", threads=2)(x, k)
    np.testing.assert_allclose(got, _expected(x, k), rtol=1e-4, atol=1e-4)


# Element-wise kernels over [A, B, C]: which of their indices may be split with
# no cache line written by both threads but at the cut, against enumeration.
RELU = """function (X[A, B, C]) -> (Y) {
    Y = relu(X);
}"""


def _shared_lines(kernel: Block, index: str, line: int = 64) -> int:
    """Lines both halves of a two-thread split on ``index`` write, enumerated."""
    import itertools

    (out,) = [r for r in kernel.refs if r.dir == "out"]
    ranges = {i.name: i.range for i in kernel.idxs}
    cut = -(-ranges[index] // 2)
    names = [i.name for i in kernel.idxs]
    halves: tuple[set[int], set[int]] = (set(), set())
    for point in itertools.product(*(range(ranges[n]) for n in names)):
        at = dict(zip(names, point))
        element = sum(a.evaluate(at) * st for a, st in zip(out.access, out.shape.strides))
        halves[at[index] >= cut].add(element * 4 // line)
    return len(halves[0] & halves[1])


@pytest.mark.parametrize("shape", [(13, 7, 24), (4, 5, 16), (3, 9, 40), (6, 2, 136), (5, 3, 1)])
def test_whole_lines_against_enumeration(shape: tuple[int, int, int]) -> None:
    from stripeml.analysis.access import accesses
    from stripeml.passes.thread import _whole_lines

    f = stripeml.compile(RELU, target="interp")
    kernel = _kernel(f.lowered(stripeml.api.signature_of([np.ones(shape, np.float32)])))
    accs = accesses(kernel)
    for idx in kernel.idxs:
        if idx.range < 2:
            continue
        if _whole_lines(kernel, accs, idx.name, 64):  # sufficient, not exact
            assert _shared_lines(kernel, idx.name) <= 1, (shape, idx.name)


def test_the_stem_splits_its_row_blocks() -> None:
    """A row index whose stride is not whole lines but spans more than the rest
    of the kernel's writes (a 13 x 24 image: rows of 96 bytes) is taken: its
    chunks are two stretches of memory; its columns, 4 bytes apart, are not."""
    from stripeml.analysis.access import accesses
    from stripeml.passes.thread import _whole_lines

    f = stripeml.compile(RELU, target="interp")
    kernel = _kernel(f.lowered(stripeml.api.signature_of([np.ones((13, 1, 24), np.float32)])))
    accs = accesses(kernel)
    rows, _, columns = (i.name for i in kernel.idxs)
    assert _whole_lines(kernel, accs, rows, 64) and _shared_lines(kernel, rows) <= 1
    assert not _whole_lines(kernel, accs, columns, 64)
    assert _shared_lines(kernel, columns) > 1  # every row's line at the cut


# Groups of 136 output channels, each written in four panels of 32 (channels
# 0-127 of every group, as ShuffleNet's 7 x 7 x 544 convolutions are tiled): a
# panel moves by two whole lines but, in odd groups, starts half way into one.
PANELS = """function (I[N, H, W, CI], K[C, G, B, CO]) -> (O) {
    O[n, y, x, 136 * g + 32 * b + co : N, H, W, 544] = +(I[n, y, x, 136 * g + c] * K[c, g, b, co]);
}"""


def _panel_inputs(side: int) -> list[np.ndarray]:
    rng = np.random.default_rng(side + 1)
    return [
        rng.standard_normal((1, side, side, 544)).astype(np.float32),
        rng.standard_normal((136, 4, 4, 32)).astype(np.float32),
    ]


def test_panels_that_move_by_whole_lines_still_share_lines() -> None:
    """The panel index moves every element by 128 bytes, yet the lines at the
    panels' ends in odd groups hold two panels: it is not whole lines (it was,
    when a whole number of lines moved was enough); a pixel index is."""
    from stripeml.analysis.access import accesses
    from stripeml.passes.thread import _whole_lines

    f = stripeml.compile(PANELS, target="interp")
    program = f.lowered(stripeml.api.signature_of(_panel_inputs(2)))
    # the contraction (the channels 128-135 it leaves are zeroed by a kernel before it)
    (kernel,) = [s for s in program.root.stmts if isinstance(s, Block) and "contraction" in s.tags]
    accs = accesses(kernel)
    assert not _whole_lines(kernel, accs, "b", 64)
    assert _shared_lines(kernel, "b") > 1
    assert _whole_lines(kernel, accs, "x", 64)
    assert _shared_lines(kernel, "x") == 0
    assert choose_thread_index(kernel, 2, 64) != "b"


def test_panels_on_two_threads_compute_what_numpy_does() -> None:
    x, k = _panel_inputs(7)
    got = stripeml.compile(PANELS, target="cpu", threads=2)(x, k)
    x64, k64 = x.astype(np.float64), k.astype(np.float64)
    want = np.zeros((1, 7, 7, 544))
    for g in range(4):
        part = np.einsum("nyxc,cbo->nyxbo", x64[..., 136 * g : 136 * g + 136], k64[:, g])
        want[..., 136 * g : 136 * g + 128] = part.reshape(1, 7, 7, 128)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def _lines_by_value(base: int, moves: list[tuple[int, int]], step: int, values: int) -> list[set]:
    """The 64-byte lines each value writes, by listing every byte offset."""
    import itertools

    lines = []
    for v in range(values):
        grid = itertools.product(*(range(count) for _, count in moves))
        offsets = {base + v * step * 64 + sum(t * m for t, (m, _) in zip(ts, moves)) for ts in grid}
        lines.append({o // 64 for o in offsets})
    return lines


@pytest.mark.parametrize("seed", range(40))
def test_lines_apart_against_enumeration(seed: int) -> None:
    """``_lines_apart`` (classes modulo the step) says what listing every line of
    every value says: no two values write a line in common."""
    from stripeml.passes.thread import _lines_apart

    rng = np.random.default_rng(seed)
    moves = [
        (int(rng.choice([4, 8, 64, 128, 136, 544, 2176, -64, -4])) * int(rng.integers(1, 3)),
         int(rng.integers(1, 6)))
        for _ in range(int(rng.integers(1, 4)))
    ]  # fmt: skip
    base = int(rng.choice([0, 32, 64, 544]))
    step = int(rng.choice([1, 2, 3, 8, 34, -2]))
    values = int(rng.integers(2, 6))
    by_value = _lines_by_value(base, moves, step, values)
    shared = any(by_value[a] & by_value[b] for a in range(values) for b in range(a + 1, values))
    assert _lines_apart(base, moves, step, values, 64) == (not shared), (moves, base, step, values)


POINTWISE = """function (I[N, H, W, C], K[C, CO]) -> (O) {
    O[n, y, x, co : N, H, W, CO] = +(I[n, y, x, c] * K[c, co]);
}"""


def test_ties_go_to_the_index_that_moves_the_writes_furthest() -> None:
    """A 1 x 1 convolution over 8 x 8 pixels of 16 channels (64 bytes, a line):
    half the rows or half the columns read as many bytes a chunk, and both
    write whole lines.  In either order of the kernel's indices the rows are
    split, so the chunks write the output in the order of memory and the
    pool's caller, which claims from the front, writes its first half (what
    the next kernel split alike reads on the same thread).  Ties went to the
    first index in the kernel's order: the columns, after the reversal."""
    from dataclasses import replace

    x, k = np.ones((1, 8, 8, 16), np.float32), np.ones((16, 16), np.float32)
    program = stripeml.compile(POINTWISE, target="interp").lowered(
        stripeml.api.signature_of([x, k])
    )
    kernel = _kernel(program)
    flipped = replace(kernel, idxs=tuple(reversed(kernel.idxs)))
    names = [i.name for i in flipped.idxs]
    assert names.index("x") < names.index("y")
    assert choose_thread_index(kernel, 2, 64) == "y"
    assert choose_thread_index(flipped, 2, 64) == "y"


@pytest.mark.parametrize("seed", range(12))
def test_lines_apart_with_thousands_of_offsets(seed: int) -> None:
    """Thousands of offsets and lines listed: the same answers as listing every
    byte."""
    from stripeml.passes import thread

    rng = np.random.default_rng(100 + seed)
    moves = [(4, int(rng.integers(8, 40))), (int(rng.choice([136, 544, 68])) * 4, 4)]
    moves.append((int(rng.choice([2176, 3808, 1088])) * 4, int(rng.integers(2, 8))))
    step = int(rng.choice([2, 17, 34, 68]))
    values = int(rng.integers(2, 5))
    by_value = _lines_by_value(0, moves, step, values)
    shared = any(by_value[a] & by_value[b] for a in range(values) for b in range(a + 1, values))
    assert thread._lines_apart(0, moves, step, values, 64) == (not shared), (moves, step, values)


@pytest.mark.parametrize("seed", range(40))
def test_lines_apart_by_residues_against_enumeration(seed: int) -> None:
    """Runs of whole lines moved by whole lines (the residue argument decides
    most of these without listing): the same answers as listing every byte."""
    from stripeml.passes.thread import _lines_apart

    rng = np.random.default_rng(500 + seed)
    moves = [(4, int(rng.choice([8, 16, 32, 48])))]
    for _ in range(int(rng.integers(1, 4))):
        moves.append((64 * int(rng.choice([1, 2, 3, 4, 6, 8, 12, 34])), int(rng.integers(2, 9))))
    base = int(rng.choice([0, 32, 64]))
    step = int(rng.choice([1, 2, 3, 4, 5, 8, 12, 16, 24]))
    values = int(rng.integers(2, 9))
    by_value = _lines_by_value(base, moves, step, values)
    shared = any(by_value[a] & by_value[b] for a in range(values) for b in range(a + 1, values))
    assert _lines_apart(base, moves, step, values, 64) == (not shared), (moves, base, step, values)
