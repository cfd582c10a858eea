"""``epilogue`` asks whether a statement touches a kernel's result a number of
times linear in the program (it counts each root buffer's statements once,
instead of scanning the root per candidate), and its results still match NumPy."""

from __future__ import annotations

import numpy as np

import stripeml
from pipelines import cpu_passes
from stripeml.ir.nodes import Block, walk_blocks
from stripeml.passes import _common
from stripeml.passes import epilogue as epilogue_module
from stripeml.passes.manager import run_pipeline
from stripeml.runtime.interp import run


def _chain(layers: int) -> str:
    """``layers`` matrix products, each with a bias and a ReLU."""
    params = ", ".join(f"W{k}[N, N], B{k}[N]" for k in range(layers))
    lines = []
    x = "X"
    for k in range(layers):
        lines.append(f"    T{k}[i, j : M, N] = +({x}[i, c] * W{k}[c, j]);")
        lines.append(f"    Y{k} = relu(T{k} + B{k});")
        x = f"Y{k}"
    return f"function (X[M, N], {params}) -> ({x}) {{\n" + "\n".join(lines) + "\n}"


def test_touch_questions_grow_linearly_and_results_match_numpy(monkeypatch) -> None:
    calls = {"n": 0}
    real = _common.touches

    def counting(stmt, name):
        calls["n"] += 1
        return real(stmt, name)

    monkeypatch.setattr(epilogue_module, "touches", counting)
    passes = cpu_passes(vector_width=8)
    at = next(n for n, p in enumerate(passes) if p.name == "epilogue")
    rng = np.random.default_rng(3)
    asked = {}
    for layers in (4, 16):
        x = rng.standard_normal((16, 32)).astype(np.float32)
        ws = [rng.standard_normal((32, 32)).astype(np.float32) / 6 for _ in range(layers)]
        bs = [rng.standard_normal(32).astype(np.float32) for _ in range(layers)]
        args = [x] + [a for k in range(layers) for a in (ws[k], bs[k])]
        f = stripeml.compile(_chain(layers), target="interp")
        program = f.lower(*args).program
        before = run_pipeline(program, passes[:at]).program
        calls["n"] = 0
        after = run_pipeline(before, [passes[at]]).program
        asked[layers] = calls["n"]
        assert sum("epilogue" in s.tags for s in _blocks(after)) >= layers  # each layer fused
        names = {p.name: a for p, a in zip(f.ast.params, args)}
        got = run(after, names)
        want = x.astype(np.float64)
        for k in range(layers):
            want = np.maximum(want @ ws[k] + bs[k], 0.0)
        np.testing.assert_allclose(got[f"Y{layers - 1}"], want, rtol=1e-4, atol=1e-4)
    # 4x the layers: about 4x the questions (a scan per candidate: about 16x)
    assert asked[16] <= 6 * asked[4], asked


def _blocks(program):
    return [b for s in program.root.stmts if isinstance(s, Block) for b in walk_blocks(s)]
