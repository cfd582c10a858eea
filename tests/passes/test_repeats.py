"""Repeated layers run through the pipeline once (``passes/_replicate.py``,
``passes/_repeats.py``).

A stack of identical attention layers, each with weights of its own, reading
buffers all layers share: the pass manager runs the layer-local passes over
three layers and copies the middle one's result for the others.  The final
program is byte for byte the one the pipeline writes over every layer
(``STRIPEML_REPEATS=0``), it computes what NumPy does in float64, and a split
the copies cannot rely on falls back to the whole pipeline."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import pytest

import stripeml
from stripeml.ir.nodes import Block, Program, Refinement, TensorShape
from stripeml.ir.printer import format as format_ir
from stripeml.passes import _repeats, _replicate
from stripeml.passes.manager import run_pipeline
from stripeml.runtime.interp import run
from stripeml.targets import resolve

M, N, D = 8, 16, 8


def _source(layers: int, skip: int | None = None) -> str:
    """``layers`` attention layers: layer ``l`` projects ``X{l-1}`` with its own
    ``W{l}``, attends over the shared keys ``K`` and values ``V``, and adds the
    result to its input; ``skip``: the result also adds that layer's output."""
    weights = ", ".join(f"W{n}[D, D]" for n in range(1, layers + 1))
    lines = [f"function (X0[M, D], {weights}, K[N, D], V[N, D]) -> (Y) {{"]
    for n in range(1, layers + 1):
        lines += [
            f"    Q{n}[m, e : M, D] = +(X{n - 1}[m, d] * W{n}[d, e]);",
            f"    S{n}[m, n : M, N] = +(Q{n}[m, d] * K[n, d]);",
            f"    T{n} = S{n} * 0.125;",
            f"    Mx{n}[m, 0 : M, 1] = >(T{n}[m, n]);",
            f"    E{n} = exp(T{n} - Mx{n});",
            f"    L{n}[m, 0 : M, 1] = +(E{n}[m, n]);",
            f"    P{n} = E{n} / L{n};",
            f"    O{n}[m, e : M, D] = +(P{n}[m, n] * V[n, e]);",
            f"    X{n} = O{n} + X{n - 1};",
        ]
    last = f"X{layers}" if skip is None else f"X{layers} + X{skip}"
    lines += [f"    Y = {last};", "}"]
    return "\n".join(lines)


def _inputs(layers: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((M, D)).astype(np.float32)]
    arrays += [(rng.standard_normal((D, D)) / 3).astype(np.float32) for _ in range(layers)]
    arrays += [rng.standard_normal((N, D)).astype(np.float32) for _ in range(2)]
    return arrays


def _reference(arrays: list[np.ndarray], layers: int, skip: int | None = None) -> np.ndarray:
    x = arrays[0].astype(np.float64)
    k, v = (a.astype(np.float64) for a in arrays[-2:])
    outs = []
    for n in range(1, layers + 1):
        s = (x @ arrays[n].astype(np.float64)) @ k.T * 0.125
        p = np.exp(s - s.max(-1, keepdims=True))
        x = p / p.sum(-1, keepdims=True) @ v + x
        outs.append(x)
    return outs[-1] if skip is None else outs[-1] + outs[skip - 1]


def _compiled(source: str, arrays: list[np.ndarray], repeats: bool, monkeypatch):
    monkeypatch.setenv("STRIPEML_REPEATS", "1" if repeats else "0")
    f = stripeml.compile(source, target="cpu")
    return f, f.lower(*arrays)


def _steps(exe) -> list[str]:
    return [name for name, _ in exe.timings]


@pytest.mark.parametrize("layers", [6, 9])
def test_layers_run_once_and_copies_are_what_every_layer_gives(
    layers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, arrays = _source(layers), _inputs(layers)
    f_all, every = _compiled(source, arrays, False, monkeypatch)
    f_rep, once = _compiled(source, arrays, True, monkeypatch)
    assert "repeats set aside" not in _steps(every)
    steps = _steps(once)
    assert steps[0] == "repeats set aside" and "repeats copied" in steps
    assert steps[-1] == "place"  # the whole program's pass ran after the copies
    assert format_ir(once.program) == format_ir(every.program)
    # the passes saw three layers, not all of them
    aside = dict(once.function._optimise(once.signature).programs)["repeats set aside"]
    lowered = once.function.lowered(once.signature)
    period = len(lowered.root.stmts) - len(aside.root.stmts)
    assert period == (layers - 3) * 9
    want = _reference(arrays, layers)
    np.testing.assert_allclose(f_rep(*arrays), want, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(f_all(*arrays), want, rtol=2e-4, atol=2e-5)


def test_the_repeats_found() -> None:
    layers = 6
    f = stripeml.compile(_source(layers), target="interp")
    program = f.lower(*_inputs(layers)).program
    rep = _replicate.find_repeats(program)
    assert rep is not None
    assert (rep.period, rep.count) == (9, layers)
    # between layers: the first repeat starts at the first layer's projection
    first = program.root.stmts[rep.start]
    assert isinstance(first, Block) and any(r.from_ == "W1" for r in first.refs)
    own = dict(zip(rep.names[1], rep.own))
    assert own["W2"] and own["X1"] and not own["K"] and not own["V"]


def test_a_middle_layer_read_at_the_end_is_not_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    """``X3`` is read by the result: the third layer is not like the others, and
    no copy stands for it; the program is still the whole pipeline's."""
    layers = 8
    source, arrays = _source(layers, skip=3), _inputs(layers)
    f_all, every = _compiled(source, arrays, False, monkeypatch)
    f_rep, once = _compiled(source, arrays, True, monkeypatch)
    assert format_ir(once.program) == format_ir(every.program)
    np.testing.assert_allclose(f_rep(*arrays), _reference(arrays, layers, 3), rtol=2e-4, atol=2e-5)


def test_too_few_layers_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    source, arrays = _source(3), _inputs(3)
    _, exe = _compiled(source, arrays, True, monkeypatch)
    assert "repeats set aside" not in _steps(exe)


@dataclass(frozen=True)
class _Spy:
    """A pass that claims ``layer_local`` but reads a buffer of the middle layer
    from the end of the program (a copy into a new result, which no later pass
    removes): the copies cannot stand for that, so the pipeline runs over every
    layer."""

    name: ClassVar[str] = "spy"
    layer_local: ClassVar[bool] = True
    buffer: str = "Q2"

    def run(self, program: Program) -> Program:
        root = program.root
        src = root.ref(self.buffer) if any(r.into == self.buffer for r in root.refs) else None
        if src is None or any(r.into == "Z" for r in root.refs):
            return program
        shape = TensorShape.dense(src.shape.dtype, src.shape.sizes)
        f = stripeml.compile("function (A[M, D]) -> (B) { B = A; }", target="interp")
        sample = np.zeros(src.shape.sizes, np.float32)
        copy = f.lower(sample).program.root.stmts[0]
        assert isinstance(copy, Block)
        refs = tuple(replace(r, from_=self.buffer if r.dir == "in" else "Z") for r in copy.refs)
        kernel = replace(copy, refs=refs, name="spy_copy")
        out = Refinement("out", "Z", shape)
        return Program(replace(root, refs=(*root.refs, out), stmts=(*root.stmts, kernel)))


def test_a_split_the_copies_cannot_rely_on_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    layers = 6
    f = stripeml.compile(_source(layers), target="interp")
    arrays = _inputs(layers)
    program = f.lower(*arrays).program
    passes = [_Spy(), *resolve("cpu").passes]
    monkeypatch.setenv("STRIPEML_REPEATS", "0")
    every = run_pipeline(program, passes)
    monkeypatch.setenv("STRIPEML_REPEATS", "1")
    rep = _replicate.find_repeats(program)
    assert rep is not None
    reduced = _replicate.reduce(program, rep)
    assert _replicate.expand(program, reduced, _Spy().run(reduced), rep) is None
    once = run_pipeline(program, passes)
    assert "repeats set aside" not in [n for n, _ in once.timings]
    assert format_ir(once.program) == format_ir(every.program)
    named = dict(zip(["X0", *(f"W{n}" for n in range(1, layers + 1)), "K", "V"], arrays))
    np.testing.assert_allclose(
        run(once.program, named)["Y"], _reference(arrays, layers), rtol=2e-4, atol=2e-5
    )


def test_a_checked_pipeline_runs_every_layer() -> None:
    """``check`` runs each stage's program: stages are whole programs then."""
    layers = 5
    f = stripeml.compile(_source(layers), target="interp")
    program = f.lower(*_inputs(layers)).program
    seen: list[str] = []
    result = run_pipeline(program, resolve("cpu").passes, check=lambda n, p: seen.append(n))
    assert "repeats set aside" not in [n for n, _ in result.timings]
    assert seen


def _pre_norm(layers: int) -> str:
    """Layers that centre their input, project it and add it back (GPT-2's
    residual stream): each layer's first statement sums the last one's result."""
    weights = ", ".join(f"W{n}[D, D]" for n in range(1, layers + 1))
    lines = [f"function (X0[M, D], {weights}) -> (Y) {{"]
    for n in range(1, layers + 1):
        lines += [
            f"    S{n}[m, 0 : M, 1] = +(X{n - 1}[m, d]);",
            f"    C{n} = X{n - 1} - S{n} * 0.125;",
            f"    Q{n}[m, e : M, D] = +(C{n}[m, d] * W{n}[d, e]);",
            f"    R{n} = relu(Q{n});",
            f"    X{n} = R{n} + X{n - 1};",
        ]
    lines += [f"    Y = X{layers};", "}"]
    return "\n".join(lines)


def test_a_merged_cut_is_tried_again_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a pass merges the statements on both sides of the first start's cut
    (a layer's residual add into the next layer's sum), a second start splits;
    it is remembered for the next input shape, which splits at once."""
    layers = 8
    monkeypatch.setattr(_repeats, "_STARTS", {})
    tries: list[object] = []
    real = _replicate.realigned

    def counted(*args):
        got = real(*args)
        tries.append(got)
        return got

    monkeypatch.setattr(_replicate, "realigned", counted)
    rng = np.random.default_rng(9)
    source = _pre_norm(layers)
    f_all = stripeml.compile(source, target="cpu")
    f_rep = stripeml.compile(source, target="cpu")
    for m in (16, 24):
        x = rng.standard_normal((m, D)).astype(np.float32)
        ws = [(rng.standard_normal((D, D)) / 3).astype(np.float32) for _ in range(layers)]
        monkeypatch.setenv("STRIPEML_REPEATS", "0")
        every = f_all.lower(x, *ws)
        monkeypatch.setenv("STRIPEML_REPEATS", "1")
        once = f_rep.lower(x, *ws)
        assert "repeats copied" in _steps(once)
        assert format_ir(once.program) == format_ir(every.program)
        want = x.astype(np.float64)
        for w in ws:
            c = want - want.sum(-1, keepdims=True) * 0.125
            want = np.maximum(c @ w, 0) + want
        np.testing.assert_allclose(f_rep(x, *ws), want, rtol=2e-4, atol=2e-4)
    # the first shape's first start did not split, its second did; the second
    # shape started there
    assert len(tries) == 1 and tries[0] is not None


def test_repeats_that_set_aside_under_half_the_program_are_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five layers after a chain of 60 other statements: setting two layers
    aside would leave the passes most of their work (as the light ResNet-50's
    5 equal blocks would of its 178 statements), so the whole pipeline runs."""
    layers = 5
    body = _source(layers).split("\n")
    chain = [f"    Z{i} = Z{i - 1} * {i}.5;" for i in range(1, 61)]
    body[0] = body[0].replace("(X0[M, D]", "(Z0[M, D]")
    source = "\n".join([body[0], *chain, "    X0 = Z60;", *body[1:]])
    arrays = _inputs(layers)
    f = stripeml.compile(source, target="interp")
    program = f.lower(*arrays).program
    assert _replicate.find_repeats(program) is None
    _, exe = _compiled(source, arrays, True, monkeypatch)
    assert "repeats set aside" not in _steps(exe)
    # the same layers alone are replicated
    assert _replicate.find_repeats(
        stripeml.compile(_source(layers), target="interp").lower(*arrays).program
    )
