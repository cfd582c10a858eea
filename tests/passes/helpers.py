"""Shared helpers of the pass tests: random inputs and result comparison."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from stripeml.ir.dtypes import to_numpy
from stripeml.ir.nodes import Program
from stripeml.runtime.interp import run


def lower_case(case) -> tuple[Program, dict[str, np.ndarray]]:
    """A program-suite case lowered for its own inputs, and those inputs."""
    import stripeml

    inputs = case.make_inputs()
    f = stripeml.compile(case.source, target="interp")
    return f.lower(*(inputs[p] for p in f.params)).program, inputs


def chain_inputs(n: int, m: int) -> dict[str, np.ndarray]:
    """Inputs of the random elementwise chains: A (n, m), B (m,), C (n, 1)."""
    rng = np.random.default_rng(n * 10 + m)
    return {
        "A": rng.uniform(-1, 1, (n, m)).astype(np.float32),
        "B": rng.uniform(-1, 1, (m,)).astype(np.float32),
        "C": rng.uniform(-1, 1, (n, 1)).astype(np.float32),
    }


def random_inputs(program: Program, seed: int = 0) -> dict[str, np.ndarray]:
    """Values in [-1, 1] (integers in [-5, 5], random bools) for every parameter."""
    rng = np.random.default_rng(seed)
    out = {}
    for ref in program.inputs:
        dt = to_numpy(ref.shape.dtype)
        shape = ref.shape.sizes
        if dt.kind == "f":
            out[ref.into] = rng.uniform(-1, 1, shape).astype(dt)
        elif dt.kind == "b":
            out[ref.into] = rng.integers(0, 2, shape).astype(dt)
        else:
            out[ref.into] = rng.integers(-5, 6, shape).astype(dt)
    return out


def assert_close(
    got: Mapping[str, np.ndarray],
    want: Mapping[str, np.ndarray],
    what: str = "",
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """Same names, dtypes and shapes; floats allclose (nan where nan), the rest equal."""
    assert got.keys() == want.keys(), what
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, f"{what}: {name}"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{what}: {name}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{what}: {name}")


def assert_same_results(before: Program, after: Program, seed: int = 0) -> None:
    """``after`` computes what ``before`` computes, on random inputs (the interpreter)."""
    inputs = random_inputs(before, seed)
    assert_close(run(after, inputs), run(before, inputs), "after vs before")


def checker(
    inputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], **tol: float
) -> Callable[[str, Program], None]:
    """A pass-manager ``check``: each changed stage must compute ``expected``."""

    def check(pass_name: str, program: Program) -> None:
        assert_close(run(program, inputs), expected, f"after pass '{pass_name}'", **tol)

    return check
