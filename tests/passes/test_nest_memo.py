"""``nest`` analyses the chains of repeated layers once per structure
(``passes/_nest_memo.py``): a stack of identical attention layers, each over
other buffers, has its rows unified for a few windows, not once per layer, and
every layer still nests and computes what NumPy does.  Layers that differ only
in a buffer's size (one whose scores fit the cache) get their own answer."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.ir.nodes import Block, Program
from stripeml.passes import nest as nest_module
from stripeml.passes.dce import Dce
from stripeml.passes.fuse import Fuse
from stripeml.passes.manager import run_pipeline
from stripeml.passes.nest import Nest
from stripeml.runtime.interp import run

OPTIONS = Nest(cache_bytes=16384, fraction=0.125, min_points=2, min_rows=1, vector_width=8)


def _layers(keys: list[str]) -> str:
    """Attention layers one after another (layer ``l`` reads ``O{l-1}`` as its
    queries and the keys ``keys[l-1]``; every ``O`` a result, so no chain
    crosses a layer)."""
    outs = ", ".join(f"O{n}" for n in range(1, len(keys) + 1))
    params = ", ".join(f"{k}[H, {k}N, D]" for k in dict.fromkeys(keys))
    lines = [f"function (O0[H, M, D], {params}, V[H, N, D]) -> ({outs}) {{"]
    for n, k in enumerate(keys, 1):
        lines += [
            f"    S{n}[h, m, n : H, M, {k}N] = +(O{n - 1}[h, m, d] * {k}[h, n, d]);",
            f"    T{n} = S{n} * 0.125;",
            f"    Mx{n}[h, m, 0 : H, M, 1] = >(T{n}[h, m, n]);",
            f"    X{n} = exp(T{n} - Mx{n});",
            f"    L{n}[h, m, 0 : H, M, 1] = +(X{n}[h, m, n]);",
            f"    P{n} = X{n} / L{n};",
            f"    O{n}[h, m, e : H, M, D] = +(P{n}[h, m, n] * V[h, n, e]);",
        ]
    return "\n".join([*lines, "}"])


def _reference(keys: list[str], inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Each layer's output in float64."""
    o, outs = inputs["O0"].astype(np.float64), []
    for k in keys:
        s = np.einsum("hmd,hnd->hmn", o, inputs[k]) * 0.125
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        n = inputs[k].shape[1]
        o = np.einsum("hmn,hne->hme", p, inputs["V"][:, :n])
        outs.append(o)
    return outs


def _program(keys: list[str], sizes: dict[str, int]) -> tuple[Program, dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    h, m, d = 2, 32, 8
    inputs = {"O0": rng.standard_normal((h, m, d)).astype(np.float32)}
    for k in dict.fromkeys(keys):
        inputs[k] = rng.standard_normal((h, sizes[k], d)).astype(np.float32)
    inputs["V"] = rng.standard_normal((h, max(sizes.values()), d)).astype(np.float32)
    args = [inputs["O0"], *(inputs[k] for k in dict.fromkeys(keys)), inputs["V"]]
    program = stripeml.compile(_layers(keys), target="interp").lower(*args).program
    return run_pipeline(program, [Fuse(), Dce()]).program, inputs


def _nested(program: Program) -> list[Block]:
    return [s for s in program.root.stmts if isinstance(s, Block) and "nest" in s.tags]


def _check(program: Program, keys: list[str], inputs: dict[str, np.ndarray]) -> None:
    got = run(program, inputs)
    for n, want in enumerate(_reference(keys, inputs), 1):
        np.testing.assert_allclose(got[f"O{n}"], want, rtol=1e-4, atol=1e-5)


def test_repeated_layers_are_analysed_once(unified: list[int]) -> None:
    keys = ["K"] * 8  # scores 2 x 32 x 32 x 4 bytes: 8 KiB, over 16 KiB x 0.125
    fused, inputs = _program(keys, {"K": 32})
    result = OPTIONS.run(fused)
    assert len(_nested(result)) == 8  # every layer nests ...
    # ... and the windows of the middle layers, equal up to their buffers, are
    # answered from the first of them (8 layers: a call per layer without the memo)
    assert 0 < len(unified) <= 5
    _check(result, keys, inputs)


def test_layers_differing_in_a_size_get_their_own_answer(unified: list[int]) -> None:
    # the fifth layer's intermediates (scores 2 x 32 x 1) fit the cache's share: not nested
    keys = ["K", "K", "K", "K", "J", "K", "K", "K"]
    fused, inputs = _program(keys, {"K": 32, "J": 1})
    result = OPTIONS.run(fused)
    nests = _nested(result)
    assert len(nests) == 7
    assert not any(any(r.from_ == "J" for r in s.refs) for s in nests)
    _check(result, keys, inputs)


@pytest.mark.parametrize(
    "keys",
    [["K", "J", "K", "J", "K", "J", "K"], ["J", "J", "K", "K", "K", "J", "K", "K"]],
)
def test_memo_answers_as_the_analysis_does(
    keys: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Layers of two sizes in any order (windows that share structure but not
    shapes): the program with the memo is the one the analysis of every window
    writes, and it computes what NumPy does."""
    fused, inputs = _program(keys, {"K": 32, "J": 16})
    shared = OPTIONS.run(fused)
    monkeypatch.setattr(nest_module.ChainMemo, "get", lambda *_: (False, None))
    assert OPTIONS.run(fused) == shared
    assert _nested(shared)
    _check(shared, keys, inputs)
