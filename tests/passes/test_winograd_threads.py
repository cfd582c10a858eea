"""``winograd`` with ``threads`` marks its transforms ``#thread`` itself (race-free
on every index by construction), as ``thread`` would after ``vectorize``: the
marked index is race-free by brute force, ``thread`` analyses none of them, the
program after ``vectorize`` and ``thread`` is the one without the option (but
for a transform whose channels ``thread`` would split: ``winograd`` splits a
block index), and the results match NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from stripeml.ir.nodes import Block
from stripeml.passes import thread as thread_module
from stripeml.passes.halo import Halo
from stripeml.passes.manager import run_pipeline
from stripeml.passes.thread import Thread
from stripeml.passes.vectorize import Vectorize
from stripeml.passes.winograd import Winograd, _lane
from stripeml.runtime.interp import run

from .helpers import checker
from .test_winograd import _program

try:
    from analysis.brute import brute_race_free_nested  # tests/analysis/brute.py
except ImportError:  # tests/ imported as a package
    from tests.analysis.brute import brute_race_free_nested


def _pipeline(threads: int) -> list:
    return [
        Halo(),
        Winograd(min_channels=8, vector_width=8, threads=threads),
        Vectorize(width=8),
        Thread(threads=2),
    ]


@pytest.mark.parametrize(
    ("n", "h", "w", "ci", "co", "relu"),
    [(1, 8, 8, 8, 8, True), (2, 6, 10, 16, 8, False), (1, 7, 5, 8, 16, True), (1, 14, 14, 32, 32, True)],
)  # fmt: skip
def test_marked_transforms_are_race_free_and_thread_skips_them(
    n, h, w, ci, co, relu, monkeypatch
) -> None:
    program, inputs, want = _program(n, h, w, ci, co, relu=relu)
    asked: list[str] = []
    real = thread_module.choose_thread_index

    def counting(block, threads, line=0):
        asked.append(block.name)
        return real(block, threads, line)

    monkeypatch.setattr(thread_module, "choose_thread_index", counting)
    expected = run(program, inputs)
    check = checker(inputs, expected, rtol=1e-4, atol=1e-4)
    marked = run_pipeline(program, _pipeline(2), check=check).program
    analysed = list(asked)
    asked.clear()
    plain = run_pipeline(program, _pipeline(0)).program
    monkeypatch.undo()
    # the same choices, made without the analysis (the transforms left to
    # ``thread`` carry ``#writes_once`` besides), but for a transform that
    # ``thread`` splits on its channels (the vector lanes) where a block index
    # splits evenly enough: ``winograd`` splits it on that index
    got, same = _untagged(marked).root.stmts, plain.root.stmts
    assert len(got) == len(same)
    for b, p in zip(got, same):
        if b != p:
            assert isinstance(b, Block) and "winograd" in b.tags, b
            assert _lane(p, p.idxs[0].name) and not _lane(b, b.idxs[0].name), (b, p)
    transforms = [s for s in marked.root.stmts if isinstance(s, Block) and "winograd" in s.tags]
    assert transforms
    skipped = [b.name for b in transforms if b.name not in analysed]
    assert skipped, analysed  # at least the weight and input transforms
    for b in transforms:
        if "thread" in b.tags:
            assert b.idxs[0].range >= 2
            assert b.idxs[0].name in brute_race_free_nested(b), b.name
        if "writes_once" in b.tags:  # every index race-free, as the tag says
            assert set(brute_race_free_nested(b)) >= {i.name for i in b.idxs if i.range >= 2}
    out = "R" if relu else "O"
    np.testing.assert_allclose(run(marked, inputs)[out], want, rtol=1e-4, atol=1e-4)


def _untagged(program):
    """``program`` without ``#writes_once`` on its root kernels."""
    from dataclasses import replace

    stmts = tuple(
        replace(s, tags=s.tags - {"writes_once"}) if isinstance(s, Block) else s
        for s in program.root.stmts
    )
    return replace(program, root=replace(program.root, stmts=stmts))


def test_transforms_left_to_thread_are_chosen_without_the_analysis(monkeypatch) -> None:
    """A 7 x 5 image's transforms split unevenly on their blocks, so ``winograd``
    leaves them to ``thread`` (their even index is the written unit-stride one)
    marked ``#writes_once``: ``thread`` chooses among every index without asking
    the race analysis, and the result matches NumPy."""
    program, inputs, want = _program(1, 7, 5, 8, 16, relu=True)
    asked: list[str] = []
    real = thread_module.race_free_indices

    def counting(block, *args):
        asked.append(block.name)
        return real(block, *args)

    monkeypatch.setattr(thread_module, "race_free_indices", counting)
    expected = run(program, inputs)
    check = checker(inputs, expected, rtol=1e-4, atol=1e-4)
    out = run_pipeline(program, _pipeline(2), check=check).program
    once = [s for s in out.root.stmts if isinstance(s, Block) and "writes_once" in s.tags]
    assert once and all("thread" in b.tags for b in once)
    assert not {b.name for b in once} & set(asked), asked
    np.testing.assert_allclose(run(out, inputs)["R"], want, rtol=1e-4, atol=1e-4)
