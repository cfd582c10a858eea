"""What the explorer's sections are made of: stages, buffers, kernels and traffic,
checked against the compiler's own answers (stages, peak bytes, the roofline
accounting, the interpreter's traffic report)."""

from __future__ import annotations

import numpy as np

import stripeml
from stripeml.analysis.memory import allocations
from stripeml.explore.kernels import run_steps
from stripeml.explore.memory import memory_map
from stripeml.explore.passes import build_stages, pass_runs
from stripeml.runtime.interp import run_with_report

from .conftest import mlp_inputs


def _programs(exe):
    exe.stages  # noqa: B018 - computes them
    return exe._stages.programs


def test_stages_are_the_pass_managers(npu_exe) -> None:
    programs = _programs(npu_exe)
    stages = build_stages(programs, npu_exe.timings)
    assert [s.name for s in stages] == [name for name, _ in npu_exe.stages]
    assert stages[0].name == "lower" and stages[0].seconds is None and not stages[0].diff
    runs = pass_runs(programs, npu_exe.timings)
    assert [r.name for r in runs] == [p for p, _ in npu_exe.timings]
    assert [r.name for r in runs if r.changed] == [s.name for s in stages[1:]]
    # Every changed stage's time is its pass's; the diff is of the printed programs.
    times = dict(npu_exe.timings)
    for st, (_, text) in zip(stages[1:], npu_exe.stages[1:]):
        assert st.seconds == times[st.name]
        assert st.text == text and st.lines == len(text.splitlines())
        assert st.added + st.removed > 0
    cache = next(s for s in stages if s.name == "cache")
    assert [k.name for k in cache.changed] == ["k0_Z"]  # the kernel it staged through SRAM
    assert "tiled" in cache.changed[0].tags and cache.changed[0].statement.startswith("Z[b, n")
    assert any(line.startswith("+") and "@SRAM" in line for line in cache.diff)


def test_buffers_are_where_place_put_them(npu_exe) -> None:
    locations = {loc.name: loc for loc in memory_map(npu_exe.program, npu_exe.function.target)}
    assert list(locations) == ["DRAM", "SRAM"]  # the target's order
    placed = {r.into: r for r in allocations(npu_exe.program)}
    for loc in locations.values():
        assert loc.peak == npu_exe.peak_bytes[loc.name]
        assert loc.capacity == npu_exe.function.target.memory(loc.name).size_bytes
        for b in loc.buffers:
            assert b.placed and b.offset == placed[b.name].offset
            assert b.offset + b.size <= loc.peak
    sram = locations["SRAM"].buffers
    assert sorted(b.name for b in sram) == ["W_sram", "X_sram", "Z_sram"]
    assert all(0 <= b.start < b.end <= 1 and b.kernel == "k0_Z" for b in sram)
    # Rectangles that overlap in time never overlap in bytes (what place promises).
    for i, a in enumerate(sram):
        for b in sram[i + 1 :]:
            if a.start < b.end and b.start < a.end:
                assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset
    (z,) = locations["DRAM"].buffers
    assert z.name == "Z" and (z.start, z.end) == (0, 2) and "k0_Z" in z.live


def test_step_by_step_runs_count_what_a_whole_run_counts(npu_exe) -> None:
    program = npu_exe.program
    x, w, bias = mlp_inputs()
    inputs = {"X": x, "W": w, "Bias": bias}
    steps = run_steps(program, inputs)
    assert [s.kernel for s in steps] == ["k0_Z", "k1_Y"]
    result, whole = run_with_report(program, inputs)
    for loc in whole.locations:
        assert sum(s.reads.get(loc, 0) for s in steps) == whole.reads.get(loc, 0)
        assert sum(s.writes.get(loc, 0) for s in steps) == whole.writes.get(loc, 0)
    assert steps[0].reads["SRAM"] > 0 and "SRAM" not in steps[1].reads  # k1 is not tiled
    np.testing.assert_allclose(result["Y"], np.maximum(x @ w + bias, 0), rtol=1e-4, atol=1e-4)


def test_unplaced_and_constant_buffers_are_stacked() -> None:
    """Without ``place`` every temporary is drawn stacked above the last, as
    peak_bytes counts them (each its own space)."""
    src = "function (A, B) -> (C) { T = A + B; U = T * A; C = U - B; }"
    a = np.ones((64, 64), np.float32)
    exe = stripeml.compile(src, target="interp").lower(a, a)
    (dram,) = memory_map(exe.program, exe.function.target)
    assert dram.name == "DRAM" and sorted(b.name for b in dram.buffers) == ["T", "U"]
    assert not any(b.placed for b in dram.buffers)
    offsets = sorted((b.offset, b.size) for b in dram.buffers)
    assert all(o1 + s1 == o2 for (o1, s1), (o2, _) in zip(offsets, offsets[1:]))
    assert offsets[-1][0] + offsets[-1][1] == dram.peak
