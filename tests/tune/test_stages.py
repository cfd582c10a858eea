"""The staged pipeline of a tune (``tuning.kernels.Stages``): each candidate runs
only the passes its choice can change, and must give exactly the program the
whole pipeline gives with that choice, whose outputs match the interpreter's."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import stripeml
import stripeml.onnx
from stripeml.ir.printer import format as format_ir
from stripeml.passes.manager import run_pipeline
from stripeml.tile.bind import signature_of
from stripeml.tuning.driver import _function_and_args
from stripeml.tuning.executors import LocalMeasurer
from stripeml.tuning.kernels import Stages, build_candidate, kernel_jobs
from stripeml.tuning.space import axes, neighbours


def _model() -> tuple[onnx.ModelProto, np.ndarray]:
    """Three convolutions with biases and ReLUs (a 3 x 3 one Winograd rewrites, a
    1 x 1, a strided 3 x 3), then a global average pool: kernels of different
    kinds, each its own job."""
    rng = np.random.default_rng(3)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    inits = [
        numpy_helper.from_array(w(32, 32, 3, 3), "W1"),
        numpy_helper.from_array(w(32), "B1"),
        numpy_helper.from_array(w(16, 32, 1, 1), "W2"),
        numpy_helper.from_array(w(16), "B2"),
        numpy_helper.from_array(w(24, 16, 3, 3), "W3"),
        numpy_helper.from_array(w(24), "B3"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "W3", "B3"], ["c3"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "three",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 1, 1])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(4).standard_normal((1, 32, 12, 12)).astype(np.float32)
    return model, x


def _jobs():
    model, x = _model()
    f = stripeml.onnx.compile(model, target="cpu", threads=2)
    fn, args = _function_and_args(f, [x])
    jobs, skipped = kernel_jobs(
        fn.lowered(signature_of(args)), fn.target, fn.constants, 0, dict(zip(fn.params, args))
    )
    assert jobs and not skipped
    return model, x, fn, jobs


def _candidates(jobs, space):
    """Every job's one-step neighbours of the analytic choice, then two steps
    (a beam's second generation) for the first two neighbours, job after job."""
    for job in jobs:
        first = list(neighbours({}, space))
        yield job, {}
        for c in first:
            yield job, c
        for c in first[:2]:
            for d in neighbours(c, space):
                if d and d not in first:
                    yield job, d


def test_every_candidate_is_the_whole_pipelines_program(cache):
    """The staged run's program equals the whole pipeline's with the same choice,
    text for text, for every candidate of every job, the jobs run one after
    another on one ``Stages`` without forgetting (its memos are keyed by
    kernel: a choice for one kernel must not answer for another's)."""
    _, _, fn, jobs = _jobs()
    target = fn.target
    space = axes(target, jobs[0].point)
    stages = Stages(jobs[0], target)
    changed = 0
    n = 0
    for job, choice in _candidates(jobs, space):
        want = format_ir(
            run_pipeline(
                job.parsed, target.passes[job.point :],
                choices={job.key: choice} if choice else None,
            ).program
        )  # fmt: skip
        got, text = stages.run(job.key, choice)
        assert text == want, (job.label, choice)
        assert format_ir(got) == want
        changed += want != stages.text
        n += 1
    # the space changes some programs and leaves most alone; the staged run
    # ends most of the latter early instead of running every pass
    assert changed >= 5 and n - changed >= 5
    assert stages.ended_early > 0
    assert stages.passes_run < n * len(stages.passes) / 2


def test_candidates_match_the_interpreter_and_onnxruntime(cache):
    """Candidates built through the stages (a measurer's path) run to the
    interpreter's outputs; the ones that change the program also match
    onnxruntime on the model's output, and equal the whole-program build's
    outputs bit for bit (the same program, the same code)."""
    import onnxruntime as ort

    model, x, fn, jobs = _jobs()
    target = fn.target
    space = axes(target, jobs[0].point)
    staged = LocalMeasurer(target)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    analytic = staged._build(jobs[0], {}).text
    out = next(r.into for r in jobs[0].parsed.root.refs if r.dir == "out")
    different = 0
    for job, choice in _candidates(jobs, space):
        built = staged._build(job, choice)
        assert built.error is None, (job.label, choice, built.error)
        if built.text == analytic or built.compiled is None:
            continue
        different += 1
        got = built.compiled.run(dict(job.inputs))[out]
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-3, atol=1e-4)
        whole = build_candidate(job, target, choice)  # every pass, no stages
        assert whole.text == built.text
        assert whole.compiled is not None
        np.testing.assert_array_equal(whole.compiled.run(dict(job.inputs))[out], got)
    assert different >= 3
