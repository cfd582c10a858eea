"""Depthwise and grouped convolutions on target cpu: the interpreter's results, and
torch's ``conv2d(groups=...)`` (or NumPy without torch).

``unroll`` tiles a depthwise kernel (every input reads the channel, the vector
index) with rows along a pixel index the weight does not depend on, in a flat
nest; the CPU code generator leaves each register tile to start from the
aggregation's identity (no separate pass writing it to the output first).
"""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.ir.nodes import walk_blocks
from stripeml.passes.manager import run_pipeline
from stripeml.passes.unroll import Unroll

ODD = (7, 13, 14, 27, 28)


def _out(h: int, k: int, s: int, pad: int) -> int:
    return (h + 2 * pad - k) // s + 1


def _nhwc(k: int, s: int, pad: int, h: int) -> str:
    o = _out(h, k, s, pad)
    return f"""function (I[N, H, W, C], K[KY, KX, C]) -> (O) {{
  O[n, y, x, c : N, {o}, {o}, C] = +(I[n, {s}*y + ky - {pad}, {s}*x + kx - {pad}, c] * K[ky, kx, c]);
}}"""


def _nchw(k: int, s: int, pad: int, h: int) -> str:
    o = _out(h, k, s, pad)
    return f"""function (I[N, C, H, W], K[C, KY, KX]) -> (O) {{
  O[n, c, y, x : N, C, {o}, {o}] = +(I[n, c, {s}*y + ky - {pad}, {s}*x + kx - {pad}] * K[c, ky, kx]);
}}"""


def _grouped(k: int, s: int, pad: int, h: int, g: int, cig: int, cog: int) -> str:
    """The ONNX importer's grouped form (NHWC, weight KH, KW, CIg, G, COg)."""
    o = _out(h, k, s, pad)
    return f"""function (I[N, H, W, C], K[KY, KX, CIG, G, COG]) -> (O) {{
  O[n, y, x, {cog} * g + co : N, {o}, {o}, {g * cog}] =
      +(I[n, {s}*y + ky - {pad}, {s}*x + kx - {pad}, {cig} * g + ci] * K[ky, kx, ci, g, co]);
}}"""


def _reference(x_nchw: np.ndarray, w: np.ndarray, s: int, pad: int, groups: int) -> np.ndarray:
    """conv2d over NCHW ``x_nchw`` with OIHW ``w`` (torch when present, else NumPy)."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        with torch.no_grad():
            y = torch.nn.functional.conv2d(
                torch.from_numpy(x_nchw), torch.from_numpy(w), stride=s, padding=pad, groups=groups
            )
        return y.numpy()
    n, c, h, _ = x_nchw.shape
    co, cig, k, _ = w.shape
    o = _out(h, k, s, pad)
    p = np.pad(x_nchw.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, co, o, o))
    cog = co // groups
    for oc in range(co):
        g = oc // cog
        for ky in range(k):
            for kx in range(k):
                win = p[:, g * cig : (g + 1) * cig, ky : ky + s * o : s, kx : kx + s * o : s]
                out[:, oc] += np.einsum("nchw,c->nhw", win, w[oc, :, ky, kx])
    return out.astype(np.float32)


def _run(src: str, i: np.ndarray, k: np.ndarray, const: bool) -> tuple[np.ndarray, str]:
    want = stripeml.compile(src, target="interp")(i, k)
    f = stripeml.compile(src, target="cpu", constants={"K": k} if const else None)
    exe = f.lower(i) if const else f.lower(i, k)
    got = exe(i) if const else exe(i, k)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return got, exe.ir


@pytest.mark.parametrize("h", ODD + (16,))
@pytest.mark.parametrize("s", [1, 2])
@pytest.mark.parametrize("const", [True, False])
def test_depthwise_nhwc_3x3(h: int, s: int, const: bool) -> None:
    rng = np.random.default_rng(h * 10 + s)
    c = 48
    i = rng.standard_normal((1, h, h, c)).astype(np.float32)
    k = rng.standard_normal((3, 3, c)).astype(np.float32)
    got, ir = _run(_nhwc(3, s, 1, h), i, k, const)
    want = _reference(i.transpose(0, 3, 1, 2).copy(), k.transpose(2, 0, 1)[:, None].copy(), s, 1, c)
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)
    if _out(h, 3, s, 1) in (7, 14, 8, 4, 16):
        assert "#register_tile" in ir


@pytest.mark.parametrize(("c", "h", "k", "s", "pad"), [(16, 14, 5, 1, 2), (32, 13, 5, 2, 2),
                                                        (144, 7, 3, 1, 1), (24, 27, 3, 2, 0)])  # fmt: skip
def test_depthwise_nhwc_other_windows(c: int, h: int, k: int, s: int, pad: int) -> None:
    rng = np.random.default_rng(c + h)
    i = rng.standard_normal((2, h, h, c)).astype(np.float32)
    w = rng.standard_normal((k, k, c)).astype(np.float32)
    got, _ = _run(_nhwc(k, s, pad, h), i, w, True)
    want = _reference(
        i.transpose(0, 3, 1, 2).copy(), w.transpose(2, 0, 1)[:, None].copy(), s, pad, c
    )
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("h", ODD)
@pytest.mark.parametrize("s", [1, 2])
def test_depthwise_nchw_3x3(h: int, s: int) -> None:
    rng = np.random.default_rng(h + 100 * s)
    c = 20
    i = rng.standard_normal((1, c, h, h)).astype(np.float32)
    k = rng.standard_normal((c, 3, 3)).astype(np.float32)
    got, _ = _run(_nchw(3, s, 1, h), i, k, True)
    np.testing.assert_allclose(got, _reference(i, k[:, None], s, 1, c), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("g", "cig", "cog", "h", "s"), [(2, 8, 16, 14, 1), (4, 4, 4, 13, 2),
                                                        (3, 16, 16, 7, 1), (8, 2, 2, 28, 2)])  # fmt: skip
def test_grouped_nhwc(g: int, cig: int, cog: int, h: int, s: int) -> None:
    rng = np.random.default_rng(g * cig + h)
    i = rng.standard_normal((1, h, h, g * cig)).astype(np.float32)
    w = rng.standard_normal((g * cog, cig, 3, 3)).astype(np.float32)  # OIHW, as torch
    k = np.ascontiguousarray(w.reshape(g, cog, cig, 3, 3).transpose(3, 4, 2, 0, 1))
    got, _ = _run(_grouped(3, s, 1, h, g, cig, cog), i, k, True)
    want = _reference(i.transpose(0, 3, 1, 2).copy(), w, s, 1, g)
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)


def _tiles(c: int, h: int, **options: object) -> list:
    rng = np.random.default_rng(0)
    i = rng.standard_normal((1, h, h, c)).astype(np.float32)
    k = rng.standard_normal((3, 3, c)).astype(np.float32)
    # Halo-free reading of a padding-free depthwise conv (no constraints).
    src = f"""function (I[N, H, W, C], K[KY, KX, C]) -> (O) {{
  O[n, y, x, c : N, {h - 2}, {h - 2}, C] = +(I[n, y + ky, x + kx, c] * K[ky, kx, c]);
}}"""
    program = stripeml.compile(src, target="interp").lower(i, k).program
    result = run_pipeline(program, [Unroll(vector_width=16, **options)])  # type: ignore[arg-type]
    return [b for b in walk_blocks(result.program.root) if "register_tile" in b.tags]


def test_unroll_takes_pixel_rows_for_depthwise() -> None:
    (tile,) = _tiles(64, 16)  # 14 x 14 outputs: 7 rows of x, as many vectors as fit (1)
    ranges = {i.name: i.range for i in tile.idxs}
    assert sorted(ranges.values()) == [3, 3, 7, 16]
    (tile,) = _tiles(64, 10)  # 8 x 8 outputs: 4 rows, 3 vectors do not divide 4: 2
    assert sorted(i.range for i in tile.idxs) == [3, 3, 4, 32]


def test_channel_rows_off_keeps_one_pixel_tiles() -> None:
    (tile,) = _tiles(64, 16, channel_rows=False)
    assert sorted(i.range for i in tile.idxs) == [3, 3, 64]
