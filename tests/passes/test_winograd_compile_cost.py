"""What keeps F(4 x 4)'s transforms cheap to compile: the matrices run as
straight-line programs with shared partial sums (each checked against its
matrix in float64, and the transforms' statement counts), and a transform split
over threads on a block index rather than on its channels, the vector lanes,
where a block index splits evenly enough (results against NumPy's direct sum)."""

from __future__ import annotations

import numpy as np
import pytest

from stripeml.ir.nodes import Block, Intrinsic
from stripeml.passes._winograd_body import AT4, BT4, G4, PROGRAMS, Body, separable
from stripeml.passes.halo import Halo
from stripeml.passes.manager import run_pipeline
from stripeml.passes.winograd import Winograd, _balanced, _lane
from stripeml.runtime.interp import run

from .helpers import checker
from .test_winograd import _program


def _matrix(rows: tuple) -> np.ndarray:
    cols = 1 + max(j for row in rows for _, j in row)
    m = np.zeros((len(rows), cols))
    for i, row in enumerate(rows):
        for c, j in row:
            m[i, j] = c
    return m


def _evaluate(program: tuple, x: np.ndarray) -> np.ndarray:
    env: dict[str, float] = {f"x{j}": float(v) for j, v in enumerate(x)}
    env["zero"] = 0.0
    for name, op, a, b in program:
        if op == "mul":
            env[name] = env[a] * float(b)
        else:
            env[name] = env[a] + env[b] if op == "add" else env[a] - env[b]
    rows = sum(1 for k in env if k.startswith("y"))
    return np.array([env[f"y{i}"] for i in range(rows)])


@pytest.mark.parametrize("rows", [BT4, G4, AT4], ids=["BT", "G", "AT"])
def test_each_program_computes_its_matrix(rows):
    m = _matrix(rows)
    rng = np.random.default_rng(1)
    for _ in range(20):
        x = rng.standard_normal(m.shape[1])
        np.testing.assert_allclose(_evaluate(PROGRAMS[rows], x), m @ x, rtol=1e-13, atol=1e-13)
    # and each basis vector: every coefficient, exactly
    for j in range(m.shape[1]):
        np.testing.assert_array_equal(_evaluate(PROGRAMS[rows], np.eye(m.shape[1])[j]), m[:, j])


@pytest.mark.parametrize(
    ("rows", "side", "most"), [(BT4, 6, 17 * 12), (AT4, 6, 13 * 10), (G4, 3, 12 * 9)]
)
def test_the_transforms_take_the_programs_operations(rows, side, most):
    body = Body()
    grid = [[body.load(f"X{i}{j}") for j in range(side)] for i in range(side)]
    separable(rows, grid, body)
    ops = [s for s in body.stmts if isinstance(s, Intrinsic)]
    assert len(ops) <= most


@pytest.mark.parametrize("missing", [1, 2, 3])
def test_a_cut_input_block_takes_missing_pixels_as_zero(missing):
    """The programs with the last ``missing`` rows and columns absent (None)."""
    rng = np.random.default_rng(2)
    d = rng.standard_normal((6, 6))
    d[6 - missing :, :] = 0
    d[:, 6 - missing :] = 0
    body = Body()
    grid = [[None if i >= 6 - missing or j >= 6 - missing else body.load(f"D{i}{j}")
             for j in range(6)] for i in range(6)]  # fmt: skip
    out = separable(BT4, grid, body)
    values = {f"$D{i}{j}": d[i, j] for i in range(6) for j in range(6)}
    for s in body.stmts:
        if isinstance(s, Intrinsic):
            a = [values[x] for x in s.inputs]
            if s.op == "neg":
                values[s.into] = -a[0]
            else:
                values[s.into] = {"add": a[0] + a[1], "sub": a[0] - a[1], "mul": a[0] * a[1]}[s.op]
        elif hasattr(s, "value"):  # Constant
            values[s.into] = s.value
    got = np.array([[values[v] for v in row] for row in out])
    bt = _matrix(BT4)
    np.testing.assert_allclose(got, bt @ d @ bt.T, rtol=1e-12, atol=1e-12)


def test_balanced():
    assert _balanced(7, 2) and _balanced(7, 8) and _balanced(14, 2)
    assert not _balanced(7, 16) and not _balanced(1, 2) and not _balanced(3, 2)


@pytest.mark.parametrize(("h", "tile"), [(28, 4), (14, 2), (27, 4)])
def test_transforms_split_on_blocks_not_on_the_channels(h, tile):
    """7 x 7 blocks (28 x 28 or 27 x 27, cut, with F(4 x 4), 14 x 14 with F(2 x 2))
    over 2 threads:
    ``thread`` would split the channels (the only index it finds even); the
    transforms are split on a block row instead, and compute the same."""
    program, inputs, want = _program(1, h, h, 16, 32, relu=True)
    expected = run(program, inputs)
    check = checker(inputs, expected, rtol=1e-4, atol=1e-4)
    passes = [Halo(), Winograd(min_channels=8, vector_width=8, threads=2, tile=tile)]
    out = run_pipeline(program, passes, check=check).program
    transforms = [s for s in out.root.stmts if isinstance(s, Block) and "winograd" in s.tags]
    whole = [b for b in transforms if {"t", "s"} <= {i.name for i in b.idxs}]
    assert whole
    for b in whole:
        assert "thread" in b.tags, b.name
        assert not _lane(b, b.idxs[0].name), (b.name, b.idxs[0])
    np.testing.assert_allclose(run(out, inputs)["R"], want, rtol=1e-4, atol=1e-4)


def test_the_weight_transform_alone_is_compiled_at_o0():
    """``U`` reads constants only, so it runs once: O0 (``llvm.body_opt_level``);
    the input and output transforms over 6 x 6 blocks (24 x 24 pixels), run
    every call, stay at O1."""
    from stripeml.codegen.llvm import body_opt_level

    program, inputs, _ = _program(1, 24, 24, 16, 32, relu=True)
    passes = [Halo(), Winograd(min_channels=8, vector_width=8, tile=4)]
    out = run_pipeline(program, passes).program
    levels = {
        s.name.rsplit("_", 1)[-1]: body_opt_level(s, 8)
        for s in out.root.stmts
        if isinstance(s, Block) and "winograd" in s.tags
    }
    assert levels == {"u": 0, "v": 1, "o": 1}


def test_small_transforms_are_compiled_at_o0_and_match_numpy(tmp_path):
    """26 x 26 pixels in F(4 x 4) blocks: 6 x 6 whole blocks, and a cut last
    block row, column and corner, each a transform kernel of a few thousand
    to 50,000 operations: those are compiled at O0 (each cost 20-30 ms of
    LLVM at O1, for a kernel a few microseconds long), the whole blocks' at
    O1.  Compiled for the CPU (two threads), the convolution equals NumPy's."""
    from stripeml.codegen.llvm import body_opt_level
    from stripeml.codegen.llvm_levels import WINOGRAD_O0_WORK
    from stripeml.ir.nodes import work_estimate
    from stripeml.runtime.cpu import CpuBackend, CpuOptions

    program, inputs, want = _program(1, 26, 26, 16, 32, relu=True)
    passes = [Halo(), Winograd(min_channels=8, vector_width=8, tile=4)]
    out = run_pipeline(program, passes).program
    transforms = {
        s.name.split("_wino_")[-1]: s
        for s in out.root.stmts
        if isinstance(s, Block) and "winograd" in s.tags and "once" not in s.tags
    }
    assert set(transforms) == {"v", "v_1", "v_2", "v_3", "o", "o_1", "o_2", "o_3"}
    levels = {name: body_opt_level(b, 8) for name, b in transforms.items()}
    assert levels == {"v": 1, "o": 1, **{f"{t}_{i}": 0 for t in "vo" for i in (1, 2, 3)}}
    assert all(work_estimate(transforms[f"o_{i}"]) <= WINOGRAD_O0_WORK for i in (1, 2, 3))
    compiled = CpuBackend(CpuOptions(threads=2, cache_dir=tmp_path)).compile(out)
    got = compiled.run(inputs)["R"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-4)
