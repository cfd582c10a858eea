"""``divide_late``: a softmax's division after the product that reads it, on the
interpreter and the CPU against NumPy's float64 attention, and in an ONNX graph
against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from attention import ATTENTION, attention_reference
from stripeml import api
from stripeml.ir.nodes import Block, Intrinsic, Program
from stripeml.passes.manager import run_pipeline
from stripeml.tile.bind import signature_of


def _reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # a row of -inf scores: NaN, as in the program
        return attention_reference(q, k, v)


def _inputs(h: int, m: int, n: int, d: int, e: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = ((h, m, d), (h, n, d), (h, n, e))
    return [(2 * rng.standard_normal(s)).astype(np.float32) for s in shapes]


@pytest.mark.parametrize("target", ["interp", "cpu"])
@pytest.mark.parametrize("sizes", [(2, 8, 16, 4, 4), (3, 37, 50, 16, 24), (1, 128, 96, 32, 64)])
def test_attention_matches_numpy(target: str, sizes: tuple[int, ...]) -> None:
    args = _inputs(*sizes)
    got = stripeml.compile(ATTENTION, target=target)(*args)
    want = _reference(*args)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def _divisions(program: Program) -> list[tuple[int, ...]]:
    """The sizes of every buffer a root kernel writes with a division."""
    sizes = {r.into: r.shape.sizes for r in program.root.refs}
    found = []
    for stmt in program.root.stmts:
        if isinstance(stmt, Block) and any(
            isinstance(s, Intrinsic) and s.op == "div" for s in stmt.stmts
        ):
            found += [sizes[r.from_] for r in stmt.refs if r.dir == "out"]
    return found


def _after(name: str, with_pass: bool, f: object = None, args: list | None = None) -> Program:
    args = args if args is not None else _inputs(2, 8, 16, 4, 4)
    f = f if f is not None else stripeml.compile(ATTENTION, target=api.target_for("cpu", 1))
    passes = [p for p in f.target.passes if with_pass or p.name != "divide_late"]
    upto = next(i for i, p in enumerate(passes) if p.name == name) + 1
    return run_pipeline(f.lowered(signature_of(args)), passes[:upto]).program


def test_the_division_is_per_output_not_per_score() -> None:
    # the cpu pipeline divides the (2, 8, 4) outputs, not the (2, 8, 16) scores
    assert _divisions(_after("fuse", True)) == [(2, 8, 4)]
    assert _divisions(_after("fuse", False)) == [(2, 8, 16)]


def test_the_quotient_buffer_goes() -> None:
    names = {r.into for r in _after("divide_late", True).root.refs}
    assert "P" not in names and "X" in names


def test_a_row_of_minus_infinity_gives_nan_as_before() -> None:
    # every score -inf: exp(-inf - -inf) is NaN either way; no new finite value
    q, k, v = _inputs(1, 4, 8, 4, 4)
    q[0, 1] = np.inf
    k[0, :, :] = -1.0
    got = stripeml.compile(ATTENTION, target="cpu")(q, k, v)
    assert np.isnan(got[0, 1]).all()
    finite = [0, 2, 3]
    np.testing.assert_allclose(got[0, finite], _reference(q, k, v)[0, finite], rtol=2e-5)


def test_onnx_softmax_then_matmul_against_onnxruntime() -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    import stripeml.onnx

    h, m, d = 4, 48, 16
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"]),
    ]
    shape = [h, m, d]
    graph = helper.make_graph(
        nodes,
        "attention",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, shape)],
        [helper.make_tensor("scale", TensorProto.FLOAT, [], [d**-0.5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    q, k, v = _inputs(h, m, m, d, d, seed=3)
    feeds = {"q": q, "k": k, "v": v}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, feeds)
    fn = stripeml.onnx.compile(model)
    got = fn(**feeds)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # the importer's Softmax is the same chain: the division is per output
    arrays = [feeds[n] for n in fn.input_names]
    spec = fn.specialise(arrays)
    args = list(spec.call_args(arrays))
    assert _divisions(_after("fuse", True, spec.function, args)) == [(h, m, d)]
    assert _divisions(_after("fuse", False, spec.function, args)) == [(h, m, m)]


def _layers(count: int) -> str:
    """``count`` attention layers, each one's output the next one's queries."""
    body, q = [], "Q"
    for n in range(count):
        body += [
            f"S{n}[h, m, k : H, M, N] = +({q}[h, m, d] * K[h, k, d]);",
            f"T{n} = S{n} * 0.125;",
            f"X{n}[h, m, 0 : H, M, 1] = >(T{n}[h, m, k]);",
            f"E{n} = exp(T{n} - X{n});",
            f"Z{n}[h, m, 0 : H, M, 1] = +(E{n}[h, m, k]);",
            f"P{n} = E{n} / Z{n};",
            f"O{n}[h, m, e : H, M, E] = +(P{n}[h, m, k] * V[h, k, e]);",
        ]
        q = f"O{n}"
    lines = "\n    ".join(body)
    return f"function (Q[H, M, D], K[H, N, D], V[H, N, E]) -> ({q}) {{\n    {lines}\n}}"


def test_the_pass_scans_the_program_once_per_round(monkeypatch: pytest.MonkeyPatch) -> None:
    # each statement's buffers are looked up once per round (two rounds: the
    # rewrites, then none), not once per division: 8 layers, 56 statements
    from stripeml.passes import divide_late

    args = _inputs(2, 8, 16, 8, 8)
    f = stripeml.compile(_layers(8), target=api.target_for("cpu", 1))
    passes = f.target.passes
    upto = next(i for i, p in enumerate(passes) if p.name == "divide_late")
    before = run_pipeline(f.lowered(signature_of(args)), passes[:upto]).program
    calls = 0
    real = divide_late.writes

    def counted(stmt):  # noqa: ANN001, ANN202 - the function it stands in for
        nonlocal calls
        calls += 1
        return real(stmt)

    monkeypatch.setattr(divide_late, "writes", counted)
    after = passes[upto].run(before)
    assert len(_divisions(after)) == 8 and all(s == (2, 8, 8) for s in _divisions(after))
    assert calls <= 2 * len(before.root.stmts)
    got = stripeml.compile(_layers(8), target="cpu")(*args)
    q = args[0]
    for _ in range(8):
        q = _reference(q, args[1], args[2]).astype(np.float32)
    np.testing.assert_allclose(got, q, rtol=1e-4, atol=1e-5)


def test_half_precision_keeps_its_division_first() -> None:
    # float16 tops out at 65504: the undivided sum over 512 keys of E * V could
    # overflow where the normalised one does not, so the division stays first
    args = [a.astype(np.float16) for a in _inputs(2, 8, 16, 4, 4)]
    f = stripeml.compile(ATTENTION, target=api.target_for("cpu", 1))
    passes = f.target.passes
    upto = next(i for i, p in enumerate(passes) if p.name == "fuse") + 1
    program = run_pipeline(f.lowered(signature_of(args)), passes[:upto]).program
    assert _divisions(program) == [(2, 8, 16)]
