"""``winograd`` with ``tile = 4``: F(4 x 4, 3 x 3), 6 x 6 input blocks and 36
products, on the interpreter and the CPU, against NumPy's direct convolution in
float64 (sizes that are and are not multiples of 4, so every cut part runs)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from stripeml.errors import OptionError
from stripeml.ir.nodes import Block
from stripeml.ir.parser import parse
from stripeml.ir.printer import format as format_ir
from stripeml.passes.winograd import Winograd
from stripeml.runtime.interp import run

from .test_winograd import _kernels, _onnx_conv, _program, _winograd


@pytest.mark.parametrize(
    ("n", "h", "w", "ci", "co"),
    [(1, 8, 8, 8, 8), (2, 5, 7, 16, 8), (1, 13, 13, 8, 16), (1, 6, 10, 8, 8), (1, 3, 2, 8, 8),
     (1, 4, 9, 8, 8)],
)  # fmt: skip
def test_f4_blocks_whole_and_cut_match_the_direct_sum(n, h, w, ci, co):
    program, inputs, want = _program(n, h, w, ci, co)
    out = _winograd(program, inputs, tile=4)
    products = [s for s in out.root.stmts if isinstance(s, Block) and "contraction" in s.tags]
    (m,) = products
    blocks = n * -(-h // 4) * -(-w // 4)
    assert [i.range for i in m.idxs][:3] == [6, 6, blocks]  # 36 products over the 4 x 4 blocks
    np.testing.assert_allclose(run(out, inputs)["O"], want, rtol=1e-4, atol=1e-4)
    assert parse(format_ir(out)) == out


@pytest.mark.parametrize("size", [8, 11])
def test_f4_runs_bias_and_relu_in_the_output_transform(size):
    program, inputs, want = _program(1, size, size, 16, 16, relu=True)
    out = _winograd(program, inputs, tile=4)
    assert "O" not in {r.into for r in out.root.refs}
    np.testing.assert_allclose(run(out, inputs)["R"], want, rtol=1e-4, atol=1e-4)


def test_f2_is_still_the_default():
    program, inputs, want = _program(1, 8, 8, 8, 8)
    out = _winograd(program, inputs)
    (m,) = [s for s in out.root.stmts if isinstance(s, Block) and "contraction" in s.tags]
    assert [i.range for i in m.idxs][:3] == [4, 4, 16]
    np.testing.assert_allclose(run(out, inputs)["O"], want, rtol=1e-4, atol=1e-4)


def test_tile_must_be_2_or_4():
    with pytest.raises(OptionError, match="tile"):
        Winograd(tile=3)


@pytest.mark.parametrize(("h", "ci"), [(16, 32), (12, 64), (13, 32)])
def test_f4_on_the_cpu_target_matches_numpy(h, ci):
    """The cpu target's pipeline with ``winograd``'s ``tile = 4``: an ONNX convolution
    with bias, ReLU and a residual add, at 1 and 2 threads."""
    import stripeml.onnx
    from stripeml import api

    model, x, want = _onnx_conv(h, ci, ci)
    for threads in (1, 2):
        cpu = api.target_for("cpu", threads)
        f = stripeml.onnx.compile(model, target=_with_tile(cpu, 4))
        program = f.lower(x).program
        transforms = [s for s in program.root.stmts if isinstance(s, Block) and "_wino_v" in s.name]
        assert transforms, _kernels(program)
        # every input transform writes 6 x 6 values per block and channel
        assert all(sum(r.dir == "out" for r in s.refs) == 36 for s in transforms)
        np.testing.assert_allclose(f(x=x), want, rtol=1e-4, atol=1e-4)


def _with_tile(target, tile):
    from stripeml.targets.target import PassSpec

    pipeline = tuple(
        PassSpec(p.name, tuple({**dict(p.options), "tile": tile}.items()))
        if p.name == "winograd"
        else p
        for p in target.pipeline
    )
    return replace(target, pipeline=pipeline)


@pytest.mark.parametrize(
    ("h", "w", "side"),
    [(14, 14, 4), (14, 16, 4), (16, 16, 6), (13, 13, 6), (13, 14, 6), (8, 12, 6)],
)
def test_whole_blocks_takes_f2_where_f4_alone_would_cut_blocks(h, w, side):
    """With ``whole_blocks``, even sides that are not all multiples of 4 (14 x 14)
    take F(2 x 2), which needs no cut block there; multiples of 4 and odd sides
    (where F(2 x 2) cuts too) keep F(4 x 4).  The results are NumPy's either way."""
    program, inputs, want = _program(1, h, w, 8, 8)
    out = _winograd(program, inputs, tile=4, whole_blocks=True)
    (m,) = [s for s in out.root.stmts if isinstance(s, Block) and "contraction" in s.tags]
    assert [i.range for i in m.idxs][:2] == [side, side]
    np.testing.assert_allclose(run(out, inputs)["O"], want, rtol=1e-4, atol=1e-4)
