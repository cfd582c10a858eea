"""Per-kernel choices in the pass manager: one kernel's options, the others' untouched."""

from __future__ import annotations

import numpy as np

import stripeml
from stripeml.passes._kernel_choices import kernel_key, tuning_point
from stripeml.passes.manager import run_pipeline
from stripeml.runtime.interp import run as interpret
from stripeml.tile.bind import signature_of
from stripeml.tuning.kernels import kernel_jobs
from stripeml.tuning.space import axes, neighbours

TWO = """
function (A[M, K], B[K, N], D[N, P]) -> (E) {
    C[m, n : M, N] = +(A[m, k] * B[k, n]);
    E[m, p : M, P] = +(C[m, n] * D[n, p]);
}
"""


def _program():
    f = stripeml.compile(TWO, target="cpu", threads=2)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((16, 32), (32, 64), (64, 64))]
    from stripeml.tile.bind import signature_of

    return f, f.lowered(signature_of(arrays)), arrays


def test_a_choice_changes_only_its_kernel():
    f, program, arrays = _program()
    passes = f.target.passes
    point = tuning_point(passes)
    assert point is not None and passes[point].name == "winograd"
    at_point = run_pipeline(program, passes[:point]).program
    first = next(s for s in at_point.root.stmts if s.name.startswith("k0"))
    choice = {"unroll": {"rows": 2}, "thread": {"rank": 1}}
    plain = run_pipeline(program, passes).program
    tuned = run_pipeline(
        program, passes, choices={kernel_key(at_point.root, first): choice}
    ).program
    plain_k = {s.name: s for s in plain.root.stmts}
    tuned_k = {s.name: s for s in tuned.root.stmts}
    changed = [name for name in plain_k if plain_k[name] != tuned_k.get(name)]
    assert changed and all(name.startswith("k0") for name in changed)
    named = dict(zip("ABD", arrays))
    want = interpret(program, dict(named))["E"]
    got = f.backend.compile(tuned).run(dict(named))["E"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_no_choices_is_the_target_pipeline():
    f, program, _ = _program()
    plain = run_pipeline(program, f.target.passes).program
    assert run_pipeline(program, f.target.passes, choices={}).program == plain
    assert (
        run_pipeline(program, f.target.passes, choices={"0" * 64: {"unroll": {"rows": 2}}}).program
        == plain
    )


def test_space_comes_from_the_passes():
    f, _, _ = _program()
    space = axes(f.target, tuning_point(f.target.passes))
    names = {(a.pass_name, a.option) for a in space}
    assert ("unroll", "rows") in names and ("thread", "rank") in names
    for a in space:
        assert a.start in a.values  # the analytic choice is a point of the space
    steps = list(neighbours({}, space))
    assert steps and all(len(opts) == 1 for c in steps for opts in c.values())


def test_a_kernel_window_holds_only_what_epilogue_may_merge():
    """A contraction's window takes the elementwise kernel after it (its bias
    and activation); a halo's zero fill's window is the fill alone, not the
    convolution that reads it."""
    # T is written straight into the halo's interior (alias_copy), so the last
    # zero fill runs right before the convolution, which reads it
    src = """function (I[1, 12, 12, 16], K[3, 3, 16, 32], B[32]) -> (O) {
        T = I * 2.0;
        C[n, y, x, co : 1, 12, 12, 32] = +(T[n, y + ky - 1, x + kx - 1, ci] * K[ky, kx, ci, co]);
        O = relu(C + B);
    }"""
    rng = np.random.default_rng(0)
    args = {
        "I": rng.standard_normal((1, 12, 12, 16)).astype(np.float32),
        "K": rng.standard_normal((3, 3, 16, 32)).astype(np.float32),
        "B": rng.standard_normal(32).astype(np.float32),
    }
    f = stripeml.compile(src, target="cpu")
    jobs, _ = kernel_jobs(f.lowered(signature_of(list(args.values()))), f.target, {}, 0, args)
    kernels = {s.name: s for s in jobs[0].parsed.root.stmts if hasattr(s, "tags")}
    fills = [j for j in jobs if "fill" in kernels[j.name].tags]
    conv = next(j for j in jobs if "contraction" in kernels[j.name].tags)
    order = [s.name for s in jobs[0].parsed.root.stmts if hasattr(s, "tags")]
    assert "fill" in kernels[order[order.index(conv.name) - 1]].tags  # the case in question
    assert fills and all(j.window == (j.name,) for j in fills)
    assert len(conv.window) == 2 and "eltwise" in kernels[conv.window[1]].tags
