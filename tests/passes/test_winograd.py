"""``winograd``: 3 x 3 stride-1 convolutions as Winograd F(2 x 2, 3 x 3), on the
interpreter and the CPU, against NumPy's direct convolution."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import stripeml
from stripeml.codegen.llvm import body_opt_level
from stripeml.ir.nodes import Block, Program
from stripeml.ir.parser import parse
from stripeml.ir.printer import format as format_ir
from stripeml.passes.halo import Halo
from stripeml.passes.manager import run_pipeline
from stripeml.passes.winograd import Winograd
from stripeml.runtime.interp import run

from .helpers import checker


def _conv_numpy(i: np.ndarray, k: np.ndarray, pad: int, stride: int = 1) -> np.ndarray:
    """NHWC input, (KY, KX, CI, CO) weights; float64 sums."""
    p = np.pad(i.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    ky, kx = k.shape[:2]
    yo = (p.shape[1] - ky) // stride + 1
    xo = (p.shape[2] - kx) // stride + 1
    out = np.zeros((i.shape[0], yo, xo, k.shape[3]))
    for a in range(ky):
        for b in range(kx):
            win = p[
                :, a : a + stride * (yo - 1) + 1 : stride, b : b + stride * (xo - 1) + 1 : stride
            ]
            out += np.einsum("nyxc,cd->nyxd", win, k[a, b].astype(np.float64))
    return out


def _program(
    n: int, h: int, w: int, ci: int, co: int, *, ks: int = 3, stride: int = 1, relu: bool = False,
    const: bool = True, seed: int = 0,
) -> tuple[Program, dict[str, np.ndarray], np.ndarray]:  # fmt: skip
    """A padded NHWC convolution (bias and ReLU after it with ``relu``) lowered for
    its inputs, the weights a ``const`` parameter when ``const``; its inputs and
    NumPy's result."""
    pad = ks // 2
    yo = (h + 2 * pad - ks) // stride + 1
    xo = (w + 2 * pad - ks) // stride + 1
    conv = (
        f"O[n, y, x, co : N, {yo}, {xo}, CO] = +(I[n, {stride}*y + ky - {pad}, "
        f"{stride}*x + kx - {pad}, ci] * K[ky, kx, ci, co]);"
    )
    if relu:
        src = f"function (I[N, H, W, CI], K[KY, KX, CI, CO], B[CO]) -> (R) {{ {conv} R = relu(O + B); }}"
    else:
        src = f"function (I[N, H, W, CI], K[KY, KX, CI, CO]) -> (O) {{ {conv} }}"
    rng = np.random.default_rng(seed)
    inputs = {
        "I": rng.standard_normal((n, h, w, ci)).astype(np.float32),
        "K": (rng.standard_normal((ks, ks, ci, co)) / np.sqrt(ks * ks * ci)).astype(np.float32),
    }
    if relu:
        inputs["B"] = rng.standard_normal(co).astype(np.float32)
    f = stripeml.compile(src, target="interp")
    program = f.lower(*inputs.values()).program
    if const:
        refs = tuple(replace(r, const=True) if r.into == "K" else r for r in program.root.refs)
        program = replace(program, root=replace(program.root, refs=refs))
    want = _conv_numpy(inputs["I"], inputs["K"], pad, stride)
    if relu:
        want = np.maximum(want + inputs["B"], 0)
    return program, inputs, want


def _kernels(program: Program) -> list[str]:
    return [s.name for s in program.root.stmts if isinstance(s, Block)]


def _winograd(program, inputs, **options):
    expected = run(program, inputs)
    passes = [Halo(), Winograd(**{"min_channels": 8, "vector_width": 8, **options})]
    check = checker(inputs, expected, rtol=1e-4, atol=1e-4)
    return run_pipeline(program, passes, check=check).program


@pytest.mark.parametrize(
    ("n", "h", "w", "ci", "co"),
    [(1, 8, 8, 8, 8), (2, 6, 10, 16, 8), (1, 4, 4, 24, 16), (1, 7, 7, 8, 8), (2, 5, 6, 8, 16),
     (1, 6, 3, 8, 8)],
)  # fmt: skip
def test_a_padded_3x3_convolution_becomes_the_transforms_and_products(n, h, w, ci, co):
    program, inputs, want = _program(n, h, w, ci, co)
    out = _winograd(program, inputs)
    names = _kernels(out)
    assert any(k.endswith("_wino_u") for k in names), names
    assert any(k.endswith("_wino_v") for k in names), names
    assert any(k.endswith("_wino_o") for k in names), names
    np.testing.assert_allclose(run(out, inputs)["O"], want, rtol=1e-4, atol=1e-4)
    assert parse(format_ir(out)) == out  # the text round trip


@pytest.mark.parametrize("size", [8, 7])
def test_bias_and_relu_run_in_the_output_transform(size):
    """The elementwise kernel after the convolution is computed on the output
    transform's four pixels (or those of a cut block that exist): the
    convolution's result is never stored."""
    program, inputs, want = _program(1, size, size, 16, 16, relu=True)
    out = _winograd(program, inputs)
    assert "O" in {r.into for r in program.root.refs}
    assert "O" not in {r.into for r in out.root.refs}
    outs = [s for s in out.root.stmts if isinstance(s, Block) and "_wino_o" in s.name]
    assert outs and all(any(r.from_ == "R" for r in s.refs) for s in outs)
    np.testing.assert_allclose(run(out, inputs)["R"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("case", "kw"),
    [
        ("stride 2", {"h": 8, "w": 8, "stride": 2}),
        ("1 x 1", {"h": 8, "w": 8, "ks": 1}),
        ("5 x 5", {"h": 8, "w": 8, "ks": 5}),
        # computed weights are transformed at every call: 9 F(2 x 2) blocks are
        # fewer than the 16 that pays for it (``min_blocks_computed_weights``)
        ("weights not constant, few blocks", {"h": 6, "w": 6, "const": False}),
    ],
)
def test_other_convolutions_are_left_alone(case, kw):
    program, inputs, want = _program(1, ci=8, co=8, **kw)
    out = _winograd(program, inputs)
    assert not any("_wino" in k for k in _kernels(out)), case
    np.testing.assert_allclose(run(out, inputs)["O"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("h", "w", "tile"), [(8, 8, 2), (10, 7, 2), (16, 16, 4), (13, 18, 4)])
def test_weights_the_program_takes_as_an_input_are_transformed_at_each_call(h, w, tile):
    """Weights that are not constant (an input: a training step's, a Tile
    function's parameter) are rewritten too when the image has at least
    ``min_blocks_computed_weights`` output blocks: their transform is one more
    kernel of every call.  New weights give new results (nothing is computed
    once and kept)."""
    program, inputs, want = _program(1, h, w, 8, 8, const=False)
    assert not any(r.const for r in program.root.refs)
    out = _winograd(program, inputs, tile=tile)
    names = _kernels(out)
    assert any(k.endswith("_wino_u") for k in names), names
    u = next(s for s in out.root.stmts if isinstance(s, Block) and s.name.endswith("_wino_u"))
    # run at every call, so not marked ``once`` (which compiles at O0 whatever its
    # size): its level is a transform's, O0 only while small (test_winograd_compile_cost)
    assert "once" not in u.tags and body_opt_level(u, 8) in (0, 1)
    tol = {"rtol": 1e-4, "atol": 1e-4} if tile == 2 else {"rtol": 1e-4, "atol": 5e-4}
    np.testing.assert_allclose(run(out, inputs)["O"], want, **tol)
    other = {**inputs, "K": -2 * inputs["K"]}
    np.testing.assert_allclose(run(out, other)["O"], -2 * want, **tol)
    fewer = _winograd(program, inputs, tile=tile, min_blocks_computed_weights=10**6)
    assert not any("_wino" in k for k in _kernels(fewer))


def test_input_weights_on_the_cpu_target_match_numpy():
    """The ``cpu`` target's pipeline on a convolution whose weights are an input:
    rewritten (its image has 14 x 14 F(4 x 4) blocks), and each call's weights
    give NumPy's result."""
    src = (
        "function (I[N, H, W, CI], K[KY, KX, CI, CO]) -> (O) { "
        "O[n, y, x, co : N, H, W, CO] = +(I[n, y + ky - 1, x + kx - 1, ci] * K[ky, kx, ci, co]); }"
    )
    rng = np.random.default_rng(3)
    i = rng.standard_normal((1, 56, 56, 32)).astype(np.float32)
    f = stripeml.compile(src, target="cpu")
    for seed in (4, 5):
        k = (np.random.default_rng(seed).standard_normal((3, 3, 32, 32)) / 17).astype(np.float32)
        exe = f.lower(i, k)
        assert any("winograd" in s.tags for s in exe.program.root.stmts if isinstance(s, Block))
        want = _conv_numpy(i, k, 1)
        np.testing.assert_allclose(f(i, k), want, rtol=1e-4, atol=2e-5 * float(np.abs(want).max()))


def test_few_channels_a_ragged_vector_or_a_small_image_are_left_alone():
    program, inputs, _ = _program(1, 8, 8, 8, 8)
    for options in ({"min_channels": 16}, {"vector_width": 16}, {"min_size": 9}):
        out = _winograd(program, inputs, **options)
        assert not any("_wino" in k for k in _kernels(out)), options


def _onnx_conv(h: int, ci: int, co: int, seed: int = 0):
    """An ONNX Conv (3 x 3, pad 1, bias) + Relu + a residual Add of the input, NCHW."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((co, ci, 3, 3)) / np.sqrt(9 * ci)).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    x = rng.standard_normal((1, ci, h, h)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Add", ["r", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    nhwc = _conv_numpy(x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), 1)
    want = np.maximum(nhwc + b, 0).transpose(0, 3, 1, 2) + x
    return model, x, want


@pytest.mark.parametrize(("h", "ci"), [(16, 32), (8, 64), (9, 32)])
def test_the_cpu_target_runs_onnx_convolutions_as_winograd(h, ci):
    """The ``cpu`` target's pipeline rewrites the model's convolution (constant
    weights, enough channels); the result is NumPy's direct convolution's, and
    without the pass the program has no transform kernels."""
    import stripeml.onnx
    from stripeml import api

    model, x, want = _onnx_conv(h, ci, ci)
    f = stripeml.onnx.compile(model, target="cpu", threads=2)
    names = [s.name for s in f.lower(x).program.root.stmts if isinstance(s, Block)]
    assert any(k.endswith("_wino_v") for k in names), names
    np.testing.assert_allclose(f(x=x), want, rtol=1e-4, atol=1e-4)
    cpu = api.target_for("cpu", 2)
    plain = replace(cpu, pipeline=tuple(p for p in cpu.pipeline if p.name != "winograd"))
    g = stripeml.onnx.compile(model, target=plain)
    assert not any("_wino" in s.name for s in g.lower(x).program.root.stmts if isinstance(s, Block))
    np.testing.assert_allclose(g(x=x), want, rtol=1e-4, atol=1e-4)


def test_the_products_read_the_weight_transform_in_panels_laid_out_once():
    """``U`` is computed from the constant weights alone, so ``unroll`` lays it out
    in its register tiles' panels once (a constant kernel), and the products read
    those panels instead of packing a panel of ``U`` at every call."""
    import stripeml.onnx
    from stripeml.analysis.constness import constness
    from stripeml.ir.nodes import walk_blocks

    model, x, want = _onnx_conv(16, 128, 128)  # several panels of output channels
    f = stripeml.onnx.compile(model, target="cpu", threads=2)
    program = f.lower(x).program
    stmts = program.root.stmts
    products = [
        s
        for s in stmts
        if isinstance(s, Block)
        and "contraction" in s.tags
        and any(r.from_.endswith("_wu_panels") for r in s.refs if r.dir == "in")
    ]
    assert products, [s.name for s in stmts if isinstance(s, Block)]
    assert not any("copy" in b.tags for p in products for b in walk_blocks(p))
    layouts = [
        k for k, s in enumerate(stmts)
        if isinstance(s, Block) and any(r.into.endswith("_wu_panels") for r in s.refs if r.dir == "out")
    ]  # fmt: skip
    assert layouts and set(layouts) <= constness(program).statements
    np.testing.assert_allclose(f(x=x), want, rtol=1e-4, atol=1e-4)
