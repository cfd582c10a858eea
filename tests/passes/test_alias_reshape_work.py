"""``alias_reshape`` keeps what it worked out about the statements across its
aliases (each buffer's first and last statement, the root's buffers): after
an alias only the kept buffer's statements are looked at again, not every
statement of the root.  Results against NumPy on the interpreter: the aliases
of a stack of layers, each splitting a product into heads and merging them
back, leave no copy and compute what they did."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.ir.nodes import Special
from stripeml.passes import alias_reshape as module
from stripeml.passes.alias_reshape import AliasReshape
from stripeml.runtime.interp import run

LAYERS = 6


def _source() -> str:
    lines = ["function (A0[8, 12], W[12, 12]) -> (" + f"A{LAYERS}" + ") {"]
    for n in range(1, LAYERS + 1):
        p = n - 1
        lines += [
            f"    B{n}[i, j : 8, 12] = +(A{p}[i, k] * W[k, j]);",
            f"    T{n} = reshape(B{n}, 8, 3, 4);",
            f"    H{n}[h, i, d : 3, 8, 4] = =(T{n}[i, h, d]);",
            f"    E{n} = tanh(H{n});",
            f"    F{n}[i, h, d : 8, 3, 4] = =(E{n}[h, i, d]);",
            f"    A{n} = reshape(F{n}, 8, 12);",
        ]
    return "\n".join([*lines, "}"])


def _reference(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    for _ in range(LAYERS):
        a = np.tanh((a.astype(np.float64) @ w).reshape(8, 3, 4)).reshape(8, 12)
    return a


@pytest.fixture
def looked_at(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per time the pass asked for a statement's buffers."""
    calls: list[int] = []
    real = module._Flows.__call__

    def counting(self, s):
        calls.append(1)
        return real(self, s)

    monkeypatch.setattr(module._Flows, "__call__", counting)
    return calls


def test_aliases_do_not_rescan_the_root(looked_at: list[int]) -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((8, 12)).astype(np.float32)
    w = (rng.standard_normal((12, 12)) / 4).astype(np.float32)
    program = stripeml.compile(_source(), target="interp").lower(a, w).program
    stmts = len(program.root.stmts)
    result = AliasReshape().run(program)
    assert not any(isinstance(s, Special) for s in result.root.stmts)  # every reshape aliased
    # 12 aliases over 36 statements: one scan, then the kept buffers' few statements
    # (a scan of the root after every alias: 366 looks)
    assert len(looked_at) <= 3 * stmts
    got = run(result, {"A0": a, "W": w})[f"A{LAYERS}"]
    np.testing.assert_allclose(got, _reference(a, w), rtol=1e-5, atol=1e-6)
