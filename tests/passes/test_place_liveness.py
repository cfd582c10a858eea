"""``place`` as the CPU pipeline uses it: root only, fast liveness, linear-ish cost.

* the quick coverage test of ``analysis.coverage`` (which spares isl the common
  kernels) gives the same live ranges as isl alone on every program of the
  suite, lowered and after the CPU pipeline;
* ``root_only`` places the root temporaries and leaves nested allocations
  (the kernels' stack slots on the CPU) without an offset;
* the one-sweep first fit finds the offsets the plain search finds;
* a 200-kernel program is placed well under a second.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

import stripeml
from pipelines import cpu_passes
from stripeml.analysis import coverage
from stripeml.analysis.liveness import live_ranges
from stripeml.analysis.memory import own_allocations
from stripeml.errors import StripeError
from stripeml.ir import parse
from stripeml.passes.manager import run_pipeline
from stripeml.passes.place import Place, _first_fit

from .helpers import lower_case

GOLDEN = Path(__file__).parent / "golden"

try:
    from programs import CASES
except ImportError:  # tests/ imported as a package
    from tests.programs import CASES


def walk(block, outer=()):
    """``(block, enclosing blocks)`` for ``block`` and every nested block."""
    yield block, outer
    for s in block.sub_blocks:
        yield from walk(s, (*outer, block))


def _all_live_ranges(program) -> dict[tuple[str, str], tuple[int, int]]:
    out = {}
    for block, outer in walk(program.root):
        for name, rng in live_ranges(block, own_allocations(block), outer).items():
            out[(block.name, name)] = rng
    return out


def _golden_programs() -> list:
    out = []
    for path in sorted(GOLDEN.glob("*/*.txt")):
        text = path.read_text()
        if "=== before\n" not in text:
            continue
        before, _, after = text.split("=== before\n", 1)[1].partition("=== after\n")
        for part in (before, after):
            try:
                out.append(parse(part))
            except StripeError:
                pass  # an "after" that is an error message
    return out


def test_the_quick_coverage_test_agrees_with_isl(monkeypatch) -> None:
    unplaced = [p for p in cpu_passes() if p.name != "place"]
    programs = _golden_programs()
    for case in CASES:
        program, _ = lower_case(case)
        programs += [program, run_pipeline(program, unplaced).program]
    boxes = []
    quick_test = coverage._box

    def counted(use, runs=()):
        boxes.append(quick_test(use, runs))
        return boxes[-1]

    monkeypatch.setattr(coverage, "_box", counted)
    quick = [_all_live_ranges(p) for p in programs]
    monkeypatch.setattr(coverage, "_box", lambda use, runs=(): None)
    slow = [_all_live_ranges(p) for p in programs]
    assert quick == slow
    assert sum(b is not None for b in boxes) > 50 and boxes.count(None) > 5  # both exercised


def test_root_only_leaves_nested_allocations_alone() -> None:
    case = next(c for c in CASES if c.name == "mlp_10_statements")
    program, _ = lower_case(case)
    # 8 lanes on every host: with 16 (AVX-512) this program's tiles need no panels
    result = run_pipeline(program, cpu_passes(vector_width=8)).program
    assert cpu_passes()[-1] == Place(root_only=True)
    nested = [
        r for block, outer in walk(result.root) if outer for r in own_allocations(block)
    ]  # REGISTER accumulators of fused contractions, L1/L2 panels of `unroll`
    assert nested and all(r.offset is None for r in nested)
    assert all(r.offset is not None for r in own_allocations(result.root))
    everywhere = Place().run(result)
    assert any(
        r.offset is not None for b, o in walk(everywhere.root) if o for r in own_allocations(b)
    )
    assert Place(root_only=True).run(result) is result  # a fixed point


def test_the_sweep_finds_what_the_plain_search_finds() -> None:
    def plain(busy, size, align):
        for start in sorted({0, *(-(-end // align) * align for _, end in busy)}):
            if all(start + size <= s or start >= e for s, e in busy):
                return start
        raise AssertionError

    rnd = random.Random(0)
    for _ in range(3000):
        busy = []
        for _ in range(rnd.randint(0, 8)):
            s = rnd.randint(0, 300)
            busy.append((s, s + rnd.choice([0, 1, 4, 16, 64, 100])))
        size, align = rnd.choice([0, 1, 4, 32, 64, 200]), rnd.choice([1, 4, 8, 64])
        assert _first_fit(busy, size, align) == plain(busy, size, align), (busy, size, align)


def _chain_source(n: int) -> str:
    ops = ("exp", "tanh", "relu", "abs")
    lines = ["    T0 = A * B;"]
    for k in range(1, n - 1):
        skip = f" + T{max(k - 5, 0)}" if k % 3 == 0 else ""
        lines.append(f"    T{k} = {ops[k % 4]}(T{k - 1}){skip};")
    lines.append(f"    O = T{n - 2} * A;")
    return "function (A[N, M], B[N, M]) -> (O) {\n" + "\n".join(lines) + "\n}"


@pytest.mark.parametrize("root_only", [True, False])
def test_placing_a_200_kernel_program(root_only: bool) -> None:
    # (Its time, about 0.06 s against 0.8 s before the liveness index, is not
    # asserted: a loaded machine made a 0.5 s bound fail.)
    a = np.ones((64, 64), np.float32)
    program = stripeml.compile(_chain_source(200), target="interp").lower(a, a).program
    assert len(program.root.stmts) == 200
    place = Place(root_only=root_only)
    placed = place.run(program)
    assert Place.peak_bytes(placed)["DRAM"] * 20 < Place.peak_bytes(program)["DRAM"]
    assert place.run(placed) is placed


def test_the_union_of_boxes_matches_brute_force() -> None:
    rnd = random.Random(1)
    for _ in range(2000):
        sizes = tuple(rnd.randint(0, 5) for _ in range(rnd.randint(0, 3)))
        boxes = []
        for _ in range(rnd.randint(0, 5)):
            box = []
            for size in sizes:
                lo = rnd.randint(-2, size + 1)
                box.append((lo, lo + rnd.randint(1, size + 2)))
            boxes.append(tuple(box))
        grid = np.zeros(sizes, bool)
        for box in boxes:
            grid[tuple(slice(max(lo, 0), max(hi, 0)) for lo, hi in box)] = True
        assert coverage._boxes_cover(boxes, sizes) == bool(grid.all()), (sizes, boxes)
