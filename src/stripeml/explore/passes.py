"""The Passes section's data: each pass run with its time, and each stage (the
program after a pass that changed it) with its diff against the stage before.

The pass manager (:mod:`stripeml.passes.manager`) keeps a stage only when a
pass changed the program, and the time of every pass it ran.  Stages are
matched to runs in pipeline order (a pass run that has no stage changed
nothing).  IR nodes are immutable, so a root statement of a stage that is the
very object of the stage before is unchanged: only the kernels a pass touched
are listed under it, each with its tags and the source statement it came from.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from ..analysis.roofline import step_name
from ..ir.nodes import Block, Program, Statement
from ..ir.printer import format as format_ir
from ..ir.printer import format_block, format_stmt

#: A diff longer than this many lines is cut (the page stays small enough to open).
MAX_DIFF_LINES = 6000


@dataclass(frozen=True)
class Kernel:
    """One root statement as a stage shows it."""

    name: str
    tags: tuple[str, ...]
    statement: str  # the source statement (the block's comment), "" for none
    text: str  # its Stripe IR


@dataclass(frozen=True)
class Stage:
    """The program after ``name`` (``lower``: as the frontend emitted it)."""

    name: str
    seconds: float | None  # the pass's time (None for ``lower``)
    lines: int
    added: int
    removed: int
    diff: tuple[str, ...]  # unified diff lines against the stage before ("" for lower)
    diff_cut: int  # diff lines left out (MAX_DIFF_LINES)
    changed: tuple[Kernel, ...]  # root statements new or changed in this stage
    kernels: int  # root statements in all
    text: str  # the whole program


@dataclass(frozen=True)
class PassRun:
    """One pass the pipeline ran: its name, time, and whether it changed the program."""

    name: str
    seconds: float
    changed: bool


def pass_runs(
    stages: Sequence[tuple[str, Program]], timings: Sequence[tuple[str, float]]
) -> list[PassRun]:
    """Every pass run in order, marked changed when a stage belongs to it: the
    stages after ``lower`` are matched to the runs of the same name in order."""
    pending = [name for name, _ in stages[1:]]
    runs = []
    for name, seconds in timings:
        changed = bool(pending) and pending[0] == name
        if changed:
            pending.pop(0)
        runs.append(PassRun(name, seconds, changed))
    return runs


def build_stages(
    stages: Sequence[tuple[str, Program]], timings: Sequence[tuple[str, float]]
) -> list[Stage]:
    """One :class:`Stage` per program the pipeline produced (``lower`` first)."""
    seconds = iter([r.seconds for r in pass_runs(stages, timings) if r.changed])
    out: list[Stage] = []
    before_text: list[str] = []
    before: set[int] = set()
    for k, (name, program) in enumerate(stages):
        text = format_ir(program).splitlines()
        diff: list[str] = []
        if k:
            diff = list(difflib.unified_diff(before_text, text, "", "", lineterm="", n=2))[2:]
        added = sum(1 for d in diff if d.startswith("+"))
        removed = sum(1 for d in diff if d.startswith("-"))
        stmts = program.root.stmts
        changed = tuple(_kernel(j, s) for j, s in enumerate(stmts) if id(s) not in before or not k)
        out.append(
            Stage(
                name,
                next(seconds, None) if k else None,
                len(text),
                added,
                removed,
                tuple(diff[:MAX_DIFF_LINES]),
                max(0, len(diff) - MAX_DIFF_LINES),
                changed,
                len(stmts),
                format_ir(program),
            )
        )
        before_text, before = text, {id(s) for s in stmts}
    return out


def _kernel(position: int, stmt: Statement) -> Kernel:
    if isinstance(stmt, Block):
        return Kernel(
            step_name(position, stmt), tuple(sorted(stmt.tags)), stmt.comment, format_block(stmt)
        )
    return Kernel(step_name(position, stmt), (), "", format_stmt(stmt))
