"""An O3 leaf kernel takes its thread-split index's range at run time when that
index moves no unit-stride dimension of what it reads (codegen/llvm.py,
``runtime_bounds`` and ``_split_rows``): a layer norm over rows of 768, the
form BERT exports, then has one body per kernel for every sequence length, and
a second length links the first's bodies instead of compiling its own.  At 128
rows too: ``nest`` leaves a chain that reads each input row once unnested while
its intermediates fit the whole cache (passes/_nest_blocks.py, ``reads_once``), and
``partial_sums`` no longer splits its sums over a row (passes/partial_sums.py,
``_lane``), so 128 compiles the kernels 64 has.

Results are checked against NumPy in float64; what was compiled is counted with
``jit.STATS`` (every module compiled in this process: no helper processes).
"""

from __future__ import annotations

import numpy as np
import pytest

from stripeml.codegen.llvm import body_opt_level, generate, runtime_bounds
from stripeml.codegen.llvm_plan import parallel_index
from stripeml.ir.nodes import Block, walk_blocks
from stripeml.runtime import jit

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx  # noqa: E402

D = 768  # BERT-base's hidden size
EPS = 1e-12


def _layer_norm_model() -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    """``layer_norm(X + R)`` over the last axis, as BERT exports it (ReduceMean,
    Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add), for a sequence of any length."""
    rng = np.random.default_rng(11)
    g = (1.0 + 0.1 * rng.standard_normal(D)).astype(np.float32)
    b = (0.1 * rng.standard_normal(D)).astype(np.float32)
    nodes = [
        helper.make_node("Add", ["X", "R"], ["H"]),
        helper.make_node("ReduceMean", ["H"], ["M"], axes=[-1], keepdims=1),
        helper.make_node("Sub", ["H", "M"], ["C"]),
        helper.make_node("Pow", ["C", "two"], ["Q"]),
        helper.make_node("ReduceMean", ["Q"], ["V"], axes=[-1], keepdims=1),
        helper.make_node("Add", ["V", "eps"], ["VE"]),
        helper.make_node("Sqrt", ["VE"], ["SD"]),
        helper.make_node("Div", ["C", "SD"], ["N"]),
        helper.make_node("Mul", ["N", "G"], ["NG"]),
        helper.make_node("Add", ["NG", "B"], ["Y"]),
    ]
    inits = [
        numpy_helper.from_array(g, "G"),
        numpy_helper.from_array(b, "B"),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(EPS, np.float32), "eps"),
    ]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, "S", D])
    r = helper.make_tensor_value_info("R", TensorProto.FLOAT, [1, "S", D])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, "S", D])
    graph = helper.make_graph(nodes, "layer_norm", [x, r], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model, g, b


def _inputs(rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((1, rows, D)).astype(np.float32)
    r = rng.standard_normal((1, rows, D)).astype(np.float32)
    return x, r


def _expected(x: np.ndarray, r: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    h = x.astype(np.float64) + r
    c = h - h.mean(axis=-1, keepdims=True)
    v = (c * c).mean(axis=-1, keepdims=True)
    return c / np.sqrt(v + EPS) * g + b


def _o3_leaves(program) -> list[Block]:
    return [
        s
        for s in program.root.stmts
        if isinstance(s, Block) and not s.sub_blocks and body_opt_level(s, 16) == 3
    ]


def test_the_row_reductions_take_their_rows_at_run_time() -> None:
    model, _, _ = _layer_norm_model()
    f = stripeml.onnx.compile(model, target="cpu")
    leaves = _o3_leaves(f.lower(*_inputs(64)).program)
    assert leaves  # the sums over 768 and the scaling: O3 leaf kernels
    for kernel in leaves:
        bounds = runtime_bounds(kernel, 3, 16)
        assert bounds == (parallel_index(kernel),)  # the rows, split by the threads
        assert kernel.idx(bounds[0]).range == 64


def test_two_lengths_generate_the_same_o3_texts() -> None:
    model, _, _ = _layer_norm_model()
    f = stripeml.onnx.compile(model, target="cpu")
    texts = []
    for rows in (64, 32):
        module = generate(f.lower(*_inputs(rows)).program, vector_width=16)
        bodies = [b for b in module.bodies if b.opt == 3 and b.llvm_ir is not None]
        assert bodies
        texts.append(sorted(b.llvm_ir.replace(b.symbol, "SYMBOL") for b in bodies))
    assert texts[0] == texts[1]  # (before: the rows' range and the batch's stride)


def test_a_second_length_links_the_first_lengths_bodies(tmp_path, monkeypatch) -> None:
    """48 rows, then 40 (lengths no other test here compiles: a program compiled
    before in this process would be found whatever its code): the second
    compile compiles nothing, and both compute what NumPy does."""
    _check_second_length_links(tmp_path, monkeypatch, 48, 40)


def test_128_rows_are_not_nested(monkeypatch) -> None:
    """0.75 MiB of intermediates fit the 1 MiB cache ``nest`` plans for, and the
    chain reads each row of its inputs once: the kernels stay leaves, as at 64."""
    model, _, _ = _layer_norm_model()
    f = stripeml.onnx.compile(model, target="cpu")
    program = f.lower(*_inputs(128)).program
    assert not any("nest" in b.tags or "nest" in b.name for b in walk_blocks(program.root))
    assert not any(b.name.endswith("_parts") for b in program.root.sub_blocks)


def test_128_then_80_rows_link_the_first_bodies(tmp_path, monkeypatch) -> None:
    """128 rows, then 80 (a transformer's first and second sequence lengths; 80,
    which no other test here compiles, so that only 128's bodies can be
    linked): the second compile compiles nothing; both against NumPy."""
    _check_second_length_links(tmp_path, monkeypatch, 128, 80)


def _check_second_length_links(tmp_path, monkeypatch, first: int, second: int) -> None:
    """The layer norm compiled at ``first`` rows, then ``second``: the second
    compile compiles no module (its steps gather); both against NumPy."""
    monkeypatch.setenv("STRIPEML_COMPILE_WORKERS", "0")  # every compile counted here
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    model, g, b = _layer_norm_model()
    f = stripeml.onnx.compile(model, target="cpu")
    for rows, modules in ((first, None), (second, 0)):
        x, r = _inputs(rows)
        before = jit.STATS["optimize"]
        got = f(x, r)
        if modules is not None:
            assert jit.STATS["optimize"] - before == modules
        np.testing.assert_allclose(got, _expected(x, r, g, b), rtol=1e-4, atol=1e-4)


def _cast_model() -> onnx.ModelProto:
    """An attention mask's conversion, int64 to float over a sequence of any length."""
    x = helper.make_tensor_value_info("X", TensorProto.INT64, [1, "S"])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, "S"])
    node = helper.make_node("Cast", ["X"], ["Y"], to=TensorProto.FLOAT)
    graph = helper.make_graph([node], "cast", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_an_o1_split_vector_loop_takes_its_range_at_run_time() -> None:
    """At O1 the thread-split index takes its runtime bound even where it is the
    vector index: its loop runs between the caller's bounds anyway, so 64 and 32
    generate one text; both convert as NumPy does."""
    f = stripeml.onnx.compile(_cast_model(), target="cpu")
    texts = []
    for rows in (64, 32):
        x = np.arange(rows, dtype=np.int64).reshape(1, rows) % 3
        program = f.lower(x).program
        (kernel,) = [s for s in program.root.stmts if isinstance(s, Block)]
        assert body_opt_level(kernel, 16) == 1
        assert runtime_bounds(kernel, 1, 16) == (parallel_index(kernel),)
        module = generate(program, vector_width=16)
        (body,) = module.bodies
        assert body.llvm_ir is not None
        texts.append(body.llvm_ir.replace(body.symbol, "SYMBOL"))
        np.testing.assert_array_equal(f(x), x.astype(np.float32))
    assert texts[0] == texts[1]
