"""The compile profile (stripeml.phases): exclusive times, whole phases, nesting."""

from __future__ import annotations

import time

from stripeml import phases


def test_nothing_is_kept_outside_a_recording() -> None:
    with phases.phase("lonely"):
        pass
    with phases.recording() as rec:
        pass
    assert rec.rows() == []


def test_times_are_exclusive_and_add_up() -> None:
    start = time.perf_counter()
    with phases.recording() as rec:
        with phases.phase("outer"):
            time.sleep(0.02)
            with phases.phase("inner"):
                time.sleep(0.05)
            time.sleep(0.02)
        with phases.phase("inner"):
            time.sleep(0.01)
    wall = time.perf_counter() - start
    assert rec.calls == {"outer": 1, "inner": 2}
    assert 0.06 <= rec.seconds["inner"] < wall
    assert 0.04 <= rec.seconds["outer"] < 0.06 + (wall - 0.1)
    assert rec.total <= wall


def test_a_whole_phase_keeps_what_runs_inside_it() -> None:
    with phases.recording() as rec:
        with phases.phase("fold", whole=True):
            with phases.phase("lower"):
                time.sleep(0.01)
    assert list(rec.seconds) == ["fold"] and rec.seconds["fold"] >= 0.01


def test_a_nested_recording_reports_to_the_outer_one() -> None:
    with phases.recording() as outer:
        with phases.phase("a"):
            with phases.recording() as inner:
                with phases.phase("b"):
                    time.sleep(0.01)
    assert list(inner.seconds) == ["b"]
    assert outer.calls == {"a": 1, "b": 1}
    assert outer.seconds["b"] >= 0.01


def test_the_table_names_time_outside_phases() -> None:
    rec = phases.Recording()
    rec.add("codegen", 0.3)
    rec.add("verify", 0.1, 3)
    lines = rec.table(wall=0.5).splitlines()
    assert lines[0].split()[:2] == ["codegen", "300.0"]
    assert "(3 calls)" in lines[1]
    assert lines[2].startswith("(outside phases)") and "100.0 ms" in lines[2]
    assert lines[3].split()[:2] == ["total", "500.0"]
