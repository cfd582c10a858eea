"""Every program of ``programs.py`` on every target, against its NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml

try:
    from programs import CASES, Case
except ImportError:  # tests/ imported as a package
    from tests.programs import CASES, Case

# The lead extends this as backends come up ("cpu", "opencl", "cuda", target files).
TARGETS = ["interp", "cpu", "opencl"]


def _as_tuple(result, n_outputs: int) -> tuple[np.ndarray, ...]:
    if n_outputs == 1:
        assert isinstance(result, np.ndarray), (
            f"one output must come back as an ndarray, got {type(result)}"
        )
        return (result,)
    assert isinstance(result, tuple), (
        f"{n_outputs} outputs must come back as a tuple, got {type(result)}"
    )
    assert len(result) == n_outputs
    return result


def _check(case: Case, names, got, expected) -> None:
    assert len(got) == len(expected)
    for name, g, e in zip(names, got, expected):
        assert isinstance(g, np.ndarray), f"{name}: got {type(g)}"
        assert g.shape == e.shape, f"{name}: shape {g.shape}, expected {e.shape}"
        assert g.dtype == e.dtype, f"{name}: dtype {g.dtype}, expected {e.dtype}"
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol, err_msg=name)
        else:
            np.testing.assert_array_equal(g, e, err_msg=name)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_program(case: Case, target: str) -> None:
    inputs = case.make_inputs()
    snapshot = {k: v.copy() for k, v in inputs.items()}
    expected = case.reference({k: v.copy() for k, v in inputs.items()})

    f = stripeml.compile(case.source, target=target)
    assert f.params == tuple(inputs), "inputs are listed in parameter order"
    assert len(f.outputs) == len(expected)

    positional = _as_tuple(f(*(inputs[p] for p in f.params)), len(f.outputs))
    _check(case, f.outputs, positional, expected)
    by_name = _as_tuple(f(**inputs), len(f.outputs))
    _check(case, f.outputs, by_name, expected)

    for k, v in inputs.items():
        np.testing.assert_array_equal(v, snapshot[k], err_msg=f"input {k} was modified")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_lower_ir_roundtrip(case: Case, target: str) -> None:
    inputs = case.make_inputs()
    expected = case.reference({k: v.copy() for k, v in inputs.items()})
    f = stripeml.compile(case.source, target=target)
    exe = f.lower(*(inputs[p] for p in f.params))

    assert isinstance(exe.ir, str) and exe.ir
    assert stripeml.ir.format(stripeml.ir.parse(exe.ir)) == exe.ir
    assert exe.stages[0][0] == "lower"
    for _pass_name, text in exe.stages:
        assert stripeml.ir.format(stripeml.ir.parse(text)) == text
    if target == "interp":
        assert exe.code == ""

    specs = [(name, tuple(shape), np.dtype(dt)) for name, shape, dt in exe.output_specs]
    assert specs == [(n, e.shape, e.dtype) for n, e in zip(f.outputs, expected)]
