"""Shared helpers for the interpreter tests."""

from __future__ import annotations

import numpy as np

from stripeml.ir.nodes import Program
from stripeml.runtime.interp import run

MODES = ("general", "fast", "auto")


def run_all(program: Program, inputs, outputs=None, rtol=1e-5, atol=1e-5, chunk=True):
    """Run in every mode (and with tiny chunks); check they agree; return the general result."""
    results = []
    variants = [dict(mode=m) for m in MODES]
    if chunk:
        variants.append(dict(mode="general", chunk_points=7))
    for kw in variants:
        outs = None if outputs is None else {k: v.copy() for k, v in outputs.items()}
        results.append(run(program, inputs, outs, **kw))
    first = results[0]
    for other, kw in zip(results[1:], variants[1:]):
        assert first.keys() == other.keys()
        for name in first:
            assert other[name].dtype == first[name].dtype, (kw, name)
            np.testing.assert_allclose(
                other[name], first[name], rtol=rtol, atol=atol, err_msg=str(kw)
            )
    return first
