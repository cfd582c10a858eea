"""The memory passes on the whole program suite: results, placement, fixed points.

Every case of ``tests/programs.py`` is lowered and run through pipelines that
end with the memory passes (with and without ``fuse`` first).  The pass
manager verifies each stage and the interpreter re-runs every changed stage
against the unoptimised outputs; the final program must also match the NumPy
reference, run correctly with its allocations really sharing memory by offset
(``run(..., arena=True)``), pass the brute-force overlap checker, and be a
fixed point of each memory pass.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import stripeml
from pipelines import cpu_passes
from stripeml.passes import Dce, Fuse, make_pass
from stripeml.passes.cache import Cache
from stripeml.passes.localize import Localize
from stripeml.passes.manager import run_pipeline
from stripeml.passes.pad import Pad
from stripeml.passes.place import Place
from stripeml.passes.prune import Prune
from stripeml.passes.scalarize import Scalarize
from stripeml.runtime.interp import run

from .helpers import assert_close, checker, lower_case
from .memcheck import assert_placed_soundly

try:
    from programs import CASES, Case  # tests/programs.py
except ImportError:  # tests/ imported as a package
    from tests.programs import CASES, Case

MEMORY = ("localize", "scalarize", "cache", "place", "pad", "prune")

PIPELINES: dict[str, Callable[[], list]] = {
    "lowered": lambda: [Localize(), Scalarize(), Prune(), Pad(multiple=4), Place()],
    "cpu": lambda: [*cpu_passes(), Localize(), Scalarize(), Prune(), Pad(), Place()],
    "cache_kernels": lambda: [
        # the CPU pipeline's own `place` (64-byte alignment) would not be at a
        # fixed point after the final placement with another alignment
        *(p for p in cpu_passes() if p.name != "place"),
        Cache(location="SRAM", select="kernel"),
        Localize(),
        Scalarize(),
        Prune(),
        Place(alignment=16),
    ],
    "autotile_cache": lambda: [
        make_pass("autotile", memory_bytes=1024),
        Cache(location="SRAM", select="tiled"),
        Localize(),
        Scalarize(),
        Prune(),
        Pad(multiple=4),
        Place(),
    ],
    "cache_fused": lambda: [
        Fuse(unit_stride_reductions_only=False, reused_inputs=True),
        Dce(),
        Cache(location="L1", select="fused", dirs="all"),
        Prune(),
        Place(locations=("DRAM", "L1"), alignment=8),
    ],
}


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_memory_pipeline_preserves_results(case: Case, pipeline: str) -> None:
    program, inputs = lower_case(case)
    expected = run(program, inputs)
    tol = {"rtol": case.rtol, "atol": case.atol}
    passes = PIPELINES[pipeline]()
    result = run_pipeline(program, passes, check=checker(inputs, expected, **tol)).program
    stripeml.ir.verify(result)
    want = dict(zip((r.into for r in program.outputs), case.reference(dict(inputs))))
    assert_close(run(result, inputs), want, case.name, **tol)
    assert_close(run(result, inputs, arena=True), expected, f"{case.name} (arena)", **tol)
    assert_placed_soundly(result)
    for p in passes:
        if p.name in MEMORY:
            assert p.run(result) is result, f"{p.name} is not at a fixed point"
