"""A chain's row-block budget as a tuning lever (``nest``'s ``fraction``): the
choice of a chain's first kernel is the whole chain's, it nests a chain whose
intermediates the analytic budget leaves alone, the result agrees with NumPy,
and the head's window times every kernel such a choice can put in its nest."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

import stripeml
from dw_pw import DW_PW
from dw_pw import dw_pw_inputs as _inputs
from dw_pw import dw_pw_reference as _reference
from stripeml.ir.nodes import Block
from stripeml.passes._kernel_choices import kernel_key, tuning_point
from stripeml.passes.dce import Dce
from stripeml.passes.epilogue import Epilogue
from stripeml.passes.fuse import Fuse
from stripeml.passes.manager import run_pipeline
from stripeml.passes.nest import Nest
from stripeml.passes.registry import tunable_options
from stripeml.passes.thread import Thread
from stripeml.passes.unroll import Unroll
from stripeml.passes.vectorize import Vectorize
from stripeml.runtime.cpu import CpuBackend, CpuOptions
from stripeml.runtime.interp import run
from stripeml.tuning.kernels import _chains
from stripeml.tuning.space import axes, neighbours

# A, the depthwise output: 16 x 12 x 24 floats, 18,432 bytes.  Half of 64 KiB
# holds it whole (left alone); a quarter does not (nested).
CACHE = 1 << 16


def _passes(fraction=0.5):
    return [
        Fuse(),
        Dce(),
        Nest(cache_bytes=CACHE, fraction=fraction, min_points=4, min_rows=4, threads=2),
        Unroll(vector_width=8),
        Epilogue(),
        Vectorize(width=8),
        Thread(threads=2),
    ]


def _setup():
    a = _inputs()
    program = stripeml.compile(DW_PW, target="interp").lower(**a).program
    passes = _passes()
    point = tuning_point(passes)
    at_point = run_pipeline(program, passes[:point]).program
    kernels = [s for s in at_point.root.stmts if isinstance(s, Block)]
    return a, program, passes, point, at_point, kernels


def _nests(program):
    return [s for s in program.root.stmts if isinstance(s, Block) and "nest" in s.tags]


def _agrees(program, a):
    want = _reference(a)
    np.testing.assert_allclose(run(program, a)["O"], want, rtol=1e-4, atol=1e-4)
    for threads in (1, 2):
        backend = CpuBackend(CpuOptions(threads=threads, vector_width=8, min_chunk_work=1))
        got = backend.compile(program).run(a)["O"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_fraction_is_in_the_space():
    assert tunable_options(Nest)["fraction"] == (0.125, 0.25, 0.5)
    assert Nest.chain_choices
    f = stripeml.compile(DW_PW, target="cpu", threads=2)
    space = axes(f.target, tuning_point(f.target.passes))
    (axis,) = [a for a in space if (a.pass_name, a.option) == ("nest", "fraction")]
    assert axis.start == 0.5 and axis.values == (0.125, 0.25, 0.5)
    steps = list(neighbours({}, space))
    # a short axis is one step wide: an eighth is reached from the half directly
    assert {"nest": {"fraction": 0.25}} in steps and {"nest": {"fraction": 0.125}} in steps
    rows = next(a for a in space if (a.pass_name, a.option) == ("unroll", "rows"))
    assert len(rows.values) > 3  # a long axis still steps to its neighbours only
    assert sum(1 for c in steps if "rows" in c.get("unroll", {})) <= 2


def test_the_heads_fraction_nests_a_chain_the_analytic_budget_leaves_alone():
    a, program, passes, point, at_point, kernels = _setup()
    head = kernels[0]  # the depthwise convolution (its bias and ReLU fused in)
    plain = run_pipeline(program, passes).program
    assert not _nests(plain)  # the control: 18 KiB fit half of 64 KiB whole
    choice = {kernel_key(at_point.root, head): {"nest": {"fraction": 0.25}}}
    tuned = run_pipeline(program, passes, choices=choice).program
    (nest,) = _nests(tuned)
    assert nest.name.startswith(head.name)  # the chain is named after its head
    (block,) = [r for r in nest.refs if r.dir == "none"]
    assert block.into == "A" and block.shape.sizes[1] < 16  # rows of A, not all of them
    assert "A" not in {r.into for r in tuned.root.refs}  # no longer a root buffer
    _agrees(tuned, a)


def test_a_later_kernels_choice_leaves_the_chain_to_its_head():
    """The chain's options are its first kernel's: a ``nest`` choice for the
    pointwise convolution neither splits the chain nor changes its blocks (as
    one-kernel segments would have: a chain of one kernel never nests)."""
    a, program, _, point, at_point, kernels = _setup()
    passes = _passes(fraction=0.25)  # here the analytic compile nests the chain
    plain = run_pipeline(program, passes).program
    (nest,) = _nests(plain)
    later = next(k for k in kernels[1:] if "contraction" in k.tags)
    for options in ({"fraction": 0.5}, {"enabled": False}):
        choice = {kernel_key(at_point.root, later): {"nest": options}}
        tuned = run_pipeline(program, passes, choices=choice).program
        (again,) = _nests(tuned)
        assert [(i.name, i.range) for i in again.idxs] == [(i.name, i.range) for i in nest.idxs]
    _agrees(tuned, a)


def test_the_heads_choice_can_turn_its_chain_off():
    """Off for the head: no chain starts at it, so the convolution writes its
    whole result; the kernels after it may still nest as a shorter chain."""
    a, program, _, point, at_point, kernels = _setup()
    passes = _passes(fraction=0.25)
    head = kernels[0]
    (nest,) = _nests(run_pipeline(program, passes).program)
    assert nest.name.startswith(head.name)  # the control
    choice = {kernel_key(at_point.root, head): {"nest": {"enabled": False}}}
    tuned = run_pipeline(program, passes, choices=choice).program
    assert not any(n.name.startswith(head.name) for n in _nests(tuned))
    alone = next(b for b in tuned.root.stmts if isinstance(b, Block) and b.name == head.name)
    assert ("y", 16) in [(i.name, i.range) for i in alone.idxs]  # all its rows, on its own
    _agrees(tuned, a)


def test_the_heads_window_holds_the_chain_a_choice_can_nest():
    """The analytic compile nests nothing, so without the other fractions'
    compiles the head's window would be its own kernel only, and a candidate
    that nests the chain would be timed with the pointwise convolution's work
    in its window against the analytic choice without it."""
    a, program, passes, point, at_point, kernels = _setup()
    names = frozenset(k.name for k in kernels)
    chains = _chains(at_point, SimpleNamespace(passes=passes), point, names)
    head, *rest = [k.name for k in kernels]
    assert head in chains
    pointwise = next(k.name for k in kernels[1:] if "contraction" in k.tags)
    assert pointwise in chains[head]
    assert set(chains[head]) <= set(rest)
    analytic_only = [p for p in passes if not isinstance(p, Nest)]  # no nest: no chain
    assert _chains(at_point, SimpleNamespace(passes=analytic_only), point, names) == {}
