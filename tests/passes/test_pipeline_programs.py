"""Semantic preservation on the whole program suite, and where fusion must happen.

Every case of ``tests/programs.py`` is lowered and run through pipelines of
passes; the pass manager verifies each stage and the interpreter re-runs every
changed stage against the unoptimised program's outputs (loopy's
``auto_test_vs_ref`` idea).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import stripeml
from pipelines import cpu_passes
from stripeml.ir import Block, Intrinsic, Program, format, parse, walk_blocks
from stripeml.passes import Dce, Fuse
from stripeml.passes.manager import run_pipeline
from stripeml.runtime.interp import run

from .helpers import assert_close, checker, lower_case

try:
    from programs import CASES, CASES_BY_NAME, Case  # tests/programs.py
except ImportError:  # tests/ imported as a package
    from tests.programs import CASES, CASES_BY_NAME, Case

PIPELINES: dict[str, Callable[[], list]] = {
    "cpu": cpu_passes,
    "eltwise_only": lambda: [Fuse(into_contraction=False, contraction=False), Dce()],
    "contraction_only": lambda: [Fuse(eltwise=False, into_contraction=False), Dce()],
    "dce": lambda: [Dce()],
}


def _kernels(program: Program) -> list[Block]:
    return [s for s in program.root.stmts if isinstance(s, Block)]


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_pipeline_preserves_results(case: Case, pipeline: str) -> None:
    program, inputs = lower_case(case)
    expected = run(program, inputs)
    tol = {"rtol": case.rtol, "atol": case.atol}
    result = run_pipeline(program, PIPELINES[pipeline](), check=checker(inputs, expected, **tol))
    stripeml.ir.verify(result.program)
    assert result.stages[0] == ("lower", format(program))
    for _name, text in result.stages:
        assert format(parse(text)) == text
    assert [name for name, _ in result.timings] == [p.name for p in PIPELINES[pipeline]()]
    # The NumPy reference agrees too (not only the unoptimised interpreter run).
    want = dict(zip((r.into for r in program.outputs), case.reference(dict(inputs))))
    assert_close(run(result.program, inputs), want, case.name, **tol)
    # Each pass reached its fixed point: running it again changes nothing.
    for p in PIPELINES[pipeline]():
        assert p.run(result.program) is result.program, p.name


# name -> (kernels after lowering, kernels after fuse + dce); the others do not change.
FUSED_COUNTS = {
    "sum_of_squares_then_sqrt": (2, 1),
    "avgpool_2x2": (2, 1),
    "global_avg_pool": (2, 2),  # spatial reduction is not unit-stride: kept apart
    "mean_dim_constant": (2, 1),
    "softmax": (4, 3),
    "log_softmax": (4, 3),
    "layernorm": (6, 4),
    "mlp_10_statements": (10, 6),
    "unused_intermediate": (3, 1),
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_kernel_counts(case: Case) -> None:
    program, _ = lower_case(case)
    result = run_pipeline(program, [Fuse(), Dce()]).program
    before, after = len(_kernels(program)), len(_kernels(result))
    if case.name in FUSED_COUNTS:
        assert (before, after) == FUSED_COUNTS[case.name]
    else:
        assert result is program, f"{case.name}: {before} -> {after} kernels"


def _ops(block: Block) -> set[str]:
    return {s.op for b in walk_blocks(block) for s in b.stmts if isinstance(s, Intrinsic)}


def test_softmax_exp_fuses_into_row_sum() -> None:
    """The exp kernel runs inside the row sum; the division reads E (it needs the whole sum)."""
    program, _ = lower_case(CASES_BY_NAME["softmax"])
    m, fused, div = _kernels(run_pipeline(program, cpu_passes()).program)
    assert "contraction" in m.tags and "fused" not in m.tags
    assert fused.has_tags("contraction", "fused", "agg_add") and "exp" in _ops(fused)
    assert {r.from_ for r in fused.refs if r.dir == "out"} == {"E", "S"}
    assert "div" in _ops(div) and "exp" not in _ops(div)


def test_log_softmax_exp_stays_in_registers() -> None:
    """E is read only by the row sum, so once fused it is never stored."""
    program, _ = lower_case(CASES_BY_NAME["log_softmax"])
    result = run_pipeline(program, cpu_passes()).program
    assert "E" not in {r.into for r in result.root.refs}
    assert all("E" not in {r.from_ for r in k.refs} for k in _kernels(result))


def test_mlp_matmul_bias_relu_is_one_kernel() -> None:
    """With matmul-like fusion enabled, matmul + bias + relu is one kernel."""
    program, _ = lower_case(CASES_BY_NAME["mlp_10_statements"])
    result = run_pipeline(
        program, [Fuse(unit_stride_reductions_only=False, reused_inputs=True), Dce()]
    ).program
    first = _kernels(result)[0]
    assert first.has_tags("kernel", "fused")
    (inner,) = first.sub_blocks
    assert inner.has_tags("contraction", "reduce", "agg_add")
    assert {"mul"} <= _ops(inner) and {"add", "relu"} <= _ops(first)
    register = next(r for r in first.refs if r.dir == "none")
    assert register.location == "REGISTER" and register.shape.sizes == ()
    assert {r.from_ for r in first.refs if r.dir == "out"} == {"R1"}
    # Z1 and A1 no longer exist at all.
    assert not {"Z1", "A1"} & {r.into for r in result.root.refs}


@pytest.mark.parametrize(
    "source, shapes",
    [
        ("function (A[N], B[N], C[N]) -> (O) { O = tanh(A * B + C) * 0.5 + A; }", [6, 6, 6]),
        (
            "function (X[B, K], W[K, N], Bias[N]) -> (Y) {"
            " Z[b, n : B, N] = +(X[b, k] * W[k, n]); Y = relu(Z + Bias); }",
            [(3, 4), (4, 5), 5],
        ),
        (
            "function (X) -> (Y) { C = X * X * X;"
            " Y = 0.5 * X * (1.0 + tanh(0.7978845608 * (X + 0.044715 * C))); }",
            [(3, 4)],
        ),
    ],
    ids=["tanh_one_kernel", "dense_relu", "gelu"],
)
def test_small_programs_become_one_kernel(source: str, shapes: list) -> None:
    """One kernel after fuse + dce; a program that was one kernel is the same object."""
    f = stripeml.compile(source, target="interp")
    rng = np.random.default_rng(0)
    inputs = {p: rng.uniform(-1, 1, s).astype(np.float32) for p, s in zip(f.params, shapes)}
    program = f.lower(**inputs).program
    expected = run(program, inputs)
    pipeline = [Fuse(unit_stride_reductions_only=False, reused_inputs=True), Dce()]
    result = run_pipeline(program, pipeline, check=checker(inputs, expected)).program
    assert len(_kernels(result)) == 1
    if len(_kernels(program)) == 1:
        assert result is program
