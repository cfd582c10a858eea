"""``halo`` fills a padded input's border with one kernel (a view and a block per
slab) that stores each border element exactly once and nothing inside; results
match NumPy on the interpreter and the CPU, and ``alias_copy`` still lets the
producer write the interior (the fill's views miss it)."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

import stripeml
from stripeml.ir.nodes import Block, Program
from stripeml.passes import halo as halo_module
from stripeml.passes.alias_copy import AliasCopy
from stripeml.passes.halo import Halo
from stripeml.passes.manager import run_pipeline
from stripeml.runtime.interp import run

from .helpers import checker
from .test_halo import _case


def _stored(fill: Block, program: Program) -> Counter:
    """The elements of the halo buffer the fill kernel stores, each with its count
    (by enumerating every point of its blocks)."""
    views = {r.into: r for r in fill.refs}
    got: Counter = Counter()
    for b in fill.sub_blocks:
        (r,) = b.refs
        parent = views[r.from_]
        ranges = [range(i.range) for i in b.idxs]
        names = [i.name for i in b.idxs]
        for point in itertools.product(*ranges):
            env = dict(zip(names, point))
            elem = tuple(
                int(p.evaluate(env)) + int(a.evaluate(env)) for p, a in zip(parent.access, r.access)
            )
            got[elem] += 1
    return got


@pytest.mark.parametrize(
    ("shape", "pad", "stride", "dil"),
    [
        ((2, 6, 5, 3), 1, 1, 1),
        ((1, 7, 4, 2), 2, 1, 1),
        ((1, 8, 8, 2), 1, 2, 1),
        ((1, 5, 6, 2), 2, 2, 2),
    ],
)
def test_one_fill_stores_each_border_element_once(shape, pad, stride, dil) -> None:
    n, x, y, ci = shape
    program, inputs, want = _case(n, x, y, ci, 4, 3, 3, pad, stride, dil)
    expected = run(program, inputs)
    new = run_pipeline(program, [Halo()], check=checker(inputs, expected, atol=1e-5)).program
    fills = [s for s in new.root.stmts if isinstance(s, Block) and "fill" in s.tags]
    assert len(fills) == 1
    (fill,) = fills
    halo = next(r for r in new.root.refs if r.into.endswith("_halo"))
    copy = next(s for s in new.root.stmts if isinstance(s, Block) and "copy" in s.tags)
    low = [a.const for a in next(r for r in copy.refs if r.dir == "out").access]
    inside = {
        tuple(lo + c for lo, c in zip(low, point))
        for point in itertools.product(*(range(s) for s in (n, x, y, ci)))
    }
    every = set(itertools.product(*(range(s) for s in halo.shape.sizes)))
    stored = _stored(fill, new)
    assert set(stored) == every - inside  # the border, nothing inside
    assert set(stored.values()) == {1}  # each element once
    np.testing.assert_allclose(run(new, inputs)["O"], want, rtol=1e-4, atol=1e-4)
    per_slab = Halo(merge_fills=False).run(program)
    slabs = [s for s in per_slab.root.stmts if isinstance(s, Block) and "fill" in s.tags]
    assert len(slabs) == len(fill.sub_blocks) > 1


PRODUCED_THEN_PADDED = """
function (A[N, X, Y, C], K[KX, KY, C, CO]) -> (O) {
    R = relu(A);
    O[n, x, y, co : N, X, Y, CO] = +(R[n, x + kx - 1, y + ky - 1, c] * K[kx, ky, c, co]);
}
"""


def test_the_producer_still_writes_the_interior_and_the_cpu_agrees() -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((1, 6, 7, 3)).astype(np.float32)
    k = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    r = np.pad(np.maximum(a, 0).astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((1, 6, 7, 4))
    for i, j in itertools.product(range(3), range(3)):
        want += np.einsum("nxyc,cd->nxyd", r[:, i : i + 6, j : j + 7], k[i, j])
    program = stripeml.compile(PRODUCED_THEN_PADDED, target="interp").lower(a, k).program
    new = run_pipeline(program, [Halo(), AliasCopy()]).program
    kernels = [s for s in new.root.stmts if isinstance(s, Block)]
    assert not any("copy" in s.tags for s in kernels)  # R written in place, no copy
    assert sum("fill" in s.tags for s in kernels) == 1
    np.testing.assert_allclose(run(new, {"A": a, "K": k})["O"], want, rtol=1e-4, atol=1e-4)
    exe = stripeml.compile(PRODUCED_THEN_PADDED, target="cpu").lower(a, k)
    assert "_halo_fill " in exe.ir
    np.testing.assert_allclose(exe(a, k), want, rtol=1e-4, atol=1e-4)


TWO_LAYERS = """
function (A[N, X, Y, C], K[3, 3, C, C], L[3, 3, C, C]) -> (P) {
    O[n, x, y, co : N, X, Y, C] = +(A[n, x + kx - 1, y + ky - 1, c] * K[kx, ky, c, co]);
    P[n, x, y, co : N, X, Y, C] = +(O[n, x + kx - 1, y + ky - 1, c] * L[kx, ky, c, co]);
}
"""


def test_repeated_layers_ask_isl_once(monkeypatch) -> None:
    """Two padded convolutions equal up to names: the legality questions to isl
    (their domains) are asked for the first only; both get their halo, and the
    results match NumPy."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal((1, 5, 6, 3)).astype(np.float32)
    k, m = (rng.standard_normal((3, 3, 3, 3)).astype(np.float32) for _ in range(2))
    program = stripeml.compile(TWO_LAYERS, target="interp").lower(a, k, m).program
    domains: list[str] = []
    real = halo_module.block_domain

    def counting(block, outer=None):
        domains.append(block.name)
        return real(block, outer)

    monkeypatch.setattr(halo_module, "block_domain", counting)
    new = Halo().run(program)
    monkeypatch.undo()
    assert len(domains) == 2, domains  # the box and the domain of the first layer
    assert sum("fill" in s.tags for s in new.root.stmts if isinstance(s, Block)) == 2

    def conv(x, w):
        p = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
        out = np.zeros(x.shape[:3] + (w.shape[3],))
        for i, j in itertools.product(range(3), range(3)):
            out += np.einsum("nxyc,cd->nxyd", p[:, i : i + x.shape[1], j : j + x.shape[2]], w[i, j])
        return out

    want = conv(conv(a, k), m)
    got = run(new, {"A": a, "K": k, "L": m})["P"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
