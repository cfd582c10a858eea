"""Weight layouts are the target's choice: the importer binds plain weights, and
the target's pipeline blocks them to its register tiles' width (or not at all)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx as so  # noqa: E402
from stripeml.targets import TARGETS_DIR, resolve  # noqa: E402

rng = np.random.default_rng(5)


def conv_model(ci: int, co: int, size: int):
    """A 3x3 padded convolution, NCHW, with constant weights (an initializer)."""
    w = (rng.standard_normal((co, ci, 3, 3)) * 0.2).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ci, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([node], "g", [x], [y], [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]), w


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The convolution in NumPy: zero padding 1, stride 1."""
    n, ci, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd), np.float64)
    for ky in range(3):
        for kx in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, ky : ky + h, kx : kx + wd], w[:, :, ky, kx])
    return out


def cpu_target(tmp_path: Path, vector_width: int, vectors: int, registers: int = 0) -> Path:
    """The bundled cpu target with a fixed vector width and vectors per tile, and
    ``registers`` vector registers (0: the tile the options say)."""
    text = (TARGETS_DIR / "cpu.toml").read_text()
    text = text.replace('vector_width = "auto"', f"vector_width = {vector_width}")
    if registers:
        text = text.replace('vector_registers = "auto"', f"vector_registers = {registers}")
    else:
        text = text.replace('registers = "$vector_registers"', "registers = 0")
    text = text.replace("vectors = 2,", f"vectors = {vectors},")
    path = tmp_path / f"cpu_{vector_width}_{vectors}_{registers}.toml"
    path.write_text(text)
    return path


def panel_widths(ir: str) -> list[int]:
    """The last dimension of every laid-out constant (``none W_panels f32(..., B)``)."""
    return [int(m[1]) for m in re.finditer(r"none \w+_panels f32\([^)]*?(\d+)\)", ir)]


@pytest.mark.parametrize(
    ("vector_width", "vectors", "registers", "width"),
    [(4, 1, 0, 4), (4, 2, 0, 8), (8, 2, 0, 16), (4, 2, 16, 8), (4, 2, 32, 16)],
)
def test_cpu_blocks_weights_to_its_tile_width(
    tmp_path, vector_width, vectors, registers, width
) -> None:
    """32 output channels on a 12x12 image: a target with 4 lanes and 1 vector per
    tile gets 4-wide blocks, 2 vectors 8-wide, 8 lanes 16-wide; 32 registers
    double the vectors (4 lanes, 16-wide).  (12 rows: the tiles' rows, 4 or 6,
    divide them; an 8x8 image takes ``unroll``'s 8-row ``long_rows`` tiles,
    narrower.)"""
    m, w = conv_model(ci=8, co=32, size=12)
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    target = cpu_target(tmp_path, vector_width, vectors, registers)
    f = so.compile(m, target=str(target))
    source = f.source(x)
    assert "cb" not in source  # the importer writes plain (KH, KW, CI, CO) weights
    assert panel_widths(f.lower(x).ir) == [width]
    np.testing.assert_allclose(f(x), reference(x, w), rtol=1e-4, atol=1e-4)


def test_this_host_blocks_by_its_own_lanes() -> None:
    """2 vectors of the host's lanes per tile, 4 with 32 vector registers (AVX-512),
    on a 12x12 image (rows the tiles' rows divide)."""
    m, w = conv_model(ci=8, co=256, size=12)
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    f = so.compile(m, target="cpu")
    host = resolve("cpu")
    vectors = 4 if host.vector_registers >= 32 else 2
    assert panel_widths(f.lower(x).ir) == [vectors * host.vector_width]
    np.testing.assert_allclose(f(x), reference(x, w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["interp", "examples/two_level_cpu"])
def test_targets_without_register_tiles_keep_plain_weights(target) -> None:
    m, w = conv_model(ci=4, co=16, size=6)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    f = so.compile(m, target=target)
    assert panel_widths(f.lower(x).ir) == []
    np.testing.assert_allclose(f(x), reference(x, w), rtol=1e-4, atol=1e-4)
